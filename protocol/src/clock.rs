//! The coarse monotonic clock a connection's liveness is read on (when the peer was last
//! heard from): updated by the kernel at each tick, read from memory with no hardware timer
//! read, cheap enough for every frame.

use std::{sync::OnceLock, time::Instant};

/// Milliseconds on the monotonic clock at its coarse resolution (a tick: 1 to 10 ms).
pub(crate) fn coarse_ms() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write; the clock exists on every Linux since 2.6.32.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    if r != 0 {
        // Not on this kernel: the fine clock, from the first read, moves just the same.
        static FIRST: OnceLock<Instant> = OnceLock::new();
        return FIRST.get_or_init(Instant::now).elapsed().as_millis() as u64;
    }
    (ts.tv_sec as u64) * 1000 + (ts.tv_nsec as u64) / 1_000_000
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_coarse_clock_moves_with_the_fine_one() {
        // Each coarse read bracketed by fine ones, so a preemption between two reads
        // widens the bounds instead of failing the test.
        let f0 = Instant::now();
        let c0 = coarse_ms();
        let f1 = Instant::now();
        std::thread::sleep(Duration::from_millis(50));
        let f2 = Instant::now();
        let c1 = coarse_ms();
        let f3 = Instant::now();
        let moved = c1 - c0;
        let (least, most) = ((f2 - f1).as_millis() as u64, (f3 - f0).as_millis() as u64);
        // Give or take a tick (10 ms at the lowest HZ) and a millisecond of rounding.
        assert!(
            moved + 11 >= least && moved <= most + 11,
            "coarse {moved} ms vs fine {least}..{most} ms"
        );
    }
}
