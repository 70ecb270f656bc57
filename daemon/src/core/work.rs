//! The daemon's background work that outlives a request and that shutdown waits for: compiles
//! (which keep going to fill the cache when their client leaves), their disk writes and fleet
//! publishes, job streams and warm-ups. Each task is spawned under a kind, so a shutdown that
//! passes its bound can say what was still running instead of just "timed out".

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio_util::task::TaskTracker;

/// Running tasks per kind.
type Running = Arc<Mutex<BTreeMap<&'static str, usize>>>;

/// Cheap to clone: clones share the tasks, so the engine and the cache spawn into the one that
/// shutdown drains.
#[derive(Debug, Default, Clone)]
pub struct Work {
    tracker: TaskTracker,
    running: Running,
}

/// Counts one task of its kind while it lives (dropped when the task ends or is cancelled).
struct Counted {
    running: Running,
    kind: &'static str,
}

impl Counted {
    fn new(running: &Running, kind: &'static str) -> Counted {
        *running.lock().unwrap_or_else(PoisonError::into_inner).entry(kind).or_default() += 1;
        Counted { running: Arc::clone(running), kind }
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = running.get_mut(self.kind) {
            *n -= 1;
            if *n == 0 {
                running.remove(self.kind);
            }
        }
    }
}

impl Work {
    /// Spawns `task` as tracked work of `kind` (a short fixed label: "compile", "disk-write").
    pub fn spawn<F>(&self, kind: &'static str, task: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let counted = Counted::new(&self.running, kind);
        self.tracker.spawn(async move {
            let out = task.await;
            drop(counted);
            out
        })
    }

    /// What is running now, per kind.
    pub fn running(&self) -> BTreeMap<&'static str, usize> {
        self.running.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Takes no new work's completion into account past this call and waits up to `bound` for
    /// what runs; on timeout, what was still running, per kind.
    pub async fn drain(&self, bound: Duration) -> Result<(), BTreeMap<&'static str, usize>> {
        self.tracker.close();
        match tokio::time::timeout(bound, self.tracker.wait()).await {
            Ok(()) => Ok(()),
            Err(_) => Err(self.running()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_drain_that_passes_its_bound_names_what_still_runs() {
        let work = Work::default();
        work.spawn("quick", async {});
        work.spawn("stuck", std::future::pending::<()>());
        work.spawn("stuck", std::future::pending::<()>());
        let unfinished = work.drain(Duration::from_millis(50)).await.unwrap_err();
        assert_eq!(unfinished, BTreeMap::from([("stuck", 2)]));
    }

    #[tokio::test]
    async fn a_drain_of_finished_work_is_clean_and_counts_nothing() {
        let work = Work::default();
        let handle = work.spawn("compile", async { 7 });
        assert_eq!(handle.await.ok(), Some(7));
        assert_eq!(work.drain(Duration::from_secs(5)).await, Ok(()));
        assert!(work.running().is_empty());
    }

    #[tokio::test]
    async fn an_aborted_task_stops_counting() {
        let work = Work::default();
        let handle = work.spawn("stuck", std::future::pending::<()>());
        handle.abort();
        let _ = handle.await;
        assert!(work.running().is_empty());
    }
}
