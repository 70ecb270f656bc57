//! A counting gate with two priorities. Permits go to waiting interactive requests before
//! waiting background ones, and first come first served within a priority. A [`Permit`] releases
//! its slot when dropped, so a compile that is cancelled or panics never leaks one.

use crate::domain::Priority;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;

#[derive(Debug)]
pub(crate) struct Gate {
    /// A std Mutex: held for a few pushes and pops, never across an await.
    state: Mutex<Slots>,
}

/// Free slots, and who waits for one, by priority.
#[derive(Debug)]
struct Slots {
    free: usize,
    waiting: [VecDeque<oneshot::Sender<()>>; 2],
}

/// One slot, held while a compile runs.
#[derive(Debug)]
pub(crate) struct Permit {
    gate: Arc<Gate>,
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.gate.release();
    }
}

/// A place in the queue; if it is dropped after a slot was handed to it, the slot is passed on.
struct Ticket {
    rx: oneshot::Receiver<()>,
    gate: Arc<Gate>,
    done: bool,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if !self.done {
            self.rx.close();
            if self.rx.try_recv().is_ok() {
                self.gate.release();
            }
        }
    }
}

impl Gate {
    pub(crate) fn new(slots: usize) -> Arc<Self> {
        Arc::new(Gate { state: Mutex::new(Slots { free: slots.max(1), waiting: [VecDeque::new(), VecDeque::new()] }) })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Slots> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits for a slot.
    pub(crate) async fn acquire(self: &Arc<Self>, priority: Priority) -> Permit {
        let rx = {
            let mut s = self.lock();
            let nobody_waiting = s.waiting.iter().all(VecDeque::is_empty);
            if s.free > 0 && nobody_waiting {
                s.free -= 1;
                return Permit { gate: Arc::clone(self) };
            }
            let (tx, rx) = oneshot::channel();
            s.waiting[priority as usize].push_back(tx);
            rx
        };
        let mut ticket = Ticket { rx, gate: Arc::clone(self), done: false };
        // The sender lives in the queue until a slot is handed over, so this cannot fail while
        // the gate exists; if it somehow does, the permit is still accounted for by release.
        let _ = (&mut ticket.rx).await;
        ticket.done = true;
        Permit { gate: Arc::clone(self) }
    }

    fn release(&self) {
        let mut s = self.lock();
        for queue in 0..2 {
            while let Some(tx) = s.waiting[queue].pop_front() {
                if tx.send(()).is_ok() {
                    return;
                }
            }
        }
        s.free += 1;
    }

    /// Requests waiting for a slot now.
    pub(crate) fn queued(&self) -> usize {
        self.lock().waiting.iter().map(VecDeque::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn interactive_goes_before_background() {
        let gate = Gate::new(1);
        let held = gate.acquire(Priority::Background).await;
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = tokio::task::JoinSet::new();
        for (i, p) in [(0, Priority::Background), (1, Priority::Background), (2, Priority::Interactive)] {
            let (task_gate, order) = (gate.clone(), order.clone());
            tasks.spawn(async move {
                let _permit = task_gate.acquire(p).await;
                order.lock().unwrap_or_else(|p| p.into_inner()).push(i);
            });
            while gate.queued() < i + 1 {
                tokio::task::yield_now().await;
            }
        }
        drop(held);
        while tasks.join_next().await.is_some() {}
        assert_eq!(*order.lock().unwrap_or_else(|p| p.into_inner()), vec![2, 0, 1]);
    }

    #[tokio::test]
    async fn cancelled_waiters_do_not_leak_slots() {
        let gate = Gate::new(1);
        let held = gate.acquire(Priority::Interactive).await;
        let waiter = tokio::time::timeout(Duration::from_millis(20), gate.acquire(Priority::Interactive)).await;
        assert!(waiter.is_err());
        assert_eq!(gate.queued(), 1, "the dropped waiter's sender is still queued");
        drop(held);
        let again = tokio::time::timeout(Duration::from_secs(1), gate.acquire(Priority::Background)).await;
        assert!(again.is_ok(), "the slot leaked");
        assert_eq!(gate.queued(), 0);
    }
}
