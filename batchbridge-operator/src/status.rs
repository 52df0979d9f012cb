//! Pure helpers that turn what the backend said into a `BatchJobStatus`, and keep the
//! standard conditions.

use std::time::{Duration, SystemTime};

use batchbridge_core::{JobState, JobStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

use crate::crd::{BatchJobStatus, Phase};
use crate::reason::{ConditionType, Reason};

/// How far the scheduler's expected start may move before it is written again: it changes
/// at every backfill pass, and a status write per poll for every queued job is not news.
const EXPECTED_START_SLACK: Duration = Duration::from_secs(60);

/// `status` updated with what the backend reports for the job, the attempt's own fields
/// (attempts, job id, output, conditions) kept. The start time is only ever a time the job
/// started; the scheduler's estimate for a queued job is the expected start time.
pub fn observed(status: &BatchJobStatus, job: &JobStatus) -> BatchJobStatus {
    let phase = Phase::from(job.state);
    let (reason, message) = explain(job);
    let started = !matches!(job.state, JobState::Queued | JobState::Held);
    let start_time = job
        .started_at
        .filter(|_| started)
        .map(time)
        .or_else(|| status.start_time.clone());
    let finish_time = if phase.is_terminal() {
        job.ended_at
            .map(time)
            .or_else(|| status.finish_time.clone())
    } else {
        None
    };
    let expected_start_time = match (job.expected_start_at, &status.expected_start_time) {
        (Some(at), Some(written)) if moved_less_than(at, written, EXPECTED_START_SLACK) => {
            Some(written.clone())
        }
        (at, _) => at.filter(|_| !started).map(time),
    };
    BatchJobStatus {
        phase: Some(phase),
        native_state: Some(job.native_state.clone()).filter(|native| !native.is_empty()),
        reason: Some(reason),
        message,
        exit_code: job.exit_code,
        signal: job.signal,
        queue: job.queue.clone().or_else(|| status.queue.clone()),
        submit_time: job
            .submitted_at
            .map(time)
            .or_else(|| status.submit_time.clone()),
        run_time: match (&start_time, &finish_time) {
            (Some(start), Some(finish)) => Some(run_time(start, finish)),
            _ => None,
        },
        start_time,
        expected_start_time,
        finish_time,
        tasks: job.tasks.map(Into::into),
        ..status.clone()
    }
}

fn moved_less_than(at: SystemTime, written: &Time, slack: Duration) -> bool {
    let written = SystemTime::from(written.0);
    let moved = at
        .duration_since(written)
        .or_else(|_| written.duration_since(at))
        .unwrap_or_default();
    moved < slack
}

/// How long a job ran from `start` to `finish`, in whole seconds as `2h3m4s`, `1m5s`, `5s`:
/// humantime's units without its spaces, as kubectl prints ages, so the printer column
/// stays one word. From a day on the days are counted apart (`1day2h3m4s`).
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use batchbridge_operator::status::{run_time, time};
///
/// let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
/// let took = |secs| run_time(&time(start), &time(start + Duration::from_secs(secs)));
/// assert_eq!((took(5), took(65), took(7384)), ("5s".into(), "1m5s".into(), "2h3m4s".into()));
/// assert_eq!((took(0), took(93784)), ("0s".into(), "1day2h3m4s".into()));
/// ```
pub fn run_time(start: &Time, finish: &Time) -> String {
    let ran = SystemTime::from(finish.0)
        .duration_since(SystemTime::from(start.0))
        .unwrap_or_default();
    // Whole seconds: the times are written to the second.
    let seconds = Duration::from_secs(ran.as_secs());
    humantime::format_duration(seconds)
        .to_string()
        .replace(' ', "")
}

/// The status's `reason` and `message` for what the backend reports. A failed job's
/// reason is its cause ([`Reason::of_failure`]), which a retry policy's `retryOn` names; a
/// job back in the queue after it had started ([`JobStatus::requeued`]) is
/// [`Requeued`](Reason::Requeued), not failed; the scheduler's own reason, when it gives
/// one, goes into the message.
pub fn explain(job: &JobStatus) -> (Reason, Option<String>) {
    let scheduler_reason = job.reason.clone().filter(|reason| !reason.is_empty());
    let reason = match job.state {
        JobState::Queued if job.requeued() => Reason::Requeued,
        JobState::Queued => Reason::Queued,
        JobState::Held => Reason::Held,
        JobState::Running => Reason::Running,
        JobState::Suspended => Reason::Suspended,
        JobState::Succeeded => Reason::Succeeded,
        JobState::Failed => Reason::of_failure(job),
        JobState::Cancelled => Reason::Cancelled,
        _ => Reason::Unknown,
    };
    let summary = match (job.state, &job.cause) {
        (JobState::Failed | JobState::Cancelled, Some(cause)) => Some(cause.to_string()),
        (JobState::Failed, None) => Some(match (job.exit_code, job.signal) {
            (_, Some(signal)) => format!("ended by signal {signal}"),
            (Some(code), None) => format!("exited with code {code}"),
            (None, None) => "failed".to_owned(),
        }),
        _ if job.requeued() => Some(match job.requeues {
            1 => "back in the queue after it had started".to_owned(),
            times => format!("back in the queue after it had started ({times} times)"),
        }),
        _ => None,
    };
    let message = match (summary, scheduler_reason) {
        (Some(summary), Some(said)) => Some(format!("{summary}: {said}")),
        (summary, said) => summary.or(said),
    };
    (reason, message)
}

/// A Kubernetes time for `at`.
pub fn time(at: SystemTime) -> Time {
    Time(Timestamp::try_from(at).unwrap_or(Timestamp::UNIX_EPOCH))
}

/// Sets the condition of type `type_`, keeping its transition time when its status did not
/// change.
pub fn set_condition(
    conditions: &mut Vec<Condition>,
    type_: ConditionType,
    holds: bool,
    reason: Reason,
    message: &str,
    now: SystemTime,
) {
    let status = condition_status(holds);
    let transition = conditions
        .iter()
        .find(|c| c.type_ == type_.as_str() && c.status == status)
        .map_or_else(|| time(now), |c| c.last_transition_time.clone());
    conditions.retain(|c| c.type_ != type_.as_str());
    conditions.push(Condition {
        type_: type_.as_str().to_owned(),
        status: status.to_owned(),
        reason: reason.as_str().to_owned(),
        message: message.to_owned(),
        last_transition_time: transition,
        observed_generation: None,
    });
    conditions.sort_by(|a, b| a.type_.cmp(&b.type_));
}

/// The condition of type `type_`, if set.
pub fn condition(conditions: &[Condition], type_: ConditionType) -> Option<&Condition> {
    conditions.iter().find(|c| c.type_ == type_.as_str())
}

/// Whether the condition of type `type_` holds (`status: "True"`); `None` when it is not set.
pub fn holds(conditions: &[Condition], type_: ConditionType) -> Option<bool> {
    condition(conditions, type_).map(|c| c.status == condition_status(true))
}

/// A condition's `status` field: "True" or "False".
const fn condition_status(holds: bool) -> &'static str {
    if holds { "True" } else { "False" }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use batchbridge_core::{CancelledBy, FailureCause, TaskCounts};

    use super::*;

    /// A status as a backend reports it; the native state is the backend's business, never
    /// read here.
    fn job(state: JobState, reason: Option<&str>, cause: Option<FailureCause>) -> JobStatus {
        let mut job = JobStatus::new(state, "native");
        job.reason = reason.map(str::to_owned);
        job.cause = cause;
        job
    }

    /// Reasons and messages for what SLURM, HTCondor and the local backend report (the
    /// scheduler's reasons as the test beds printed them).
    #[test]
    fn reasons_and_messages() {
        let cases: Vec<(JobStatus, Reason, Option<&str>)> = vec![
            (
                job(JobState::Queued, Some("Resources"), None),
                Reason::Queued,
                Some("Resources"),
            ),
            (
                job(
                    JobState::Queued,
                    Some("ReqNodeNotAvail, Reserved for maintenance"),
                    None,
                ),
                Reason::Queued,
                Some("ReqNodeNotAvail, Reserved for maintenance"),
            ),
            (job(JobState::Queued, None, None), Reason::Queued, None),
            (
                job(JobState::Queued, Some("BeginTime"), None).with_requeues(1),
                Reason::Requeued,
                Some("back in the queue after it had started: BeginTime"),
            ),
            (
                job(JobState::Queued, None, None).with_requeues(3),
                Reason::Requeued,
                Some("back in the queue after it had started (3 times)"),
            ),
            (
                job(JobState::Running, None, None).with_requeues(1),
                Reason::Running,
                None,
            ),
            (
                job(
                    JobState::Held,
                    Some("Failed to execute '/nonexistent/bin/tool'"),
                    None,
                ),
                Reason::Held,
                Some("Failed to execute '/nonexistent/bin/tool'"),
            ),
            (job(JobState::Running, None, None), Reason::Running, None),
            (
                job(JobState::Succeeded, None, None),
                Reason::Succeeded,
                None,
            ),
            (
                job(
                    JobState::Cancelled,
                    None,
                    Some(FailureCause::Cancelled(CancelledBy::Account("1000".into()))),
                ),
                Reason::Cancelled,
                Some("cancelled by 1000"),
            ),
            (
                job(JobState::Failed, None, Some(FailureCause::ExitCode(3))).with_exit_code(3),
                Reason::NonZeroExitCode,
                Some("exited with code 3"),
            ),
            (
                job(JobState::Failed, None, Some(FailureCause::WallTimeExceeded)).with_exit_code(0),
                Reason::Timeout,
                Some("ran out of its wall time"),
            ),
            (
                job(
                    JobState::Failed,
                    Some(
                        "The job attribute PeriodicRemove expression 'JobStatus == 2 && time() - JobCurrentStartDate > 5' evaluated to TRUE",
                    ),
                    Some(FailureCause::WallTimeExceeded),
                ),
                Reason::Timeout,
                Some(
                    "ran out of its wall time: The job attribute PeriodicRemove expression 'JobStatus == 2 && time() - JobCurrentStartDate > 5' evaluated to TRUE",
                ),
            ),
            (
                job(JobState::Failed, None, Some(FailureCause::NodeFailure)),
                Reason::NodeFailure,
                Some("a node it ran on failed"),
            ),
            (
                job(JobState::Failed, None, Some(FailureCause::Preempted)),
                Reason::Preempted,
                Some("preempted by the scheduler"),
            ),
            (
                job(JobState::Failed, None, Some(FailureCause::MemoryExceeded)).with_exit_code(137),
                Reason::OutOfMemory,
                Some("ran out of memory"),
            ),
            (
                job(JobState::Failed, None, None).with_signal(9),
                Reason::Signal,
                Some("ended by signal 9"),
            ),
            (
                job(JobState::Failed, None, None).with_exit_code(2),
                Reason::NonZeroExitCode,
                Some("exited with code 2"),
            ),
            (
                job(
                    JobState::Failed,
                    Some("the job's processes ended without recording an exit code"),
                    None,
                ),
                Reason::Unknown,
                Some("failed: the job's processes ended without recording an exit code"),
            ),
            (
                job(JobState::Unknown, Some("not in squeue or sacct"), None),
                Reason::Unknown,
                Some("not in squeue or sacct"),
            ),
        ];
        for (job, reason, message) in cases {
            let (got_reason, got_message) = explain(&job);
            assert_eq!(
                (got_reason, got_message.as_deref()),
                (reason, message),
                "{job:?}"
            );
        }
    }

    /// Case 1 of issue 21: an array whose task 1 exited 1 is a non-zero exit, which
    /// `retryOn: [NonZeroExitCode]` retries.
    #[test]
    fn a_failed_array_task_is_a_non_zero_exit() {
        let task0 = job(JobState::Succeeded, None, None).with_exit_code(0);
        let task1 = job(JobState::Failed, None, Some(FailureCause::ExitCode(1))).with_exit_code(1);
        let array = JobStatus::of_array("7", "the scheduler", &[Some(&task0), Some(&task1)]);
        let (reason, message) = explain(&array);
        assert_eq!(
            (reason, message.as_deref()),
            (
                Reason::NonZeroExitCode,
                Some("exited with code 1: task 1 (1 of 2 tasks failed)")
            )
        );
        assert_eq!(array.exit_code, Some(1), "the exit code column shows it");
        assert_eq!(
            crate::crd::RetryReason::from(reason),
            crate::crd::RetryReason::NonZeroExitCode
        );
    }

    #[test]
    fn an_observation_keeps_the_attempt_and_the_times_users_can_trust() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let before = BatchJobStatus {
            phase: Some(Phase::Submitted),
            job_id: Some("42".into()),
            attempts: 2,
            observed_generation: Some(3),
            ..BatchJobStatus::default()
        };
        // Queued with the scheduler's estimate (a year ahead after backfill): no start time.
        let mut queued = job(JobState::Queued, Some("Priority"), None);
        queued.started_at = Some(now + Duration::from_secs(365 * 86400));
        queued.expected_start_at = queued.started_at;
        queued.queue = Some("debug".into());
        let status = observed(&before, &queued);
        assert_eq!(
            (status.phase, status.start_time.as_ref()),
            (Some(Phase::Queued), None)
        );
        assert_eq!(
            status.expected_start_time,
            queued.expected_start_at.map(time)
        );
        assert_eq!(
            status.queue.as_deref(),
            Some("debug"),
            "the partition the scheduler used"
        );
        // The estimate moving by less than a minute is not news.
        queued.expected_start_at = queued
            .expected_start_at
            .map(|at| at + Duration::from_secs(30));
        assert_eq!(observed(&status, &queued), status);

        let mut running = job(JobState::Running, None, None);
        running.started_at = Some(now - Duration::from_secs(5));
        let status = observed(&status, &running);
        assert_eq!(status.phase, Some(Phase::Running));
        assert_eq!((status.job_id.as_deref(), status.attempts), (Some("42"), 2));
        assert_eq!(
            status.queue.as_deref(),
            Some("debug"),
            "kept when not reported again"
        );
        assert_eq!(status.start_time, Some(time(now - Duration::from_secs(5))));
        assert_eq!(
            (
                status.expected_start_time.as_ref(),
                status.finish_time.as_ref()
            ),
            (None, None)
        );
        assert_eq!(status.run_time, None, "no run time while it runs");

        let mut done =
            job(JobState::Failed, None, Some(FailureCause::ExitCode(1))).with_exit_code(1);
        done.ended_at = Some(now + Duration::from_secs(60));
        done.tasks = Some(TaskCounts::from_states([
            JobState::Succeeded,
            JobState::Succeeded,
            JobState::Failed,
        ]));
        let status = observed(&status, &done);
        assert_eq!(status.phase, Some(Phase::Failed));
        assert_eq!(status.reason, Some(Reason::NonZeroExitCode));
        assert_eq!(status.exit_code, Some(1));
        assert_eq!(
            status.finish_time,
            Some(time(now + Duration::from_secs(60)))
        );
        // The start time seen while it ran is kept when the final report lacks it.
        assert_eq!(status.start_time, Some(time(now - Duration::from_secs(5))));
        assert_eq!(status.run_time.as_deref(), Some("1m5s"));
        assert_eq!(status.tasks.map(|t| (t.succeeded, t.failed)), Some((2, 1)));
    }

    #[test]
    fn conditions_keep_their_transition_time_while_unchanged() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let t1 = t0 + Duration::from_secs(10);
        let mut conditions = Vec::new();
        let submitted = ConditionType::Submitted;
        set_condition(
            &mut conditions,
            submitted,
            false,
            Reason::Submitting,
            "submitting",
            t0,
        );
        set_condition(
            &mut conditions,
            ConditionType::ClusterReady,
            true,
            Reason::Ready,
            "ok",
            t0,
        );
        set_condition(
            &mut conditions,
            submitted,
            false,
            Reason::Submitting,
            "still",
            t1,
        );
        let got = condition(&conditions, submitted).cloned();
        let got = got.unwrap_or_else(|| panic!("no Submitted condition"));
        assert_eq!(
            (got.message.as_str(), &got.last_transition_time),
            ("still", &time(t0))
        );
        set_condition(
            &mut conditions,
            submitted,
            true,
            Reason::Submitted,
            "job 7",
            t1,
        );
        let got = condition(&conditions, submitted).cloned();
        let got = got.unwrap_or_else(|| panic!("no Submitted condition"));
        assert_eq!(got.last_transition_time, time(t1));
        assert_eq!(holds(&conditions, submitted), Some(true));
        assert_eq!(holds(&conditions, ConditionType::Finished), None);
        let types: Vec<&str> = conditions.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(
            types,
            ["ClusterReady", "Submitted"],
            "one of each type, sorted"
        );
    }
}
