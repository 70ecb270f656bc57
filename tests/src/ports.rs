//! TCP ports for the servers the tests start.
//!
//! The usual trick, binding port 0 and closing the listener, hands out a port from the kernel's
//! ephemeral range. Between that close and the server's own bind, any outgoing connection on
//! the host (a kilnd dialling kiln-cache, a client dialling Redis) may be given the same port as
//! its local end, and the server then fails with "address in use": CI met this once, a kilnd
//! exiting during start-up. The ports here come from below the ephemeral range (32768 and up
//! unless configured otherwise), which the kernel never hands to outgoing connections, and a
//! process-wide counter keeps the tests of one binary, which run in parallel threads, from
//! picking the same one.
//!
//! Three disjoint ranges: servers' ports, Redis Cluster nodes' ports, and those nodes' cluster
//! bus ports (10000 above each node's), so no server is handed a node's bus port.

use std::net::{SocketAddr, TcpListener};
use std::ops::Range;
use std::sync::atomic::{AtomicU32, Ordering};

/// Servers' ports: up to the ephemeral range, which starts at 32768 on every kernel kiln's CI
/// and hosts use (`/proc/sys/net/ipv4/ip_local_port_range`).
const SERVERS: Range<u32> = 25_000..32_768;
/// Redis Cluster nodes' ports; their buses are at 22000..25000.
const NODES: Range<u32> = 12_000..15_000;
/// How far above its port a Redis Cluster node listens for its bus.
const BUS_OFFSET: u32 = 10_000;

/// Ports handed out so far by this process.
static NEXT: AtomicU32 = AtomicU32::new(0);

fn bindable(port: u32) -> bool {
    u16::try_from(port).is_ok_and(|p| TcpListener::bind(("127.0.0.1", p)).is_ok())
}

/// A port of `range` for which `ok` holds. Each call in a process tries ports no earlier call
/// was handed; processes start at different offsets (their pid), so two test binaries running
/// at once seldom meet either.
fn pick(range: Range<u32>, ok: impl Fn(u32) -> bool) -> u16 {
    let span = range.end - range.start;
    let start = std::process::id() % span;
    for _ in 0..span {
        let port = range.start + (start + NEXT.fetch_add(1, Ordering::Relaxed)) % span;
        if ok(port) {
            return port as u16;
        }
    }
    panic!("no free TCP port in {range:?}")
}

/// A port on 127.0.0.1 that nothing listens on now and that no outgoing connection will be
/// given.
pub fn free() -> u16 {
    pick(SERVERS, bindable)
}

/// [`free`] as an address on 127.0.0.1.
pub fn free_addr() -> SocketAddr {
    ([127, 0, 0, 1], free()).into()
}

/// A port for a Redis Cluster node: free, and so is its cluster bus port.
pub fn free_with_bus() -> u16 {
    pick(NODES, |p| bindable(p) && bindable(p + BUS_OFFSET))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_distinct_and_in_their_ranges() {
        let servers: Vec<u16> = (0..50).map(|_| free()).collect();
        let nodes: Vec<u16> = (0..10).map(|_| free_with_bus()).collect();
        let mut all: Vec<u32> = servers.iter().chain(&nodes).map(|&p| u32::from(p)).collect();
        all.extend(nodes.iter().map(|&p| u32::from(p) + BUS_OFFSET));
        let mut unique = all.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), all.len());
        assert!(servers.iter().all(|&p| SERVERS.contains(&u32::from(p))));
        assert!(nodes.iter().all(|&p| NODES.contains(&u32::from(p))));
    }

    #[test]
    fn the_ranges_are_disjoint_and_below_this_hosts_ephemeral_range() {
        let bus = NODES.start + BUS_OFFSET..NODES.end + BUS_OFFSET;
        assert!(NODES.end <= bus.start && bus.end <= SERVERS.start);
        let ephemeral = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").unwrap_or_default();
        let first: u32 = ephemeral.split_whitespace().next().and_then(|n| n.parse().ok()).unwrap_or(32_768);
        assert!(SERVERS.end <= first, "this host's ephemeral range starts at {first}, inside kiln-tests' ports");
    }
}
