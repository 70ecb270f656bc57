//! Redis's memory and evictions for the status page, from `INFO memory` and `INFO stats`.
//!
//! A full Redis evicts (under `allkeys-lru`) or refuses writes (under `noeviction`); either is
//! what an operator looks at the page to find out, so the page shows used and maximum memory,
//! the policy and the evictions since Redis started.

use serde::Serialize;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RedisInfo {
    /// INFO answers read: 1 for standalone Redis, one per node of a cluster.
    pub nodes: u64,
    pub used_memory: u64,
    /// 0: no limit.
    pub maxmemory: u64,
    /// Policies of the nodes, distinct, comma-separated.
    pub maxmemory_policy: String,
    pub evicted_keys: u64,
    pub expired_keys: u64,
}

/// Adds up the INFO texts of every node (each holding `memory` or `stats` fields or both).
/// Unknown and malformed lines are skipped: INFO's fields differ between Redis versions.
pub fn parse(texts: &[String]) -> RedisInfo {
    let mut info = RedisInfo::default();
    let mut policies: Vec<&str> = Vec::new();
    for text in texts {
        let mut memory_section = false;
        for line in text.lines() {
            let Some((name, value)) = line.trim_end().split_once(':') else { continue };
            let number = || value.parse::<u64>().unwrap_or(0);
            match name {
                "used_memory" => {
                    memory_section = true;
                    info.used_memory += number();
                }
                "maxmemory" => info.maxmemory += number(),
                "maxmemory_policy" if !policies.contains(&value) => policies.push(value),
                "evicted_keys" => info.evicted_keys += number(),
                "expired_keys" => info.expired_keys += number(),
                _ => {}
            }
        }
        info.nodes += u64::from(memory_section);
    }
    info.maxmemory_policy = policies.join(",");
    info
}

/// Bytes as a person reads them: 1.5 GiB, 12.0 MiB, 512 B.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 { format!("{n} B") } else { format!("{value:.1} {}", UNITS[unit]) }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MEMORY: &str = "# Memory\r\nused_memory:1048576\r\nused_memory_human:1.00M\r\nmaxmemory:33554432\r\n\
                          maxmemory_policy:allkeys-lru\r\n";
    const STATS: &str = "# Stats\r\ntotal_connections_received:3\r\nexpired_keys:4\r\nevicted_keys:7\r\n";

    #[test]
    fn one_node_and_a_cluster() {
        let one = parse(&[MEMORY.into(), STATS.into()]);
        assert_eq!(
            one,
            RedisInfo {
                nodes: 1,
                used_memory: 1 << 20,
                maxmemory: 32 << 20,
                maxmemory_policy: "allkeys-lru".into(),
                evicted_keys: 7,
                expired_keys: 4,
            }
        );
        let three = parse(&[MEMORY.into(), MEMORY.into(), MEMORY.into(), STATS.into(), STATS.into(), STATS.into()]);
        assert_eq!((three.nodes, three.used_memory, three.evicted_keys), (3, 3 << 20, 21));
        assert_eq!(three.maxmemory_policy, "allkeys-lru");
        assert_eq!(parse(&["garbage\nused_memory:x\n".into()]).used_memory, 0);
    }

    #[test]
    fn bytes_read_as_people_read_them() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(3 << 30), "3.0 GiB");
    }
}
