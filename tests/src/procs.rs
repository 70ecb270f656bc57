//! Processes as /proc shows them: the Triton workers of a daemon, and whether a process lives.

/// (pid, command line with NULs as spaces) of every process whose parent is `parent`.
pub fn children(parent: u32) -> Vec<(u32, String)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("list /proc").flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let ppid =
            stat.rsplit(')').next().and_then(|r| r.split_whitespace().nth(1)).and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(parent) {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            found.push((pid, String::from_utf8_lossy(&cmdline).replace('\0', " ")));
        }
    }
    found
}

/// The Triton workers (zygotes) of the daemon `daemon`.
pub fn triton_workers(daemon: u32) -> Vec<u32> {
    children(daemon).into_iter().filter(|(_, cmd)| cmd.contains("triton_worker.py")).map(|(pid, _)| pid).collect()
}

/// Every process whose name (`comm`, as prctl(PR_SET_NAME) sets it) is `name`.
pub fn named(name: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("list /proc").flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        if std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim_end() == name) {
            found.push(pid);
        }
    }
    found
}
