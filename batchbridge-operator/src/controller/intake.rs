//! The order in which BatchJobs are reconciled: a job something happened to on its cluster
//! goes first, then a job whose submit ended, then the jobs the watch brought.
//!
//! kube-runtime's controller takes its reconcile requests first in, first out. In a burst
//! of thousands of new BatchJobs the API server sets the pace (about ten requests per new
//! job), and a job the poller saw finish would wait behind every new job for its status:
//! minutes, at 10,000 (docs/PERFORMANCE.md, finding 3). So nothing feeds the controller
//! directly. The intake keeps three lanes:
//!
//! - [`Lane::Woken`]: the poller saw the job change, or its output was collected. Handed to
//!   the controller at once: these are what a user waits to see.
//! - [`Lane::Acted`]: its submit or placement ended. A burst of new jobs brings one per job,
//!   each a status write and an Event; handed over only while fewer than
//!   [`ACTED_AT_ONCE`] are being reconciled, so that they wait here, not in the
//!   controller ahead of a job that ended meanwhile (they did: a job that ended during 1000
//!   submits waited up to 9 s for its status, docs/PERFORMANCE.md).
//! - [`Lane::Watched`]: the watch brought a new job or a change to one; handed over only
//!   while fewer than [`WATCHED_AT_ONCE`] are being reconciled.
//!
//! Requeues the reconciler asks for go to the controller as before.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt};
use kube::runtime::controller::{Action, Error as ControllerError};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use tokio::sync::mpsc;

use crate::crd::BatchJob;
use crate::metrics::Metrics;

/// How many BatchJobs are reconciled at once.
pub const RECONCILES_AT_ONCE: u16 = 64;

/// How many jobs the watch brought may be reconciled at once: a quarter of the reconcile
/// workers. Woken jobs come at the pace jobs change state on their clusters, which is the
/// pace the watched ones are let through; the other three quarters keep a worker free for
/// them (at 10,000 jobs, with half, they queued for seconds).
pub const WATCHED_AT_ONCE: usize = (RECONCILES_AT_ONCE / 4) as usize;

/// How many jobs whose submit or placement ended may be reconciled at once: another
/// quarter of the workers, which the submits' own pace (a few at once per cluster) rarely
/// fills; half of them stay free for woken jobs.
pub const ACTED_AT_ONCE: usize = (RECONCILES_AT_ONCE / 4) as usize;

/// A job handed over this long ago from a lane with a window no longer counts as being
/// reconciled. Every request handed to the controller comes back as a result, but a place
/// lost to a result that did not (the controller merges and holds requests out of sight)
/// would shrink the window for good.
const FORGOTTEN_AFTER: Duration = Duration::from_secs(60);

/// Why a job is waiting to be reconciled, most urgent first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Lane {
    /// The poller saw its scheduler state change, or its output was collected.
    Woken,
    /// Its submit or placement ended.
    Acted,
    /// The watch brought a new job or a change to one (often the operator's own write).
    Watched,
}

impl Lane {
    /// Every lane, most urgent first.
    pub const ALL: [Lane; 3] = [Lane::Woken, Lane::Acted, Lane::Watched];

    /// The `lane` label of `batchbridge_reconciles_waiting`: `woken`, `acted` or `watched`.
    pub fn label(self) -> &'static str {
        match self {
            Self::Woken => "woken",
            Self::Acted => "acted",
            Self::Watched => "watched",
        }
    }

    /// How many of the lane's jobs may be reconciled at once; `None`: no limit.
    fn window(self) -> Option<usize> {
        match self {
            Self::Woken => None,
            Self::Acted => Some(ACTED_AT_ONCE),
            Self::Watched => Some(WATCHED_AT_ONCE),
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// The jobs waiting to be reconciled, in three lanes, each job at most once.
#[derive(Debug, Default)]
pub struct Intake {
    /// Per lane, the jobs in the order they came; a job moved to a more urgent lane leaves a
    /// stale entry behind, skipped when it comes up.
    lanes: [VecDeque<ObjectRef<BatchJob>>; 3],
    /// Each waiting job's lane.
    waiting: HashMap<ObjectRef<BatchJob>, Lane>,
    /// How many jobs wait in each lane (stale entries left out).
    counts: [usize; 3],
    /// The jobs handed over from a lane with a window and not yet reconciled: their lane
    /// and when they were.
    reconciling: HashMap<ObjectRef<BatchJob>, (Lane, Instant)>,
}

impl Intake {
    /// Adds `job` to `lane`, unless it already waits there or in a more urgent lane; a
    /// waiting job pushed to a more urgent lane moves there.
    pub fn push(&mut self, job: ObjectRef<BatchJob>, lane: Lane) {
        if let Some(waits) = self.waiting.get(&job) {
            if *waits <= lane {
                return;
            }
            self.counts[waits.index()] -= 1;
        }
        self.waiting.insert(job.clone(), lane);
        self.counts[lane.index()] += 1;
        self.lanes[lane.index()].push_back(job);
    }

    /// The next job to hand to the controller: from the most urgent lane that has one and
    /// whose window has room.
    pub fn next(&mut self, now: Instant) -> Option<ObjectRef<BatchJob>> {
        self.reconciling
            .retain(|_, (_, since)| now.duration_since(*since) < FORGOTTEN_AFTER);
        for lane in Lane::ALL {
            if let Some(window) = lane.window() {
                let busy = self
                    .reconciling
                    .values()
                    .filter(|(l, _)| *l == lane)
                    .count();
                if busy >= window {
                    continue;
                }
            }
            while let Some(job) = self.lanes[lane.index()].pop_front() {
                if self.waiting.get(&job) == Some(&lane) {
                    self.waiting.remove(&job);
                    self.counts[lane.index()] -= 1;
                    if lane.window().is_some() {
                        self.reconciling.insert(job.clone(), (lane, now));
                    }
                    return Some(job);
                }
            }
        }
        None
    }

    /// Records that a reconcile of `job` ended, making room in its lane's window.
    pub fn reconciled(&mut self, job: &ObjectRef<BatchJob>) {
        self.reconciling.remove(job);
    }

    /// How many jobs wait in `lane`.
    pub fn waiting(&self, lane: Lane) -> usize {
        self.counts[lane.index()]
    }
}

/// The reconcile requests for the controller: the jobs from `watch` (whose store it
/// drives), from `woken` (pollers, collected outputs) and from `acted` (ended submits and
/// placements), in the intake's order; `reconciled` brings the jobs whose reconcile ended
/// (see [`reconciled_job`]). How many wait goes to `metrics`.
pub fn requests(
    watch: impl Stream<Item = Result<BatchJob, watcher::Error>> + Send + 'static,
    woken: mpsc::UnboundedReceiver<ObjectRef<BatchJob>>,
    acted: mpsc::UnboundedReceiver<ObjectRef<BatchJob>>,
    reconciled: mpsc::UnboundedReceiver<ObjectRef<BatchJob>>,
    metrics: Arc<Metrics>,
) -> impl Stream<Item = ObjectRef<BatchJob>> + Send + 'static {
    let state = (Intake::default(), watch.boxed(), woken, acted, reconciled);
    futures::stream::unfold(state, move |mut state| {
        let metrics = Arc::clone(&metrics);
        async move {
            let (intake, watch, woken, acted, reconciled) = &mut state;
            loop {
                let next = intake.next(Instant::now());
                for lane in Lane::ALL {
                    metrics.reconciles_waiting(lane.label(), intake.waiting(lane));
                }
                if let Some(job) = next {
                    return Some((job, state));
                }
                tokio::select! {
                    biased;
                    Some(job) = reconciled.recv() => intake.reconciled(&job),
                    Some(job) = woken.recv() => intake.push(job, Lane::Woken),
                    Some(job) = acted.recv() => intake.push(job, Lane::Acted),
                    event = watch.next() => match event {
                        Some(Ok(job)) => intake.push(ObjectRef::from(&job), Lane::Watched),
                        Some(Err(err)) => tracing::warn!(error = %err, "watching BatchJobs"),
                        None => return None,
                    },
                }
            }
        }
    })
}

/// The job a controller result is about, if it names one.
pub fn reconciled_job<E, Q>(
    result: &Result<(ObjectRef<BatchJob>, Action), ControllerError<E, Q>>,
) -> Option<ObjectRef<BatchJob>> {
    match result {
        Ok((job, _)) => Some(job.clone()),
        Err(ControllerError::ObjectNotFound(job) | ControllerError::ReconcilerFailed(_, job)) => {
            let named = ObjectRef::new(&job.name);
            Some(match &job.namespace {
                Some(namespace) => named.within(namespace),
                None => named,
            })
        }
        Err(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(name: &str) -> ObjectRef<BatchJob> {
        ObjectRef::new(name).within("research")
    }

    /// What the intake hands over, in order, until it has nothing more.
    fn drain(intake: &mut Intake, now: Instant) -> Vec<String> {
        std::iter::from_fn(|| intake.next(now))
            .map(|job| job.name)
            .collect()
    }

    #[test]
    fn the_most_urgent_lane_goes_first_and_each_job_waits_once() {
        let now = Instant::now();
        type Pushes<'a> = &'a [(&'a str, Lane)];
        // (pushes in order, what is handed over)
        let cases: &[(Pushes<'_>, &[&str])] = &[
            (&[], &[]),
            (
                &[
                    ("a", Lane::Watched),
                    ("b", Lane::Watched),
                    ("c", Lane::Woken),
                ],
                &["c", "a", "b"],
            ),
            (&[("a", Lane::Watched), ("a", Lane::Watched)], &["a"]),
            (&[("a", Lane::Woken), ("a", Lane::Woken)], &["a"]),
            (&[("a", Lane::Woken), ("a", Lane::Watched)], &["a"]),
            (
                &[
                    ("a", Lane::Watched),
                    ("b", Lane::Watched),
                    ("a", Lane::Woken),
                ],
                &["a", "b"],
            ),
            (
                &[("a", Lane::Woken), ("b", Lane::Woken), ("c", Lane::Watched)],
                &["a", "b", "c"],
            ),
            (
                &[("a", Lane::Watched), ("b", Lane::Acted), ("c", Lane::Woken)],
                &["c", "b", "a"],
            ),
            (&[("a", Lane::Acted), ("a", Lane::Watched)], &["a"]),
            (&[("a", Lane::Woken), ("a", Lane::Acted)], &["a"]),
            (
                &[("a", Lane::Acted), ("b", Lane::Acted), ("a", Lane::Woken)],
                &["a", "b"],
            ),
        ];
        for (pushes, expected) in cases {
            let mut intake = Intake::default();
            for (name, lane) in *pushes {
                intake.push(job(name), *lane);
            }
            assert_eq!(drain(&mut intake, now), *expected, "pushes {pushes:?}");
        }
    }

    #[test]
    fn watched_jobs_wait_for_room_and_woken_ones_do_not() {
        let now = Instant::now();
        let mut intake = Intake::default();
        let names: Vec<String> = (0..WATCHED_AT_ONCE + 2).map(|i| format!("w{i}")).collect();
        for name in &names {
            intake.push(job(name), Lane::Watched);
        }
        assert_eq!(intake.waiting(Lane::Watched), WATCHED_AT_ONCE + 2);
        assert_eq!(drain(&mut intake, now), names[..WATCHED_AT_ONCE]);
        assert_eq!(intake.waiting(Lane::Watched), 2);

        intake.push(job("finished"), Lane::Woken);
        // A waiting watched job that is woken changes lanes.
        intake.push(job(&names[WATCHED_AT_ONCE + 1]), Lane::Woken);
        assert_eq!(
            (intake.waiting(Lane::Woken), intake.waiting(Lane::Watched)),
            (2, 1)
        );
        assert_eq!(
            drain(&mut intake, now),
            ["finished".to_owned(), names[WATCHED_AT_ONCE + 1].clone()]
        );
        assert_eq!(intake.waiting(Lane::Woken), 0);
        // The woken job's reconcile ending makes no room: it took none.
        intake.reconciled(&job("finished"));
        assert_eq!(drain(&mut intake, now), Vec::<String>::new());

        intake.reconciled(&job("w0"));
        assert_eq!(drain(&mut intake, now), [names[WATCHED_AT_ONCE].clone()]);
        // A job handed over may come back while it is being reconciled.
        intake.push(job("w1"), Lane::Woken);
        assert_eq!(drain(&mut intake, now), ["w1"]);
    }

    #[test]
    fn acted_jobs_wait_for_room_in_their_own_window() {
        let now = Instant::now();
        let mut intake = Intake::default();
        let acted: Vec<String> = (0..ACTED_AT_ONCE + 1).map(|i| format!("a{i}")).collect();
        for name in &acted {
            intake.push(job(name), Lane::Acted);
        }
        intake.push(job("new"), Lane::Watched);
        // Both windows fill side by side; the acted lane's full window keeps its last job.
        let handed = drain(&mut intake, now);
        assert_eq!(handed[..ACTED_AT_ONCE], acted[..ACTED_AT_ONCE]);
        assert_eq!(handed[ACTED_AT_ONCE..], ["new"]);
        assert_eq!(
            (intake.waiting(Lane::Acted), intake.waiting(Lane::Watched)),
            (1, 0)
        );
        intake.push(job("ended"), Lane::Woken);
        assert_eq!(
            drain(&mut intake, now),
            ["ended"],
            "no window for woken jobs"
        );
        // A watched job's end makes no room in the acted window.
        intake.reconciled(&job("new"));
        assert_eq!(drain(&mut intake, now), Vec::<String>::new());
        intake.reconciled(&job("a0"));
        assert_eq!(drain(&mut intake, now), [acted[ACTED_AT_ONCE].clone()]);
    }

    #[test]
    fn a_place_whose_result_never_came_is_freed_in_time() {
        let start = Instant::now();
        let mut intake = Intake::default();
        for i in 0..=WATCHED_AT_ONCE {
            intake.push(job(&format!("w{i}")), Lane::Watched);
        }
        assert_eq!(drain(&mut intake, start).len(), WATCHED_AT_ONCE);
        let soon = start + FORGOTTEN_AFTER - Duration::from_secs(1);
        assert_eq!(drain(&mut intake, soon), Vec::<String>::new());
        let later = start + FORGOTTEN_AFTER;
        assert_eq!(drain(&mut intake, later), [format!("w{WATCHED_AT_ONCE}")]);
    }

    #[tokio::test(start_paused = true)]
    async fn the_requests_let_woken_jobs_past_a_full_window() {
        let (watch_events, watch) = mpsc::unbounded_channel();
        let watch = futures::stream::unfold(watch, |mut watch| async move {
            watch.recv().await.map(|event| (event, watch))
        });
        let (wake, woken) = mpsc::unbounded_channel();
        let (act, acted) = mpsc::unbounded_channel();
        let (ended, reconciled) = mpsc::unbounded_channel();
        let metrics = Arc::new(Metrics::new());
        let mut requests = Box::pin(requests(
            watch,
            woken,
            acted,
            reconciled,
            Arc::clone(&metrics),
        ));
        for i in 0..=WATCHED_AT_ONCE {
            let job: BatchJob = serde_json::from_value(serde_json::json!({
                "apiVersion": "batchbridge.dev/v1alpha1",
                "kind": "BatchJob",
                "metadata": {"name": format!("w{i}"), "namespace": "research"},
                "spec": {"clusterRef": {"name": "hpc"}, "script": "true"},
            }))
            .expect("a valid BatchJob");
            watch_events.send(Ok(job)).expect("the intake watches");
        }
        let mut next = async || requests.next().await.expect("a request").name;
        for i in 0..WATCHED_AT_ONCE {
            assert_eq!(next().await, format!("w{i}"));
        }
        assert!(
            tokio::time::timeout(Duration::from_secs(60), next())
                .await
                .is_err(),
            "the window is full"
        );
        assert!(
            metrics
                .encode()
                .contains(r#"batchbridge_reconciles_waiting{lane="watched"} 1"#)
        );
        act.send(job("accepted")).expect("the intake listens");
        wake.send(job("finished")).expect("the intake listens");
        assert_eq!(next().await, "finished", "woken before acted");
        assert_eq!(next().await, "accepted", "its own window has room");
        ended.send(job("w0")).expect("the intake listens");
        assert_eq!(next().await, format!("w{WATCHED_AT_ONCE}"));
        drop(watch_events);
        assert!(requests.next().await.is_none(), "the watch ended");
    }

    #[test]
    fn results_name_their_job() {
        type Result = std::result::Result<
            (ObjectRef<BatchJob>, Action),
            ControllerError<std::io::Error, std::io::Error>,
        >;
        let erased = || Box::new(job("a").erase());
        let cases: Vec<(Result, Option<ObjectRef<BatchJob>>)> = vec![
            (Ok((job("a"), Action::await_change())), Some(job("a"))),
            (
                Err(ControllerError::ObjectNotFound(erased())),
                Some(job("a")),
            ),
            (
                Err(ControllerError::ReconcilerFailed(
                    std::io::Error::other("refused"),
                    erased(),
                )),
                Some(job("a")),
            ),
            (
                Err(ControllerError::QueueError(std::io::Error::other("watch"))),
                None,
            ),
        ];
        for (result, expected) in cases {
            assert_eq!(reconciled_job(&result), expected, "{result:?}");
        }
    }
}
