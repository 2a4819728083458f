//! The one swap point for the scheduler: every ext_proc stream takes the current scheduler
//! once, when it starts, and keeps it to its end (decision, response hooks, completion), so
//! a config reload never mixes two configs within one request. `replace` installs a new
//! scheduler for streams that start afterwards; streams in flight finish on the one they
//! started with, which is dropped after the last of them ends.

use std::sync::Arc;

use arc_swap::ArcSwap;

use super::scheduler::Scheduler;

/// The current scheduler, swappable whole (config hot reload).
#[derive(Debug)]
pub struct SchedulerHandle {
    current: ArcSwap<Scheduler>,
}

impl SchedulerHandle {
    /// A handle serving `scheduler`.
    pub fn new(scheduler: Scheduler) -> Self {
        Self { current: ArcSwap::from_pointee(scheduler) }
    }

    /// The scheduler for a stream starting now; hold it for the stream's whole life.
    pub fn current(&self) -> Arc<Scheduler> {
        self.current.load_full()
    }

    /// Installs `scheduler` for streams that start from now on and returns the previous one
    /// (still used by the streams that started before).
    pub fn replace(&self, scheduler: Scheduler) -> Arc<Scheduler> {
        self.current.swap(Arc::new(scheduler))
    }
}
