//! What came of an action on the cluster: a submit accepted, undone, deferred or refused;
//! an output collected or not.

use std::time::{Duration, SystemTime};

use crate::crd::{BatchJobStatus, Phase};
use crate::reason::{ClusterProblem, ConditionType, Reason};
use crate::status::{set_condition, time};

use super::attempt::{cluster_problem, mark_cluster_not_ready, set_finished};
use super::{
    ACTION_RETRY, ActionEffect, CLUSTER_RECHECK, CollectOutcome, Failure, Plan, Rules,
    SUBMIT_AGAIN, SubmitOutcome, Target,
};

pub(super) fn submitted(
    rules: &Rules<'_>,
    next: &mut BatchJobStatus,
    attempt: u32,
    outcome: &SubmitOutcome,
    now: SystemTime,
    plan: &mut Plan<ActionEffect>,
) {
    match outcome {
        SubmitOutcome::Accepted { id, queue, user } => {
            // Written as the state the job is in, waiting in the scheduler's queue, so that
            // the first poll, which says the same, writes nothing.
            next.phase = Some(Phase::Queued);
            next.job_id = Some(id.to_string());
            next.queue.clone_from(queue);
            next.user.clone_from(user);
            next.submit_time = Some(time(now));
            next.reason = Some(Reason::Queued);
            next.message = Some(format!("attempt {attempt} submitted as job {id}"));
            set_condition(
                &mut next.conditions,
                ConditionType::Submitted,
                true,
                Reason::Submitted,
                &format!("attempt {attempt} is job {id}"),
                now,
            );
            plan.push(ActionEffect::Follow(id.clone()));
        }
        SubmitOutcome::Failed(Failure::NotReached(problem)) => {
            // Nothing reached the cluster: the attempt did not happen, and the job waits
            // for its cluster as if it had never been submitted.
            next.phase = Some(Phase::Pending);
            next.attempts = attempt.saturating_sub(1);
            if matches!(rules.target, Target::Placed { .. }) {
                // Placed again: the next placement sees this cluster unreachable.
                next.cluster = None;
            }
            next.observed_generation = (next.attempts > 0).then_some(rules.generation);
            next.conditions
                .retain(|c| c.type_ != ConditionType::Submitted.as_str());
            cluster_problem(next, problem, now);
            plan.requeue(CLUSTER_RECHECK);
        }
        SubmitOutcome::Failed(Failure::Interrupted { problem, .. }) => {
            // The status still says Submitted without an id: the same key is submitted
            // again, and the backend returns the job if this attempt reached it.
            if let Some(problem) = problem {
                mark_cluster_not_ready(next, problem, now);
            }
            plan.requeue(action_retry(problem.as_ref()));
        }
        SubmitOutcome::Failed(Failure::Deferred { reason, message }) => {
            // The scheduler has no job of this key: the attempt is undone, as one that never
            // reached the cluster, and the job waits Pending with the scheduler's reason
            // until its cluster has room (`capacity`), never Failed. Its next submit uses the
            // same key again.
            next.phase = Some(Phase::Pending);
            next.attempts = attempt.saturating_sub(1);
            if matches!(rules.target, Target::Placed { .. }) {
                next.cluster = None;
            }
            next.observed_generation = (next.attempts > 0).then_some(rules.generation);
            next.reason = Some(*reason);
            next.message = Some(message.clone());
            set_condition(
                &mut next.conditions,
                ConditionType::Submitted,
                false,
                *reason,
                message,
                now,
            );
            plan.requeue(SUBMIT_AGAIN);
        }
        SubmitOutcome::Failed(Failure::Refused(message))
        | SubmitOutcome::DirectiveRefused(message)
        | SubmitOutcome::InputRefused(message) => {
            let reason = match outcome {
                SubmitOutcome::DirectiveRefused(_) => Reason::DirectiveRefused,
                SubmitOutcome::InputRefused(_) => Reason::InputRefused,
                _ => Reason::SubmitRejected,
            };
            next.phase = Some(Phase::Failed);
            next.reason = Some(reason);
            next.message = Some(message.clone());
            next.finish_time = Some(time(now));
            set_condition(
                &mut next.conditions,
                ConditionType::Submitted,
                false,
                reason,
                message,
                now,
            );
            set_finished(next, now);
        }
    }
}

pub(super) fn collected(
    next: &mut BatchJobStatus,
    outcome: &CollectOutcome,
    now: SystemTime,
    plan: &mut Plan<ActionEffect>,
) {
    let (holds, reason, message) = match outcome {
        CollectOutcome::Collected {
            tail,
            task_outputs,
            task_outputs_omitted,
            summary,
            refused,
            unwritten,
            staged,
        } => {
            if let Some(staged) = staged {
                let (holds, reason, message) = match staged {
                    Ok(message) => (true, Reason::OutputsStaged, message),
                    Err(message) => (false, Reason::OutputsNotStaged, message),
                };
                set_condition(
                    &mut next.conditions,
                    ConditionType::OutputsStaged,
                    holds,
                    reason,
                    message,
                    now,
                );
            }
            next.output_tail.clone_from(tail);
            next.task_outputs.clone_from(task_outputs);
            next.task_outputs_omitted = *task_outputs_omitted;
            let mut message = summary.clone();
            if !refused.is_empty() {
                message.push_str(&format!(
                    "; not written, as the name belongs to another object: {} (rename the \
                     BatchJob or that object)",
                    refused.join(", ")
                ));
            }
            if !unwritten.is_empty() {
                message.push_str(&format!(
                    "; not written, as the API server did not take it: {} (a quota or policy \
                     of the namespace may refuse it; edit the job to run it again)",
                    unwritten.join(", ")
                ));
            }
            match (refused.is_empty(), unwritten.is_empty()) {
                (true, true) => (true, Reason::Collected, message),
                (false, _) => (false, Reason::OutputNameTaken, message),
                (true, false) => (false, Reason::OutputNotWritten, message),
            }
        }
        CollectOutcome::Failed(Failure::Refused(message)) => {
            (false, Reason::OutputUnavailable, message.clone())
        }
        CollectOutcome::Failed(
            Failure::NotReached(problem)
            | Failure::Interrupted {
                problem: Some(problem),
                ..
            },
        ) => {
            plan.requeue(CLUSTER_RECHECK);
            mark_cluster_not_ready(next, problem, now);
            return;
        }
        CollectOutcome::Failed(
            Failure::Interrupted { problem: None, .. } | Failure::Deferred { .. },
        ) => {
            plan.requeue(ACTION_RETRY);
            return;
        }
    };
    set_condition(
        &mut next.conditions,
        ConditionType::OutputCollected,
        holds,
        reason,
        &message,
        now,
    );
}

/// How long an interrupted action waits before it is tried again.
pub(super) fn action_retry(problem: Option<&ClusterProblem>) -> Duration {
    if problem.is_some() {
        CLUSTER_RECHECK
    } else {
        ACTION_RETRY
    }
}
