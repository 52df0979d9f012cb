//! Why a job failed or was cancelled, in one vocabulary for every backend.
//!
//! Each backend reads the cause out of its own scheduler's words (SLURM's `TIMEOUT` or
//! `NODE_FAIL`, HTCondor's hold and remove reasons, PBS's `Exit_status`, the exit-code files
//! its wrapper writes) and sets [`JobStatus::cause`](crate::JobStatus::cause). Code above
//! the trait — retry policies, the operator's conditions, a command line — decides on the
//! cause alone, so a custom backend that reports causes gets every feature built on them.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Why a job ended [`Failed`](crate::JobState::Failed) or
/// [`Cancelled`](crate::JobState::Cancelled).
///
/// For an array job it is the cause of the first task (in task order) that ended in the
/// array's state: a task exiting non-zero is a non-zero exit of the array.
///
/// ```
/// use batchbridge_core::{CancelledBy, FailureCause};
///
/// assert_eq!(FailureCause::ExitCode(3).to_string(), "exited with code 3");
/// assert_eq!(
///     FailureCause::Cancelled(CancelledBy::Account("alice".into())).to_string(),
///     "cancelled by alice"
/// );
/// assert!(FailureCause::NodeFailure.is_infrastructure());
/// assert!(!FailureCause::ExitCode(1).is_infrastructure());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub enum FailureCause {
    /// The script exited with this code, other than 0.
    ExitCode(i32),
    /// A signal ended the script (its number), not a limit the scheduler enforced.
    Signal(i32),
    /// The job ran out of its wall time.
    WallTimeExceeded,
    /// The job used more memory than it asked for.
    MemoryExceeded,
    /// A node the job ran on failed, or the job could not be launched on it.
    NodeFailure,
    /// The scheduler preempted the job for another and did not requeue it.
    Preempted,
    /// The script never started: the wrapper could not enter the working directory or
    /// start the container runtime.
    NotStarted,
    /// The job was removed before it finished.
    Cancelled(CancelledBy),
    /// A job this one was to run after ended so that the dependency can no longer be met
    /// (it failed where success was required, or succeeded where failure was), so this one
    /// never ran. Names that dependency as the submitter knows it: a job id, or the name of
    /// the operator's BatchJob.
    DependencyFailed(String),
    /// The scheduler says the job failed and nothing tells why.
    Other,
}

impl FailureCause {
    /// Whether the cause lies in the cluster rather than in the job (node failure,
    /// preemption): running the same job again may well succeed.
    pub const fn is_infrastructure(&self) -> bool {
        matches!(self, Self::NodeFailure | Self::Preempted)
    }
}

impl fmt::Display for FailureCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ExitCode(code) => write!(f, "exited with code {code}"),
            Self::Signal(signal) => write!(f, "ended by signal {signal}"),
            Self::WallTimeExceeded => f.write_str("ran out of its wall time"),
            Self::MemoryExceeded => f.write_str("ran out of memory"),
            Self::NodeFailure => f.write_str("a node it ran on failed"),
            Self::Preempted => f.write_str("preempted by the scheduler"),
            Self::NotStarted => f.write_str("the script never started"),
            Self::Cancelled(CancelledBy::Unknown) => f.write_str("cancelled"),
            Self::Cancelled(by) => write!(f, "cancelled {by}"),
            Self::DependencyFailed(dependency) => {
                write!(f, "its dependency {dependency} can no longer be met")
            }
            Self::Other => f.write_str("failed"),
        }
    }
}

/// Who removed a cancelled job.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub enum CancelledBy {
    /// This library's [`cancel`](crate::BatchBackend::cancel), as the job's files or the
    /// scheduler record.
    Request,
    /// The account the scheduler names (a user name or a numeric id), from outside this
    /// library: `scancel`, `condor_rm`, an administrator.
    Account(String),
    /// The scheduler says cancelled and not by whom.
    Unknown,
}

impl fmt::Display for CancelledBy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Request => f.write_str("on request"),
            Self::Account(account) => write!(f, "by {account}"),
            Self::Unknown => f.write_str("by an account the scheduler does not name"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serialises_as_tagged_camel_case() {
        let cases = [
            (FailureCause::ExitCode(3), r#"{"exitCode":3}"#),
            (FailureCause::WallTimeExceeded, r#""wallTimeExceeded""#),
            (
                FailureCause::Cancelled(CancelledBy::Account("1000".into())),
                r#"{"cancelled":{"account":"1000"}}"#,
            ),
            (
                FailureCause::Cancelled(CancelledBy::Request),
                r#"{"cancelled":"request"}"#,
            ),
            (
                FailureCause::DependencyFailed("4711".into()),
                r#"{"dependencyFailed":"4711"}"#,
            ),
        ];
        for (cause, json) in cases {
            assert_eq!(serde_json::to_string(&cause).unwrap(), json, "{cause:?}");
            assert_eq!(serde_json::from_str::<FailureCause>(json).unwrap(), cause);
        }
    }
}
