//! CPU time from /proc: of one process, or of a process and everything it started (kilnd's
//! compile workers are processes of their own, alive for the daemon's life, so their time is
//! not in kilnd's `cutime` until they exit).

use anyhow::{Context, Result};
use std::collections::HashMap;
use std::path::Path;

/// (parent pid, utime + stime in seconds) of `pid`, from `/proc/<pid>/stat`.
fn stat(pid: u32) -> Result<(u32, f64)> {
    let stat = std::fs::read_to_string(Path::new("/proc").join(pid.to_string()).join("stat"))
        .with_context(|| format!("reading /proc/{pid}/stat"))?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = stat.rsplit_once(')').context("malformed /proc stat")?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let parent: u32 = fields.get(1).context("short /proc stat")?.parse()?;
    let ticks: f64 = fields.get(11).context("short /proc stat")?.parse::<f64>()?
        + fields.get(12).context("short /proc stat")?.parse::<f64>()?;
    // SAFETY: sysconf with a valid name has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    Ok((parent, ticks / hz))
}

/// utime + stime of `pid` in seconds.
pub fn seconds(pid: u32) -> Result<f64> {
    Ok(stat(pid)?.1)
}

/// utime + stime of `pid` and of every live process descended from it, in seconds.
pub fn tree_seconds(pid: u32) -> Result<f64> {
    let mut by_parent: HashMap<u32, Vec<(u32, f64)>> = HashMap::new();
    for entry in std::fs::read_dir("/proc").context("reading /proc")?.flatten() {
        let Some(child) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        // A process may exit between the listing and the read: it is simply not counted.
        if let Ok((parent, cpu)) = stat(child) {
            by_parent.entry(parent).or_default().push((child, cpu));
        }
    }
    let mut total = seconds(pid)?;
    let mut pending = vec![pid];
    while let Some(p) = pending.pop() {
        for &(child, cpu) in by_parent.get(&p).map(Vec::as_slice).unwrap_or_default() {
            total += cpu;
            pending.push(child);
        }
    }
    Ok(total)
}
