//! PBS's job states and `Exit_status` conventions, mapped onto batchbridge's
//! [`JobState`] and [`FailureCause`].
//!
//! `Exit_status` is the script's exit code (0–255), `256 + N` when signal `N` ended it, or
//! negative when PBS itself ended or failed the job (`JOB_EXEC_*` in OpenPBS's `job.h`):
//! -29 walltime exceeded, -27 and -26 memory, -1 to -7 and -10 a start that failed on the
//! execution host, and so on. A finished job's `substate` says how it finished: 91 deleted
//! (`qdel`), 92 exit 0, 93 anything else.

use batchbridge_core::wrapper::JobFiles;
use batchbridge_core::{CancelledBy, FailureCause, JobState, JobStatus};

use crate::parse::{QstatJob, parse_ctime};

/// `substate` of a finished job that `qdel` removed (`JOB_SUBSTATE_TERMINATED`).
pub const SUBSTATE_DELETED: u32 = 91;

/// `substate` of a finished job that ended without being deleted by a person: exit 0, or,
/// with no `Exit_status` at all, a job the server deleted because a dependency can never
/// be met ([`dependency_deleted`]).
pub const SUBSTATE_FINISHED: u32 = 92;

/// Maps a PBS `job_state` letter onto the unified state. F (finished) and X (a finished
/// subjob) are Succeeded here: [`ended`] decides how they really ended.
///
/// ```
/// use batchbridge_core::JobState;
/// use batchbridge_pbs::state::map_state;
///
/// assert_eq!(map_state("Q"), JobState::Queued);
/// assert_eq!(map_state("B"), JobState::Running);
/// assert_eq!(map_state("?"), JobState::Unknown);
/// ```
pub fn map_state(job_state: &str) -> JobState {
    match job_state {
        // Queued, waiting for its start time (-a), in transit between queues.
        "Q" | "W" | "T" => JobState::Queued,
        "H" => JobState::Held,
        // Running, exiting, an array with subjobs begun.
        "R" | "E" | "B" => JobState::Running,
        // Suspended by the scheduler or an admin (S), or by workstation activity (U).
        "S" | "U" => JobState::Suspended,
        "F" | "X" => JobState::Succeeded,
        // M: moved to another server, which batchbridge does not follow.
        _ => JobState::Unknown,
    }
}

/// The cause PBS's own negative `Exit_status` gives, with what it means in words.
///
/// ```
/// use batchbridge_core::FailureCause;
/// use batchbridge_pbs::state::pbs_failure;
///
/// assert_eq!(pbs_failure(-29).0, FailureCause::WallTimeExceeded);
/// assert_eq!(pbs_failure(-1).0, FailureCause::NodeFailure);
/// ```
pub fn pbs_failure(exit_status: i32) -> (FailureCause, &'static str) {
    match exit_status {
        -29 => (
            FailureCause::WallTimeExceeded,
            "PBS killed the job: walltime exceeded",
        ),
        -27 | -26 => (
            FailureCause::MemoryExceeded,
            "PBS killed the job: memory limit exceeded",
        ),
        -28 => (FailureCause::Other, "PBS killed the job: cput exceeded"),
        -24 | -25 => (FailureCause::Other, "PBS killed the job: ncpus exceeded"),
        -12 => (
            FailureCause::Preempted,
            "PBS checkpointed and killed the job",
        ),
        -17 | -19 => (FailureCause::Other, "a PBS hook deleted the job"),
        -7..=-1 | -10 | -13 | -23..=-20 | -30 => (
            FailureCause::NodeFailure,
            "PBS could not start the job on its execution host",
        ),
        _ => (FailureCause::Other, "PBS ended the job"),
    }
}

/// How a finished job (F) or subjob (X) ended, from its `Exit_status`, `substate` and
/// `comment`, with what its job directory says for task `task` put over it
/// ([`JobFiles::overrule`]): whether batchbridge cancelled it, and why the script never ran
/// when the wrapper exited
/// [`NOT_STARTED_EXIT_CODE`](batchbridge_core::wrapper::NOT_STARTED_EXIT_CODE).
///
/// A deleted job (substate 91) is Cancelled whatever its `Exit_status` (PBS gives the
/// queued subjobs of a deleted array 1): by batchbridge when its job directory holds the
/// cancel mark, else by the account PBS names in the comment (`... terminated by
/// alice@login1`), else by an account it does not name.
///
/// A job killed by a signal (`Exit_status` 256+N) after batchbridge asked to cancel it is
/// Cancelled by that request too, whatever its substate: a `qdel` that reaches the
/// execution host while it is still starting the job is lost there, and PBS kills the job
/// at the end of its kill delay and calls it failed (substate 93).
///
/// ```
/// use batchbridge_core::{CancelledBy, FailureCause, JobState};
/// use batchbridge_pbs::state::ended;
///
/// let status = ended(Some(3), Some(93), None, None, 0);
/// assert_eq!((status.state, status.exit_code), (JobState::Failed, Some(3)));
/// let status = ended(Some(256 + 9), Some(93), None, None, 0);
/// assert_eq!((status.signal, status.cause), (Some(9), Some(FailureCause::Signal(9))));
/// let comment = "Job run at Mon Nov 23 at 15:20 on (pbs:ncpus=1) and terminated by alice@pbs";
/// let status = ended(Some(271), Some(91), Some(comment), None, 0);
/// assert_eq!(status.state, JobState::Cancelled);
/// assert_eq!(status.cause, Some(FailureCause::Cancelled(CancelledBy::Account("alice".into()))));
/// ```
pub fn ended(
    exit_status: Option<i32>,
    substate: Option<u32>,
    comment: Option<&str>,
    files: Option<&JobFiles>,
    task: u32,
) -> JobStatus {
    let status = pbs_ended(exit_status, substate, comment, files);
    match files {
        Some(files) => files.overrule(status, task),
        None => status,
    }
}

/// [`ended`] as PBS alone tells it, but for a signal after a cancel batchbridge asked for.
fn pbs_ended(
    exit_status: Option<i32>,
    substate: Option<u32>,
    comment: Option<&str>,
    files: Option<&JobFiles>,
) -> JobStatus {
    if substate == Some(SUBSTATE_DELETED) {
        let by = comment
            .and_then(|c| c.rsplit_once("terminated by "))
            .map(|(_, who)| who.split('@').next().unwrap_or(who).trim())
            .filter(|who| !who.is_empty())
            .map_or(CancelledBy::Unknown, |who| {
                CancelledBy::Account(who.to_owned())
            });
        let mut status =
            JobStatus::new(JobState::Cancelled, "F").with_cause(FailureCause::Cancelled(by));
        status.reason = Some(match exit_status {
            Some(code) if code > 256 => {
                status.signal = Some(code - 256);
                format!("deleted while running (signal {})", code - 256)
            }
            _ => "deleted before it ran".to_owned(),
        });
        return status;
    }
    match exit_status {
        None => JobStatus::new(JobState::Unknown, "F")
            .with_reason("PBS says the job finished but records no exit status"),
        Some(0) => JobStatus::new(JobState::Succeeded, "F").with_exit_code(0),
        Some(code @ 1..=255) => JobStatus::new(JobState::Failed, "F")
            .with_exit_code(code)
            .with_cause(FailureCause::ExitCode(code)),
        Some(code) if code > 256 && files.is_some_and(|f| f.cancel_requested) => {
            let signal = code - 256;
            JobStatus::new(JobState::Cancelled, "F")
                .with_signal(signal)
                .with_cause(FailureCause::Cancelled(CancelledBy::Request))
                .with_reason(format!(
                    "killed by signal {signal} after batchbridge asked to cancel it"
                ))
        }
        Some(code) if code > 256 => {
            let signal = code - 256;
            JobStatus::new(JobState::Failed, "F")
                .with_signal(signal)
                .with_cause(FailureCause::Signal(signal))
                .with_reason(format!("ended by signal {signal}"))
        }
        Some(code) => {
            let (cause, why) = pbs_failure(code);
            JobStatus::new(JobState::Failed, "F")
                .with_cause(cause)
                .with_reason(format!("{why} (Exit_status {code})"))
        }
    }
}

/// A job the PBS server deleted because one of its dependencies can never be met, made
/// Failed with [`FailureCause::DependencyFailed`]: PBS leaves it finished (F, substate
/// [`SUBSTATE_FINISHED`]) without an `Exit_status` (it never ran), its `depend` list still
/// naming what it waited for. PBS does not say which dependency failed; the cause names
/// the one job waited for, or all of them (`12, 13`), by the backend's ids. Any other status is
/// returned as it came.
///
/// ```
/// use batchbridge_core::{FailureCause, JobState};
/// use batchbridge_pbs::parse::QstatJob;
/// use batchbridge_pbs::state::{dependency_deleted, job_status};
///
/// let job = QstatJob {
///     job_state: "F".into(),
///     substate: Some(92),
///     depend: Some("afterok:6015.pbs@pbs,beforeok:6017.pbs@pbs".into()),
///     ..QstatJob::default()
/// };
/// let status = job_status(&job, None, 0);
/// assert_eq!(status.state, JobState::Failed);
/// assert_eq!(status.cause, Some(FailureCause::DependencyFailed("6015".into())));
/// ```
pub fn dependency_deleted(mut status: JobStatus, job: &QstatJob) -> JobStatus {
    let waited_for: Vec<&str> = job
        .depend
        .as_deref()
        .unwrap_or_default()
        .split(',')
        .filter_map(|term| term.strip_prefix("after")?.split_once(':'))
        .flat_map(|(_, jobs)| jobs.split(':'))
        // `6015.pbs@pbs`: the backend's id is the sequence number alone.
        .map(|job| job.split(['.', '@']).next().unwrap_or(job))
        .collect();
    let deleted_unrun = job.job_state == "F"
        && job.substate == Some(SUBSTATE_FINISHED)
        && job.exit_status.is_none();
    if !deleted_unrun || waited_for.is_empty() {
        return status;
    }
    let named = waited_for.join(", ");
    status.state = JobState::Failed;
    status.reason = Some(format!(
        "deleted by PBS without running: its dependency on {named} can never be met"
    ));
    status.cause = Some(FailureCause::DependencyFailed(named));
    status
}

/// The status of one job or subjob from its qstat record (and, once it finished, what its
/// job directory says for task `task`): state, native letter, reason (PBS's `comment`, or
/// the hold types of a held job), queue, times, and for a finished one its exit code,
/// signal and cause.
///
/// ```
/// use batchbridge_core::JobState;
/// use batchbridge_pbs::parse::QstatJob;
/// use batchbridge_pbs::state::job_status;
///
/// let job = QstatJob {
///     job_state: "Q".into(),
///     comment: Some("Not Running: Insufficient amount of resource: ncpus".into()),
///     queue: Some("workq".into()),
///     ..QstatJob::default()
/// };
/// let status = job_status(&job, None, 0);
/// assert_eq!((status.state, status.queue.as_deref()), (JobState::Queued, Some("workq")));
/// assert!(status.reason.unwrap().contains("ncpus"));
/// ```
pub fn job_status(job: &QstatJob, files: Option<&JobFiles>, task: u32) -> JobStatus {
    let state = map_state(&job.job_state);
    let mut status = if matches!(job.job_state.as_str(), "F" | "X") {
        let mut status = ended(
            job.exit_status,
            job.substate,
            job.comment.as_deref(),
            files,
            task,
        );
        status.native_state.clone_from(&job.job_state);
        status.ended_at = job.obittime.as_deref().and_then(parse_ctime);
        dependency_deleted(status, job)
    } else {
        let mut status = JobStatus::new(state, job.job_state.clone());
        status.reason = match (state, &job.comment) {
            (_, Some(comment)) if !comment.is_empty() => Some(comment.clone()),
            (JobState::Held, _) => Some(format!(
                "held (hold types {})",
                job.hold_types.as_deref().unwrap_or("unknown")
            )),
            (JobState::Queued, _) => Some("waiting in the queue".to_owned()),
            (JobState::Unknown, _) => Some(format!(
                "PBS state {:?}, which batchbridge does not follow (M: moved to another server)",
                job.job_state
            )),
            _ => None,
        };
        status
    };
    if status.reason.is_none()
        && status.state.is_terminal()
        && let Some(comment) = job.comment.as_ref().filter(|c| !c.is_empty())
    {
        status.reason = Some(comment.clone());
    }
    status.queue.clone_from(&job.queue);
    status.submitted_at = job.ctime.as_deref().and_then(parse_ctime);
    status.started_at = job.stime.as_deref().and_then(parse_ctime);
    status.with_starts(job.run_count.unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `run_count` as the test bed's PBS printed it around a `qrerun` of a running job:
    /// 1 while it ran, then (PBS starting it again at once) 2 while it ran again.
    #[test]
    fn run_counts_are_requeues() {
        let cases = [
            ("Q", None, JobState::Queued, 0, false),
            ("R", Some(1), JobState::Running, 0, false),
            ("Q", Some(1), JobState::Queued, 1, true),
            ("R", Some(2), JobState::Running, 1, false),
            ("H", Some(1), JobState::Held, 1, false),
        ];
        for (job_state, run_count, state, requeues, requeued) in cases {
            let job = QstatJob {
                job_state: job_state.into(),
                run_count,
                ..QstatJob::default()
            };
            let status = job_status(&job, None, 0);
            assert_eq!(
                (status.state, status.requeues, status.requeued()),
                (state, requeues, requeued),
                "{job_state} run_count {run_count:?}"
            );
        }
    }
}
