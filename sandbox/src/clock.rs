//! The two clocks that decide "changed on the host after the run started".
//!
//! The kernel stamps inode times from the coarse real-time clock, except that since Linux 6.13
//! (multigrain timestamps) a file whose ctime was looked at since its last change gets a
//! fine-grained stamp on its next change, which can run up to one tick ahead of the coarse clock.
//! So neither clock read alone splits "before" from "after":
//! - a coarse reading is behind a fine-grained stamp given a moment earlier (a spurious
//!   conflict for a file written just before the run);
//! - a precise reading is ahead of a coarse stamp given a moment later (a missed conflict).
//!
//! The split that holds for both: read the precise clock (`at`); every change before has a
//! ctime at or before it. Then, before anything reads the host on the run's behalf, wait until
//! the coarse clock has passed `at`; every change after that has a ctime after it. A change
//! during the wait may fall either side, and both are right: the run has not looked yet.

use std::time::Duration;

/// A timestamp: seconds and nanoseconds since the epoch, as in `struct timespec`.
pub type Stamp = [i64; 2];

/// `CLOCK_REALTIME_COARSE` now: the clock the kernel stamps most inode times with.
pub fn coarse_now() -> Stamp {
    read(nix::time::ClockId::CLOCK_REALTIME_COARSE)
}

/// `CLOCK_REALTIME` now: never behind any inode time already stamped.
pub fn precise_now() -> Stamp {
    read(nix::time::ClockId::CLOCK_REALTIME)
}

fn read(clock: nix::time::ClockId) -> Stamp {
    match nix::time::clock_gettime(clock) {
        Ok(ts) => [ts.tv_sec(), ts.tv_nsec()],
        // Both clocks always exist on Linux; the epoch is the earliest, so "changed" errs on
        // the side of seeing a change.
        Err(_) => [0, 0],
    }
}

/// Returns once the coarse clock is past `at`: from then on every change is stamped after it.
/// Waits at most one scheduler tick (4 ms at 250 Hz), usually less.
pub fn wait_past(at: Stamp) {
    while coarse_now() <= at {
        std::thread::sleep(Duration::from_micros(500));
    }
}

/// [`precise_now`], returned once [`wait_past`] it: a boundary with everything already done at
/// or before it and everything done later after it.
pub fn settle() -> Stamp {
    let at = precise_now();
    wait_past(at);
    at
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_changed_before_the_boundary_is_not_after_it_and_one_changed_later_is() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("f");
        let ctime = |p: &std::path::Path| {
            use std::os::unix::fs::MetadataExt;
            let m = std::fs::metadata(p).unwrap();
            [m.ctime(), m.ctime_nsec()]
        };
        for _ in 0..200 {
            std::fs::write(&f, b"a").unwrap();
            // Looking at the ctime is what makes the next change fine-grained (multigrain).
            let _ = ctime(&f);
            std::fs::write(&f, b"b").unwrap();
            let before = ctime(&f);
            let at = settle();
            assert!(before <= at, "{before:?} > {at:?}");
            std::fs::write(&f, b"c").unwrap();
            let after = ctime(&f);
            assert!(after > at, "{after:?} <= {at:?}");
        }
    }
}
