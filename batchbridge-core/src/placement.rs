//! Choosing among candidate clusters for a job: [`Placer`] asks each candidate backend
//! [`estimate_start`](crate::BatchBackend::estimate_start) (answers cached per candidate and
//! resource shape for a while, so placing many similar jobs costs one question per
//! candidate and shape per interval) and [`choose`], a pure decision over what they said,
//! picks one.
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
//! let chosen = choose(Policy::EarliestStart, &seen, now);
//! assert_eq!(chosen.map(|s| s.candidate.as_str()), Some("pool"));
//! let chosen = choose(Policy::Ordered, &seen, now);
//! assert_eq!(chosen.map(|s| s.candidate.as_str()), Some("pool"));
//! ```

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::backend::BatchBackend;
use crate::error::{Error, ErrorKind};
use crate::estimate::StartEstimate;
use crate::spec::JobSpec;

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

/// Chooses among `seen`, in candidate order, by `policy`; `now` is when the estimates were
/// taken. Skipped candidates are never chosen: `None` when every one was.
pub fn choose(policy: Policy, seen: &[Seen], now: SystemTime) -> Option<&Seen> {
    let answered = seen
        .iter()
        .filter(|s| !matches!(s.answer, Answer::Skipped(_)));
    match policy {
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
    }
}

/// How long a [`Placer`] keeps an answer unless told otherwise.
pub const DEFAULT_ESTIMATE_TTL: Duration = Duration::from_secs(30);

/// A backend a job may be placed on, under the name placement reports it by.
#[derive(Clone)]
pub struct Candidate {
    /// The name (a BatchCluster's, a cluster in a config file).
    pub name: String,
    /// Its backend.
    pub backend: Arc<dyn BatchBackend>,
}

impl std::fmt::Debug for Candidate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Candidate")
            .field("name", &self.name)
            .field("backend", &self.backend.name())
            .finish()
    }
}

impl Candidate {
    /// `backend`, known as `name`.
    pub fn new(name: impl Into<String>, backend: Arc<dyn BatchBackend>) -> Self {
        Self {
            name: name.into(),
            backend,
        }
    }
}

/// What [`Placer::place`] decided, and what it saw.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Placement {
    /// The chosen candidate; `None` when every one was skipped.
    pub chosen: Option<String>,
    /// Every candidate's answer, in candidate order.
    pub seen: Vec<Seen>,
    /// When the decision was made (the time `Now` estimates mean).
    pub at: SystemTime,
}

/// Asks candidates when a job would start and chooses one by a [`Policy`], keeping each
/// answer for a while per candidate and resource shape (the spec's resources, queue, array
/// size, passthrough options and container: what the answer depends on). Concurrent placements of the
/// same shape wait for one question instead of asking each.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use batchbridge_core::placement::{Candidate, Placer, Policy};
/// use batchbridge_core::{JobKey, JobSpec, LocalBackend};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> batchbridge_core::Result<()> {
/// let dir = tempfile::tempdir()?;
/// let here = Candidate::new("here", Arc::new(LocalBackend::new(dir.path())?));
/// let placer = Placer::new(Duration::from_secs(30));
/// let spec = JobSpec::new(JobKey::new("k")?, "n", "true");
/// let placement = placer.place(Policy::EarliestStart, &[here], &spec).await;
/// assert_eq!(placement.chosen.as_deref(), Some("here"));
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Placer {
    ttl: Duration,
    /// Per (candidate, shape): the last answer and when it was taken. The async lock makes
    /// concurrent placements of one shape share a question.
    answers: Mutex<HashMap<(String, String), Arc<AnswerSlot>>>,
    questions: Arc<AtomicU64>,
}

impl Placer {
    /// A placer keeping answers for `ttl`.
    pub fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            answers: Mutex::default(),
            questions: Arc::default(),
        }
    }

    /// How many times it asked a backend so far (answers taken from its cache not counted).
    pub fn questions(&self) -> u64 {
        self.questions.load(Ordering::Relaxed)
    }

    /// Asks every candidate (concurrently, or from the cache) when `spec` would start there
    /// and chooses by `policy`.
    pub async fn place(
        &self,
        policy: Policy,
        candidates: &[Candidate],
        spec: &JobSpec,
    ) -> Placement {
        let shape = shape_of(spec);
        let mut questions = tokio::task::JoinSet::new();
        for (order, candidate) in candidates.iter().enumerate() {
            let slot = self.slot(&candidate.name, &shape);
            let backend = Arc::clone(&candidate.backend);
            let (spec, ttl, asked) = (spec.clone(), self.ttl, Arc::clone(&self.questions));
            questions.spawn(async move {
                (
                    order,
                    answer(&slot, backend.as_ref(), &spec, ttl, &asked).await,
                )
            });
        }
        let mut answers = vec![None; candidates.len()];
        while let Some(joined) = questions.join_next().await {
            if let Ok((order, answer)) = joined {
                answers[order] = Some(answer);
            }
        }
        let seen: Vec<Seen> = candidates
            .iter()
            .zip(answers)
            .map(|(candidate, answer)| {
                let answer = answer.unwrap_or_else(|| {
                    Answer::Skipped(Skipped::NoAnswer("its backend panicked".into()))
                });
                Seen::new(candidate.name.clone(), answer)
            })
            .collect();
        let at = SystemTime::now();
        Placement {
            chosen: choose(policy, &seen, at).map(|s| s.candidate.clone()),
            seen,
            at,
        }
    }

    /// The cache slot of `candidate` and `shape`; drops the slots whose answer expired.
    fn slot(&self, candidate: &str, shape: &str) -> Arc<AnswerSlot> {
        let mut answers = self.answers.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        // A slot someone holds (a question on its way) stays.
        answers.retain(|_, slot| {
            Arc::strong_count(slot) > 1
                || slot
                    .try_lock()
                    .is_ok_and(|held| held.as_ref().is_some_and(|(at, _)| now - *at < self.ttl))
        });
        Arc::clone(
            answers
                .entry((candidate.to_owned(), shape.to_owned()))
                .or_default(),
        )
    }
}

/// One candidate's last answer for one shape, and when it was taken.
type AnswerSlot = tokio::sync::Mutex<Option<(Instant, Answer)>>;

/// The answer in `slot` if younger than `ttl`, else a new one from `backend` (counted in
/// `asked`). Holding the slot's lock while asking makes concurrent callers share it.
async fn answer(
    slot: &AnswerSlot,
    backend: &dyn BatchBackend,
    spec: &JobSpec,
    ttl: Duration,
    asked: &AtomicU64,
) -> Answer {
    let mut slot = slot.lock().await;
    if let Some((at, answer)) = slot.as_ref()
        && at.elapsed() < ttl
    {
        return answer.clone();
    }
    asked.fetch_add(1, Ordering::Relaxed);
    let answer = match backend.estimate_start(spec).await {
        Ok(estimate) => Answer::Estimate(estimate),
        Err(err) => answer_to_failure(&err),
    };
    *slot = Some((Instant::now(), answer.clone()));
    answer
}

impl Default for Placer {
    fn default() -> Self {
        Self::new(DEFAULT_ESTIMATE_TTL)
    }
}

/// What a failed estimate says about the candidate.
fn answer_to_failure(err: &Error) -> Answer {
    match err.kind() {
        ErrorKind::Unsupported => Answer::NoEstimate,
        ErrorKind::Unreachable
        | ErrorKind::HostKeyMismatch
        | ErrorKind::AuthenticationFailed
        | ErrorKind::ConnectionLost => Answer::Skipped(Skipped::Unreachable(err.to_string())),
        ErrorKind::InvalidInput | ErrorKind::Rejected | ErrorKind::PermissionDenied => {
            Answer::Skipped(Skipped::Unsuitable(err.to_string()))
        }
        _ => Answer::Skipped(Skipped::NoAnswer(err.to_string())),
    }
}

/// What an estimate depends on, as a cache key: what the scheduler is asked about, and
/// the container, which a backend without a runtime refuses.
fn shape_of(spec: &JobSpec) -> String {
    let shape = (
        &spec.resources,
        &spec.queue,
        spec.array.map(|array| array.count),
        &spec.passthrough,
        &spec.container,
    );
    serde_json::to_string(&shape).expect("a spec's resources serialize")
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
                choose(policy, &seen, now).map(|s| s.candidate.as_str()),
                expected,
                "{name}"
            );
        }
    }

    fn estimating(answer: fn() -> crate::Result<StartEstimate>) -> Arc<dyn BatchBackend> {
        let mut backend = crate::backend::MockBatchBackend::new();
        backend.expect_estimate_start().returning(move |_| answer());
        backend.expect_name().return_const("mock".to_owned());
        Arc::new(backend)
    }

    #[tokio::test(start_paused = true)]
    async fn placing_many_jobs_of_one_shape_asks_each_candidate_once_per_ttl() {
        let candidates = [
            Candidate::new(
                "full",
                estimating(|| Ok(StartEstimate::new(EstimatedStart::Later))),
            ),
            Candidate::new(
                "down",
                estimating(|| Err(Error::new(ErrorKind::Unreachable, "connection refused"))),
            ),
            Candidate::new(
                "idle",
                estimating(|| Ok(StartEstimate::new(EstimatedStart::Now))),
            ),
        ];
        let placer = Placer::new(Duration::from_secs(30));
        let spec = |n: u32, cpus: u32| {
            let mut spec = JobSpec::new(crate::JobKey::new(format!("k{n}")).unwrap(), "n", "true");
            spec.resources.cpus = Some(cpus);
            spec
        };
        for n in 0..100 {
            let placement = placer
                .place(Policy::EarliestStart, &candidates, &spec(n, 1))
                .await;
            assert_eq!(placement.chosen.as_deref(), Some("idle"));
            assert!(matches!(
                placement.seen[1].answer,
                Answer::Skipped(Skipped::Unreachable(_))
            ));
        }
        assert_eq!(
            placer.questions(),
            3,
            "one question per candidate and shape"
        );
        placer
            .place(Policy::EarliestStart, &candidates, &spec(0, 4))
            .await;
        assert_eq!(placer.questions(), 6, "a new shape asks again");
        let mut boxed = spec(0, 4);
        boxed.container = Some(crate::spec::Container::new("docker://alpine"));
        placer
            .place(Policy::EarliestStart, &candidates, &boxed)
            .await;
        assert_eq!(
            placer.questions(),
            9,
            "a container may be refused: asked again"
        );
        tokio::time::advance(Duration::from_secs(31)).await;
        placer
            .place(Policy::EarliestStart, &candidates, &spec(0, 1))
            .await;
        assert_eq!(placer.questions(), 12, "an expired answer is asked again");
    }
}
