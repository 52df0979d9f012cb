//! Pure helpers that turn what the scheduler said into a `BatchJobStatus`, and keep the
//! standard conditions.

use std::time::SystemTime;

use batchbridge_core::{JobState, JobStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

use crate::crd::{BatchJobStatus, Phase, RetryReason};

/// Condition type: whether the job's cluster could be used (its BatchCluster and Secret
/// exist and are well formed, its host answered).
pub const CLUSTER_READY: &str = "ClusterReady";
/// Condition type: whether the scheduler has the current attempt.
pub const SUBMITTED: &str = "Submitted";
/// Condition type: whether the current attempt has finished.
pub const FINISHED: &str = "Finished";
/// Condition type: whether the finished job's output was collected.
pub const OUTPUT_COLLECTED: &str = "OutputCollected";
/// OutputCollected's reason when the output ConfigMap's or log pod's name belongs to an
/// object the job does not own, which the operator leaves alone.
pub const OUTPUT_NAME_TAKEN: &str = "OutputNameTaken";

/// `status` updated with what the scheduler reports for the job, the attempt's own fields
/// (attempts, job id, output) kept.
pub fn observed(status: &BatchJobStatus, job: &JobStatus, now: SystemTime) -> BatchJobStatus {
    let phase = Phase::from(job.state);
    let (reason, message) = explain(job);
    let mut next = BatchJobStatus {
        phase: Some(phase),
        native_state: Some(job.native_state.clone()).filter(|native| !native.is_empty()),
        reason: Some(reason.clone()),
        message: message.clone(),
        exit_code: job.exit_code,
        signal: job.signal,
        submit_time: job
            .submitted_at
            .map(time)
            .or_else(|| status.submit_time.clone()),
        start_time: job
            .started_at
            .map(time)
            .or_else(|| status.start_time.clone()),
        finish_time: if phase.is_terminal() {
            job.ended_at
                .map(time)
                .or_else(|| status.finish_time.clone())
        } else {
            None
        },
        tasks: job.tasks.map(Into::into),
        conditions: status.conditions.clone(),
        ..status.clone()
    };
    let finished = phase.is_terminal();
    set_condition(
        &mut next.conditions,
        FINISHED,
        finished,
        if finished { &reason } else { "NotFinished" },
        message.as_deref().unwrap_or(if finished {
            "the job has finished"
        } else {
            "the job has not finished yet"
        }),
        now,
    );
    next
}

/// The status's `reason` (one CamelCase word) and `message` for what the scheduler says.
/// For a failed job the word is why, as a retry policy names it
/// ([`RetryReason`]): NonZeroExitCode, Timeout, NodeFailure, Preempted; or OutOfMemory,
/// Signal, Unknown.
pub fn explain(job: &JobStatus) -> (String, Option<String>) {
    let scheduler_reason = job.reason.clone().filter(|reason| !reason.is_empty());
    let word = match job.state {
        JobState::Failed => failure_word(job),
        JobState::Queued | JobState::Held => scheduler_reason
            .as_deref()
            .filter(|reason| is_word(reason))
            .unwrap_or(if job.state == JobState::Held {
                "Held"
            } else {
                "Queued"
            })
            .to_owned(),
        state => format!("{:?}", Phase::from(state)),
    };
    let message = match (job.state, scheduler_reason) {
        (JobState::Failed, reason) => {
            let exit = match (job.exit_code, job.signal) {
                (_, Some(signal)) => format!("ended by signal {signal}"),
                (Some(code), None) => format!("exited with code {code}"),
                (None, None) => "failed".to_owned(),
            };
            Some(match reason {
                Some(reason) => format!("{exit}: {reason}"),
                None => exit,
            })
        }
        (_, reason) => reason,
    };
    (word, message)
}

fn failure_word(job: &JobStatus) -> String {
    let native = job.native_state.to_ascii_uppercase();
    let word = if native.contains("TIMEOUT") || native == "REMOVED" {
        // HTCondor's "Removed" is a periodic_remove, which is how batchbridge enforces the
        // wall time there.
        "Timeout"
    } else if native.contains("NODE_FAIL") || native.contains("BOOT_FAIL") {
        "NodeFailure"
    } else if native.contains("PREEMPT") {
        "Preempted"
    } else if native.contains("OUT_OF_MEMORY") {
        "OutOfMemory"
    } else if job.signal.is_some() {
        "Signal"
    } else if job.exit_code.is_some_and(|code| code != 0) {
        "NonZeroExitCode"
    } else {
        "Unknown"
    };
    word.to_owned()
}

/// Which retry reason a failed job's status `reason` falls under.
pub fn retry_reason(reason: Option<&str>) -> RetryReason {
    match reason {
        Some("NonZeroExitCode") => RetryReason::NonZeroExitCode,
        Some("Timeout") => RetryReason::Timeout,
        Some("NodeFailure") => RetryReason::NodeFailure,
        Some("Preempted") => RetryReason::Preempted,
        _ => RetryReason::Unknown,
    }
}

fn is_word(text: &str) -> bool {
    !text.is_empty() && text.len() <= 64 && text.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// A Kubernetes time for `at`.
pub fn time(at: SystemTime) -> Time {
    Time(Timestamp::try_from(at).unwrap_or(Timestamp::UNIX_EPOCH))
}

/// Sets the condition of type `type_`, keeping its transition time when its status did not
/// change.
pub fn set_condition(
    conditions: &mut Vec<Condition>,
    type_: &str,
    holds: bool,
    reason: &str,
    message: &str,
    now: SystemTime,
) {
    let status = if holds { "True" } else { "False" };
    let transition = conditions
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .map_or_else(|| time(now), |c| c.last_transition_time.clone());
    conditions.retain(|c| c.type_ != type_);
    conditions.push(Condition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: reason.to_owned(),
        message: message.to_owned(),
        last_transition_time: transition,
        observed_generation: None,
    });
    conditions.sort_by(|a, b| a.type_.cmp(&b.type_));
}

/// The condition of type `type_`, if set.
pub fn condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use batchbridge_core::TaskCounts;

    use super::*;

    fn job(state: JobState, native: &str, reason: Option<&str>) -> JobStatus {
        let mut job = JobStatus::new(state, native);
        job.reason = reason.map(str::to_owned);
        job
    }

    /// Words and messages for what SLURM, HTCondor and the local backend report (native
    /// states and reasons as the test beds printed them).
    #[test]
    fn reason_words_and_messages() {
        let exited = |code, native: &str| job(JobState::Failed, native, None).with_exit_code(code);
        let cases: Vec<(JobStatus, &str, Option<&str>)> = vec![
            (
                job(JobState::Queued, "PENDING", Some("Resources")),
                "Resources",
                Some("Resources"),
            ),
            (
                job(
                    JobState::Queued,
                    "PENDING",
                    Some("ReqNodeNotAvail, Reserved for maintenance"),
                ),
                "Queued",
                Some("ReqNodeNotAvail, Reserved for maintenance"),
            ),
            (job(JobState::Queued, "1", None), "Queued", None),
            (
                job(
                    JobState::Held,
                    "5",
                    Some("Failed to execute '/nonexistent/bin/tool'"),
                ),
                "Held",
                Some("Failed to execute '/nonexistent/bin/tool'"),
            ),
            (job(JobState::Running, "RUNNING", None), "Running", None),
            (
                job(JobState::Succeeded, "COMPLETED", None),
                "Succeeded",
                None,
            ),
            (
                job(JobState::Cancelled, "CANCELLED", Some("cancelled by 1000")),
                "Cancelled",
                Some("cancelled by 1000"),
            ),
            (
                exited(3, "FAILED"),
                "NonZeroExitCode",
                Some("exited with code 3"),
            ),
            (exited(0, "TIMEOUT"), "Timeout", Some("exited with code 0")),
            (
                job(
                    JobState::Failed,
                    "Removed",
                    Some(
                        "The job attribute PeriodicRemove expression 'JobStatus == 2 && time() - JobCurrentStartDate > 5' evaluated to TRUE",
                    ),
                ),
                "Timeout",
                Some(
                    "failed: The job attribute PeriodicRemove expression 'JobStatus == 2 && time() - JobCurrentStartDate > 5' evaluated to TRUE",
                ),
            ),
            (
                job(JobState::Failed, "NODE_FAIL", None),
                "NodeFailure",
                Some("failed"),
            ),
            (
                job(JobState::Failed, "PREEMPTED", None),
                "Preempted",
                Some("failed"),
            ),
            (
                exited(137, "OUT_OF_MEMORY"),
                "OutOfMemory",
                Some("exited with code 137"),
            ),
            (
                job(JobState::Failed, "FAILED", None).with_signal(9),
                "Signal",
                Some("ended by signal 9"),
            ),
            (
                job(
                    JobState::Failed,
                    "LOST",
                    Some("the job's processes ended without recording an exit code"),
                ),
                "Unknown",
                Some("failed: the job's processes ended without recording an exit code"),
            ),
            (
                job(JobState::Unknown, "", Some("not in squeue or sacct")),
                "Unknown",
                Some("not in squeue or sacct"),
            ),
        ];
        for (job, word, message) in cases {
            let (got_word, got_message) = explain(&job);
            assert_eq!(
                (got_word.as_str(), got_message.as_deref()),
                (word, message),
                "{job:?}"
            );
        }
    }

    #[test]
    fn retry_reasons_follow_the_words() {
        for (word, reason) in [
            (Some("NonZeroExitCode"), RetryReason::NonZeroExitCode),
            (Some("Timeout"), RetryReason::Timeout),
            (Some("NodeFailure"), RetryReason::NodeFailure),
            (Some("Preempted"), RetryReason::Preempted),
            (Some("OutOfMemory"), RetryReason::Unknown),
            (Some("SubmitRejected"), RetryReason::Unknown),
            (None, RetryReason::Unknown),
        ] {
            assert_eq!(retry_reason(word), reason, "{word:?}");
        }
    }

    #[test]
    fn an_observation_keeps_the_attempt_and_sets_finished() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let before = BatchJobStatus {
            phase: Some(Phase::Submitted),
            job_id: Some("42".into()),
            attempts: 2,
            observed_generation: Some(3),
            queue: Some("debug".into()),
            ..BatchJobStatus::default()
        };
        let mut running = job(JobState::Running, "RUNNING", None);
        running.started_at = Some(now - Duration::from_secs(5));
        let status = observed(&before, &running, now);
        assert_eq!(status.phase, Some(Phase::Running));
        assert_eq!((status.job_id.as_deref(), status.attempts), (Some("42"), 2));
        assert_eq!(status.queue.as_deref(), Some("debug"));
        assert_eq!(status.start_time, Some(time(now - Duration::from_secs(5))));
        assert_eq!(status.finish_time, None);
        let finished = condition(&status.conditions, FINISHED).map(|c| c.status.as_str());
        assert_eq!(finished, Some("False"));

        let mut done = job(JobState::Failed, "ARRAY", None).with_exit_code(1);
        done.ended_at = Some(now);
        done.tasks = Some(TaskCounts::from_states([
            JobState::Succeeded,
            JobState::Succeeded,
            JobState::Failed,
        ]));
        done.started_at = None;
        let later = now + Duration::from_secs(60);
        let status = observed(&status, &done, later);
        assert_eq!(status.phase, Some(Phase::Failed));
        assert_eq!(status.reason.as_deref(), Some("NonZeroExitCode"));
        assert_eq!(status.exit_code, Some(1));
        assert_eq!(status.finish_time, Some(time(now)));
        // The start time seen while it ran is kept when the final report lacks it.
        assert_eq!(status.start_time, Some(time(now - Duration::from_secs(5))));
        assert_eq!(status.tasks.map(|t| (t.succeeded, t.failed)), Some((2, 1)));
        let finished = condition(&status.conditions, FINISHED).cloned();
        let finished = finished.unwrap_or_else(|| panic!("no Finished condition"));
        assert_eq!(
            (finished.status.as_str(), finished.reason.as_str()),
            ("True", "NonZeroExitCode")
        );
        assert_eq!(finished.last_transition_time, time(later));
    }

    #[test]
    fn conditions_keep_their_transition_time_while_unchanged() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let t1 = t0 + Duration::from_secs(10);
        let mut conditions = Vec::new();
        set_condition(
            &mut conditions,
            SUBMITTED,
            false,
            "Submitting",
            "submitting",
            t0,
        );
        set_condition(&mut conditions, CLUSTER_READY, true, "Ready", "ok", t0);
        set_condition(&mut conditions, SUBMITTED, false, "Submitting", "still", t1);
        let submitted = condition(&conditions, SUBMITTED).cloned();
        let submitted = submitted.unwrap_or_else(|| panic!("no Submitted condition"));
        assert_eq!(
            (submitted.message.as_str(), &submitted.last_transition_time),
            ("still", &time(t0))
        );
        set_condition(&mut conditions, SUBMITTED, true, "Submitted", "job 7", t1);
        let submitted = condition(&conditions, SUBMITTED).cloned();
        let submitted = submitted.unwrap_or_else(|| panic!("no Submitted condition"));
        assert_eq!(submitted.last_transition_time, time(t1));
        let types: Vec<&str> = conditions.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(
            types,
            [CLUSTER_READY, SUBMITTED],
            "one of each type, sorted"
        );
    }
}
