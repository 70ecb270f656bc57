//! What the figures were measured on: the machine, the date and the commit. Ratios travel
//! between machines far better than absolute numbers, but neither means much without this.

use std::path::Path;
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

/// Facts about the host and the checkout, read once at the start of a run.
#[derive(Debug, Clone)]
pub struct Machine {
    pub cpu: String,
    pub cores: usize,
    pub memory: String,
    pub kernel: String,
    /// UTC, ISO 8601, to the second.
    pub date: String,
    /// The commit, with a note when the work tree differs from it.
    pub commit: String,
    /// 1, 5 and 15-minute load averages when the run started: other work on the machine
    /// skews every figure, so a reader should see whether there was any.
    pub load_at_start: String,
}

impl Machine {
    pub fn probe(repo: &Path) -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        Machine {
            cpu: field(&cpuinfo, "model name").unwrap_or_else(|| "unknown".into()),
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            memory: field(&meminfo, "MemTotal").map_or_else(|| "unknown".into(), |kb| kib_to_gib(&kb)),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map_or_else(|_| "unknown".into(), |s| format!("Linux {}", s.trim())),
            date: utc_now(),
            commit: commit(repo),
            load_at_start: load_average(),
        }
    }

    /// The machine table; `load_at_end` is read by the caller when the run is over.
    pub fn markdown(&self, load_at_end: &str) -> String {
        format!(
            "| | |\n|---|---|\n| CPU | {} |\n| cores | {} |\n| memory | {} |\n| kernel | {} |\n| date (UTC) | {} |\n\
             | commit | {} |\n| load average at start (1, 5, 15 min) | {} |\n| load average at end | {} |\n",
            self.cpu, self.cores, self.memory, self.kernel, self.date, self.commit, self.load_at_start, load_at_end
        )
    }
}

/// "0.52 0.40 0.31", from /proc/loadavg.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// The value of the first `key: value` line of a /proc file.
fn field(text: &str, key: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let (k, v) = line.split_once(':')?;
        (k.trim() == key).then(|| v.trim().to_string())
    })
}

/// "24575232 kB" → "23.4 GiB".
fn kib_to_gib(value: &str) -> String {
    let kib: f64 = value.split_whitespace().next().and_then(|n| n.parse().ok()).unwrap_or(0.0);
    format!("{:.1} GiB", kib / (1024.0 * 1024.0))
}

fn commit(repo: &Path) -> String {
    let git = |args: &[&str]| {
        Command::new("git")
            .arg("-C")
            .arg(repo)
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let Some(head) = git(&["rev-parse", "--short=12", "HEAD"]) else { return "unknown (not a git checkout)".into() };
    match git(&["status", "--porcelain", "--untracked-files=no"]) {
        Some(s) if !s.is_empty() => format!("{head} with uncommitted changes"),
        _ => head,
    }
}

fn utc_now() -> String {
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!("{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's algorithm); a
/// dependency on a date crate for one line of the report would be out of proportion.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(19_782), (2024, 2, 29));
        assert_eq!(civil_from_days(20_454), (2026, 1, 1));
    }

    #[test]
    fn proc_fields() {
        let text = "processor\t: 0\nmodel name\t: Some CPU @ 2.0GHz\n";
        assert_eq!(field(text, "model name").as_deref(), Some("Some CPU @ 2.0GHz"));
        assert_eq!(kib_to_gib("2097152 kB"), "2.0 GiB");
    }
}
