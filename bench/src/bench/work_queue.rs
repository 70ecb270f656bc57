//! Items done by a fixed number of threads pulling from one queue: as kilnd's scheduler hands
//! kernels to its workers, and as `make -j` runs one process per file.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Runs `work(i)` for every `i` in `0..n` on `threads` threads, each taking the next item as it
/// finishes one, and returns the results in item order.
pub fn run<T: Send>(n: usize, threads: usize, work: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<T>>> = Mutex::new((0..n).map(|_| None).collect());
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n {
                        break;
                    }
                    let result = work(i);
                    results.lock().unwrap_or_else(|p| p.into_inner())[i] = Some(result);
                }
            });
        }
    });
    // The scope returns only once every thread has, and re-raises a thread's panic: every item
    // is done.
    let results = results.into_inner().unwrap_or_else(|p| p.into_inner());
    results.into_iter().map(|r| r.expect("every item is done when the scope returns")).collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_item_is_done_once_and_returned_in_order() {
        assert_eq!(super::run(100, 4, |i| i * 2), (0..100).map(|i| i * 2).collect::<Vec<_>>());
        assert_eq!(super::run(0, 4, |i| i), Vec::<usize>::new());
    }
}
