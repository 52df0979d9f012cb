//! Choosing among candidate clusters for a job: [`choose`], a pure decision over what each
//! candidate said when asked [`estimate_start`](crate::BatchBackend::estimate_start).
//!
//! ```
//! use std::time::{Duration, SystemTime};
//! use batchbridge_core::estimate::{EstimatedStart, StartEstimate};
//! use batchbridge_core::placement::{choose, Answer, Policy, Seen, Skipped};
//!
//! let now = SystemTime::now();
//! let seen = vec![
//!     Seen::new("campus", Answer::Estimate(StartEstimate::new(EstimatedStart::At(now + Duration::from_secs(3600))))),
//!     Seen::new("national", Answer::Skipped(Skipped::Unreachable("connection refused".into()))),
//!     Seen::new("pool", Answer::Estimate(StartEstimate::new(EstimatedStart::Now))),
//! ];
//! let choice = choose(Policy::EarliestStart, &seen, now);
//! assert_eq!(choice.chosen.as_deref(), Some("pool"));
//! assert_eq!(choose(Policy::Ordered, &seen, now).chosen.as_deref(), Some("pool"));
//! ```

use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use crate::estimate::StartEstimate;

/// How to choose among candidates.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub enum Policy {
    /// The candidate with the earliest estimated start; candidates that answered but
    /// cannot estimate come after every known time; ties go to the earlier candidate.
    #[default]
    EarliestStart,
    /// The first candidate, in the given order, where the job would start now; when none
    /// would, the first one that answered.
    Ordered,
}

/// Why a candidate was not considered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub enum Skipped {
    /// The cluster could not be reached (the connection failed), with the error.
    Unreachable(String),
    /// The cluster was reached but its scheduler did not answer, with the error.
    NoAnswer(String),
    /// The candidate cannot run this job at all (a capability it lacks), with why.
    Unsuitable(String),
}

/// What one candidate said.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub enum Answer {
    /// Its estimate.
    Estimate(StartEstimate),
    /// It answered but cannot estimate (its backend does not support estimates).
    NoEstimate,
    /// It was skipped.
    Skipped(Skipped),
}

/// One candidate and its answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Seen {
    /// The candidate's name.
    pub candidate: String,
    /// What it said.
    pub answer: Answer,
}

impl Seen {
    /// `candidate` answered `answer`.
    pub fn new(candidate: impl Into<String>, answer: Answer) -> Self {
        Self {
            candidate: candidate.into(),
            answer,
        }
    }
}

/// The outcome of [`choose`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Choice {
    /// The chosen candidate; `None` when every one was skipped.
    pub chosen: Option<String>,
}

/// Chooses among `seen`, in candidate order, by `policy`; `now` is when the estimates were
/// taken. Skipped candidates are never chosen.
pub fn choose(policy: Policy, seen: &[Seen], now: SystemTime) -> Choice {
    let answered = seen
        .iter()
        .filter(|s| !matches!(s.answer, Answer::Skipped(_)));
    let chosen = match policy {
        Policy::EarliestStart => answered
            .enumerate()
            .min_by_key(|(order, s)| {
                let start = match &s.answer {
                    Answer::Estimate(estimate) => estimate.start_time(now),
                    _ => None,
                };
                // Known times first (None sorts before Some, hence the flag), then order.
                (start.is_none(), start, *order)
            })
            .map(|(_, s)| s),
        Policy::Ordered => {
            let starts_now = |s: &&Seen| matches!(&s.answer, Answer::Estimate(e) if e.start_time(now) == Some(now));
            answered
                .clone()
                .find(starts_now)
                .or(answered.clone().next())
        }
    };
    Choice {
        chosen: chosen.map(|s| s.candidate.clone()),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::estimate::EstimatedStart;

    fn at(now: SystemTime, secs: u64) -> Answer {
        Answer::Estimate(StartEstimate::new(EstimatedStart::At(
            now + Duration::from_secs(secs),
        )))
    }

    #[test]
    fn choices_by_policy() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let later = || Answer::Estimate(StartEstimate::new(EstimatedStart::Later));
        let starts_now = || Answer::Estimate(StartEstimate::new(EstimatedStart::Now));
        let down = || Answer::Skipped(Skipped::Unreachable("refused".into()));
        let mute = || Answer::Skipped(Skipped::NoAnswer("slurmctld down".into()));
        #[rustfmt::skip]
        let cases: Vec<(&str, Policy, Vec<Answer>, Option<&str>)> = vec![
            ("earliest known time wins", Policy::EarliestStart, vec![at(now, 600), at(now, 60)], Some("c1")),
            ("now beats any time", Policy::EarliestStart, vec![at(now, 1), starts_now()], Some("c1")),
            ("a time in the past is now", Policy::EarliestStart, vec![starts_now(), Answer::Estimate(StartEstimate::new(EstimatedStart::At(now - Duration::from_secs(5))))], Some("c0")),
            ("a tie goes to the earlier candidate", Policy::EarliestStart, vec![at(now, 60), at(now, 60)], Some("c0")),
            ("a known time beats later", Policy::EarliestStart, vec![later(), at(now, 86_400)], Some("c1")),
            ("a known time beats no estimate", Policy::EarliestStart, vec![Answer::NoEstimate, at(now, 86_400)], Some("c1")),
            ("no times: the first that answered", Policy::EarliestStart, vec![down(), later(), Answer::NoEstimate], Some("c1")),
            ("unreachable is never chosen", Policy::EarliestStart, vec![down(), at(now, 600)], Some("c1")),
            ("a mute scheduler is never chosen", Policy::EarliestStart, vec![mute(), later()], Some("c1")),
            ("all skipped: none", Policy::EarliestStart, vec![down(), mute()], None),
            ("no candidates: none", Policy::EarliestStart, vec![], None),
            ("ordered: the first starting now", Policy::Ordered, vec![at(now, 60), starts_now(), starts_now()], Some("c1")),
            ("ordered: none starts now, the first that answered", Policy::Ordered, vec![down(), at(now, 6000), at(now, 60)], Some("c1")),
            ("ordered: falls back past the unreachable", Policy::Ordered, vec![down(), mute(), Answer::NoEstimate], Some("c2")),
            ("ordered: all skipped", Policy::Ordered, vec![down()], None),
        ];
        for (name, policy, answers, expected) in cases {
            let seen: Vec<Seen> = answers
                .into_iter()
                .enumerate()
                .map(|(i, answer)| Seen::new(format!("c{i}"), answer))
                .collect();
            assert_eq!(
                choose(policy, &seen, now).chosen.as_deref(),
                expected,
                "{name}"
            );
        }
    }
}
