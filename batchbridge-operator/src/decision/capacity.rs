//! Room on a cluster: whether a job may begin an attempt now, or waits Pending with reason
//! SubmitLimit, in creation order, for jobs of its cluster to end.
//!
//! Two limits count. The BatchCluster's `spec.maxQueued`: at most that many of the
//! operator's jobs are active (submitted, queued, held, running, suspended) on it; a job
//! begins an attempt only when the active ones and the waiting ones created before it leave
//! room. And the scheduler's own submit limit, learnt when it refuses a submit: from then
//! on one job at a time, the first waiting one, asks (a probe), and only once a job of the
//! cluster ended since the refusal, the last probe was taken, or [`SUBMIT_AGAIN`] passed;
//! never one submit per held job per look. [`SubmitGate`] keeps what the scheduler said,
//! per cluster and in memory (an operator that restarts learns it again with one refusal);
//! [`Load`] is what the cluster's jobs show, counted from the BatchJobs themselves, so a
//! restart counts the same.

use std::time::SystemTime;

use super::SUBMIT_AGAIN;
use super::attempt::retry_wait;
use crate::crd::{BatchJobStatus, Phase};

/// Whether a job whose status is `status` takes room on its cluster: it has an attempt the
/// scheduler has, or may have (Submitted, its id not written yet), and not ended.
///
/// ```
/// use batchbridge_operator::crd::{BatchJobStatus, Phase};
/// use batchbridge_operator::decision::takes_room;
///
/// let at = |phase| BatchJobStatus { phase: Some(phase), ..BatchJobStatus::default() };
/// assert!(takes_room(&at(Phase::Submitted)));
/// assert!(!takes_room(&at(Phase::Pending)));
/// assert!(!takes_room(&at(Phase::Succeeded)));
/// ```
pub fn takes_room(status: &BatchJobStatus) -> bool {
    !status.phase.unwrap_or(Phase::Pending).spec_editable()
}

/// Whether a job whose status is `status` (spec.suspend `suspended`) waits to begin an
/// attempt at `now`: Pending and not suspended, or RetryPending with its backoff over.
pub fn waits_for_room(status: &BatchJobStatus, suspended: bool, now: SystemTime) -> bool {
    match status.phase.unwrap_or(Phase::Pending) {
        Phase::Pending => !suspended,
        Phase::RetryPending => !suspended && retry_wait(status, now).is_none(),
        _ => false,
    }
}

/// Whether a job may begin an attempt.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Capacity {
    /// It may.
    #[default]
    Free,
    /// It waits Pending, reason SubmitLimit, with this message.
    Full(String),
}

/// Where a job stands among the jobs of its cluster, as their statuses show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Load<'a> {
    /// The BatchCluster's name, for the message.
    pub cluster: &'a str,
    /// Its spec.maxQueued.
    pub max_queued: Option<u32>,
    /// How many of its jobs are active (the job itself is not: it is about to begin).
    pub active: u32,
    /// How many of its jobs wait to begin an attempt and were created before this one.
    pub ahead: u32,
    /// How many wait and were created after it.
    pub behind: u32,
}

/// What a cluster's scheduler said about its submit limit: kept per cluster from a
/// refusal for a submit limit until the jobs that waited for it are all submitted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SubmitGate {
    cap: Option<Cap>,
    /// The job (by uid) whose submit probes the limit now, and since when.
    probe: Option<(String, SystemTime)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Cap {
    /// The scheduler's words.
    message: String,
    /// How many jobs were active when it refused.
    active_then: u32,
    refused_at: SystemTime,
    /// Whether a submit was taken since.
    taken_since: bool,
}

/// How long a probe that never reported its end (its action lost) blocks the next one.
const PROBE_LOST: std::time::Duration = std::time::Duration::from_secs(120);

impl SubmitGate {
    /// Whether job `uid`, standing at `load`, may begin an attempt at `now`; when it may
    /// while the scheduler's limit is known, its submit is the cluster's one probe.
    ///
    /// ```
    /// use std::time::SystemTime;
    /// use batchbridge_operator::decision::{Capacity, Load, SubmitGate};
    ///
    /// let mut gate = SubmitGate::default();
    /// let load = Load { cluster: "hpc", max_queued: Some(10), active: 9, ahead: 0, behind: 5 };
    /// assert_eq!(gate.admit("a", &load, SystemTime::now()), Capacity::Free);
    /// let full = Load { ahead: 1, ..load };
    /// assert!(matches!(gate.admit("b", &full, SystemTime::now()), Capacity::Full(_)));
    /// ```
    pub fn admit(&mut self, uid: &str, load: &Load<'_>, now: SystemTime) -> Capacity {
        if let Some(max) = load.max_queued
            && load.active + load.ahead >= max
        {
            return Capacity::Full(format!(
                "BatchCluster {} has spec.maxQueued {max}: at most {max} of its jobs are \
                 queued or running at once; this one is submitted, in creation order, as \
                 they end",
                load.cluster
            ));
        }
        let Some(cap) = &self.cap else {
            return Capacity::Free;
        };
        let probing = self
            .probe
            .as_ref()
            .is_some_and(|(other, since)| other != uid && now < *since + PROBE_LOST);
        let room_seen = cap.taken_since
            || load.active < cap.active_then
            || now >= cap.refused_at + SUBMIT_AGAIN;
        if load.ahead > 0 || probing || !room_seen {
            return Capacity::Full(cap.message.clone());
        }
        if load.behind == 0 && cap.taken_since {
            // Nothing waits behind the last job the limit held: the next burst learns the
            // limit afresh.
            self.cap = None;
            self.probe = None;
        } else {
            self.probe = Some((uid.to_owned(), now));
        }
        Capacity::Free
    }

    /// Whether the scheduler's submit limit is known (a refusal since the jobs that waited
    /// for the last one were all submitted).
    pub fn knows_limit(&self) -> bool {
        self.cap.is_some()
    }

    /// The scheduler refused job `uid`'s submit for its submit limit, saying `message`,
    /// with `active` jobs of the cluster active.
    pub fn refused(&mut self, uid: &str, message: &str, active: u32, now: SystemTime) {
        self.end_probe(uid);
        self.cap = Some(Cap {
            message: message.to_owned(),
            active_then: active,
            refused_at: now,
            taken_since: false,
        });
    }

    /// The scheduler took job `uid`'s submit.
    pub fn taken(&mut self, uid: &str) {
        self.end_probe(uid);
        if let Some(cap) = &mut self.cap {
            cap.taken_since = true;
        }
    }

    /// Job `uid`'s submit ended without an answer about the limit (the cluster not reached,
    /// the connection broken, the submit refused for another reason).
    pub fn ended(&mut self, uid: &str) {
        self.end_probe(uid);
    }

    /// What a job other than the probe is told instead of submitting while the limit is
    /// known: the submits that were under way when the scheduler first refused one are not
    /// sent to be refused too.
    pub fn holds(&self, uid: &str) -> Option<&str> {
        let cap = self.cap.as_ref()?;
        let probe = self.probe.as_ref().map(|(probe, _)| probe.as_str());
        (probe != Some(uid)).then_some(cap.message.as_str())
    }

    fn end_probe(&mut self, uid: &str) {
        if self.probe.as_ref().is_some_and(|(probe, _)| probe == uid) {
            self.probe = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn at(seconds: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + seconds)
    }

    fn load(max_queued: Option<u32>, active: u32, ahead: u32, behind: u32) -> Load<'static> {
        Load {
            cluster: "hpc",
            max_queued,
            active,
            ahead,
            behind,
        }
    }

    const LIMIT: &str = "QOSMaxSubmitJobPerUserLimit";

    fn capped(active_then: u32) -> SubmitGate {
        let mut gate = SubmitGate::default();
        gate.refused("earlier", LIMIT, active_then, at(0));
        gate
    }

    fn free(capacity: &Capacity) -> bool {
        *capacity == Capacity::Free
    }

    /// (what, gate, job, load, seconds after the refusal, admitted)
    #[test]
    fn admission() {
        let cases: Vec<(&str, SubmitGate, &str, Load<'_>, u64, bool)> = vec![
            (
                "no limit: free",
                SubmitGate::default(),
                "a",
                load(None, 500, 90, 9),
                1,
                true,
            ),
            (
                "room for it",
                SubmitGate::default(),
                "a",
                load(Some(10), 8, 1, 0),
                1,
                true,
            ),
            (
                "the room is taken by older waiting jobs",
                SubmitGate::default(),
                "a",
                load(Some(10), 8, 2, 0),
                1,
                false,
            ),
            (
                "no room",
                SubmitGate::default(),
                "a",
                load(Some(10), 10, 0, 0),
                1,
                false,
            ),
            (
                "more active than allowed (maxQueued lowered)",
                SubmitGate::default(),
                "a",
                load(Some(10), 12, 0, 0),
                1,
                false,
            ),
            (
                "maxQueued 0 holds every job",
                SubmitGate::default(),
                "a",
                load(Some(0), 0, 0, 0),
                1,
                false,
            ),
            (
                "scheduler limit: the first waiting job waits for a job to end",
                capped(10),
                "a",
                load(None, 10, 0, 5),
                1,
                false,
            ),
            (
                "scheduler limit: a job ended, the first waiting job probes",
                capped(10),
                "a",
                load(None, 9, 0, 5),
                1,
                true,
            ),
            (
                "scheduler limit: only the first waiting job probes",
                capped(10),
                "b",
                load(None, 9, 1, 4),
                1,
                false,
            ),
            (
                "scheduler limit: asked again after a while without an end",
                capped(10),
                "a",
                load(None, 10, 0, 5),
                30,
                true,
            ),
            (
                "scheduler limit and maxQueued: the lower holds",
                capped(10),
                "a",
                load(Some(5), 5, 0, 5),
                60,
                false,
            ),
        ];
        for (what, mut gate, uid, load, after, admitted) in cases {
            assert_eq!(free(&gate.admit(uid, &load, at(after))), admitted, "{what}");
        }
    }

    #[test]
    fn one_probe_at_a_time() {
        let mut gate = capped(10);
        assert!(free(&gate.admit("a", &load(None, 9, 0, 5), at(1))));
        // While a's submit is under way, the next job waits, even if it came first in a
        // stale view.
        assert_eq!(
            gate.admit("b", &load(None, 9, 0, 4), at(2)),
            Capacity::Full(LIMIT.into())
        );
        assert_eq!(gate.holds("b"), Some(LIMIT));
        assert_eq!(gate.holds("a"), None, "the probe itself submits");
        gate.taken("a");
        // Taken: the next one probes at once, without waiting for an end.
        assert!(free(&gate.admit("b", &load(None, 10, 0, 4), at(3))));
        gate.refused("b", LIMIT, 11, at(4));
        assert!(!free(&gate.admit("c", &load(None, 11, 0, 3), at(5))));
        // A probe whose action never reported is not waited for forever.
        let mut lost = capped(10);
        assert!(free(&lost.admit("a", &load(None, 9, 0, 5), at(1))));
        assert!(!free(&lost.admit("b", &load(None, 9, 0, 4), at(60))));
        assert!(free(&lost.admit("b", &load(None, 9, 0, 4), at(200))));
    }

    #[test]
    fn the_limit_is_forgotten_once_nothing_waits_for_it() {
        let mut gate = capped(10);
        assert!(free(&gate.admit("a", &load(None, 9, 0, 1), at(1))));
        gate.taken("a");
        assert!(free(&gate.admit("b", &load(None, 10, 0, 0), at(2))));
        assert_eq!(gate.holds("c"), None, "no limit known any more");
        assert!(free(&gate.admit("c", &load(None, 11, 0, 0), at(3))));
    }
}
