//! The Events a status change is worth: what `kubectl describe` shows a user of a job's
//! life, decided from the status before and after a step.

use kube::runtime::events::EventType;

use crate::crd::{BatchJobStatus, MoveOutcome, Phase, PlacementStatus};
use crate::reason::{ConditionType, Reason};
use crate::status::{condition, holds};

/// An Event to publish about a BatchJob.
#[derive(Debug, Clone, PartialEq)]
pub struct Notice {
    /// Normal, or Warning for what a user should look at.
    pub type_: EventType,
    /// The Event's reason: a phase, or one of [`Reason`]'s.
    pub reason: String,
    /// What happened, for a person.
    pub note: String,
    /// The Event's action. The operator's event recorder folds Events of the same type,
    /// reason and action into one series that keeps its first note, so each attempt's
    /// `Submitted` has an action of its own (`SubmitAttempt2`): one Event per attempt,
    /// naming its own job id.
    pub action: String,
}

/// The Events a status change is worth: a new phase, a new job id, a cluster problem or its
/// end. Not news, since every new job would get one: a cluster found ready the first time,
/// a submitted job found queued (its `Submitted` Event says so already), and a queued job
/// found running.
pub fn transitions(current: &BatchJobStatus, next: &BatchJobStatus) -> Vec<Notice> {
    let mut events = Vec::new();
    let notice = |type_, reason: &str, note: String, action: &str| Notice {
        type_,
        reason: reason.to_owned(),
        note,
        action: action.to_owned(),
    };
    let ready = |s: &BatchJobStatus| {
        condition(&s.conditions, ConditionType::ClusterReady)
            .map(|c| (c.status.clone(), c.reason.clone()))
    };
    let (was, is) = (ready(current), ready(next));
    if was != is
        && let Some(c) = condition(&next.conditions, ConditionType::ClusterReady)
        && let Some(holds) = holds(&next.conditions, ConditionType::ClusterReady)
        && (was.is_some() || !holds)
    {
        events.push(notice(
            event_type(holds),
            &c.reason,
            c.message.clone(),
            "Reconcile",
        ));
    }
    if current.cluster != next.cluster
        && let (Some(cluster), Some(placement)) = (&next.cluster, &next.placement)
        && next.moving.is_none()
        && current.moves.len() == next.moves.len()
    {
        events.push(notice(
            EventType::Normal,
            Reason::Placed.as_str(),
            format!("placed on {cluster}; {}", answers(placement)),
            // An attempt placed again after its submit never reached the first choice
            // gets an Event of its own, not a repeat folded into the first one's series.
            &format!("PlaceAttempt{}On{cluster}", next.attempts),
        ));
    }
    if current.moving.is_none()
        && let Some(moving) = &next.moving
    {
        let answers = next.placement.as_ref().map(answers).unwrap_or_default();
        events.push(notice(
            EventType::Normal,
            Reason::Moving.as_str(),
            format!(
                "cancelling job {} on {} to move it to {}, which promises an earlier start; {answers}",
                moving.job_id, moving.from, moving.to
            ),
            &format!("Move{}", next.moves.len() + 1),
        ));
    }
    for ended in next.moves.iter().skip(current.moves.len()) {
        let (type_, reason, note) = match ended.outcome {
            MoveOutcome::Moved => (
                EventType::Normal,
                Reason::Moved,
                format!(
                    "job {} was cancelled on {} before it started; submitting attempt {} to {}",
                    ended.job_id, ended.from, next.attempts, ended.to
                ),
            ),
            MoveOutcome::StartedFirst | MoveOutcome::Cancelling => (
                EventType::Warning,
                Reason::MoveAbandoned,
                format!(
                    "job {} started or ended on {} before the cancel took: it stays there and \
                     will not move again",
                    ended.job_id, ended.from
                ),
            ),
        };
        events.push(notice(type_, reason.as_str(), note, "Move"));
    }
    if current.job_id != next.job_id
        && let Some(id) = &next.job_id
    {
        let attempt = next.attempts;
        events.push(notice(
            EventType::Normal,
            Reason::Submitted.as_str(),
            format!("attempt {attempt} is job {id}"),
            &format!("SubmitAttempt{attempt}"),
        ));
    }
    if current.reason != Some(Reason::Suspending)
        && next.reason == Some(Reason::Suspending)
        && let Some(message) = &next.message
    {
        events.push(notice(
            EventType::Normal,
            Reason::Suspending.as_str(),
            message.clone(),
            // Each attempt suspended gets an Event of its own, not a repeat folded into
            // the first one's series.
            &format!("SuspendAttempt{}", next.attempts),
        ));
    }
    if current.phase != next.phase
        && let Some(phase) = next.phase
        && phase != Phase::Submitted
        && (phase, current.phase) != (Phase::Queued, Some(Phase::Submitted))
        && !starts_as_usual(current, phase)
    {
        let type_ = if matches!(phase, Phase::Failed | Phase::RetryPending | Phase::Unknown) {
            EventType::Warning
        } else {
            EventType::Normal
        };
        let note = next
            .message
            .clone()
            .or_else(|| next.reason.map(|reason| reason.to_string()))
            .unwrap_or_else(|| format!("{phase:?}"));
        // A job held back by spec.suspend or spec.after is Pending, but what a user reads
        // is why.
        let reason = match (phase, next.reason) {
            (
                Phase::Pending,
                Some(reason @ (Reason::Suspended | Reason::WaitingForDependencies)),
            ) => reason.to_string(),
            _ => format!("{phase:?}"),
        };
        events.push(notice(type_, &reason, note, "Reconcile"));
    }
    events
}

/// Whether `phase` is the job's ordinary start, out of the queue it was submitted to: not
/// news either, since nearly every job gets one (it would be an Event per job, a request
/// each at 10,000 jobs); the phase column and status.startTime show it. A start after
/// anything else (held, unknown, a requeue) still gets its Event.
fn starts_as_usual(current: &BatchJobStatus, phase: Phase) -> bool {
    phase == Phase::Running && matches!(current.phase, Some(Phase::Submitted | Phase::Queued))
}

/// What each candidate answered, in one line for an Event.
fn answers(placement: &PlacementStatus) -> String {
    placement
        .candidates
        .iter()
        .map(|c| {
            let when = c
                .start_time
                .as_ref()
                .map(|t| format!(" {}", t.0))
                .unwrap_or_default();
            let why = c
                .message
                .as_ref()
                .map(|m| format!(" ({m})"))
                .unwrap_or_default();
            format!("{}: {:?}{when}{why}", c.cluster, c.answer)
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Normal for a condition that holds, Warning for one that does not.
pub fn event_type(holds: bool) -> EventType {
    if holds {
        EventType::Normal
    } else {
        EventType::Warning
    }
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use super::*;
    use crate::status::set_condition;

    #[test]
    fn events_follow_what_changed() {
        let now = SystemTime::UNIX_EPOCH;
        let submitted = BatchJobStatus {
            phase: Some(Phase::Submitted),
            attempts: 1,
            ..BatchJobStatus::default()
        };
        let with_id = BatchJobStatus {
            job_id: Some("7".into()),
            ..submitted.clone()
        };
        let queued = BatchJobStatus {
            phase: Some(Phase::Queued),
            ..with_id.clone()
        };
        let running = BatchJobStatus {
            phase: Some(Phase::Running),
            ..with_id.clone()
        };
        let failed = BatchJobStatus {
            phase: Some(Phase::Failed),
            message: Some("exited with code 3".into()),
            ..running.clone()
        };
        let mut unreachable = running.clone();
        set_condition(
            &mut unreachable.conditions,
            ConditionType::ClusterReady,
            false,
            Reason::Unreachable,
            "connection refused",
            now,
        );
        let reasons = |a: &BatchJobStatus, b: &BatchJobStatus| -> Vec<(String, String)> {
            transitions(a, b)
                .into_iter()
                .map(|event| (event.reason, event.note))
                .collect()
        };
        assert_eq!(reasons(&BatchJobStatus::default(), &submitted), []);
        assert_eq!(
            reasons(&submitted, &with_id),
            [("Submitted".into(), "attempt 1 is job 7".into())]
        );
        assert_eq!(reasons(&with_id, &queued), []);
        assert_eq!(reasons(&queued, &running), []);
        assert_eq!(reasons(&with_id, &running), []);
        let held = BatchJobStatus {
            phase: Some(Phase::Held),
            ..with_id.clone()
        };
        assert_eq!(
            reasons(&held, &running),
            [("Running".into(), "Running".into())]
        );
        assert_eq!(
            reasons(&running, &queued),
            [("Queued".into(), "Queued".into())]
        );
        assert_eq!(
            reasons(&running, &failed),
            [("Failed".into(), "exited with code 3".into())]
        );
        assert_eq!(
            reasons(&running, &unreachable),
            [("Unreachable".into(), "connection refused".into())]
        );
        let mut ready = running.clone();
        set_condition(
            &mut ready.conditions,
            ConditionType::ClusterReady,
            true,
            Reason::Ready,
            "the cluster answered",
            now,
        );
        assert_eq!(
            reasons(&unreachable, &ready),
            [("Ready".into(), "the cluster answered".into())]
        );
        let mut first_ready = submitted.clone();
        first_ready.conditions = ready.conditions.clone();
        assert_eq!(reasons(&BatchJobStatus::default(), &first_ready), []);
        let first_unreachable = BatchJobStatus {
            conditions: unreachable.conditions.clone(),
            ..BatchJobStatus::default()
        };
        assert_eq!(
            reasons(&BatchJobStatus::default(), &first_unreachable),
            [("Unreachable".into(), "connection refused".into())]
        );
        assert_eq!(reasons(&running, &running), []);
    }
}
