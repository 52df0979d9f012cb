//! A reconcile with the job's cluster usable: what the poller's report (or none) makes of
//! each phase, a job being moved included.

use std::time::{Duration, SystemTime};

use batchbridge_core::{JobId, JobState, JobStatus};

use crate::crd::{BatchJobStatus, MoveOutcome, Phase};
use crate::reason::{ConditionType, Reason};
use crate::status::{condition, observed, set_condition};

use super::attempt::{end_attempt, pend, retry_wait, set_finished, start_attempt};
use super::dependencies::{
    dependency_failed, handed_over, handed_to_scheduler, waits_for_dependencies,
};
use super::placement::move_wait;
use super::{
    ACTION_RETRY, Capacity, Effect, Plan, Purpose, QUEUE_REPORT_HOLD, RECHECK, Rules, SUBMIT_AGAIN,
    Target,
};

/// A reconcile with the cluster usable.
pub(super) fn observe(
    rules: &Rules<'_>,
    next: &mut BatchJobStatus,
    observation: Option<&JobStatus>,
    now: SystemTime,
    plan: &mut Plan<Effect>,
) {
    let phase = next.phase.unwrap_or(Phase::Pending);
    let id = next.job_id.as_deref().map(JobId::from);
    let edited = next
        .observed_generation
        .is_some_and(|generation| generation != rules.generation);
    match (phase, id) {
        // Held already (its message may name the attempt cancelled for it): nothing new.
        (Phase::Pending, _) if rules.suspended => {
            if next.reason != Some(Reason::Suspended) {
                hold(next, HELD, now);
            }
        }
        (Phase::Pending, _) => {
            let retries = if edited { 0 } else { next.retries };
            if !waits_for_dependencies(rules, next, now, plan) {
                begin_attempt(rules, next, next.attempts + 1, retries, now, plan);
            }
        }
        // The scheduler refused this attempt's key for now (a submit limit, a closed queue):
        // it has no job of it, so the attempt is undone, as one that never reached the
        // cluster, and the job held back instead of submitted again.
        (Phase::Submitted, None)
            if rules.suspended
                && matches!(next.reason, Some(Reason::SubmitLimit | Reason::QueueClosed)) =>
        {
            next.attempts = next.attempts.saturating_sub(1);
            hold(next, HELD, now);
        }
        // Stopped between asking the backend and writing its answer: ask again, same key
        // (suspended or not: the scheduler may have the job, which is then cancelled).
        (Phase::Submitted, None) => plan.push(Effect::Submit {
            attempt: next.attempts.max(1),
            after: match rules.target {
                Target::Fixed(cluster) => {
                    handed_over(cluster, rules.native_dependencies, rules.after)
                }
                Target::Placed { .. } => Vec::new(),
            },
        }),
        (phase, id) if phase.spec_editable() && edited => {
            plan.extend(id.map(Effect::Forget));
            if rules.suspended {
                // The edited spec runs once suspend is cleared; its retries start afresh
                // then, as the generation is still not observed.
                hold(next, HELD, now);
            } else if !waits_for_dependencies(rules, next, now, plan) {
                begin_attempt(rules, next, next.attempts + 1, 0, now, plan);
            }
        }
        (Phase::RetryPending, _) => match (uncollected(rules, next), retry_wait(next, now)) {
            // The operator stopped during the collection: the failed attempt's output first.
            (Some(id), _) => plan.push(Effect::Collect { id }),
            (None, _) => retry(rules, next, now, plan),
        },
        (phase, id) if phase.is_terminal() => {
            plan.extend(id.map(Effect::Forget));
            rest(rules, next, now, plan);
        }
        (_, Some(id)) if next.moving.is_some() => moving(rules, next, observation, id, now, plan),
        (_, Some(id)) if rules.suspended || suspending(next) => {
            suspend(rules, next, observation, id, now, plan);
        }
        (_, Some(id)) => follow(rules, next, observation, id, now, plan),
        // An active phase without an id is only ever written as Submitted, handled above.
        (_, None) => begin_attempt(rules, next, next.attempts + 1, 0, now, plan),
    }
}

/// The message of a job held back by spec.suspend with no attempt cancelled for it.
const HELD: &str = "spec.suspend is true: the job is submitted once it is cleared";

/// The job held back by spec.suspend, nothing of it on the cluster: Pending, reason
/// Suspended, the condition Suspended True, as a suspended batch/v1 Job has it; of its
/// attempts only their count, retries and clusters are left (the next submit starts the
/// next attempt). Nothing to do until the spec changes, which wakes the job.
fn hold(next: &mut BatchJobStatus, message: &str, now: SystemTime) {
    pend(next, Reason::Suspended, message);
    set_condition(
        &mut next.conditions,
        ConditionType::Suspended,
        true,
        Reason::Suspended,
        message,
        now,
    );
}

/// Whether the job's attempt is being cancelled for spec.suspend (the condition Suspended
/// False, reason Suspending), whatever spec.suspend says now: the attempt is over for the
/// operator once it ended on the cluster, and the next one waits for that.
fn suspending(status: &BatchJobStatus) -> bool {
    condition(&status.conditions, ConditionType::Suspended)
        .is_some_and(|c| c.reason == Reason::Suspending.as_str())
}

/// An attempt the scheduler has while spec.suspend is true, or had when it was set:
/// cancelled (Suspending) until the poller reports it ended. Ended cancelled, it is not
/// counted as a failure: the job waits suspended (Pending) or, when suspend was cleared
/// meanwhile, its next attempt starts, never before. Ended otherwise before the cancel took
/// (succeeded, failed), it ends as it did.
fn suspend(
    rules: &Rules<'_>,
    next: &mut BatchJobStatus,
    observation: Option<&JobStatus>,
    id: JobId,
    now: SystemTime,
    plan: &mut Plan<Effect>,
) {
    let attempt = next.attempts;
    match observation.map(|job| Phase::from(job.state)) {
        Some(Phase::Cancelled) => {
            plan.push(Effect::Forget(id.clone()));
            if rules.suspended {
                let message = format!(
                    "spec.suspend is true: attempt {attempt} (job {id}) was cancelled, not \
                     counted as a failure; attempt {} is submitted once suspend is cleared",
                    attempt + 1
                );
                hold(next, &message, now);
            } else {
                begin_attempt(rules, next, attempt + 1, next.retries, now, plan);
            }
        }
        Some(phase) if phase.is_terminal() => follow(rules, next, observation, id, now, plan),
        _ => {
            if let Some(job) = observation {
                *next = observed(next, job);
            }
            let message = format!(
                "spec.suspend is true: cancelling attempt {attempt} (job {id}) on the cluster"
            );
            next.reason = Some(Reason::Suspending);
            next.message = Some(message.clone());
            set_condition(
                &mut next.conditions,
                ConditionType::Suspended,
                false,
                Reason::Suspending,
                &message,
                now,
            );
            set_finished(next, now);
            // Cancelled again at each look until its end is seen: a cancel lost with a
            // broken connection, or an operator stopped before it, is repeated.
            plan.push(Effect::Follow(id.clone()));
            plan.push(Effect::Cancel(id));
            plan.requeue(ACTION_RETRY);
        }
    }
}

/// An attempt the scheduler has, as the poller reports it: its end collected or written,
/// its changes written, followed until then.
fn follow(
    rules: &Rules<'_>,
    next: &mut BatchJobStatus,
    observation: Option<&JobStatus>,
    id: JobId,
    now: SystemTime,
    plan: &mut Plan<Effect>,
) {
    match observation {
        // The end is written with the output, in one write: collect it first (the
        // poller keeps following the job until then).
        Some(job) if Phase::from(job.state).is_terminal() && rules.keeps_output => {
            plan.push(Effect::Collect { id });
        }
        Some(job) if Phase::from(job.state).is_terminal() => {
            end_attempt(rules, next, job, dependency_failed(rules, job), now);
            plan.push(Effect::Forget(id));
            if next.phase == Some(Phase::RetryPending) {
                retry(rules, next, now, plan);
            } else {
                rest(rules, next, now, plan);
            }
        }
        _ => {
            let mut recheck = RECHECK;
            if let Some(job) = observation {
                match held_back(next, job, now) {
                    Some(hold_left) => {
                        // Written when the hold ends, not at the next change, which may
                        // be minutes away: until then the status only says which job the
                        // attempt is, and a user waits to read why it waits.
                        recheck = hold_left;
                    }
                    None => {
                        let started = next.phase != Some(Phase::Running);
                        *next = observed(next, job);
                        if rules.log_pod && started && next.phase == Some(Phase::Running) {
                            plan.push(Effect::ShowOutput(id.clone()));
                        }
                    }
                }
            }
            set_finished(next, now);
            plan.push(Effect::Follow(id));
            let waiting = observation.is_some_and(|job| job.state == JobState::Queued);
            match move_wait(rules, next, now).filter(|_| waiting) {
                Some(Duration::ZERO) => {
                    plan.push(Effect::Place(Purpose::Move));
                    plan.requeue(recheck);
                }
                Some(wait) => plan.requeue(wait.min(recheck)),
                None => plan.requeue(recheck),
            }
        }
    }
}

/// How much longer the poller's report `job` waits for the job's next change, if it does:
/// the job still waits in the phase its status says, in its first [`QUEUE_REPORT_HOLD`] in
/// the queue. The acceptance was written as Queued, so the first polls say nothing new but
/// the scheduler's words for the wait (its native state and reason, its estimate, the
/// partition); written at once they would cost a status write per job just when a burst of
/// submits makes the API server the limit. They go out when that minute ends, or with an
/// earlier change of phase (the job starting).
pub(super) fn held_back(
    status: &BatchJobStatus,
    job: &JobStatus,
    now: SystemTime,
) -> Option<Duration> {
    let phase = Phase::from(job.state);
    if status.phase != Some(phase) || !matches!(phase, Phase::Queued | Phase::Held) {
        return None;
    }
    let submitted = SystemTime::from(status.submit_time.as_ref()?.0);
    (submitted + QUEUE_REPORT_HOLD)
        .duration_since(now)
        .ok()
        .filter(|left| !left.is_zero())
}

/// A job in RetryPending: waits out its backoff, then its next attempt starts. While
/// spec.suspend is true it keeps RetryPending (the retry is one of the policy's) and says
/// so with the condition Suspended True, and waits for suspend to be cleared.
pub(super) fn retry(
    rules: &Rules<'_>,
    next: &mut BatchJobStatus,
    now: SystemTime,
    plan: &mut Plan<Effect>,
) {
    if rules.suspended {
        let message = format!(
            "spec.suspend is true: the retry, attempt {}, is submitted once it is cleared",
            next.attempts + 1
        );
        set_condition(
            &mut next.conditions,
            ConditionType::Suspended,
            true,
            Reason::Suspended,
            &message,
            now,
        );
        return;
    }
    match retry_wait(next, now) {
        Some(wait) => plan.requeue(wait),
        None => begin_attempt(rules, next, next.attempts + 1, next.retries + 1, now, plan),
    }
}

/// A job over for good: kept until its ttl expires, if it has one.
pub(super) fn rest(
    rules: &Rules<'_>,
    next: &BatchJobStatus,
    now: SystemTime,
    plan: &mut Plan<Effect>,
) {
    if let Some(id) = uncollected(rules, next) {
        // The operator stopped during the collection.
        plan.push(Effect::Collect { id });
        return;
    }
    let Some(ttl) = rules.ttl_after_finished else {
        return;
    };
    let finished = next
        .finish_time
        .as_ref()
        .map_or(now, |finished| SystemTime::from(finished.0));
    match (finished + ttl).duration_since(now) {
        Ok(wait) if !wait.is_zero() => plan.requeue(wait),
        _ => plan.push(Effect::Expire),
    }
}

/// The ended attempt whose output the policy keeps and that is not collected yet.
pub(super) fn uncollected(rules: &Rules<'_>, status: &BatchJobStatus) -> Option<JobId> {
    let collected = condition(&status.conditions, ConditionType::OutputCollected).is_some();
    (rules.keeps_output && !collected)
        .then(|| status.job_id.as_deref().map(JobId::from))
        .flatten()
}

/// Starts attempt `attempt` on the job's fixed cluster, or asks where to place it first.
pub(super) fn begin_attempt(
    rules: &Rules<'_>,
    next: &mut BatchJobStatus,
    attempt: u32,
    retries: u32,
    now: SystemTime,
    plan: &mut Plan<Effect>,
) {
    match (rules.target, &rules.capacity) {
        (Target::Fixed(_), Capacity::Full(message)) => wait_for_room(next, message, plan),
        (Target::Fixed(cluster), Capacity::Free) => {
            start_attempt(rules, next, attempt, retries, cluster, now);
            let after = handed_to_scheduler(rules).unwrap_or_default();
            plan.push(Effect::Submit { attempt, after });
        }
        (Target::Placed { .. }, _) => {
            plan.push(Effect::Place(Purpose::Attempt { attempt, retries }));
        }
    }
}

/// No room on the job's cluster ([`Capacity::Full`]): a job that has not run is Pending with
/// reason SubmitLimit and `message` (written once: the same message writes nothing); a retry
/// keeps RetryPending and the reason of the attempt that failed. Looked at again after
/// [`SUBMIT_AGAIN`] in case no job of the cluster wakes it when room frees.
fn wait_for_room(next: &mut BatchJobStatus, message: &str, plan: &mut Plan<Effect>) {
    if next.phase.unwrap_or(Phase::Pending) == Phase::Pending {
        next.phase = Some(Phase::Pending);
        next.reason = Some(Reason::SubmitLimit);
        next.message = Some(message.to_owned());
    }
    plan.requeue(SUBMIT_AGAIN);
}

/// A job being moved, as its cluster's poller reports it: cancelled without having started,
/// it is submitted to the move's target under its next attempt's key; started or ended
/// first, it stays (and never moves again); still waiting, it is cancelled again.
fn moving(
    rules: &Rules<'_>,
    next: &mut BatchJobStatus,
    observation: Option<&JobStatus>,
    id: JobId,
    now: SystemTime,
    plan: &mut Plan<Effect>,
) {
    let Some(job) = observation else {
        // The poller has no report yet: nothing is known, nothing is done.
        plan.push(Effect::Follow(id));
        plan.requeue(ACTION_RETRY);
        return;
    };
    let Some(mut record) = next.moving.take() else {
        return;
    };
    let phase = Phase::from(job.state);
    let started = job.started_at.is_some() || next.start_time.is_some();
    if phase == Phase::Cancelled && !started {
        record.outcome = MoveOutcome::Moved;
        let to = record.to.clone();
        next.moves.push(record);
        plan.push(Effect::Forget(id));
        if rules.suspended {
            // Suspended while it was withdrawn: it left its cluster, and is placed again
            // once suspend is cleared.
            hold(next, HELD, now);
            return;
        }
        let (attempt, retries) = (next.attempts + 1, next.retries);
        start_attempt(rules, next, attempt, retries, &to, now);
        plan.push(Effect::Submit {
            attempt,
            after: Vec::new(),
        });
    } else if started || phase.is_terminal() || matches!(phase, Phase::Running | Phase::Suspended) {
        record.outcome = MoveOutcome::StartedFirst;
        next.moves.push(record);
        observe(rules, next, Some(job), now, plan);
    } else {
        next.moving = Some(record);
        plan.push(Effect::Follow(id.clone()));
        plan.push(Effect::Withdraw(id));
        plan.requeue(ACTION_RETRY);
    }
}
