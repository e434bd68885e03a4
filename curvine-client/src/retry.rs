//! Retries for idempotent master calls: up to `attempts` tries on a retryable error
//! (`FsError::is_retryable`), sleeping `backoff * attempt` between tries; for some
//! errors, more tries until a deadline (`run_if_until`).

use std::future::Future;
use std::time::Duration;

use curvine_common::{FsError, FsResult};
use tracing::debug;

#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    /// Total tries (at least 1).
    pub attempts: u32,
    pub backoff: Duration,
}

impl RetryPolicy {
    /// Run `op(attempt)` (attempt counts from 0) until it succeeds, fails with a
    /// non-retryable error, or the tries are used up (the last error is returned).
    pub async fn run<T, F, Fut>(&self, what: &str, op: F) -> FsResult<T>
    where
        F: FnMut(u32) -> Fut,
        Fut: Future<Output = FsResult<T>>,
    {
        self.run_if(what, FsError::is_retryable, op).await
    }

    /// Like `run`, retrying only errors for which `retry_if` holds.
    pub async fn run_if<T, F, Fut, P>(&self, what: &str, retry_if: P, op: F) -> FsResult<T>
    where
        F: FnMut(u32) -> Fut,
        Fut: Future<Output = FsResult<T>>,
        P: Fn(&FsError) -> bool,
    {
        self.run_if_until(what, retry_if, None, |_| false, op).await
    }

    /// Like `run_if`; with `until`, tries of the errors `past` holds for go on past
    /// `attempts` until that instant: a failover between masters takes an election,
    /// and a master that has just started waits for its workers' reports, however
    /// many tries that is.
    pub async fn run_if_until<T, F, Fut, P, Q>(
        &self,
        what: &str,
        retry_if: P,
        until: Option<std::time::Instant>,
        past: Q,
        mut op: F,
    ) -> FsResult<T>
    where
        F: FnMut(u32) -> Fut,
        Fut: Future<Output = FsResult<T>>,
        P: Fn(&FsError) -> bool,
        Q: Fn(&FsError) -> bool,
    {
        let attempts = self.attempts.max(1);
        let mut attempt = 0;
        loop {
            let res = op(attempt).await;
            let within = attempt + 1 < attempts;
            let before = |u: std::time::Instant| std::time::Instant::now() + self.backoff < u;
            match res {
                Ok(v) => return Ok(v),
                Err(e) if (within || (past(&e) && until.is_some_and(before))) && retry_if(&e) => {
                    debug!(error = %e, attempt, what, "retrying");
                    let wait = match e {
                        // the next attempt goes to another master; no need to wait long
                        FsError::NotLeader { .. } => self.backoff / 4,
                        // a worker's report ends the wait: ask again soon
                        FsError::ReplicasUnknown { .. } => self.backoff / 2,
                        _ if within => self.backoff * (attempt + 1),
                        _ => self.backoff,
                    };
                    tokio::time::sleep(wait).await;
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    fn policy(attempts: u32) -> RetryPolicy {
        RetryPolicy {
            attempts,
            backoff: Duration::from_millis(1),
        }
    }

    /// With a deadline, retries go on past the attempts until it passes.
    #[tokio::test]
    async fn a_deadline_keeps_retrying_past_the_attempts() {
        let calls = AtomicU32::new(0);
        let until = std::time::Instant::now() + Duration::from_secs(20);
        let v = policy(2)
            .run_if_until(
                "t",
                FsError::is_retryable,
                Some(until),
                |_| true,
                |_| async {
                    if calls.fetch_add(1, Ordering::SeqCst) < 6 {
                        Err(FsError::NotLeader {
                            leader: String::new(),
                        })
                    } else {
                        Ok(7)
                    }
                },
            )
            .await
            .unwrap();
        assert_eq!((v, calls.load(Ordering::SeqCst)), (7, 7));
        // past the deadline, the attempts alone count
        let calls = AtomicU32::new(0);
        let gone = std::time::Instant::now();
        let e = policy(2)
            .run_if_until(
                "t",
                FsError::is_retryable,
                Some(gone),
                |_| true,
                |_| async {
                    calls.fetch_add(1, Ordering::SeqCst);
                    FsResult::<()>::Err(FsError::Unavailable {
                        message: "down".into(),
                    })
                },
            )
            .await;
        assert!(e.is_err());
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }

    /// Only the errors the deadline is for are tried past the attempts.
    #[tokio::test]
    async fn the_deadline_is_for_the_errors_it_names() {
        let until = std::time::Instant::now() + Duration::from_secs(20);
        let not_located = || FsError::ReplicasUnknown {
            path: "/f".into(),
            block_id: 1,
            message: "0 of 1 workers reported".into(),
        };
        let past = |e: &FsError| matches!(e, FsError::ReplicasUnknown { .. });
        let calls = AtomicU32::new(0);
        let v = policy(2)
            .run_if_until("t", FsError::is_retryable, Some(until), past, |_| async {
                if calls.fetch_add(1, Ordering::SeqCst) < 6 {
                    Err(not_located())
                } else {
                    Ok(7)
                }
            })
            .await
            .unwrap();
        assert_eq!((v, calls.load(Ordering::SeqCst)), (7, 7));
        let calls = AtomicU32::new(0);
        let e = policy(2)
            .run_if_until("t", FsError::is_retryable, Some(until), past, |_| async {
                calls.fetch_add(1, Ordering::SeqCst);
                FsResult::<()>::Err(FsError::Unavailable {
                    message: "down".into(),
                })
            })
            .await;
        assert!(e.is_err());
        assert_eq!(calls.load(Ordering::SeqCst), 2, "the attempts alone count");
    }

    #[tokio::test]
    async fn retries_retryable_errors_until_success() {
        let calls = AtomicU32::new(0);
        let v = policy(5)
            .run("t", |_| async {
                if calls.fetch_add(1, Ordering::SeqCst) < 2 {
                    Err(FsError::Unavailable {
                        message: "down".into(),
                    })
                } else {
                    Ok(7)
                }
            })
            .await
            .unwrap();
        assert_eq!(v, 7);
        assert_eq!(calls.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn does_not_retry_other_errors() {
        let calls = AtomicU32::new(0);
        let e = policy(5)
            .run("t", |_| async {
                calls.fetch_add(1, Ordering::SeqCst);
                Err::<(), _>(FsError::not_found("/x"))
            })
            .await
            .unwrap_err();
        assert!(matches!(e, FsError::NotFound { .. }));
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn gives_up_after_the_last_attempt() {
        let calls = AtomicU32::new(0);
        let e = policy(3)
            .run("t", |_| async {
                calls.fetch_add(1, Ordering::SeqCst);
                Err::<(), _>(FsError::Timeout {
                    message: "slow".into(),
                })
            })
            .await
            .unwrap_err();
        assert!(matches!(e, FsError::Timeout { .. }));
        assert_eq!(calls.load(Ordering::SeqCst), 3);
    }
}
