//! The local backend's start estimates: whether enough of its CPU slots are free now.
//!
//! A slot is a lock file that a running task holds (`flock`); one that can be locked at
//! once is free. Probing takes each lock for an instant: a wrapper that finds a slot busy
//! in that instant tries again 0.2 s later, so an estimate can delay a start by that much
//! and never lets two jobs share a slot.

use std::fs::OpenOptions;
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

use crate::error::{Error, ErrorKind, Result};
use crate::estimate::{EstimatedStart, StartEstimate};

/// How many of the `capacity` slots in `slots` are free now.
fn free_slots(slots: &Path, capacity: u32) -> Result<u32> {
    let mut free = 0;
    for slot in 0..capacity {
        let path = slots.join(slot.to_string());
        // Append and create, as the wrapper opens it (`exec {fd}>>"$slots/$s"`).
        let file = OpenOptions::new().append(true).create(true).open(&path)?;
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            // Dropping the lock releases it.
            Ok(_held) => free += 1,
            Err((_, Errno::EWOULDBLOCK)) => {}
            Err((_, errno)) => {
                return Err(Error::new(
                    ErrorKind::Io,
                    format!("cannot probe CPU slot {}: {errno}", path.display()),
                ));
            }
        }
    }
    Ok(free)
}

/// When a task asking for `cpus` of the `capacity` slots in `slots` would start: now when
/// that many are free, else later (the local backend keeps no queue order to tell when).
/// More CPUs than the capacity is refused: such a job would wait forever.
pub(super) fn estimate(slots: &Path, capacity: u32, cpus: u32) -> Result<StartEstimate> {
    if cpus > capacity {
        return Err(Error::invalid_input(format!(
            "resources.cpus: {cpus} CPUs, more than the local backend's {capacity}; the job \
             would wait forever"
        )));
    }
    let free = free_slots(slots, capacity)?;
    let start = match free >= cpus {
        true => EstimatedStart::Now,
        false => EstimatedStart::Later,
    };
    let mut estimate = StartEstimate::new(start);
    estimate.detail = Some(format!("{free} of {capacity} CPU slots free"));
    Ok(estimate)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_slots_are_busy_and_the_rest_free() {
        let dir = tempfile::tempdir().unwrap();
        let estimate_for = |cpus| estimate(dir.path(), 3, cpus).unwrap();
        assert_eq!(estimate_for(3).start, EstimatedStart::Now);
        assert_eq!(
            estimate_for(1).detail.as_deref(),
            Some("3 of 3 CPU slots free")
        );

        // A task holding slot 1, as the wrapper's flock does.
        let file = OpenOptions::new()
            .append(true)
            .open(dir.path().join("1"))
            .unwrap();
        let held = Flock::lock(file, FlockArg::LockExclusiveNonblock).unwrap();
        assert_eq!(estimate_for(2).start, EstimatedStart::Now);
        assert_eq!(estimate_for(3).start, EstimatedStart::Later);
        assert_eq!(
            estimate_for(3).detail.as_deref(),
            Some("2 of 3 CPU slots free")
        );
        drop(held);
        assert_eq!(estimate_for(3).start, EstimatedStart::Now, "released");

        let err = estimate(dir.path(), 3, 4).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
        assert!(err.message().contains("wait forever"), "{err}");
    }
}
