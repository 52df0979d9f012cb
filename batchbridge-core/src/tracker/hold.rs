//! The jobs a [`Tracker`](super::Tracker) holds locally instead of submitting them: those
//! the scheduler refused with its submit limit
//! ([`Refusal::SubmitLimit`](crate::Refusal::SubmitLimit)) and those beyond
//! the tracker's own [`max_queued`](super::TrackerBuilder::max_queued), in submission order,
//! each submitted when one of the tracker's jobs in the scheduler ends.
//!
//! Everything here is pure bookkeeping under the tracker's lock; the tracker makes the
//! submits.

use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt;
use std::sync::Arc;

use crate::backend::JobId;
use crate::error::Error;
use crate::spec::{JobKey, JobSpec};
use crate::state::{JobState, JobStatus};

/// The [`JobStatus::native_state`] of a job a tracker holds locally: it is in no scheduler
/// yet, so the word is batchbridge's.
pub const NATIVE_STATE_HELD_LOCALLY: &str = "held locally";

/// Why a tracker holds a job locally instead of submitting it.
///
/// ```
/// use batchbridge_core::JobState;
/// use batchbridge_core::tracker::HeldLocally;
///
/// let held = HeldLocally::MaxQueued { limit: 10 };
/// let status = held.status();
/// assert_eq!(status.state, JobState::Queued);
/// assert_eq!(
///     status.reason.as_deref(),
///     Some("held locally: max_queued: 10 jobs already in the scheduler")
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum HeldLocally {
    /// The scheduler refused the submit with its limit on queued jobs
    /// ([`Refusal::SubmitLimit`](crate::Refusal::SubmitLimit)); `message` is what it said.
    SubmitLimit {
        /// The scheduler's refusal, as the backend reported it.
        message: String,
    },
    /// The tracker's own [`max_queued`](super::TrackerBuilder::max_queued): `limit` of its
    /// jobs are in the scheduler already.
    MaxQueued {
        /// The tracker's `max_queued`.
        limit: usize,
    },
    /// The submit's answer was lost
    /// ([`SubmitOutcomeUnknown`](crate::ErrorKind::SubmitOutcomeUnknown)): the job may be
    /// in the scheduler. The tracker submits its key again at its next round, which
    /// returns the job the first submit made, if it made one, and never makes a second.
    OutcomeUnknown {
        /// What the backend said of the lost submit.
        message: String,
    },
    /// Jobs given before it are held because their submits' outcomes are not known
    /// ([`OutcomeUnknown`](Self::OutcomeUnknown)), `key`'s the last of them: it waits for
    /// their next round, so as not to pass them. It was never submitted itself.
    Behind {
        /// The key of the job it waits behind.
        key: JobKey,
    },
}

impl HeldLocally {
    /// The status a held job shows: [`Queued`](JobState::Queued), with native state
    /// [`NATIVE_STATE_HELD_LOCALLY`] and this as its reason.
    pub fn status(&self) -> JobStatus {
        JobStatus::new(JobState::Queued, NATIVE_STATE_HELD_LOCALLY).with_reason(self.to_string())
    }
}

impl fmt::Display for HeldLocally {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::SubmitLimit { message } => {
                write!(f, "held locally: the scheduler's submit limit: {message}")
            }
            Self::MaxQueued { limit } => write!(
                f,
                "held locally: max_queued: {limit} jobs already in the scheduler"
            ),
            Self::OutcomeUnknown { message } => write!(
                f,
                "held locally: the submit's outcome is not known, its key is submitted again: {message}"
            ),
            Self::Behind { key } => write!(
                f,
                "held locally: not submitted yet, behind job {key}, held when its submit's \
                 answer was lost (its key is submitted again first)"
            ),
        }
    }
}

/// What [`Tracker::submit`](super::Tracker::submit) did with a job.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Submitted {
    /// It is in the scheduler as this job, followed by the tracker.
    Job(JobId),
    /// The tracker holds it, behind the jobs it held before; it is submitted when room
    /// frees, or submitted again at the next round when its outcome is not known
    /// ([`Tracker::wait_submitted`](super::Tracker::wait_submitted) waits for that).
    Held(HeldLocally),
}

/// What became of a key given to the tracker, for the waits on it.
#[derive(Debug, Clone)]
pub(super) enum Fate {
    /// In the scheduler as this job.
    Submitted(JobId),
    /// Still held, for this reason.
    Held(HeldLocally),
    /// Its submit, once room freed, failed for good.
    Refused(Arc<Error>),
}

/// Held jobs taken to be submitted, first in line first.
#[derive(Debug)]
pub(super) struct HeldBatch {
    pub(super) jobs: Vec<JobSpec>,
    /// The first was refused by the scheduler's own limit: submit them one after another
    /// and stop at the first refusal. Submits in flight at once can pass a limit together
    /// (PBS checks `max_queued` when a job is queued but counts the job when it is
    /// committed), and a later job could get in while an earlier one is refused.
    pub(super) one_by_one: bool,
}

/// A tracker's held jobs and its jobs in the scheduler.
#[derive(Debug, Default)]
pub(super) struct Holds {
    /// Held jobs, oldest first: the order they are submitted in.
    queue: VecDeque<(JobSpec, HeldLocally)>,
    /// The jobs the tracker submitted that it has not seen end.
    in_scheduler: HashSet<JobId>,
    /// Every key given to the tracker whose job was submitted or refused.
    settled: HashMap<JobKey, Result<JobId, Arc<Error>>>,
    max_queued: Option<usize>,
    /// How many of the tracker's jobs ended since held jobs were last taken to submit: about
    /// the room the scheduler's own limit has made.
    freed: usize,
}

impl Holds {
    pub(super) fn new(max_queued: Option<usize>) -> Self {
        Self {
            max_queued,
            ..Self::default()
        }
    }

    /// Whether a new job may go to the scheduler now, `picked` others of its batch going
    /// before it: not while jobs are held (it would pass them), nor with `max_queued` of
    /// the tracker's jobs in the scheduler. `Err` is why it is held instead.
    pub(super) fn room_for_new(&self, picked: usize) -> Result<(), HeldLocally> {
        match self.queue.back() {
            Some((spec, HeldLocally::OutcomeUnknown { .. })) => Err(HeldLocally::Behind {
                key: spec.key.clone(),
            }),
            Some((_, why)) => Err(why.clone()),
            None if self.room() > picked => Ok(()),
            None => Err(self.max_queued_held()),
        }
    }

    /// How many more jobs the tracker's `max_queued` lets into the scheduler.
    fn room(&self) -> usize {
        self.max_queued.map_or(usize::MAX, |limit| {
            limit.saturating_sub(self.in_scheduler.len())
        })
    }

    fn max_queued_held(&self) -> HeldLocally {
        HeldLocally::MaxQueued {
            limit: self.max_queued.unwrap_or_default(),
        }
    }

    /// Holds `spec` behind the others.
    pub(super) fn hold(&mut self, spec: JobSpec, why: HeldLocally) {
        self.queue.push_back((spec, why));
    }

    /// Holds `held`, in its order, ahead of the others: jobs given before any of those.
    pub(super) fn hold_ahead(&mut self, held: Vec<(JobSpec, HeldLocally)>) {
        for job in held.into_iter().rev() {
            self.queue.push_front(job);
        }
    }

    /// The held jobs to submit next, first in line first: as many as
    /// `max_queued` has room for and, when the first was refused by the scheduler's own
    /// limit (whose size the tracker does not know), as many of the tracker's jobs as ended
    /// since the last batch, or one to try.
    pub(super) fn next_batch(&mut self) -> HeldBatch {
        let at_scheduler_limit = matches!(
            self.queue.front(),
            Some((_, HeldLocally::SubmitLimit { .. }))
        );
        let scheduler_room = if at_scheduler_limit {
            self.freed.max(1)
        } else {
            usize::MAX
        };
        self.freed = 0;
        HeldBatch {
            jobs: self
                .queue
                .iter()
                .take(self.room().min(scheduler_room))
                .map(|(spec, _)| spec.clone())
                .collect(),
            one_by_one: at_scheduler_limit,
        }
    }

    /// The held job of `key` was refused again with the submit limit, or its submit's
    /// outcome is not known again: it keeps its place, with the latest words.
    pub(super) fn still_limited(&mut self, key: &JobKey, why: HeldLocally) {
        if let Some((_, reason)) = self.queue.iter_mut().find(|(spec, _)| &spec.key == key) {
            *reason = why;
        }
    }

    /// `key`'s job is in the scheduler as `id` (submitted now, held or not).
    pub(super) fn submitted(&mut self, key: &JobKey, id: JobId) {
        self.remove_held(key);
        self.in_scheduler.insert(id.clone());
        self.settled.insert(key.clone(), Ok(id));
    }

    /// The held job of `key` was refused for good when its turn came.
    pub(super) fn refused(&mut self, key: &JobKey, err: Arc<Error>) {
        self.remove_held(key);
        self.settled.insert(key.clone(), Err(err));
    }

    fn remove_held(&mut self, key: &JobKey) {
        // Batches are taken from the front: the key is almost always there.
        if let Some(at) = self.queue.iter().position(|(spec, _)| &spec.key == key) {
            self.queue.remove(at);
        }
    }

    /// Job `id` was seen in a terminal state: if it was one of the tracker's, it no longer
    /// takes room, and `true` says room freed.
    pub(super) fn ended(&mut self, id: &JobId) -> bool {
        let freed = self.in_scheduler.remove(id);
        self.freed += usize::from(freed);
        freed
    }

    /// Whether job `id` is one the tracker submitted that has not ended.
    pub(super) fn is_in_scheduler(&self, id: &JobId) -> bool {
        self.in_scheduler.contains(id)
    }

    /// How many of the tracker's jobs are in the scheduler.
    pub(super) fn in_scheduler(&self) -> usize {
        self.in_scheduler.len()
    }

    /// Whether any job is held.
    pub(super) fn any_held(&self) -> bool {
        !self.queue.is_empty()
    }

    /// The held jobs' keys and reasons, in the order they will be submitted.
    pub(super) fn held(&self) -> Vec<(JobKey, HeldLocally)> {
        self.queue
            .iter()
            .map(|(spec, why)| (spec.key.clone(), why.clone()))
            .collect()
    }

    /// What became of `key`, if the tracker was given it.
    pub(super) fn fate(&self, key: &JobKey) -> Option<Fate> {
        if let Some(settled) = self.settled.get(key) {
            return Some(match settled {
                Ok(id) => Fate::Submitted(id.clone()),
                Err(err) => Fate::Refused(Arc::clone(err)),
            });
        }
        self.queue
            .iter()
            .find(|(spec, _)| &spec.key == key)
            .map(|(_, why)| Fate::Held(why.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(key: &str) -> JobSpec {
        JobSpec::new(JobKey::new(key).unwrap(), key, "true")
    }

    fn limit() -> HeldLocally {
        HeldLocally::SubmitLimit {
            message: "QOSMaxSubmitJobPerUserLimit".into(),
        }
    }

    /// Steps on a tracker's holds, each with what a new submit may do after it and which
    /// held jobs go in the next batch.
    #[test]
    fn holds_keep_submission_order_and_max_queued() {
        enum Step {
            Submitted(&'static str, &'static str),
            Hold(&'static str, HeldLocally),
            Ended(&'static str, bool),
            StillLimited(&'static str),
        }
        use Step::*;
        let max_two = HeldLocally::MaxQueued { limit: 2 };
        let steps: Vec<(Step, Result<(), HeldLocally>, &[&str])> = vec![
            (Submitted("a", "1"), Ok(()), &[]),
            (Submitted("b", "2"), Err(max_two.clone()), &[]),
            // A third job waits for room: held, and first in line, but no room yet.
            (Hold("c", max_two.clone()), Err(max_two.clone()), &[]),
            // A job the tracker did not submit frees nothing.
            (Ended("99", false), Err(max_two.clone()), &[]),
            (Ended("1", true), Err(max_two.clone()), &["c"]),
            // The scheduler refused c: it stays first, and new jobs go behind it.
            (StillLimited("c"), Err(limit()), &["c"]),
            (Hold("d", limit()), Err(limit()), &["c"]),
            (Submitted("c", "3"), Err(limit()), &[]),
            (Ended("2", true), Err(limit()), &["d"]),
            (Submitted("d", "4"), Err(max_two.clone()), &[]),
            (Ended("3", true), Ok(()), &[]),
            // e's answer was lost: a new job waits behind it, and says so, not e's words.
            (Hold("e", lost()), Err(behind("e")), &["e"]),
            (Hold("f", behind("e")), Err(behind("e")), &["e"]),
            (Submitted("e", "5"), Err(behind("e")), &[]),
            (Ended("4", true), Err(behind("e")), &["f"]),
            (Submitted("f", "6"), Err(max_two.clone()), &[]),
        ];
        let mut holds = Holds::new(Some(2));
        for (n, (step, room, batch)) in steps.into_iter().enumerate() {
            match step {
                Submitted(key, id) => holds.submitted(&JobKey::new(key).unwrap(), id.into()),
                Hold(key, why) => holds.hold(spec(key), why),
                Ended(id, freed) => assert_eq!(holds.ended(&id.into()), freed, "step {n}"),
                StillLimited(key) => holds.still_limited(&JobKey::new(key).unwrap(), limit()),
            }
            assert_eq!(holds.room_for_new(0), room, "step {n}");
            let next = holds.next_batch();
            assert_eq!(keys(&next.jobs), batch, "step {n}");
            let at_limit = holds
                .held()
                .first()
                .is_some_and(|(_, why)| matches!(why, HeldLocally::SubmitLimit { .. }));
            assert_eq!(next.one_by_one, at_limit, "step {n}");
        }
        assert!(!holds.any_held());
        assert_eq!(holds.in_scheduler(), 2);
    }

    fn lost() -> HeldLocally {
        HeldLocally::OutcomeUnknown {
            message: "connection lost".into(),
        }
    }

    fn behind(key: &str) -> HeldLocally {
        HeldLocally::Behind {
            key: JobKey::new(key).unwrap(),
        }
    }

    fn keys(specs: &[JobSpec]) -> Vec<String> {
        specs.iter().map(|spec| spec.key.to_string()).collect()
    }

    /// A batch of new jobs fills `max_queued` and no more; held jobs behind the scheduler's
    /// limit go as many at a time as the tracker's jobs ended, or one to try.
    #[test]
    fn batches_take_the_room_there_is() {
        let max_three = HeldLocally::MaxQueued { limit: 3 };
        let mut holds = Holds::new(Some(3));
        holds.submitted(&JobKey::new("a").unwrap(), "1".into());
        let rooms: Vec<_> = (0..3).map(|picked| holds.room_for_new(picked)).collect();
        assert_eq!(rooms, [Ok(()), Ok(()), Err(max_three)]);

        let mut holds = Holds::new(None);
        assert_eq!(holds.room_for_new(10_000), Ok(()));
        for (n, key) in ["a", "b", "c", "d"].into_iter().enumerate() {
            holds.submitted(&JobKey::new(key).unwrap(), n.to_string().into());
        }
        for key in ["e", "f", "g", "h", "i"] {
            holds.hold(spec(key), limit());
        }
        let first = holds.next_batch();
        assert_eq!(keys(&first.jobs), ["e"], "nothing ended: one to try");
        assert!(first.one_by_one, "the scheduler's limit was met");
        for id in ["0", "1", "2"] {
            holds.ended(&id.into());
        }
        assert_eq!(keys(&holds.next_batch().jobs), ["e", "f", "g"]);
        holds.submitted(&JobKey::new("f").unwrap(), "5".into());
        assert_eq!(keys(&holds.next_batch().jobs), ["e"], "f left the line");
        assert_eq!(
            keys(
                &holds
                    .held()
                    .iter()
                    .map(|(k, _)| spec(k.as_str()))
                    .collect::<Vec<_>>()
            ),
            ["e", "g", "h", "i"]
        );
    }

    #[test]
    fn a_key_is_held_then_submitted_or_refused() {
        let mut holds = Holds::new(None);
        let (a, b) = (JobKey::new("a").unwrap(), JobKey::new("b").unwrap());
        assert!(holds.fate(&a).is_none());
        holds.hold(spec("a"), limit());
        holds.hold(spec("b"), limit());
        assert!(matches!(holds.fate(&b), Some(Fate::Held(why)) if why == limit()));
        assert_eq!(holds.held().len(), 2);
        holds.submitted(&a, "7".into());
        assert!(matches!(holds.fate(&a), Some(Fate::Submitted(id)) if id.as_str() == "7"));
        assert!(holds.is_in_scheduler(&"7".into()));
        holds.refused(&b, Arc::new(Error::invalid_input("no such partition")));
        assert!(matches!(holds.fate(&b), Some(Fate::Refused(_))));
        assert!(holds.held().is_empty());
    }
}
