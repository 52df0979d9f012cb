//! The words the operator writes: the `reason` of a BatchJob's status and of every
//! condition ([`Reason`]), and the condition types ([`ConditionType`]). Both are closed
//! enums with stable names, so code decides on variants, never on text, and users (kubectl,
//! `kubectl wait`, alerts) can rely on the names.
//!
//! ```
//! use batchbridge_operator::reason::{ConditionType, Reason};
//!
//! assert_eq!(Reason::NonZeroExitCode.as_str(), "NonZeroExitCode");
//! assert_eq!(ConditionType::ClusterReady.to_string(), "ClusterReady");
//! let word: Reason = serde_json::from_value(serde_json::json!("Preempted")).unwrap();
//! assert_eq!(word, Reason::Preempted);
//! ```

use std::fmt;

use batchbridge_core::{ErrorKind, FailureCause, JobStatus, Refusal};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Declares a fieldless enum whose variants serialise as their own names, with `as_str`,
/// `Display` and the list of every variant, so that each name is written once.
macro_rules! words {
    ($(#[$meta:meta])* pub enum $name:ident { $($(#[$doc:meta])* $variant:ident,)+ }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
        pub enum $name {
            $($(#[$doc])* $variant,)+
        }

        impl $name {
            /// Every variant, in declaration order.
            pub const ALL: &[Self] = &[$(Self::$variant,)+];

            /// The stable name, as written to the API server.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => stringify!($variant),)+
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

words! {
    /// Why a BatchJob (its status, or one of its conditions) is as it is, in one stable
    /// CamelCase word; for a failed job, its cause as retryPolicy.retryOn names it. The
    /// README's troubleshooting table says what each means and what to do.
    pub enum Reason {
        /// An attempt is being submitted.
        Submitting,
        /// The scheduler has the attempt.
        Submitted,
        /// Waiting in the scheduler's queue; the message carries the scheduler's own reason.
        Queued,
        /// Back in the scheduler's queue after it had started, under the same job id and
        /// the same attempt: requeued by a user or an administrator, or preempted and
        /// requeued. It runs again; the message says how many times it went back, with the
        /// scheduler's own reason. Never a failure.
        Requeued,
        /// Kept from running until released; the message says why.
        Held,
        /// Running.
        Running,
        /// Started, then paused by the scheduler; or held back by spec.suspend: not
        /// submitted, or its attempt cancelled on the cluster and not counted as a failure.
        Suspended,
        /// spec.suspend is true and the job's attempt is being cancelled on its cluster; it
        /// is Suspended once the scheduler says the job ended.
        Suspending,
        /// Finished with exit code 0 (every task, for an array).
        Succeeded,
        /// Removed before it finished.
        Cancelled,
        /// The script (a task, for an array) exited with a code other than 0.
        NonZeroExitCode,
        /// A signal ended the script.
        Signal,
        /// The job ran out of its wall time.
        Timeout,
        /// The job used more memory than it asked for.
        OutOfMemory,
        /// A node the job ran on failed.
        NodeFailure,
        /// The scheduler preempted the job.
        Preempted,
        /// The script never started (working directory, container runtime).
        NotStarted,
        /// The scheduler or the backend refused the job; never retried.
        SubmitRejected,
        /// A scheduler directive in the header of spec.script cannot be honoured (it would
        /// move the job's output, block, lose the job id) or read; the message names the
        /// line. Nothing was submitted and the job is never retried: edit the script.
        DirectiveRefused,
        /// An entry of spec.inputs or spec.outputs cannot be had (its ConfigMap, Secret or
        /// object is missing, a Secret lacks the label batchbridge.dev/job-input=true, the
        /// object store refused the listing, the inline inputs are too big); the message
        /// names the entry. Nothing was submitted and the job is not retried: fix the entry
        /// or what it names, and edit the job to run it again.
        InputRefused,
        /// Event: an entry of spec.inputs was read (ConfigMap, Secret) or signed (object
        /// store) for the attempt being submitted; the job fetches it before its script.
        InputPrepared,
        /// OutputsStaged: every output the job had to send is in its object store.
        OutputsStaged,
        /// OutputsStaged False: an output the job had to send is not in its object store
        /// (the job's stderr says why: a missing file, no curl or wget, an expired URL);
        /// the message names each.
        OutputsNotStaged,
        /// The scheduler refused the attempt for now: a limit on the jobs a user, account
        /// or QOS may have in it was reached. It is submitted again until the scheduler
        /// takes it; the message carries the scheduler's words.
        SubmitLimit,
        /// The scheduler refused the attempt for now: its partition or queue is closed
        /// (drained, inactive, disabled). It is submitted again until the queue opens; the
        /// message carries the scheduler's words.
        QueueClosed,
        /// spec.after names BatchJobs whose condition is not met yet (the message names
        /// them, and those not created yet): the job is submitted once every one is.
        WaitingForDependencies,
        /// A BatchJob of spec.after can no longer meet its condition: it ended the other
        /// way, was deleted before it ended, or never ran because of its own dependencies
        /// (the message names it). The job never ran and is never retried.
        DependencyFailed,
        /// The job and the BatchJobs its spec.after leads to wait for each other in a
        /// circle (the message names it), so none would ever run: each fails unsubmitted.
        /// Edit spec.after to break the circle, which runs them again.
        DependencyCycle,
        /// A failed attempt waits for its retry.
        RetryPending,
        /// The job has not finished.
        NotFinished,
        /// The cluster answered and its credentials are in place.
        Ready,
        /// The BatchCluster's probe got an answer from the scheduler.
        Answered,
        /// The job's clusterRef names no BatchCluster in its namespace.
        BatchClusterNotFound,
        /// Placement chose the job's cluster among its candidates.
        Placed,
        /// Every candidate of the job was skipped (unreachable, not answering, unsuitable,
        /// or no BatchCluster matched): it waits and placement asks again.
        NoClusterAvailable,
        /// The waiting job is being cancelled on its cluster to move to another.
        Moving,
        /// The job was cancelled on its cluster without having started and submitted to
        /// another.
        Moved,
        /// A move was given up: the job started (or ended) before the cancel took.
        MoveAbandoned,
        /// The BatchCluster's secretRef names no Secret in its namespace.
        SecretNotFound,
        /// The Secret has the wrong type or lacks the key its type needs.
        SecretMalformed,
        /// The operator could not read the Secret.
        SecretUnreadable,
        /// The BatchCluster's spec cannot make a connection.
        SpecInvalid,
        /// The BatchCluster's `ssh.host` and `ssh.port` are not on the operator's list of
        /// login nodes it may connect to (its installer's `allowedSshTargets`); nothing
        /// was tried.
        HostNotAllowed,
        /// The scheduler names a backend this operator has not registered.
        UnknownScheduler,
        /// `scheduler: local`, which the operator's installer has not turned on.
        SchedulerDisabled,
        /// The login node does not answer.
        Unreachable,
        /// The login node's key is not in knownHosts.
        HostKeyMismatch,
        /// The login was refused.
        AuthenticationFailed,
        /// The Secret's SSH certificate is valid for longer than the operator's warning
        /// time (CREDENTIAL_EXPIRY_WARNING).
        CredentialValid,
        /// The Secret's SSH certificate expires within the operator's warning time; the
        /// message says when. Jobs go on; renew it before then.
        CredentialExpiring,
        /// The Secret's SSH certificate has expired (the message says when), so the operator
        /// no longer logs in with it: jobs wait, none is failed, until the Secret holds a
        /// valid one.
        CredentialExpired,
        /// An established SSH connection broke.
        ConnectionLost,
        /// A command on the login node did not finish in time.
        CommandTimedOut,
        /// The login works, the scheduler's tools fail.
        SchedulerNotAnswering,
        /// The output was collected.
        Collected,
        /// The output's ConfigMap or log pod name belongs to another object.
        OutputNameTaken,
        /// The output could not be read.
        OutputUnavailable,
        /// The output was read, but its ConfigMap or log pod could not be written (the API
        /// server refused it, or kept failing); the tail is in status.
        OutputNotWritten,
        /// No source could tell what became of the job, or why it failed. A word this
        /// version does not know (written by an older operator) reads as this one.
        #[serde(other)]
        Unknown,
    }
}

words! {
    /// The type of a condition the operator sets.
    pub enum ConditionType {
        /// BatchJob: whether the job's cluster can be used (BatchCluster and Secret in
        /// place, host answering).
        ClusterReady,
        /// BatchJob: whether the scheduler has the current attempt.
        Submitted,
        /// BatchJob: whether the job has finished for good (no retry pending).
        Finished,
        /// BatchJob: finished successfully, as batch/v1 Job's `Complete`.
        Complete,
        /// BatchJob: finished unsuccessfully (failed with no retry left, or cancelled), as
        /// batch/v1 Job's `Failed`.
        Failed,
        /// BatchJob: whether the finished job's output was collected.
        OutputCollected,
        /// BatchJob with spec.outputs: whether the outputs the job had to send (by their
        /// `when`) arrived in their object stores, checked once the job ended; True with
        /// reason OutputsStaged, False with OutputsNotStaged. The phase stays what the
        /// script did.
        OutputsStaged,
        /// BatchJob: held back by spec.suspend, as batch/v1 Job's `Suspended`: True once
        /// nothing runs on the cluster (not submitted, or the attempt's cancel confirmed),
        /// False with reason `Suspending` while the attempt is being cancelled; gone once
        /// the job is submitted again.
        Suspended,
        /// BatchCluster: whether the last probe logged in and the scheduler answered.
        Reachable,
        /// BatchCluster whose Secret holds an SSH certificate: whether it stays valid for
        /// longer than the operator's warning time; False with reason CredentialExpiring
        /// before its expiry, CredentialExpired after. Absent for credentials that do not
        /// expire.
        CredentialValid,
        /// The summary kstatus, Argo CD and Flux read. BatchCluster: ready for jobs, true
        /// when Reachable is. BatchJob: true once the job succeeded, false (with the
        /// status's reason) while it is on its way or when it ended otherwise.
        Ready,
    }
}

impl Reason {
    /// The reason a failed or cancelled job ended so, from the cause its backend reports;
    /// without one, from the exit code or signal.
    ///
    /// ```
    /// use batchbridge_core::{FailureCause, JobState, JobStatus};
    /// use batchbridge_operator::reason::Reason;
    ///
    /// let mut job = JobStatus::new(JobState::Failed, "native");
    /// job.cause = Some(FailureCause::WallTimeExceeded);
    /// assert_eq!(Reason::of_failure(&job), Reason::Timeout);
    /// ```
    pub fn of_failure(job: &JobStatus) -> Self {
        match &job.cause {
            Some(FailureCause::ExitCode(_)) => Self::NonZeroExitCode,
            Some(FailureCause::Signal(_)) => Self::Signal,
            Some(FailureCause::WallTimeExceeded) => Self::Timeout,
            Some(FailureCause::MemoryExceeded) => Self::OutOfMemory,
            Some(FailureCause::NodeFailure) => Self::NodeFailure,
            Some(FailureCause::Preempted) => Self::Preempted,
            Some(FailureCause::NotStarted) => Self::NotStarted,
            Some(FailureCause::Cancelled(_)) => Self::Cancelled,
            Some(FailureCause::DependencyFailed(_)) => Self::DependencyFailed,
            Some(_) => Self::Unknown,
            None if job.signal.is_some() => Self::Signal,
            None if job.exit_code.is_some_and(|code| code != 0) => Self::NonZeroExitCode,
            None => Self::Unknown,
        }
    }

    /// The reason of an attempt the scheduler refused for now, by the kind of refusal its
    /// backend read; `None` for a refusal for good (the job fails, SubmitRejected).
    ///
    /// ```
    /// use batchbridge_core::Refusal;
    /// use batchbridge_operator::reason::Reason;
    ///
    /// assert_eq!(Reason::of_refusal(Refusal::SubmitLimit), Some(Reason::SubmitLimit));
    /// assert_eq!(Reason::of_refusal(Refusal::InvalidRequest), None);
    /// ```
    pub const fn of_refusal(refusal: Refusal) -> Option<Self> {
        match refusal {
            Refusal::SubmitLimit => Some(Self::SubmitLimit),
            Refusal::QueueClosed => Some(Self::QueueClosed),
            _ => None,
        }
    }

    /// The reason of a cluster that cannot be used because a command failed with `kind`,
    /// if that kind means the cluster rather than one job (not reached, host key or login
    /// refused, connection broken or hung).
    ///
    /// ```
    /// use batchbridge_core::ErrorKind;
    /// use batchbridge_operator::reason::Reason;
    ///
    /// assert_eq!(Reason::of_connection(ErrorKind::HostKeyMismatch), Some(Reason::HostKeyMismatch));
    /// assert_eq!(Reason::of_connection(ErrorKind::Rejected), None);
    /// ```
    pub const fn of_connection(kind: ErrorKind) -> Option<Self> {
        match kind {
            ErrorKind::Unreachable => Some(Self::Unreachable),
            ErrorKind::HostKeyMismatch => Some(Self::HostKeyMismatch),
            ErrorKind::AuthenticationFailed => Some(Self::AuthenticationFailed),
            ErrorKind::CredentialExpired => Some(Self::CredentialExpired),
            ErrorKind::ConnectionLost => Some(Self::ConnectionLost),
            ErrorKind::Timeout => Some(Self::CommandTimedOut),
            _ => None,
        }
    }
}

/// Why a cluster cannot be used right now, for the jobs that use it and the cluster's own
/// status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterProblem {
    /// Which problem: BatchClusterNotFound, SecretNotFound, SecretMalformed, Unreachable,
    /// HostKeyMismatch, AuthenticationFailed, UnknownScheduler...
    pub reason: Reason,
    /// What is wrong and what to do about it.
    pub message: String,
}

#[cfg(test)]
mod tests {
    use batchbridge_core::{CancelledBy, JobState};

    use super::*;
    use crate::crd::RetryReason;

    #[test]
    fn an_unknown_word_reads_as_unknown() {
        let old: Result<Reason, _> = serde_json::from_value(serde_json::json!("Resources"));
        assert_eq!(old.ok(), Some(Reason::Unknown));
    }

    #[test]
    fn names_round_trip_through_serde() {
        for reason in Reason::ALL {
            let json = serde_json::to_value(reason).unwrap_or_default();
            assert_eq!(json, reason.as_str(), "{reason:?}");
            assert_eq!(serde_json::from_value::<Reason>(json).ok(), Some(*reason));
        }
        for type_ in ConditionType::ALL {
            let json = serde_json::to_value(type_).unwrap_or_default();
            assert_eq!(json, type_.as_str(), "{type_:?}");
        }
    }

    /// Causes as the backends report them, the retryOn entry each falls under.
    #[test]
    fn causes_map_to_reasons_and_retry_reasons() {
        let failed = |cause: Option<FailureCause>, exit: Option<i32>, signal: Option<i32>| {
            let mut job = JobStatus::new(JobState::Failed, "native");
            job.cause = cause;
            job.exit_code = exit;
            job.signal = signal;
            job
        };
        let cases = [
            (
                failed(Some(FailureCause::ExitCode(1)), Some(1), None),
                Reason::NonZeroExitCode,
                RetryReason::NonZeroExitCode,
            ),
            (
                failed(Some(FailureCause::WallTimeExceeded), Some(0), None),
                Reason::Timeout,
                RetryReason::Timeout,
            ),
            (
                failed(Some(FailureCause::NodeFailure), None, None),
                Reason::NodeFailure,
                RetryReason::NodeFailure,
            ),
            (
                failed(Some(FailureCause::Preempted), None, None),
                Reason::Preempted,
                RetryReason::Preempted,
            ),
            (
                failed(Some(FailureCause::MemoryExceeded), Some(137), None),
                Reason::OutOfMemory,
                RetryReason::Unknown,
            ),
            (
                failed(Some(FailureCause::Signal(9)), None, Some(9)),
                Reason::Signal,
                RetryReason::Unknown,
            ),
            (
                failed(Some(FailureCause::NotStarted), Some(1), None),
                Reason::NotStarted,
                RetryReason::Unknown,
            ),
            (
                failed(
                    Some(FailureCause::Cancelled(CancelledBy::Account("1000".into()))),
                    None,
                    None,
                ),
                Reason::Cancelled,
                RetryReason::Unknown,
            ),
            (
                failed(
                    Some(FailureCause::DependencyFailed("4711".into())),
                    None,
                    None,
                ),
                Reason::DependencyFailed,
                RetryReason::Unknown,
            ),
            (
                failed(Some(FailureCause::Other), None, None),
                Reason::Unknown,
                RetryReason::Unknown,
            ),
            // A backend that reports no cause: the exit code or signal tells.
            (
                failed(None, Some(3), None),
                Reason::NonZeroExitCode,
                RetryReason::NonZeroExitCode,
            ),
            (
                failed(None, None, Some(15)),
                Reason::Signal,
                RetryReason::Unknown,
            ),
            (
                failed(None, Some(0), None),
                Reason::Unknown,
                RetryReason::Unknown,
            ),
            (
                failed(None, None, None),
                Reason::Unknown,
                RetryReason::Unknown,
            ),
        ];
        for (job, reason, retry) in cases {
            assert_eq!(Reason::of_failure(&job), reason, "{job:?}");
            assert_eq!(RetryReason::from(reason), retry, "{reason:?}");
        }
    }

    #[test]
    fn temporary_refusals_have_reasons_of_their_own() {
        for refusal in Refusal::ALL {
            let reason = Reason::of_refusal(*refusal);
            assert_eq!(reason.is_some(), refusal.is_temporary(), "{refusal:?}");
            if let Some(reason) = reason {
                assert_eq!(
                    reason.as_str(),
                    refusal.as_str(),
                    "one name for one meaning"
                );
            }
        }
    }

    #[test]
    fn only_connection_errors_are_cluster_problems() {
        use ErrorKind::*;
        let cases = [
            (Unreachable, Some(Reason::Unreachable)),
            (HostKeyMismatch, Some(Reason::HostKeyMismatch)),
            (AuthenticationFailed, Some(Reason::AuthenticationFailed)),
            (CredentialExpired, Some(Reason::CredentialExpired)),
            (ConnectionLost, Some(Reason::ConnectionLost)),
            (Timeout, Some(Reason::CommandTimedOut)),
            (Rejected, None),
            (InvalidInput, None),
            (SubmitOutcomeUnknown, None),
            (CommandFailed, None),
        ];
        for (kind, reason) in cases {
            assert_eq!(Reason::of_connection(kind), reason, "{kind:?}");
        }
    }
}
