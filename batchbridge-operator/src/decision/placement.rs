//! Placement (spec.placement): where an attempt goes, and whether and when a waiting job
//! moves (a move under way is observed as any job is, in `observe`).

use std::convert::Infallible;
use std::time::{Duration, SystemTime};

use batchbridge_core::placement::{Answer, Seen, Skipped, choose};

use crate::crd::{
    BatchJobStatus, CandidateAnswer, Estimate, Move, MoveOutcome, Phase, PlacementStatus,
};
use crate::reason::{ClusterProblem, Reason};
use crate::status::time;

use super::attempt::{cluster_problem, start_attempt};
use super::{
    ACTION_RETRY, CLUSTER_RECHECK, MOVE_MARGIN, MOVE_RECHECK, Placed, Plan, Rules, Target,
};

/// Whether the job waits for placement to choose its cluster: a placed job not yet
/// submitted has no cluster whose readiness would mean anything.
pub(super) fn awaits_placement(rules: &Rules<'_>, status: &BatchJobStatus) -> bool {
    matches!(rules.target, Target::Placed { .. })
        && status.phase.unwrap_or(Phase::Pending) == Phase::Pending
}

/// The candidates answered where to submit `attempt`: it starts on the chosen one, or the
/// job waits, `ClusterReady` false with reason `NoClusterAvailable`, when none can take it.
pub(super) fn place_attempt(
    rules: &Rules<'_>,
    next: &mut BatchJobStatus,
    (attempt, retries): (u32, u32),
    &Placed {
        chosen, seen, at, ..
    }: &Placed<'_>,
    now: SystemTime,
    plan: &mut Plan<Infallible>,
) {
    // An answer overtaken by another step (the attempt started, the job changed) is old;
    // a job suspended meanwhile is held by the reconcile the answer's end wakes.
    let phase = next.phase.unwrap_or(Phase::Pending);
    if !matches!(rules.target, Target::Placed { .. })
        || rules.suspended
        || !phase.spec_editable()
        || next.attempts + 1 != attempt
    {
        return;
    }
    let candidates = candidate_answers(seen, at);
    match chosen {
        Some(cluster) => {
            next.placement = Some(PlacementStatus {
                time: time(at),
                candidates,
            });
            start_attempt(rules, next, attempt, retries, cluster, now);
        }
        None => {
            // The same answers again change nothing: no write every recheck.
            if next.placement.as_ref().map(|p| &p.candidates) != Some(&candidates) {
                next.placement = Some(PlacementStatus {
                    time: time(at),
                    candidates,
                });
            }
            let problem = ClusterProblem {
                reason: Reason::NoClusterAvailable,
                message: format!("no candidate can take the job now: {}", skipped(seen)),
            };
            cluster_problem(next, &problem, now);
            plan.requeue(CLUSTER_RECHECK);
        }
    }
}

/// The candidates answered whether the waiting job should move: when one other than its
/// cluster promises a clearly earlier start ([`MOVE_MARGIN`]), the move begins
/// (status.moving, written before anything is cancelled).
pub(super) fn consider_move(
    rules: &Rules<'_>,
    next: &mut BatchJobStatus,
    seen: &[Seen],
    at: SystemTime,
    now: SystemTime,
    plan: &mut Plan<Infallible>,
) {
    let Target::Placed { policy, .. } = rules.target else {
        return;
    };
    if next.phase != Some(Phase::Queued) || move_wait(rules, next, now) != Some(Duration::ZERO) {
        return;
    }
    let (Some(from), Some(id)) = (next.cluster.clone(), next.job_id.clone()) else {
        return;
    };
    next.placement = Some(PlacementStatus {
        time: time(at),
        candidates: candidate_answers(seen, at),
    });
    let others: Vec<Seen> = seen
        .iter()
        .filter(|s| s.candidate != from)
        .cloned()
        .collect();
    let expected = next
        .expected_start_time
        .as_ref()
        .map(|t| SystemTime::from(t.0));
    let target = choose(policy, &others, at)
        .filter(|to| clearly_earlier(&to.answer, expected, at))
        .cloned();
    if let Some(to) = target {
        next.moving = Some(Move {
            from,
            to: to.candidate,
            job_id: id,
            time: time(now),
            outcome: MoveOutcome::Cancelling,
        });
        // The reconcile the placement's end wakes withdraws the job (status.moving).
        plan.requeue(ACTION_RETRY);
    } else {
        plan.requeue(MOVE_RECHECK);
    }
}

/// How long until the waiting job may be considered for a move (`Some(ZERO)`: now); `None`
/// when it never moves (no moveAfter, its moves used up, a move under way or given up, or
/// it started).
pub(super) fn move_wait(
    rules: &Rules<'_>,
    status: &BatchJobStatus,
    now: SystemTime,
) -> Option<Duration> {
    let Target::Placed {
        move_after: Some(after),
        max_moves,
        ..
    } = rules.target
    else {
        return None;
    };
    let movable = status.moving.is_none()
        && status.start_time.is_none()
        && status.moves.len() < max_moves as usize
        && !status
            .moves
            .iter()
            .any(|m| m.outcome == MoveOutcome::StartedFirst);
    let submitted = SystemTime::from(status.submit_time.as_ref()?.0);
    let asked = status
        .placement
        .as_ref()
        .map_or(SystemTime::UNIX_EPOCH, |p| SystemTime::from(p.time.0));
    let due = (submitted + after).max(asked + MOVE_RECHECK);
    movable.then(|| due.duration_since(now).unwrap_or_default())
}

/// Whether `answer` promises a clearly earlier start than `expected` (the waiting job's
/// scheduler's estimate, if it gives one), as [`MOVE_MARGIN`] says.
pub(super) fn clearly_earlier(
    answer: &Answer,
    expected: Option<SystemTime>,
    at: SystemTime,
) -> bool {
    let Answer::Estimate(estimate) = answer else {
        return false;
    };
    let Some(start) = estimate.start_time(at) else {
        return false;
    };
    match expected {
        Some(expected) => start + MOVE_MARGIN <= expected,
        None => start <= at + MOVE_MARGIN,
    }
}

/// The longest message kept per candidate.
pub(super) const CANDIDATE_MESSAGE_CHARS: usize = 256;

/// The candidates' answers as status.placement shows them.
pub(super) fn candidate_answers(seen: &[Seen], at: SystemTime) -> Vec<CandidateAnswer> {
    seen.iter()
        .take(crate::crd::MAX_CANDIDATES)
        .map(|s| {
            let (answer, start, message) = match &s.answer {
                Answer::Estimate(estimate) => {
                    let answer = match estimate.start {
                        batchbridge_core::estimate::EstimatedStart::Now => Estimate::StartsNow,
                        batchbridge_core::estimate::EstimatedStart::Later => Estimate::StartsLater,
                        _ => Estimate::StartsAt,
                    };
                    let words: Vec<String> = [
                        estimate.queue.as_ref().map(|q| format!("partition {q}")),
                        estimate.nodes.as_ref().map(|n| format!("nodes {n}")),
                        estimate.detail.clone(),
                    ]
                    .into_iter()
                    .flatten()
                    .collect();
                    let message = (!words.is_empty()).then(|| words.join("; "));
                    (answer, estimate.start_time(at), message)
                }
                Answer::NoEstimate => (Estimate::NoEstimate, None, None),
                Answer::Skipped(Skipped::Unreachable(why)) => {
                    (Estimate::Unreachable, None, Some(why.clone()))
                }
                Answer::Skipped(Skipped::Unsuitable(why)) => {
                    (Estimate::Unsuitable, None, Some(why.clone()))
                }
                Answer::Skipped(Skipped::NoAnswer(why)) => {
                    (Estimate::NoAnswer, None, Some(why.clone()))
                }
                Answer::Skipped(other) => (Estimate::NoAnswer, None, Some(format!("{other:?}"))),
                other => (Estimate::NoAnswer, None, Some(format!("{other:?}"))),
            };
            CandidateAnswer {
                cluster: s.candidate.clone(),
                answer,
                start_time: start.map(time),
                message: message.map(|m| m.chars().take(CANDIDATE_MESSAGE_CHARS).collect()),
            }
        })
        .collect()
}

/// Why each candidate was skipped, in one line.
pub(super) fn skipped(seen: &[Seen]) -> String {
    if seen.is_empty() {
        return "no BatchCluster matches spec.placement".to_owned();
    }
    seen.iter()
        .map(|s| match &s.answer {
            Answer::Skipped(
                Skipped::Unreachable(why) | Skipped::NoAnswer(why) | Skipped::Unsuitable(why),
            ) => format!("{}: {why}", s.candidate),
            _ => format!("{}: answered", s.candidate),
        })
        .collect::<Vec<_>>()
        .join("; ")
}
