//! Progress bars: a job's kernels, and a snapshot's transfer. Shown on stderr only when stderr
//! is a terminal (and a graph is big enough to be worth one), so piped and scripted runs (and
//! small graphs) get clean output.

use indicatif::{ProgressBar, ProgressStyle};
use kiln_client::snapshot::{Observer, Phase};
use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Graphs smaller than this finish before a bar is worth drawing.
const MIN_KERNELS: usize = 8;

/// A bar that may not exist. Every method is a no-op without one, so callers need no branches.
#[derive(Debug, Default)]
pub struct Progress {
    bar: Option<ProgressBar>,
}

impl Progress {
    /// Starts the bar once the number of kernels is known (at once for `compile`, on the
    /// `Queued` event for `watch`). Later calls do nothing.
    pub fn start(&mut self, kernels: usize) {
        if self.bar.is_some() || kernels < MIN_KERNELS || !std::io::stderr().is_terminal() {
            return;
        }
        let bar = ProgressBar::new(kernels as u64);
        // The template is a constant, so this only falls back if indicatif changes its syntax.
        if let Ok(style) = ProgressStyle::with_template("{spinner} [{bar:30}] {pos}/{len} kernels  {elapsed}  {msg}") {
            bar.set_style(style.progress_chars("=> "));
        }
        self.bar = Some(bar);
    }

    /// Moves the bar to `done` of `total` (for warm-ups, which report in batches).
    pub fn set(&mut self, done: u64, total: u64) {
        self.start(total as usize);
        if let Some(bar) = &self.bar {
            bar.set_length(total);
            bar.set_position(done);
        }
    }

    /// Counts one kernel done.
    pub fn inc(&self) {
        if let Some(bar) = &self.bar {
            bar.inc(1);
        }
    }

    pub fn set_message(&self, message: &'static str) {
        if let Some(bar) = &self.bar {
            bar.set_message(message);
        }
    }

    /// Runs `f` with the bar hidden, so lines printed meanwhile do not tear it.
    pub fn suspend<R>(&self, f: impl FnOnce() -> R) -> R {
        match &self.bar {
            Some(bar) => bar.suspend(f),
            None => f(),
        }
    }

    /// Removes the bar before the summary is printed.
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

/// The bar of a snapshot save or restore, on stderr when it is a terminal: the current phase
/// (hashing, uploading, fetching) in bytes, or in files while sizes are not known yet.
#[derive(Debug, Default)]
pub struct TransferBar {
    bar: Option<ProgressBar>,
    /// Whether the current phase counts bytes (else files).
    in_bytes: AtomicBool,
}

impl TransferBar {
    /// Runs `transfer` with a bar that draws only when `wanted` (no `--json`) and stderr is a
    /// terminal, and removes the bar before the result, whatever it is, comes back to be printed.
    pub async fn around<T, F: Future<Output = T>>(wanted: bool, transfer: impl FnOnce(Arc<TransferBar>) -> F) -> T {
        let bar = (wanted && std::io::stderr().is_terminal()).then(|| ProgressBar::new(0));
        let bar = Arc::new(TransferBar { bar, in_bytes: AtomicBool::new(false) });
        let result = transfer(Arc::clone(&bar)).await;
        bar.finish();
        result
    }

    fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

impl Observer for TransferBar {
    fn phase(&self, phase: Phase, files: u64, bytes: u64) {
        let Some(bar) = &self.bar else { return };
        let in_bytes = bytes > 0;
        self.in_bytes.store(in_bytes, Ordering::Relaxed);
        let counts = if in_bytes { "{bytes}/{total_bytes}" } else { "{pos}/{len} files" };
        let template = format!("{{spinner}} {{msg:9}} [{{bar:30}}] {counts}  {{elapsed}}");
        if let Ok(style) = ProgressStyle::with_template(&template) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_message(match phase {
            Phase::Hash => "hashing",
            Phase::Upload => "uploading",
            Phase::Fetch => "fetching",
        });
        bar.set_length(if in_bytes { bytes } else { files });
        bar.set_position(0);
    }

    fn advance(&self, files: u64, bytes: u64) {
        if let Some(bar) = &self.bar {
            bar.inc(if self.in_bytes.load(Ordering::Relaxed) { bytes } else { files });
        }
    }
}
