//! A bounded pool for CPU-heavy tokenization: at most `workers` jobs run at once on tokio's
//! blocking threads; the others wait for a permit. The caller puts a deadline around
//! [`BlockingPool::run`]; a job that already started finishes in the background (its result
//! is dropped) and keeps its permit until then, so the bound holds under timeouts too.

use std::num::NonZeroUsize;
use std::sync::Arc;

use tokio::sync::Semaphore;

/// Why a job produced no result.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    /// The pool was closed.
    #[error("tokenizer pool closed")]
    Closed,
    /// The job panicked or was cancelled.
    #[error("tokenizer job failed")]
    Join(#[source] tokio::task::JoinError),
}

/// The bounded pool.
#[derive(Clone, Debug)]
pub struct BlockingPool {
    permits: Arc<Semaphore>,
}

impl BlockingPool {
    /// A pool running at most `workers` jobs at once.
    pub fn new(workers: NonZeroUsize) -> Self {
        Self { permits: Arc::new(Semaphore::new(workers.get())) }
    }

    /// Runs `job` on a blocking thread once a worker permit is free.
    ///
    /// Errors: [`PoolError`]. Cancel-safe: dropping the future while waiting for a permit
    /// gives nothing up; dropping it later lets the job finish unobserved.
    pub async fn run<T, F>(&self, job: F) -> Result<T, PoolError>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        let permit = self.permits.clone().acquire_owned().await.map_err(|_| PoolError::Closed)?;
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            job()
        })
        .await
        .map_err(PoolError::Join)
    }

    /// Free worker permits.
    pub fn available(&self) -> usize {
        self.permits.available_permits()
    }

    /// Takes every permit until the guard drops (tests: a saturated pool).
    #[cfg(test)]
    pub async fn saturate(&self) -> tokio::sync::OwnedSemaphorePermit {
        let n = u32::try_from(self.permits.available_permits()).unwrap_or(u32::MAX);
        self.permits.clone().acquire_many_owned(n).await.expect("pool open")
    }
}
