//! When a failed model request is tried again: on 429, on 5xx and on connection errors,
//! after an exponential backoff with jitter, or after the server's `Retry-After`. Any
//! other 4xx is final. The schedule is a pure function of the attempt and a jitter draw,
//! so it is tested without sleeping.

use std::time::Duration;

/// The longest `Retry-After` honoured; a server asking for more waits this long.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// How often and how long to wait between attempts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first attempt (`max_retries` in the model's `extra`).
    pub max_retries: u32,
    /// The backoff before the first retry; it doubles with each retry.
    pub base_delay: Duration,
    /// The cap of the backoff.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    /// 4 retries, 0.5 s doubling to 8 s.
    fn default() -> RetryPolicy {
        RetryPolicy {
            max_retries: 4,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(8),
        }
    }
}

impl RetryPolicy {
    /// The backoff before retry `retry` (1-based) without jitter: `base * 2^(retry-1)`,
    /// capped at `max_delay`.
    pub fn backoff(&self, retry: u32) -> Duration {
        let doublings = retry.saturating_sub(1).min(31);
        self.base_delay
            .saturating_mul(1u32 << doublings)
            .min(self.max_delay)
    }

    /// The wait before retry `retry`: the server's `Retry-After` when it gave one
    /// (capped at [`MAX_RETRY_AFTER`]), else the backoff scaled by `jitter` in
    /// `[0, 1)` into its upper half ("equal jitter": between half and all of it), so
    /// clients that failed together do not come back together.
    pub fn delay(&self, retry: u32, retry_after: Option<Duration>, jitter: f64) -> Duration {
        if let Some(wait) = retry_after {
            return wait.min(MAX_RETRY_AFTER);
        }
        let backoff = self.backoff(retry);
        backoff.mul_f64(0.5 + 0.5 * jitter.clamp(0.0, 1.0))
    }
}

/// Whether an HTTP status is worth another attempt (429 and 5xx).
pub fn is_retryable_status(status: u16) -> bool {
    status == 429 || (500..=599).contains(&status)
}

/// A `Retry-After` header in seconds (an HTTP date is ignored: the backoff applies).
pub fn parse_retry_after(value: &str) -> Option<Duration> {
    let seconds: f64 = value.trim().parse().ok()?;
    (seconds.is_finite() && seconds >= 0.0).then(|| Duration::from_secs_f64(seconds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_half_a_second_to_eight() {
        let policy = RetryPolicy::default();
        let schedule: Vec<f64> = (1..=6).map(|n| policy.backoff(n).as_secs_f64()).collect();
        assert_eq!(schedule, [0.5, 1.0, 2.0, 4.0, 8.0, 8.0]);
        assert_eq!(policy.max_retries, 4);
        assert_eq!(policy.backoff(200), Duration::from_secs(8));
    }

    #[test]
    fn jitter_keeps_the_delay_between_half_and_all_of_the_backoff() {
        let policy = RetryPolicy::default();
        assert_eq!(policy.delay(3, None, 0.0), Duration::from_secs(1));
        assert_eq!(policy.delay(3, None, 0.5), Duration::from_millis(1500));
        assert_eq!(policy.delay(3, None, 1.0), Duration::from_secs(2));
        for _ in 0..100 {
            let d = policy.delay(2, None, fastrand::f64());
            assert!(
                d >= Duration::from_millis(500) && d < Duration::from_secs(1),
                "{d:?}"
            );
        }
    }

    #[test]
    fn retry_after_wins_over_the_backoff_and_is_capped() {
        let policy = RetryPolicy::default();
        assert_eq!(policy.delay(4, Some(Duration::ZERO), 0.9), Duration::ZERO);
        assert_eq!(
            policy.delay(1, Some(Duration::from_secs(3)), 0.0),
            Duration::from_secs(3)
        );
        assert_eq!(
            policy.delay(1, Some(Duration::from_secs(3600)), 0.0),
            MAX_RETRY_AFTER
        );
        assert_eq!(parse_retry_after(" 2 "), Some(Duration::from_secs(2)));
        assert_eq!(parse_retry_after("0.25"), Some(Duration::from_millis(250)));
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), None);
        assert_eq!(parse_retry_after("-1"), None);
    }

    #[test]
    fn only_429_and_5xx_are_retried() {
        for status in [429, 500, 502, 503, 599] {
            assert!(is_retryable_status(status), "{status}");
        }
        for status in [200, 400, 401, 403, 404, 408, 422, 600] {
            assert!(!is_retryable_status(status), "{status}");
        }
    }
}
