//! A process's memory as /proc reports it: resident set now (VmRSS) and its peak (VmHWM).

use anyhow::{Context, Result};

/// Resident memory of one process, in KiB.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Memory {
    pub rss_kib: u64,
    /// The high-water mark of the resident set since the process started.
    pub peak_kib: u64,
}

/// Reads `/proc/<pid>/status`.
pub fn read(pid: u32) -> Result<Memory> {
    let path = format!("/proc/{pid}/status");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    parse(&text).with_context(|| format!("no VmRSS or VmHWM in {path}"))
}

fn parse(status: &str) -> Option<Memory> {
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
    };
    Some(Memory { rss_kib: field("VmRSS:")?, peak_kib: field("VmHWM:")? })
}

/// KiB as MiB with one decimal, for the report.
pub fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_status() {
        let status = "Name:\tkilnd\nVmPeak:\t  900000 kB\nVmHWM:\t   51200 kB\nVmRSS:\t   40960 kB\n";
        assert_eq!(parse(status), Some(Memory { rss_kib: 40960, peak_kib: 51200 }));
        assert_eq!(parse("Name:\tx\n"), None);
        assert!(read(std::process::id()).is_ok_and(|m| m.rss_kib > 0 && m.peak_kib >= m.rss_kib));
    }
}
