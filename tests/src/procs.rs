//! Processes as /proc shows them: the Triton workers of a daemon, and whether a process lives;
//! and signals to them (a process frozen with STOP is a peer that stops answering, as a
//! partitioned one does, without closing its connections).

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

/// Whether `pid` can never run its own code again: gone, a zombie or dead, exiting (`PF_EXITING`
/// in /proc's flags), or with SIGKILL pending. What the Triton box guarantees of a compile's
/// processes once the next compile starts; the kernel may still be tearing them down.
pub fn killed_or_gone(pid: u32) -> bool {
    const PF_EXITING: u64 = 0x4;
    const SIGKILL_BIT: u64 = 1 << (9 - 1);
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return true };
    let fields: Vec<&str> = stat.rsplit(')').next().unwrap_or_default().split_whitespace().collect();
    let (state, flags) = (fields.first().copied().unwrap_or("X"), fields.get(6).and_then(|f| f.parse::<u64>().ok()));
    if matches!(state, "Z" | "X" | "x") || flags.is_some_and(|f| f & PF_EXITING != 0) {
        return true;
    }
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status.lines().filter(|l| l.starts_with("ShdPnd:") || l.starts_with("SigPnd:")).any(|l| {
        u64::from_str_radix(l.split_whitespace().nth(1).unwrap_or("0"), 16).is_ok_and(|mask| mask & SIGKILL_BIT != 0)
    }) || !std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// Sends `signal` (a `kill` name: STOP, CONT) to `pid`.
pub fn signal(pid: u32, signal: &str) {
    let status =
        std::process::Command::new("kill").arg(format!("-{signal}")).arg(pid.to_string()).status().expect("run kill");
    assert!(status.success(), "kill -{signal} {pid} failed");
}

/// Waits for `child` to exit, at most `bound`; past it, kills and reaps it and answers `None`,
/// for the caller to fail the test with what it was waiting for.
pub fn wait_or_kill(child: &mut std::process::Child, bound: std::time::Duration) -> Option<std::process::ExitStatus> {
    let deadline = std::time::Instant::now() + bound;
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return Some(status);
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// SIGTERM to `child`, then asserts that it exits with status 0 within `bound`; `name` says
/// which daemon it is in the failure.
pub fn terminate(mut child: std::process::Child, name: &str, bound: std::time::Duration) {
    signal(child.id(), "TERM");
    let status =
        wait_or_kill(&mut child, bound).unwrap_or_else(|| panic!("{name} did not exit within {bound:?} of SIGTERM"));
    assert!(status.success(), "{name} exited with {status} after SIGTERM");
}
