//! What a BatchJob's deletion does on its cluster, and when the operator gives up on it.

use std::time::{Duration, SystemTime};

use batchbridge_core::JobId;

use crate::crd::{BatchJobStatus, CleanupPolicy, Phase};

/// What to cancel on deletion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cancel {
    /// The job with this id.
    Job(JobId),
    /// An attempt was being submitted: the job with this attempt's key, if the scheduler
    /// has one.
    ByKey {
        /// The attempt being submitted.
        attempt: u32,
    },
    /// Nothing runs.
    Nothing,
}

/// What to do on deletion, before the finalizer is removed: cancel what may run, then
/// remove the files of attempts 1 to `remove_files` (each under its [`attempt_key`](crate::crd::attempt_key)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Removal {
    /// What to cancel first.
    pub cancel: Cancel,
    /// How many attempts' files to remove; 0 when none were submitted or the cleanup
    /// policy keeps them.
    pub remove_files: u32,
}

impl Removal {
    /// Whether there is nothing to do on the cluster.
    pub fn is_nothing(&self) -> bool {
        self.cancel == Cancel::Nothing && self.remove_files == 0
    }

    /// The note of the Warning Event that gives this removal up, for the BatchJob with UID
    /// `uid` deleted at `deleted_at`, once `deadline` has passed ([`removal_abandoned`]):
    /// what may be left behind, and `error`, the last try's. `None` while the operator
    /// keeps trying. Holding the resource back longer would only make `kubectl delete` hang
    /// on a cluster that may never answer again.
    pub fn given_up(
        &self,
        uid: &str,
        deleted_at: SystemTime,
        now: SystemTime,
        deadline: Duration,
        error: &str,
    ) -> Option<String> {
        if !removal_abandoned(deleted_at, now, deadline) {
            return None;
        }
        let left = match &self.cancel {
            Cancel::Nothing => String::new(),
            Cancel::Job(id) => format!("job {id} may still run; "),
            Cancel::ByKey { .. } => "a job may have been submitted and may still run; ".to_owned(),
        };
        Some(format!(
            "gave up {} s after the deletion: {left}its files may remain in the cluster's work \
             directory (jobs/{uid}*); last error: {error}",
            deadline.as_secs()
        ))
    }
}

/// What to do on deletion: cancel an active job; remove every attempt's files unless the
/// cleanup policy keeps them (earlier attempts, retries and re-runs, have files too).
pub fn removal(status: Option<&BatchJobStatus>, policy: CleanupPolicy) -> Removal {
    let Some(status) = status else {
        return Removal {
            cancel: Cancel::Nothing,
            remove_files: 0,
        };
    };
    let cancel = match (status.phase.unwrap_or(Phase::Pending), &status.job_id) {
        (phase, _) if phase.spec_editable() => Cancel::Nothing,
        (_, Some(id)) => Cancel::Job(JobId::from(id.as_str())),
        (_, None) => Cancel::ByKey {
            attempt: status.attempts.max(1),
        },
    };
    let remove_files = match policy {
        CleanupPolicy::OnDelete => status.attempts,
        CleanupPolicy::Never => 0,
    };
    Removal {
        cancel,
        remove_files,
    }
}

/// Whether the operator stops trying to cancel and remove the files of a BatchJob deleted
/// at `deleted_at`: `deadline` (by default [`REMOVAL_DEADLINE`](super::REMOVAL_DEADLINE)) has passed.
pub fn removal_abandoned(deleted_at: SystemTime, now: SystemTime, deadline: Duration) -> bool {
    now.duration_since(deleted_at)
        .is_ok_and(|since| since >= deadline)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_removal_given_up_says_what_may_be_left() {
        let deleted = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let deadline = Duration::from_secs(120);
        let removal = |cancel| Removal {
            cancel,
            remove_files: 1,
        };
        let cases = [
            (
                Cancel::Nothing,
                120,
                Some(
                    "gave up 120 s after the deletion: its files may remain in the cluster's work directory (jobs/u1*); last error: refused",
                ),
            ),
            (
                Cancel::Job(JobId::from("42")),
                130,
                Some(
                    "gave up 120 s after the deletion: job 42 may still run; its files may remain in the cluster's work directory (jobs/u1*); last error: refused",
                ),
            ),
            (
                Cancel::ByKey { attempt: 2 },
                500,
                Some(
                    "gave up 120 s after the deletion: a job may have been submitted and may still run; its files may remain in the cluster's work directory (jobs/u1*); last error: refused",
                ),
            ),
            (Cancel::Job(JobId::from("42")), 119, None),
        ];
        for (cancel, after, note) in cases {
            let now = deleted + Duration::from_secs(after);
            assert_eq!(
                removal(cancel.clone())
                    .given_up("u1", deleted, now, deadline, "refused")
                    .as_deref(),
                note,
                "{cancel:?} after {after} s"
            );
        }
    }
}
