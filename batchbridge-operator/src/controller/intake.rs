//! The order in which BatchJobs are reconciled: a job woken because something happened to
//! it on its cluster goes before the jobs the watch brought.
//!
//! kube-runtime's controller takes its reconcile requests first in, first out. In a burst
//! of thousands of new BatchJobs the API server sets the pace (about ten requests per new
//! job), and a job the poller saw finish would wait behind every new job for its status:
//! minutes, at 10,000 (docs/PERFORMANCE.md, finding 3). So the watch does not feed the
//! controller directly. The intake keeps two lanes: a woken job is handed to the
//! controller at once; a watched one only while fewer than [`WATCHED_AT_ONCE`] watched
//! jobs are being reconciled, so that the controller never holds a backlog for a woken job
//! to wait behind. Requeues the reconciler asks for go to the controller as before.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt};
use kube::runtime::controller::{Action as Requeue, Error as ControllerError};
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

/// A watched job handed over this long ago no longer counts as being reconciled. Every
/// request handed to the controller comes back as a result, but a place lost to a result
/// that did not (the controller merges and holds requests out of sight) would shrink the
/// window for good.
const FORGOTTEN_AFTER: Duration = Duration::from_secs(60);

/// Why a job is waiting to be reconciled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// The poller saw its scheduler state change, or its action ended.
    Woken,
    /// The watch brought a new job or a change to one (often the operator's own write).
    Watched,
}

impl Lane {
    /// The `lane` label of `batchbridge_reconciles_waiting`: `woken` or `watched`.
    pub fn label(self) -> &'static str {
        match self {
            Self::Woken => "woken",
            Self::Watched => "watched",
        }
    }
}

/// The jobs waiting to be reconciled, in two lanes, each job at most once.
#[derive(Debug, Default)]
pub struct Intake {
    woken: VecDeque<ObjectRef<BatchJob>>,
    watched: VecDeque<ObjectRef<BatchJob>>,
    /// Each waiting job's lane; a job moved to the woken lane leaves a stale entry in the
    /// watched one, skipped when it comes up.
    waiting: HashMap<ObjectRef<BatchJob>, Lane>,
    /// The watched jobs handed over and not yet reconciled, with when they were.
    reconciling: HashMap<ObjectRef<BatchJob>, Instant>,
}

impl Intake {
    /// Adds `job` to `lane`, unless it already waits there or in the woken lane; a watched
    /// job that is woken moves to the woken lane.
    pub fn push(&mut self, job: ObjectRef<BatchJob>, lane: Lane) {
        if matches!(
            (self.waiting.get(&job), lane),
            (Some(Lane::Woken), _) | (Some(Lane::Watched), Lane::Watched)
        ) {
            return;
        }
        self.waiting.insert(job.clone(), lane);
        match lane {
            Lane::Woken => self.woken.push_back(job),
            Lane::Watched => self.watched.push_back(job),
        }
    }

    /// The next job to hand to the controller: the first woken one, or else the first
    /// watched one if the window has room.
    pub fn next(&mut self, now: Instant) -> Option<ObjectRef<BatchJob>> {
        while let Some(job) = self.woken.pop_front() {
            if self.waiting.get(&job) == Some(&Lane::Woken) {
                self.waiting.remove(&job);
                return Some(job);
            }
        }
        self.reconciling
            .retain(|_, since| now.duration_since(*since) < FORGOTTEN_AFTER);
        while self.reconciling.len() < WATCHED_AT_ONCE {
            let job = self.watched.pop_front()?;
            if self.waiting.get(&job) == Some(&Lane::Watched) {
                self.waiting.remove(&job);
                self.reconciling.insert(job.clone(), now);
                return Some(job);
            }
        }
        None
    }

    /// Records that a reconcile of `job` ended, making room in the window.
    pub fn reconciled(&mut self, job: &ObjectRef<BatchJob>) {
        self.reconciling.remove(job);
    }

    /// How many jobs wait in `lane`.
    pub fn waiting(&self, lane: Lane) -> usize {
        // The woken lane holds no stale entries: a woken job leaves it only when handed over.
        match lane {
            Lane::Woken => self.woken.len(),
            Lane::Watched => self.waiting.len() - self.woken.len(),
        }
    }
}

/// The reconcile requests for the controller: the jobs from `watch` (whose store it
/// drives) and from `woken`, in the intake's order; `reconciled` brings the jobs whose
/// reconcile ended (see [`reconciled_job`]). How many wait goes to `metrics`.
pub fn requests(
    watch: impl Stream<Item = Result<BatchJob, watcher::Error>> + Send + 'static,
    woken: mpsc::UnboundedReceiver<ObjectRef<BatchJob>>,
    reconciled: mpsc::UnboundedReceiver<ObjectRef<BatchJob>>,
    metrics: Arc<Metrics>,
) -> impl Stream<Item = ObjectRef<BatchJob>> + Send + 'static {
    let state = (Intake::default(), watch.boxed(), woken, reconciled);
    futures::stream::unfold(state, move |mut state| {
        let metrics = Arc::clone(&metrics);
        async move {
            let (intake, watch, woken, reconciled) = &mut state;
            loop {
                let next = intake.next(Instant::now());
                for lane in [Lane::Woken, Lane::Watched] {
                    metrics.reconciles_waiting(lane.label(), intake.waiting(lane));
                }
                if let Some(job) = next {
                    return Some((job, state));
                }
                tokio::select! {
                    biased;
                    Some(job) = reconciled.recv() => intake.reconciled(&job),
                    Some(job) = woken.recv() => intake.push(job, Lane::Woken),
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
    result: &Result<(ObjectRef<BatchJob>, Requeue), ControllerError<E, Q>>,
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
    fn woken_jobs_go_first_and_each_job_waits_once() {
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
        let (ended, reconciled) = mpsc::unbounded_channel();
        let metrics = Arc::new(Metrics::new());
        let mut requests = Box::pin(requests(watch, woken, reconciled, Arc::clone(&metrics)));
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
        wake.send(job("finished")).expect("the intake listens");
        assert_eq!(next().await, "finished");
        ended.send(job("w0")).expect("the intake listens");
        assert_eq!(next().await, format!("w{WATCHED_AT_ONCE}"));
        drop(watch_events);
        assert!(requests.next().await.is_none(), "the watch ended");
    }

    #[test]
    fn results_name_their_job() {
        type Result = std::result::Result<
            (ObjectRef<BatchJob>, Requeue),
            ControllerError<std::io::Error, std::io::Error>,
        >;
        let erased = || Box::new(job("a").erase());
        let cases: Vec<(Result, Option<ObjectRef<BatchJob>>)> = vec![
            (Ok((job("a"), Requeue::await_change())), Some(job("a"))),
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
