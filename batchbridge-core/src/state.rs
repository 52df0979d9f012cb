//! The one job state machine every backend maps onto.
//!
//! Each scheduler has its own vocabulary (SLURM's `PENDING`/`COMPLETING`/`TIMEOUT`,
//! HTCondor's `JobStatus` 1–7, PBS's `job_state` letters); backends translate it into [`JobState`] and keep the native
//! word and the reason beside it in [`JobStatus`]. The transition rules live here and only
//! here: terminal states are absorbing, everything else may move anywhere because a poller
//! samples states and can miss the steps between two observations.

use std::fmt;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use crate::FailureCause;

/// Where a job is in its life, the same for every backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[non_exhaustive]
pub enum JobState {
    /// Accepted and waiting to run (including waiting for resources that may never come).
    Queued,
    /// Kept from running until released (by a user, an admin or the scheduler).
    Held,
    /// Running.
    Running,
    /// Started, then paused by the scheduler or an administrator (e.g. SLURM `SUSPENDED`).
    Suspended,
    /// Finished with exit code 0 (every task, for an array).
    Succeeded,
    /// Finished unsuccessfully: a non-zero exit, a signal, a time or memory limit, a node
    /// failure, preemption without requeue.
    Failed,
    /// Removed before finishing, by a user or an administrator.
    Cancelled,
    /// No source could tell: not in the queue, not in accounting, no exit-code file.
    Unknown,
}

/// Every state, in declaration order; handy for exhaustive tables.
pub const ALL_STATES: [JobState; 8] = [
    JobState::Queued,
    JobState::Held,
    JobState::Running,
    JobState::Suspended,
    JobState::Succeeded,
    JobState::Failed,
    JobState::Cancelled,
    JobState::Unknown,
];

impl JobState {
    /// Whether the job is over: Succeeded, Failed or Cancelled. Terminal states never change.
    pub const fn is_terminal(self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed | Self::Cancelled)
    }

    /// Whether the job may still change state (every state that is not terminal).
    pub const fn is_active(self) -> bool {
        !self.is_terminal()
    }

    /// Whether a job observed in `self` may next be observed in `next`.
    ///
    /// ```
    /// use batchbridge_core::JobState::*;
    ///
    /// assert!(Queued.can_transition_to(Succeeded)); // ran between two polls
    /// assert!(Running.can_transition_to(Queued));   // requeued
    /// assert!(!Succeeded.can_transition_to(Running)); // terminal states are absorbing
    /// assert!(Failed.can_transition_to(Failed));    // observing the same state again is fine
    /// ```
    pub const fn can_transition_to(self, next: Self) -> bool {
        !self.is_terminal() || self as u8 == next as u8
    }

    /// Moves from `self` to `next`, or reports why it cannot.
    ///
    /// ```
    /// use batchbridge_core::JobState;
    ///
    /// assert_eq!(JobState::Queued.transition(JobState::Running), Ok(JobState::Running));
    /// let err = JobState::Cancelled.transition(JobState::Running).unwrap_err();
    /// assert_eq!(err.to_string(), "invalid job state transition: Cancelled -> Running (Cancelled is terminal)");
    /// ```
    pub fn transition(self, next: Self) -> Result<Self, InvalidTransition> {
        if self.can_transition_to(next) {
            Ok(next)
        } else {
            Err(InvalidTransition {
                from: self,
                to: next,
            })
        }
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// A transition the state machine forbids.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("invalid job state transition: {from} -> {to} ({from} is terminal)")]
pub struct InvalidTransition {
    /// The state the job was in.
    pub from: JobState,
    /// The state it was observed in next.
    pub to: JobState,
}

/// How the tasks of an array job are spread over states.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct TaskCounts {
    /// Tasks in the array.
    pub total: u32,
    /// Tasks waiting: Queued, Held or Unknown.
    pub pending: u32,
    /// Tasks Running or Suspended.
    pub running: u32,
    /// Tasks Succeeded.
    pub succeeded: u32,
    /// Tasks Failed.
    pub failed: u32,
    /// Tasks Cancelled.
    pub cancelled: u32,
}

impl TaskCounts {
    /// Counts tasks by state.
    ///
    /// ```
    /// use batchbridge_core::{JobState::*, TaskCounts};
    ///
    /// let counts = TaskCounts::from_states([Succeeded, Failed, Succeeded]);
    /// assert_eq!((counts.total, counts.succeeded, counts.failed), (3, 2, 1));
    /// assert_eq!(counts.overall_state(), Failed);
    /// ```
    pub fn from_states(states: impl IntoIterator<Item = JobState>) -> Self {
        let mut counts = Self::default();
        for state in states {
            counts.total += 1;
            match state {
                JobState::Queued | JobState::Held | JobState::Unknown => counts.pending += 1,
                JobState::Running | JobState::Suspended => counts.running += 1,
                JobState::Succeeded => counts.succeeded += 1,
                JobState::Failed => counts.failed += 1,
                JobState::Cancelled => counts.cancelled += 1,
            }
        }
        counts
    }

    /// The state of the array as a whole: Running while any task runs, Queued while tasks
    /// only wait; once every task is over, Cancelled if any was cancelled, else Failed if any
    /// failed, else Succeeded.
    pub fn overall_state(&self) -> JobState {
        if self.running > 0 {
            JobState::Running
        } else if self.pending > 0 {
            JobState::Queued
        } else if self.cancelled > 0 {
            JobState::Cancelled
        } else if self.failed > 0 {
            JobState::Failed
        } else {
            JobState::Succeeded
        }
    }
}

/// What a backend knows about a job at one moment.
///
/// `#[non_exhaustive]`: a backend outside this crate builds one with [`JobStatus::new`] (or
/// [`JobStatus::unknown`]) and the `with_*` setters, then sets any other public field; a
/// struct literal is error E0639.
///
/// ```
/// use batchbridge_core::{FailureCause, JobState, JobStatus};
///
/// let mut status = JobStatus::new(JobState::Failed, "FAILED")
///     .with_exit_code(3)
///     .with_cause(FailureCause::ExitCode(3));
/// status.queue = Some("debug".into());
/// assert_eq!(status.exit_code, Some(3));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct JobStatus {
    /// The unified state.
    pub state: JobState,
    /// The scheduler's own word for it (`PENDING`, `COMPLETED`, `Idle`, …). When the status
    /// came from somewhere other than the scheduler, a name the backend documents for that
    /// source (SLURM's `exit-code file`); empty only for an [`Unknown`](JobState::Unknown)
    /// job no source knows.
    pub native_state: String,
    /// Why the job is in this state, when the scheduler says (`Resources`, a hold reason…).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The script's exit code, once it exited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// The signal that ended the script, if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// Why a Failed or Cancelled job ended so, when the backend can tell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<FailureCause>,
    /// The partition or queue the scheduler placed the job in, when it says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// When the job was submitted.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "humantime_serde"
    )]
    pub submitted_at: Option<SystemTime>,
    /// When it started running.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "humantime_serde"
    )]
    pub started_at: Option<SystemTime>,
    /// When the scheduler expects a job that has not started yet to start (SLURM's
    /// backfill estimate); never set once it started.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "humantime_serde"
    )]
    pub expected_start_at: Option<SystemTime>,
    /// When it ended.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "humantime_serde"
    )]
    pub ended_at: Option<SystemTime>,
    /// Per-state task counts, for array jobs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tasks: Option<TaskCounts>,
    /// How many times the scheduler put the job back in its queue after it had started,
    /// under the same job id: requeued by a user or an administrator, preempted and
    /// requeued, evicted from its node. 0 for a job that never went back (or whose
    /// scheduler does not say). A [`Queued`](JobState::Queued) job with a count above 0
    /// waits to run again: [`requeued`](Self::requeued).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub requeues: u32,
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if passes a reference.
const fn is_zero(count: &u32) -> bool {
    *count == 0
}

impl JobStatus {
    /// A status with the given state and native word and nothing else known yet.
    pub fn new(state: JobState, native_state: impl Into<String>) -> Self {
        Self {
            state,
            native_state: native_state.into(),
            reason: None,
            exit_code: None,
            signal: None,
            cause: None,
            queue: None,
            submitted_at: None,
            started_at: None,
            expected_start_at: None,
            ended_at: None,
            tasks: None,
            requeues: 0,
        }
    }

    /// Whether the job waits in the queue to run again, under the same id, after it had
    /// started: Queued with [`requeues`](Self::requeues) above 0. Never a final state: the
    /// job runs again.
    ///
    /// ```
    /// use batchbridge_core::{JobState, JobStatus};
    ///
    /// assert!(JobStatus::new(JobState::Queued, "PENDING").with_requeues(1).requeued());
    /// assert!(!JobStatus::new(JobState::Queued, "PENDING").requeued());
    /// // Running again after a requeue: the count stays, the job no longer waits.
    /// assert!(!JobStatus::new(JobState::Running, "RUNNING").with_requeues(1).requeued());
    /// ```
    pub const fn requeued(&self) -> bool {
        matches!(self.state, JobState::Queued) && self.requeues > 0
    }

    /// Sets how many times the job went back to its queue after it had started.
    pub const fn with_requeues(mut self, requeues: u32) -> Self {
        self.requeues = requeues;
        self
    }

    /// Sets [`requeues`](Self::requeues) from how many times the scheduler started the
    /// job (PBS's `run_count`, HTCondor's `NumJobStarts`): every start but the one it is in,
    /// or all of them while it waits (Queued or Held) again.
    ///
    /// ```
    /// use batchbridge_core::{JobState, JobStatus};
    ///
    /// assert_eq!(JobStatus::new(JobState::Running, "R").with_starts(1).requeues, 0);
    /// assert!(JobStatus::new(JobState::Queued, "Q").with_starts(1).requeued());
    /// assert_eq!(JobStatus::new(JobState::Succeeded, "F").with_starts(2).requeues, 1);
    /// assert!(!JobStatus::new(JobState::Queued, "Q").with_starts(0).requeued());
    /// ```
    pub const fn with_starts(self, starts: u32) -> Self {
        let requeues = match self.state {
            JobState::Queued | JobState::Held => starts,
            _ => starts.saturating_sub(1),
        };
        self.with_requeues(requeues)
    }

    /// The status of a job that no source knows, with the reason why.
    pub fn unknown(reason: impl Into<String>) -> Self {
        Self::new(JobState::Unknown, "").with_reason(reason)
    }

    /// Sets the reason.
    pub fn with_reason(mut self, reason: impl Into<String>) -> Self {
        self.reason = Some(reason.into());
        self
    }

    /// Sets the exit code.
    pub fn with_exit_code(mut self, exit_code: i32) -> Self {
        self.exit_code = Some(exit_code);
        self
    }

    /// Sets the signal that ended the script.
    pub fn with_signal(mut self, signal: i32) -> Self {
        self.signal = Some(signal);
        self
    }

    /// Sets why the job failed or was cancelled.
    ///
    /// ```
    /// use batchbridge_core::{FailureCause, JobState, JobStatus};
    ///
    /// let status = JobStatus::new(JobState::Failed, "TIMEOUT").with_cause(FailureCause::WallTimeExceeded);
    /// assert_eq!(status.cause, Some(FailureCause::WallTimeExceeded));
    /// ```
    pub fn with_cause(mut self, cause: FailureCause) -> Self {
        self.cause = Some(cause);
        self
    }

    /// Sets the partition or queue the scheduler placed the job in.
    pub fn with_queue(mut self, queue: impl Into<String>) -> Self {
        self.queue = Some(queue.into());
        self
    }
}

impl JobStatus {
    /// The status of array job `id` from its tasks' statuses, in task order (`None` for a
    /// task no source knows): the state from the [`TaskCounts`], Held when every waiting task
    /// is held, the native words of the tasks joined, the reason and cause of the first task
    /// in the array's state (for a failed array, its first failed task named in the reason,
    /// with that task's exit code and signal), the first queue named, the earliest submit, start and expected
    /// start (the latter only while no task started) and, once over, the latest end. When tasks are
    /// missing and none of the known ones is active, the array is Unknown: its missing tasks
    /// could have ended either way. `scheduler` names who forgot them, for the reason.
    ///
    /// ```
    /// use batchbridge_core::{FailureCause, JobState, JobStatus};
    ///
    /// let done = JobStatus::new(JobState::Succeeded, "Completed");
    /// let held = JobStatus::new(JobState::Held, "Held").with_reason("disk quota");
    /// let array = JobStatus::of_array("7", "HTCondor", &[Some(&done), Some(&held)]);
    /// assert_eq!((array.state, array.reason.as_deref()), (JobState::Held, Some("disk quota")));
    /// assert_eq!(array.native_state, "Completed,Held");
    ///
    /// let failed = JobStatus::new(JobState::Failed, "Completed").with_cause(FailureCause::ExitCode(1));
    /// let failed = failed.with_exit_code(1);
    /// let array = JobStatus::of_array("8", "HTCondor", &[Some(&done), Some(&failed), Some(&done)]);
    /// assert_eq!((array.state, array.cause), (JobState::Failed, Some(FailureCause::ExitCode(1))));
    /// // A failed array names its first failed task, with its exit code.
    /// assert_eq!(array.reason.as_deref(), Some("task 1 (1 of 3 tasks failed)"));
    /// assert_eq!(array.exit_code, Some(1));
    ///
    /// let forgotten = JobStatus::of_array("7", "HTCondor", &[Some(&done), None]);
    /// assert_eq!(forgotten.state, JobState::Unknown);
    /// ```
    pub fn of_array(id: &str, scheduler: &str, tasks: &[Option<&JobStatus>]) -> Self {
        let counts = TaskCounts::from_states(
            tasks
                .iter()
                .map(|s| s.map_or(JobState::Unknown, |s| s.state)),
        );
        let known: Vec<&JobStatus> = tasks.iter().flatten().copied().collect();
        if known.len() < tasks.len() && !known.iter().any(|s| s.state.is_active()) {
            let mut status = Self::unknown(format!(
                "{scheduler} no longer knows {} of the {} tasks of array job {id}",
                tasks.len() - known.len(),
                tasks.len()
            ));
            status.tasks = Some(counts);
            return status;
        }
        let mut state = counts.overall_state();
        let held = known.iter().filter(|s| s.state == JobState::Held).count();
        if state == JobState::Queued && u32::try_from(held).is_ok_and(|h| h == counts.pending) {
            state = JobState::Held;
        }
        let mut natives: Vec<&str> = known
            .iter()
            .map(|s| s.native_state.as_str())
            .filter(|n| !n.is_empty())
            .collect();
        natives.sort_unstable();
        natives.dedup();
        let mut status = Self::new(state, natives.join(","));
        status.reason = known
            .iter()
            .find(|s| s.state == state && s.reason.is_some())
            .and_then(|s| s.reason.clone());
        status.cause = known
            .iter()
            .find(|s| s.state == state && s.cause.is_some())
            .and_then(|s| s.cause.clone());
        // A failed array names its first failed task, with that task's exit code, signal
        // and cause: the one a user looks at first.
        let first_failed = tasks.iter().enumerate().find_map(|(index, s)| {
            s.filter(|s| s.state == JobState::Failed)
                .map(|s| (index, s))
        });
        if let (JobState::Failed, Some((index, task))) = (state, first_failed) {
            let why = task
                .reason
                .as_deref()
                .map_or_else(String::new, |reason| format!(": {reason}"));
            status.reason = Some(format!(
                "task {index}{why} ({} of {} tasks failed)",
                counts.failed, counts.total
            ));
            status.exit_code = task.exit_code;
            status.signal = task.signal;
            status.cause.clone_from(&task.cause);
        }
        status.queue = known.iter().find_map(|s| s.queue.clone());
        status.submitted_at = known.iter().filter_map(|s| s.submitted_at).min();
        status.started_at = known.iter().filter_map(|s| s.started_at).min();
        if status.started_at.is_none() {
            status.expected_start_at = known.iter().filter_map(|s| s.expected_start_at).min();
        }
        if state.is_terminal() {
            status.ended_at = known.iter().filter_map(|s| s.ended_at).max();
        }
        // The most any task went back: a requeued array waits to run again.
        status.requeues = known.iter().map(|s| s.requeues).max().unwrap_or(0);
        status.tasks = Some(counts);
        status
    }
}

#[cfg(test)]
mod tests {
    use super::JobState::*;
    use super::*;

    /// Every ordered pair of states and whether the move is allowed. Rows are `from`,
    /// columns are `to`, in the order of [`ALL_STATES`].
    #[test]
    fn transition_table_covers_every_pair() {
        const Y: bool = true;
        const N: bool = false;
        #[rustfmt::skip]
        let table: [(JobState, [bool; 8]); 8] = [
            //             Queued Held Running Suspended Succeeded Failed Cancelled Unknown
            (Queued,      [Y,     Y,   Y,      Y,        Y,        Y,     Y,        Y]),
            (Held,        [Y,     Y,   Y,      Y,        Y,        Y,     Y,        Y]),
            (Running,     [Y,     Y,   Y,      Y,        Y,        Y,     Y,        Y]),
            (Suspended,   [Y,     Y,   Y,      Y,        Y,        Y,     Y,        Y]),
            (Succeeded,   [N,     N,   N,      N,        Y,        N,     N,        N]),
            (Failed,      [N,     N,   N,      N,        N,        Y,     N,        N]),
            (Cancelled,   [N,     N,   N,      N,        N,        N,     Y,        N]),
            (Unknown,     [Y,     Y,   Y,      Y,        Y,        Y,     Y,        Y]),
        ];
        for (from, row) in table {
            for (to, allowed) in ALL_STATES.into_iter().zip(row) {
                assert_eq!(from.can_transition_to(to), allowed, "{from} -> {to}");
                match from.transition(to) {
                    Ok(state) => {
                        assert!(allowed, "{from} -> {to} should be refused");
                        assert_eq!(state, to);
                    }
                    Err(err) => {
                        assert!(!allowed, "{from} -> {to} should be allowed");
                        assert_eq!(err, InvalidTransition { from, to });
                    }
                }
            }
        }
    }

    #[test]
    fn terminal_and_active_partition_the_states() {
        let terminal: Vec<_> = ALL_STATES.into_iter().filter(|s| s.is_terminal()).collect();
        assert_eq!(terminal, [Succeeded, Failed, Cancelled]);
        for state in ALL_STATES {
            assert_ne!(state.is_terminal(), state.is_active(), "{state}");
        }
    }

    #[test]
    fn task_counts_and_overall_state() {
        let cases: &[(&[JobState], JobState)] = &[
            (&[Succeeded, Succeeded, Succeeded], Succeeded),
            (&[Succeeded, Failed, Succeeded], Failed),
            (&[Succeeded, Failed, Cancelled], Cancelled),
            (&[Running, Queued, Succeeded], Running),
            (&[Suspended, Failed], Running),
            (&[Queued, Held, Succeeded], Queued),
            (&[Unknown, Succeeded], Queued),
            (&[Failed, Queued], Queued),
        ];
        for (states, overall) in cases {
            let counts = TaskCounts::from_states(states.iter().copied());
            assert_eq!(counts.total as usize, states.len());
            assert_eq!(
                counts.pending
                    + counts.running
                    + counts.succeeded
                    + counts.failed
                    + counts.cancelled,
                counts.total
            );
            assert_eq!(counts.overall_state(), *overall, "{states:?}");
        }
    }

    #[test]
    fn a_status_that_never_went_back_to_the_queue_omits_the_count() {
        let json = serde_json::to_value(JobStatus::new(Queued, "PENDING")).unwrap();
        assert_eq!(json.get("requeues"), None);
        let read: JobStatus = serde_json::from_value(json).unwrap();
        assert_eq!(read.requeues, 0);
    }

    #[test]
    fn status_serde_round_trips_with_rfc3339_times() {
        let mut status = JobStatus::new(Failed, "TIMEOUT").with_reason("TimeLimit");
        status.exit_code = Some(0);
        status.signal = Some(15);
        status.submitted_at =
            Some(SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000));
        status.tasks = Some(TaskCounts::from_states([Failed]));
        status.requeues = 2;
        let json = serde_json::to_value(&status).unwrap();
        assert_eq!(json["state"], "Failed");
        assert_eq!(json["requeues"], 2);
        assert_eq!(json["submittedAt"], "2023-11-14T22:13:20Z");
        assert_eq!(serde_json::from_value::<JobStatus>(json).unwrap(), status);
    }
}
