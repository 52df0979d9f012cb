//! SLURM's job states and exit codes, mapped onto batchbridge's [`JobState`].

use batchbridge_core::{CancelledBy, FailureCause, JobState, JobStatus};

/// Maps a SLURM state word (as `squeue %T` or `sacct State` print it) and its reason onto
/// the unified state. sacct appends the actor to cancellations (`CANCELLED by 1001`); only
/// the first word counts. Holds show as PENDING with a `JobHeld…` reason.
pub fn map_state(native: &str, reason: &str) -> JobState {
    let word = native.split_whitespace().next().unwrap_or("");
    match word {
        "PENDING" if reason.starts_with("JobHeld") => JobState::Held,
        "PENDING" | "CONFIGURING" | "REQUEUED" | "REQUEUE_FED" => JobState::Queued,
        "REQUEUE_HOLD" | "RESV_DEL_HOLD" | "SPECIAL_EXIT" => JobState::Held,
        "RUNNING" | "COMPLETING" | "SIGNALING" | "STAGE_OUT" | "RESIZING" => JobState::Running,
        "SUSPENDED" | "STOPPED" => JobState::Suspended,
        "COMPLETED" => JobState::Succeeded,
        "FAILED" | "TIMEOUT" | "NODE_FAIL" | "PREEMPTED" | "OUT_OF_MEMORY" | "BOOT_FAIL"
        | "DEADLINE" => JobState::Failed,
        "CANCELLED" | "REVOKED" => JobState::Cancelled,
        _ => JobState::Unknown,
    }
}

/// Parses SLURM's `code:signal` exit code (`3:0`, `0:15`) into (exit code, signal).
pub fn parse_exit_code(text: &str) -> Option<(i32, Option<i32>)> {
    let (code, signal) = text.trim().split_once(':')?;
    let code = code.parse().ok()?;
    let signal = signal.parse().ok().filter(|s: &i32| *s != 0);
    Some((code, signal))
}

/// Why a job SLURM reports in state `native` ended Failed or Cancelled, with its exit code
/// and signal once known; `None` for every other state.
///
/// | SLURM state | cause |
/// |---|---|
/// | `TIMEOUT` | [`WallTimeExceeded`](FailureCause::WallTimeExceeded) |
/// | `OUT_OF_MEMORY` | [`MemoryExceeded`](FailureCause::MemoryExceeded) |
/// | `NODE_FAIL`, `BOOT_FAIL` | [`NodeFailure`](FailureCause::NodeFailure) |
/// | `PREEMPTED` | [`Preempted`](FailureCause::Preempted) |
/// | `FAILED` | [`Signal`](FailureCause::Signal) or [`ExitCode`](FailureCause::ExitCode), else [`Other`](FailureCause::Other) |
/// | `DEADLINE` (its `--deadline` passed) | [`Other`](FailureCause::Other) |
/// | `CANCELLED by N` (sacct) | [`Cancelled`](FailureCause::Cancelled)`(Account(N))` |
/// | `CANCELLED` (squeue), `REVOKED` | [`Cancelled`](FailureCause::Cancelled)`(Unknown)` |
///
/// Whether batchbridge itself cancelled the job only its job directory tells
/// ([`CancelledBy::Request`]); that is for the caller to add.
///
/// ```
/// use batchbridge_core::{CancelledBy, FailureCause};
/// use batchbridge_slurm::state::failure_cause;
///
/// assert_eq!(failure_cause("TIMEOUT", Some(0), Some(15)), Some(FailureCause::WallTimeExceeded));
/// assert_eq!(failure_cause("FAILED", Some(3), None), Some(FailureCause::ExitCode(3)));
/// assert_eq!(
///     failure_cause("CANCELLED by 1001", Some(0), None),
///     Some(FailureCause::Cancelled(CancelledBy::Account("1001".into())))
/// );
/// assert_eq!(failure_cause("COMPLETED", Some(0), None), None);
/// ```
pub fn failure_cause(
    native: &str,
    exit_code: Option<i32>,
    signal: Option<i32>,
) -> Option<FailureCause> {
    let mut words = native.split_whitespace();
    let cause = match words.next()? {
        "TIMEOUT" => FailureCause::WallTimeExceeded,
        "OUT_OF_MEMORY" => FailureCause::MemoryExceeded,
        "NODE_FAIL" | "BOOT_FAIL" => FailureCause::NodeFailure,
        "PREEMPTED" => FailureCause::Preempted,
        "DEADLINE" => FailureCause::Other,
        "FAILED" => match (signal, exit_code) {
            (Some(signal), _) => FailureCause::Signal(signal),
            (None, Some(code)) if code != 0 => FailureCause::ExitCode(code),
            _ => FailureCause::Other,
        },
        "CANCELLED" | "REVOKED" => {
            FailureCause::Cancelled(match (words.next(), words.next(), words.next()) {
                (Some("by"), Some(account), None) => CancelledBy::Account(account.to_owned()),
                _ => CancelledBy::Unknown,
            })
        }
        _ => return None,
    };
    Some(cause)
}

/// A status from SLURM's words: the state, the native state and reason kept beside it
/// (`None` for SLURM's `None` reason), the exit code when the job ended, and the
/// [`failure_cause`].
pub fn status_from(native: &str, reason: &str, exit_code: Option<&str>) -> JobStatus {
    let state = map_state(native, reason);
    let mut status = JobStatus::new(state, native);
    let reason = reason.trim();
    if !reason.is_empty() && reason != "None" {
        status.reason = Some(reason.to_owned());
    } else if state == JobState::Failed {
        status.reason = Some(native.to_owned());
    }
    if state.is_terminal()
        && let Some((code, signal)) = exit_code.and_then(parse_exit_code)
    {
        status.exit_code = Some(code);
        status.signal = signal;
    }
    status.cause = failure_cause(native, status.exit_code, status.signal);
    status
}

/// The reason SLURM gives a job it ended because one of its dependencies can never be met
/// (sbatch's `--kill-on-invalid-dep=yes`, which batchbridge always sets with one).
pub const NEVER_SATISFIED: &str = "DependencyNeverSatisfied";

/// A status, with a job SLURM cancelled for [`NEVER_SATISFIED`] made Failed with
/// [`FailureCause::DependencyFailed`] naming the dependency's job, read from squeue's
/// dependency field (`%E`: `afterok:8537(failed)`, several joined by `,`). Nobody
/// cancelled such a job: it can never run. Any other status is returned as it came.
///
/// ```
/// use batchbridge_core::{FailureCause, JobState};
/// use batchbridge_slurm::state::{never_satisfied, status_from};
///
/// let cancelled = status_from("CANCELLED", "DependencyNeverSatisfied", None);
/// let status = never_satisfied(cancelled, "afterok:8537(failed)");
/// assert_eq!(status.state, JobState::Failed);
/// assert_eq!(status.cause, Some(FailureCause::DependencyFailed("8537".into())));
/// ```
pub fn never_satisfied(mut status: JobStatus, dependency_field: &str) -> JobStatus {
    if status.state != JobState::Cancelled || status.reason.as_deref() != Some(NEVER_SATISFIED) {
        return status;
    }
    let failed = dependency_field.split(',').find_map(|term| {
        let (_, job) = term.split_once(':')?;
        job.strip_suffix("(failed)")
    });
    status.state = JobState::Failed;
    status.cause = Some(FailureCause::DependencyFailed(
        failed.unwrap_or("(SLURM did not say which)").to_owned(),
    ));
    status.reason = Some(match failed {
        Some(job) => format!("{NEVER_SATISFIED}: job {job} ended so that this one can never run"),
        None => NEVER_SATISFIED.to_owned(),
    });
    status
}

#[cfg(test)]
mod tests {
    use super::*;
    use JobState::*;

    #[test]
    fn every_slurm_state_is_mapped() {
        let cases = [
            ("PENDING", "Resources", Queued),
            ("PENDING", "Priority", Queued),
            ("PENDING", "PartitionConfig", Queued),
            ("PENDING", "JobHeldUser", Held),
            ("PENDING", "JobHeldAdmin", Held),
            ("CONFIGURING", "None", Queued),
            ("RUNNING", "None", Running),
            ("COMPLETING", "None", Running),
            ("COMPLETED", "None", Succeeded),
            ("FAILED", "NonZeroExitCode", Failed),
            ("CANCELLED", "None", Cancelled),
            ("CANCELLED by 1001", "None", Cancelled),
            ("TIMEOUT", "TimeLimit", Failed),
            ("NODE_FAIL", "None", Failed),
            ("PREEMPTED", "None", Failed),
            ("OUT_OF_MEMORY", "OutOfMemory", Failed),
            ("BOOT_FAIL", "None", Failed),
            ("DEADLINE", "None", Failed),
            ("SUSPENDED", "None", Suspended),
            ("REQUEUED", "None", Queued),
            ("REQUEUE_HOLD", "JobHeldAdmin", Held),
            ("REQUEUE_FED", "None", Queued),
            ("RESV_DEL_HOLD", "None", Held),
            ("SPECIAL_EXIT", "None", Held),
            ("STOPPED", "None", Suspended),
            ("SIGNALING", "None", Running),
            ("STAGE_OUT", "None", Running),
            ("RESIZING", "None", Running),
            ("REVOKED", "None", Cancelled),
            ("", "", Unknown),
            ("SOMETHING_NEW", "None", Unknown),
        ];
        for (native, reason, expected) in cases {
            assert_eq!(map_state(native, reason), expected, "{native} / {reason}");
        }
    }

    #[test]
    fn exit_codes() {
        let cases = [
            ("0:0", Some((0, None))),
            ("3:0", Some((3, None))),
            ("0:15", Some((0, Some(15)))),
            ("137:9", Some((137, Some(9)))),
            (" 1:0 ", Some((1, None))),
            ("", None),
            ("x:y", None),
            ("3", None),
        ];
        for (text, expected) in cases {
            assert_eq!(parse_exit_code(text), expected, "{text:?}");
        }
    }

    /// Every state word that ends a job, as sacct printed it on the test bed (`State` and
    /// `ExitCode` of a script exiting 3, one killed by SIGKILL, a job over its time limit, a
    /// `scancel` by uid 1001) or as SLURM documents it, with its cause.
    #[test]
    fn every_ending_has_its_cause() {
        use CancelledBy::{Account, Unknown as Nobody};
        use FailureCause as C;
        let cases = [
            ("FAILED", "3:0", Some(C::ExitCode(3))),
            ("FAILED", "0:9", Some(C::Signal(9))),
            ("FAILED", "0:0", Some(C::Other)),
            ("TIMEOUT", "0:0", Some(C::WallTimeExceeded)),
            ("TIMEOUT", "0:15", Some(C::WallTimeExceeded)),
            ("OUT_OF_MEMORY", "0:125", Some(C::MemoryExceeded)),
            ("NODE_FAIL", "0:0", Some(C::NodeFailure)),
            ("BOOT_FAIL", "0:0", Some(C::NodeFailure)),
            ("PREEMPTED", "0:15", Some(C::Preempted)),
            ("DEADLINE", "0:0", Some(C::Other)),
            (
                "CANCELLED by 1001",
                "0:0",
                Some(C::Cancelled(Account("1001".into()))),
            ),
            (
                "CANCELLED by 0",
                "0:15",
                Some(C::Cancelled(Account("0".into()))),
            ),
            ("CANCELLED", "0:15", Some(C::Cancelled(Nobody))),
            ("REVOKED", "0:0", Some(C::Cancelled(Nobody))),
            ("COMPLETED", "0:0", None),
            ("RUNNING", "0:0", None),
            ("PENDING", "0:0", None),
        ];
        for (native, exit_code, cause) in cases {
            let status = status_from(native, "None", Some(exit_code));
            assert_eq!(status.cause, cause, "{native} {exit_code}");
            assert_eq!(
                status.cause.is_some(),
                matches!(status.state, Failed | Cancelled),
                "{native}: a cause exactly when Failed or Cancelled"
            );
        }
    }

    #[test]
    fn statuses_keep_the_native_word_and_reason() {
        let timeout = status_from("TIMEOUT", "TimeLimit", Some("0:15"));
        assert_eq!(
            (timeout.state, timeout.native_state.as_str()),
            (Failed, "TIMEOUT")
        );
        assert_eq!((timeout.exit_code, timeout.signal), (Some(0), Some(15)));
        assert_eq!(timeout.reason.as_deref(), Some("TimeLimit"));

        let failed = status_from("FAILED", "None", Some("3:0"));
        assert_eq!(
            (failed.exit_code, failed.reason.as_deref()),
            (Some(3), Some("FAILED"))
        );

        let pending = status_from("PENDING", "Resources", Some("0:0"));
        assert_eq!(
            (pending.state, pending.exit_code),
            (Queued, None),
            "no exit code before the end"
        );
        assert_eq!(pending.reason.as_deref(), Some("Resources"));
    }
}
