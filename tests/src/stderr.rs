//! A child's stderr, passed through to the test's own and its end kept: a server that exits
//! during start-up is then reported with its reason, not only its exit code (CI's log shows the
//! panic message, where the lines a server wrote may be cut).

use std::io::{BufRead, Write};
use std::process::ChildStderr;
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How much of the stderr is kept.
const KEPT: usize = 8 * 1024;

/// The last [`KEPT`] bytes of a child's stderr, filled by a thread that copies it line by line.
#[derive(Debug)]
pub struct StderrTail {
    kept: Arc<Mutex<String>>,
    copier: JoinHandle<()>,
}

impl StderrTail {
    /// Starts copying `from` to this process's stderr.
    pub fn tee(from: ChildStderr) -> StderrTail {
        let kept = Arc::new(Mutex::new(String::new()));
        let filled = kept.clone();
        let copier = std::thread::spawn(move || {
            for line in std::io::BufReader::new(from).lines().map_while(Result::ok) {
                let _ = writeln!(std::io::stderr(), "{line}");
                let mut t = filled.lock().unwrap_or_else(PoisonError::into_inner);
                t.push_str(&line);
                t.push('\n');
                if t.len() > 2 * KEPT {
                    let cut = t.ceil_char_boundary(t.len() - KEPT);
                    t.replace_range(..cut, "");
                }
            }
        });
        StderrTail { kept, copier }
    }

    /// What was kept so far, while the child runs: for a test that checks what a server logged.
    pub fn so_far(&self) -> String {
        self.kept.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// What was kept, once the child has exited: after the copy has read to the pipe's end, or
    /// 1 s (a process the child started may still hold the pipe).
    pub fn after_exit(&self) -> String {
        let bound = Instant::now() + Duration::from_secs(1);
        while !self.copier.is_finished() && Instant::now() < bound {
            std::thread::sleep(Duration::from_millis(10));
        }
        self.kept.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}
