//! An attempt's status: started clean, ended as its scheduler reports it, retried as the
//! policy says, and the conditions that follow its phase and its cluster's readiness.

use std::time::{Duration, SystemTime};

use batchbridge_core::JobStatus;

use crate::crd::{BatchJobStatus, Phase, RetryPolicy, RetryReason};
use crate::reason::{ClusterProblem, ConditionType, Reason};
use crate::status::{holds, observed, set_condition};

use super::{Rules, retry_backoff};

/// Starts attempt `attempt` of the current spec on `cluster`: a clean status that says
/// Submitted (what placement saw and the moves are kept).
pub(super) fn start_attempt(
    rules: &Rules<'_>,
    next: &mut BatchJobStatus,
    attempt: u32,
    retries: u32,
    cluster: &str,
    now: SystemTime,
) {
    let mut conditions = std::mem::take(&mut next.conditions);
    // Ready stays too: False before and after, its transition time is the job's, not the
    // attempt's.
    conditions.retain(|c| {
        c.type_ == ConditionType::ClusterReady.as_str() || c.type_ == ConditionType::Ready.as_str()
    });
    let clusters_used = with_cluster_used(std::mem::take(&mut next.clusters_used), cluster);
    *next = BatchJobStatus {
        phase: Some(Phase::Submitted),
        reason: Some(Reason::Submitting),
        message: Some(format!("submitting attempt {attempt}")),
        attempts: attempt,
        retries,
        observed_generation: Some(rules.generation),
        spec_digest: Some(rules.spec_digest.clone()),
        conditions,
        cluster: Some(cluster.to_owned()),
        placement: next.placement.take(),
        moves: std::mem::take(&mut next.moves),
        clusters_used,
        ..BatchJobStatus::default()
    };
    mark_cluster_ready(next, now);
    set_condition(
        &mut next.conditions,
        ConditionType::Submitted,
        false,
        Reason::Submitting,
        &format!("submitting attempt {attempt}"),
        now,
    );
    set_finished(next, now);
}

/// The most clusters a status remembers attempts on ([`BatchJobStatus::clusters_used`]):
/// a job re-run on more clusters than this leaves the files of the earliest behind on
/// deletion, rather than grow its status without bound.
pub const MAX_CLUSTERS_USED: usize = 32;

/// `used` with `cluster` in it, in name order, at most [`MAX_CLUSTERS_USED`] (the newest
/// kept).
pub(super) fn with_cluster_used(mut used: Vec<String>, cluster: &str) -> Vec<String> {
    if let Err(at) = used.binary_search_by(|name| name.as_str().cmp(cluster)) {
        used.insert(at, cluster.to_owned());
        if used.len() > MAX_CLUSTERS_USED {
            // Which older one goes matters little; the one just added must stay.
            used.remove(usize::from(at == 0));
        }
    }
    used
}

/// The attempt ended as `job` reports: its status written (with `message` instead of the
/// report's, when given), RetryPending when the policy retries it, else final. An end that
/// came before a suspension's cancel took ends the suspension with it.
pub(super) fn end_attempt(
    rules: &Rules<'_>,
    next: &mut BatchJobStatus,
    job: &JobStatus,
    message: Option<String>,
    now: SystemTime,
) {
    *next = observed(next, job);
    if message.is_some() {
        next.message = message;
    }
    next.conditions
        .retain(|c| c.type_ != ConditionType::Suspended.as_str());
    if next.phase == Some(Phase::Failed)
        && let Some(policy) = rules.retry_policy
        && retryable(next, policy)
    {
        next.phase = Some(Phase::RetryPending);
    }
    set_finished(next, now);
}

/// Sets Finished, Complete and Failed for the phase: Finished only when the job is over
/// for good; Complete when it succeeded, Failed when it failed or was cancelled, as
/// batch/v1 Job has them.
pub(super) fn set_finished(next: &mut BatchJobStatus, now: SystemTime) {
    let phase = next.phase.unwrap_or(Phase::Pending);
    let reason = next.reason.unwrap_or(Reason::Unknown);
    let message = next.message.clone().unwrap_or_default();
    let conditions = &mut next.conditions;
    if phase.is_terminal() {
        set_condition(
            conditions,
            ConditionType::Finished,
            true,
            reason,
            &message,
            now,
        );
        let (complete, failed) = (phase == Phase::Succeeded, phase != Phase::Succeeded);
        set_condition(
            conditions,
            ConditionType::Complete,
            complete,
            reason,
            &message,
            now,
        );
        set_condition(
            conditions,
            ConditionType::Failed,
            failed,
            reason,
            &message,
            now,
        );
        return;
    }
    let (reason, message) = if phase == Phase::RetryPending {
        (
            Reason::RetryPending,
            format!(
                "attempt {} failed ({message}); a retry follows",
                next.attempts
            ),
        )
    } else {
        (
            Reason::NotFinished,
            "the job has not finished yet".to_owned(),
        )
    };
    set_condition(
        conditions,
        ConditionType::Finished,
        false,
        reason,
        &message,
        now,
    );
    conditions.retain(|c| {
        c.type_ != ConditionType::Complete.as_str() && c.type_ != ConditionType::Failed.as_str()
    });
}

/// Sets Ready, the summary condition kstatus (and Argo CD and Flux with it) reads, so no
/// custom health check is needed: True once the job reached the end it is for (Succeeded),
/// False while it is on its way or when it ended otherwise, with the status's reason. It
/// follows the phase and reason, so it changes only in a write that happens anyway.
pub(super) fn set_ready(next: &mut BatchJobStatus, now: SystemTime) {
    let phase = next.phase.unwrap_or(Phase::Pending);
    let (reason, message) = match phase {
        Phase::Succeeded => (Reason::Succeeded, "the job succeeded".to_owned()),
        phase if phase.is_terminal() => (
            next.reason.unwrap_or(Reason::Unknown),
            format!("the job ended {phase:?}; editing its spec runs it again"),
        ),
        phase => (
            next.reason.unwrap_or(Reason::NotFinished),
            format!("the job is {phase:?}, not finished yet"),
        ),
    };
    set_condition(
        &mut next.conditions,
        ConditionType::Ready,
        phase == Phase::Succeeded,
        reason,
        &message,
        now,
    );
}

/// How long a job in RetryPending still waits for its retry; `None` when it is due.
pub(super) fn retry_wait(status: &BatchJobStatus, now: SystemTime) -> Option<Duration> {
    let due = status.finish_time.as_ref().map_or(now, |finished| {
        SystemTime::from(finished.0) + retry_backoff(status.retries)
    });
    due.duration_since(now).ok().filter(|wait| !wait.is_zero())
}

pub(super) fn retryable(status: &BatchJobStatus, policy: &RetryPolicy) -> bool {
    let reason = status.reason.unwrap_or(Reason::Unknown);
    status.retries < policy.max_retries
        && !matches!(
            reason,
            Reason::SubmitRejected | Reason::DependencyFailed | Reason::DependencyCycle
        )
        && (policy.retry_on.is_empty() || policy.retry_on.contains(&RetryReason::from(reason)))
}

/// A cluster problem on a job that has not started yet: ClusterReady=False, and the
/// problem as the job's reason while it is Pending.
pub(super) fn cluster_problem(
    next: &mut BatchJobStatus,
    problem: &ClusterProblem,
    now: SystemTime,
) {
    mark_cluster_not_ready(next, problem, now);
    if next.phase.unwrap_or(Phase::Pending) == Phase::Pending {
        next.phase = Some(Phase::Pending);
        next.reason = Some(problem.reason);
        next.message = Some(problem.message.clone());
    }
}

/// ClusterReady=False with the problem's reason and message; the phase stays as it is.
pub(super) fn mark_cluster_not_ready(
    status: &mut BatchJobStatus,
    problem: &ClusterProblem,
    now: SystemTime,
) {
    set_condition(
        &mut status.conditions,
        ConditionType::ClusterReady,
        false,
        problem.reason,
        &problem.message,
        now,
    );
}

pub(super) fn mark_cluster_ready(status: &mut BatchJobStatus, now: SystemTime) {
    if holds(&status.conditions, ConditionType::ClusterReady) != Some(true) {
        set_condition(
            &mut status.conditions,
            ConditionType::ClusterReady,
            true,
            Reason::Ready,
            "the cluster answered and its credentials are in place",
            now,
        );
    }
}

/// The job Pending for `reason`, nothing of it on the cluster: of its attempts only their
/// count, retries and clusters are left (the next submit starts the next attempt), of its
/// conditions only ClusterReady and Ready.
pub(super) fn pend(next: &mut BatchJobStatus, reason: Reason, message: &str) {
    let mut conditions = std::mem::take(&mut next.conditions);
    conditions.retain(|c| {
        c.type_ == ConditionType::ClusterReady.as_str() || c.type_ == ConditionType::Ready.as_str()
    });
    *next = BatchJobStatus {
        phase: Some(Phase::Pending),
        reason: Some(reason),
        message: Some(message.to_owned()),
        attempts: next.attempts,
        retries: next.retries,
        observed_generation: next.observed_generation,
        spec_digest: next.spec_digest.take(),
        conditions,
        cluster: next.cluster.take(),
        placement: next.placement.take(),
        moves: std::mem::take(&mut next.moves),
        clusters_used: std::mem::take(&mut next.clusters_used),
        ..BatchJobStatus::default()
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clusters_used_are_remembered_once_each_in_name_order_and_bounded() {
        let mut used = Vec::new();
        for cluster in ["slurm", "htcondor", "slurm", "pbs"] {
            used = with_cluster_used(used, cluster);
        }
        assert_eq!(used, ["htcondor", "pbs", "slurm"]);
        let mut used: Vec<String> = (0..MAX_CLUSTERS_USED).map(|n| format!("c{n:02}")).collect();
        used = with_cluster_used(used, "a-first");
        assert_eq!(used.len(), MAX_CLUSTERS_USED);
        assert_eq!(used[0], "a-first", "the newest is kept");
        used = with_cluster_used(used, "z-last");
        assert_eq!(used.len(), MAX_CLUSTERS_USED);
        assert_eq!(used.last().map(String::as_str), Some("z-last"));
    }
}
