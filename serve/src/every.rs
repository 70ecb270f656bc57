//! The clock of a daemon's periodic task: a tick every period until the daemon stops.

use std::time::Duration;
use tokio::time::{Interval, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

/// Ticks every `period`, the first at once, until `stop` is cancelled. A round that overruns
/// delays the next tick by a whole period instead of bunching the ticks it missed, so a slow
/// Redis or fleet cache is not met with a burst of catch-up rounds.
#[derive(Debug)]
pub struct Every {
    tick: Interval,
    stop: CancellationToken,
}

impl Every {
    /// Call it inside the runtime: the interval starts now.
    pub fn new(period: Duration, stop: CancellationToken) -> Self {
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        Every { tick, stop }
    }

    /// Waits for the next tick: `true`, or `false` once `stop` is cancelled.
    pub async fn tick(&mut self) -> bool {
        tokio::select! {
            _ = self.stop.cancelled() => false,
            _ = self.tick.tick() => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn ticks_at_once_then_every_period_until_stopped() {
        let stop = CancellationToken::new();
        let mut every = Every::new(Duration::from_secs(10), stop.clone());
        let start = tokio::time::Instant::now();
        assert!(every.tick().await);
        assert_eq!(start.elapsed(), Duration::ZERO);
        assert!(every.tick().await);
        assert_eq!(start.elapsed(), Duration::from_secs(10));
        stop.cancel();
        assert!(!every.tick().await);
    }
}
