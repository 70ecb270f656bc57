//! A Redis Cluster as containers, the store of a [`super::containers::ContainerFleet`]: each node
//! its own container with its own address on the store network, so that one node can be cut off
//! from the others (and from kiln-cache) while it keeps running, which nodes sharing 127.0.0.1
//! cannot be.
//!
//! The cluster is made by `redis-cli --cluster create` run inside the first node's container (the
//! images have redis-cli and nothing else), and read back with `CLUSTER NODES`, parsed here into
//! [`Node`]s: who is master of which slots, who is failed, who replicates whom.

use super::docker::{Container, docker, in_netns};
use anyhow::{Context, Result, bail};
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// The port every node serves on (its cluster bus is this + 10000).
pub const PORT: u16 = 6379;
/// How long a new cluster gets to agree and sync its replicas.
const FORM: Duration = Duration::from_secs(60);

/// How big a cluster, and how quickly its nodes judge one another failed.
#[derive(Debug, Clone)]
pub struct ClusterSpec {
    pub masters: usize,
    /// Replicas of each master.
    pub replicas: usize,
    /// `cluster-node-timeout`: a node unreachable this long is suspected failed, and once most
    /// masters agree, its replica is promoted.
    pub node_timeout: Duration,
}

impl ClusterSpec {
    pub fn nodes(&self) -> usize {
        self.masters * (1 + self.replicas)
    }

    /// `redis-server`'s arguments on every node: cluster mode, no persistence (as the other
    /// scenarios' Redis), the node's table in its own `/data`.
    pub fn server_args(&self) -> Vec<String> {
        [
            "--bind",
            "0.0.0.0",
            "--protected-mode",
            "no",
            "--save",
            "",
            "--appendonly",
            "no",
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "/data/nodes.conf",
            "--cluster-node-timeout",
        ]
        .iter()
        .map(|s| s.to_string())
        .chain([self.node_timeout.as_millis().to_string()])
        .collect()
    }
}

/// `redis-cli` against one node from inside the node's network namespace: this machine's
/// redis-cli under `nsenter`, which reaches the node on 127.0.0.1 whether or not it is cut off
/// from the store network, for the price of a process (a `docker exec` costs the engine a round
/// trip, too slow to sample a failover with).
#[derive(Debug, Clone)]
pub struct NodeCli {
    pid: u32,
    cli: String,
}

impl NodeCli {
    /// Panics, as the harness does, when this machine has no redis-cli (scripts/reliability
    /// installs it): run it off the async threads ([`super::blocking`]).
    pub fn new(node: &Container) -> Result<NodeCli> {
        let cli = kiln_tests::redis::redis_tool("redis-cli").to_string_lossy().into_owned();
        Ok(NodeCli { pid: node.pid()?, cli })
    }

    /// `redis-cli --raw ARGS` against the node, without following redirects.
    pub fn run(&self, args: &[&str]) -> Result<String> {
        let mut argv = vec![self.cli.as_str(), "-p", "6379", "--raw"];
        argv.extend_from_slice(args);
        Ok(in_netns(self.pid, &argv)?.trim().to_string())
    }

    /// The cluster as this node sees it.
    pub fn nodes(&self) -> Result<Vec<Node>> {
        Ok(parse_nodes(&self.run(&["CLUSTER", "NODES"])?))
    }

    /// Whether `command`'s answer (`CLUSTER INFO`, `INFO replication`) has the line `line`.
    pub fn reports(&self, command: &[&str], line: &str) -> bool {
        self.run(command).is_ok_and(|text| text.lines().any(|l| l.trim() == line))
    }
}

/// Makes a cluster of `nodes` (started with [`ClusterSpec::server_args`], on `net`): the first
/// `spec.masters` become masters, the rest their replicas, by `redis-cli --cluster create` run
/// inside the first node's container. Returns once every node reports `cluster_state:ok` and knows
/// every other, and every replica's link to its master is up (a replica that has not synced
/// cannot take over). Blocking.
pub fn create(nodes: &[Container], net: &str, spec: &ClusterSpec) -> Result<()> {
    let first = nodes.first().context("a cluster of no nodes")?;
    let clis = nodes.iter().map(NodeCli::new).collect::<Result<Vec<_>>>()?;
    let started = Instant::now();
    let wait = |what: &str, ready: &dyn Fn(&NodeCli) -> bool| -> Result<()> {
        while !clis.iter().all(ready) {
            if started.elapsed() > FORM {
                bail!("the cluster's nodes did not {what} within {} s", FORM.as_secs());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(())
    };
    wait("answer PING", &|cli| cli.run(&["PING"]).is_ok_and(|pong| pong == "PONG"))?;
    // `--cluster create` wants addresses, not names (CLUSTER MEET takes an IP).
    let addrs = nodes.iter().map(|n| Ok(format!("{}:{PORT}", n.ip(net)?))).collect::<Result<Vec<_>>>()?;
    let replicas = spec.replicas.to_string();
    let mut args = vec!["exec", first.name.as_str(), "redis-cli", "--cluster", "create"];
    args.extend(addrs.iter().map(String::as_str));
    args.extend(["--cluster-replicas", replicas.as_str(), "--cluster-yes"]);
    docker(&args).context("redis-cli --cluster create")?;
    let known = format!("cluster_known_nodes:{}", nodes.len());
    wait("reach cluster_state:ok with every replica synced", &|cli| {
        cli.reports(&["CLUSTER", "INFO"], "cluster_state:ok")
            && cli.reports(&["CLUSTER", "INFO"], &known)
            && (cli.reports(&["INFO", "replication"], "role:master")
                || cli.reports(&["INFO", "replication"], "master_link_status:up"))
    })
}

/// One line of `CLUSTER NODES`: a node as another node sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub id: String,
    pub ip: Option<IpAddr>,
    pub flags: Vec<String>,
    /// The id of the master it replicates, for a replica.
    pub master_of: Option<String>,
    /// Whether the cluster bus link to it is up (as the node asked sees it).
    pub connected: bool,
    /// Slot ranges it serves, inclusive.
    pub slots: Vec<(u16, u16)>,
}

impl Node {
    pub fn has_flag(&self, flag: &str) -> bool {
        self.flags.iter().any(|f| f == flag)
    }

    pub fn is_master(&self) -> bool {
        self.has_flag("master")
    }

    pub fn is_replica(&self) -> bool {
        self.has_flag("slave")
    }

    /// Judged failed by the cluster (`fail`), not merely suspected by one node (`fail?`).
    pub fn failed(&self) -> bool {
        self.has_flag("fail")
    }

    pub fn serves(&self, slot: u16) -> bool {
        self.slots.iter().any(|(from, to)| (*from..=*to).contains(&slot))
    }
}

/// Parses `CLUSTER NODES`: `<id> <ip:port@bus> <flags> <master> <ping> <pong> <epoch> <link>
/// <slot> ...`, where a slot is `N` or `N-M` (`[...]` entries are slots migrating, skipped).
pub fn parse_nodes(text: &str) -> Vec<Node> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 8 {
                return None;
            }
            let host = fields[1].split('@').next().unwrap_or_default();
            let ip = host.rsplit_once(':').and_then(|(ip, _)| ip.parse().ok());
            let slots = fields[8..]
                .iter()
                .filter(|s| !s.starts_with('['))
                .filter_map(|s| match s.split_once('-') {
                    Some((from, to)) => Some((from.parse().ok()?, to.parse().ok()?)),
                    None => s.parse().ok().map(|n| (n, n)),
                })
                .collect();
            Some(Node {
                id: fields[0].to_string(),
                ip,
                flags: fields[2].split(',').map(str::to_string).collect(),
                master_of: (fields[3] != "-").then(|| fields[3].to_string()),
                connected: fields[7] == "connected",
                slots,
            })
        })
        .collect()
}

/// The slot of a Redis key: CRC16 (XMODEM) of its hash tag, the part between the first `{` and
/// the next `}` when that is not empty, else of the whole key; modulo 16384. kiln-cache tags every
/// key of an artifact with the artifact's key, so `slot(key)` is where all of them live.
pub fn slot(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let tagged = key
        .find('{')
        .and_then(|open| key[open + 1..].find('}').map(|len| &bytes[open + 1..open + 1 + len]))
        .filter(|tag| !tag.is_empty());
    crc16(tagged.unwrap_or(bytes)) % 16384
}

fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for b in bytes {
        crc ^= u16::from(*b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 { (crc << 1) ^ 0x1021 } else { crc << 1 };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_redis_slots() {
        // Values from the Redis Cluster specification and `CLUSTER KEYSLOT`.
        assert_eq!(crc16(b"123456789"), 0x31c3);
        assert_eq!(slot("foo"), 12182);
        assert_eq!(slot("bar"), 5061);
        assert_eq!(slot("kiln:v1:{foo}:a"), slot("foo"));
        // An empty tag is no tag: the whole key is hashed.
        assert_eq!(slot("{}foo"), crc16(b"{}foo") % 16384);
    }

    #[test]
    fn cluster_nodes_are_read() {
        let text = "\
07c37dfeb235213a872192d90877d0cd55635b91 172.18.0.4:6379@16379 slave e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 0 1426238317239 4 connected
67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1 172.18.0.3:6379@16379 myself,master - 0 1426238316232 2 connected 5461-10922 12000
e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 172.18.0.2:6379@16379 master,fail - 1426238316232 0 1 disconnected
";
        let nodes = parse_nodes(text);
        assert_eq!(nodes.len(), 3);
        assert!(nodes[0].is_replica());
        assert_eq!(nodes[0].master_of.as_deref(), Some("e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca"));
        assert!(nodes[1].is_master() && nodes[1].serves(6000) && nodes[1].serves(12000) && !nodes[1].serves(12001));
        assert_eq!(nodes[1].ip, "172.18.0.3".parse().ok());
        assert!(nodes[2].failed() && !nodes[2].connected && nodes[2].slots.is_empty());
    }
}
