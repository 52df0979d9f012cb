//! Following jobs on one backend until they end: [`Tracker`].
//!
//! A tracker asks its backend about every job it follows in one batched
//! [`status`](BatchBackend::status) call per interval, whatever the number of jobs and of
//! tasks waiting on them (the backends answer any number of ids in a constant number of
//! commands). When the backend pushes job events ([`BatchBackend::events`]), the tracker
//! also keeps one run of its [`EventSource`] going and merges what it says with what the
//! polls see, so that a job's start and end arrive within moments while the poll stays the
//! safety net (and may then be slow). Waits ([`Tracker::wait`]), change streams
//! ([`Tracker::changes`]) and output streams ([`Tracker::follow_output`]) all read what
//! those two sources saw; none of them asks the backend about states itself.
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use batchbridge_core::{BatchBackend, JobKey, JobSpec, JobState, LocalBackend, Tracker};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> batchbridge_core::Result<()> {
//! let dir = tempfile::tempdir()?;
//! let backend = Arc::new(LocalBackend::new(dir.path())?);
//! let tracker = Tracker::new(backend.clone(), Duration::from_millis(100))?;
//!
//! let mut ids = Vec::new();
//! for n in 0..3 {
//!     let spec = JobSpec::new(JobKey::new(format!("part-{n}"))?, "part", format!("echo {n}"));
//!     ids.push(backend.submit(&spec).await?);
//! }
//! // Three waits, one status call per interval between them.
//! for id in &ids {
//!     let status = tracker.wait(id, Duration::from_secs(30)).await?;
//!     assert_eq!(status.state, JobState::Succeeded);
//! }
//! # Ok(()) }
//! ```

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use backon::{BackoffBuilder, ExponentialBuilder};
use tokio::sync::{Notify, mpsc};
use tokio::task::JoinHandle;

use crate::backend::{BatchBackend, JobId, not_answered};
use crate::error::{Error, ErrorKind, Result};
use crate::events::{EventSource, JobEvent};
use crate::state::{JobState, JobStatus};

mod hold;
mod merge;
mod stage_out;

pub use hold::{HeldLocally, NATIVE_STATE_HELD_LOCALLY, Submitted};

use crate::error::Refusal;
use crate::spec::{JobKey, JobSpec};
use hold::{Fate, HeldBatch, Holds};
use merge::{Merge, TaskEvents, ended_by_events, merge};

/// The least time between the starts of two polls when newly followed jobs (or events that
/// cannot decide a job's state) ask for one early: a burst of them costs a poll per gap,
/// not one per job.
pub const EARLY_POLL_GAP: Duration = Duration::from_secs(1);

/// The first pause before a job whose end an event told (but could not decide) is polled
/// again, when the early poll still saw it active: schedulers take a moment to record the
/// end of a job their signal killed (PBS keeps it in `R`, then `E`, for a few seconds). The
/// pause doubles until the poll sees the end or it reaches the interval, where the regular
/// polls take over.
pub const END_RECHECK_MIN: Duration = Duration::from_secs(2);

/// The pause before an event source's run is opened again after the last one ended or
/// failed to open; it doubles up to [`EVENT_RETRY_MAX`] while runs keep failing, each pause
/// plus a random part of up to as much again.
pub const EVENT_RETRY_MIN: Duration = Duration::from_secs(1);

/// The most an event source's pause between runs grows to (before its random part).
pub const EVENT_RETRY_MAX: Duration = Duration::from_secs(60);

/// A run of an event source that lasted this long was healthy: when it ends, the next one
/// starts after [`EVENT_RETRY_MIN`] again. A source that ends at once after each start
/// (replaying what it read, say) is retried ever more slowly instead.
pub const EVENT_RUN_HEALTHY: Duration = Duration::from_secs(60);

/// Follows jobs on one backend with one batched status call per interval, and with the
/// backend's pushed events when it has them.
///
/// A job is followed from [`follow`](Self::follow) until [`forget`](Self::forget), and
/// while a [`wait`](Self::wait) (or an output stream) for it runs; a job followed for the
/// first time is polled at once (at most one such early poll per [`EARLY_POLL_GAP`],
/// however many jobs arrive, each asking only about the jobs that wanted it, and, while no
/// events come, about the jobs last seen running), then with all the others once per
/// interval. What each poll sees goes through the state machine's rules
/// ([`JobState::transition`](crate::JobState::transition)): a job seen in a terminal state
/// stays there, and an observation that would take it out is ignored (and logged).
///
/// A poll that fails with a temporary error changes no job and is retried at the next
/// interval; [`last_failure`](Self::last_failure) shows it until a poll succeeds. A poll
/// that fails with a permanent error ends the waits running then with that error.
///
/// # Events
///
/// When the backend has an [`EventSource`] and events are on (the default;
/// [`TrackerBuilder::events`] turns them off), the tracker keeps one run of it open,
/// opening it again after [`EVENT_RETRY_MIN`] to [`EVENT_RETRY_MAX`] (exponential, with
/// jitter) whenever it ends or fails to open; [`event_health`](Self::event_health) says
/// how that goes. Each event of a followed job is merged with what the polls saw:
///
/// - an event never takes a job out of a terminal state, and a repeat of an event already
///   seen for a task changes nothing (a new run may replay what the last one read);
/// - a task's start makes the job Running; an exit code from 0 to 128 ends a job without
///   an array: Succeeded for 0, else Failed with the cause
///   [`ExitCode`](crate::FailureCause::ExitCode) (or
///   [`NotStarted`](crate::FailureCause::NotStarted) for
///   [`NOT_STARTED_EXIT_CODE`](crate::wrapper::NOT_STARTED_EXIT_CODE)); a hold makes it
///   Held with its reason; a release or an eviction makes it Queued;
/// - a signal, a removal or an exit code above 128 decides nothing (a cancel, a wall-time
///   limit, the OOM killer and a preemption look alike from the job's side): the job is
///   polled early instead, so that the scheduler's own words set the cause, and again
///   after [`END_RECHECK_MIN`], doubling up to the interval, while the scheduler still
///   shows it active (it takes a moment to record a job its signal killed);
/// - an array goes Running at its first started task and is ended by events only when
///   every task's end is known (its task count from the last poll); its holds and
///   evictions are left to the poll;
/// - events of jobs the tracker does not follow are ignored.
///
/// A status taken from an event has the native state
/// [`NATIVE_STATE_EVENT`](crate::events::NATIVE_STATE_EVENT). The poll always applies (it
/// corrects what events missed or got wrong), except that nothing takes a job out of a
/// terminal state (after an event ended a job, a poll may still add its details, the
/// scheduler's word and its end time, in a change of the same state), and that a poll
/// whose call was in flight while an event changed the job is older than that event: its
/// status of the job is skipped unless it is an end, and the next poll applies.
///
/// # Submit limits
///
/// Jobs submitted through the tracker ([`submit`](Self::submit)) are followed as those
/// given to [`follow`](Self::follow) are; [`forget`](Self::forget) lets one go only once it
/// ended, since its end is what frees room. One the scheduler refuses with its limit on queued jobs
/// ([`Refusal::SubmitLimit`], temporary) is not failed but held
/// locally ([`Submitted::Held`]), and so is every later one, in submission order; so is one
/// that would put more than [`TrackerBuilder::max_queued`] of the tracker's jobs in the
/// scheduler, a limit a site does not enforce but a user wants to keep. When one of the
/// tracker's jobs ends, and at least once per interval while jobs are held (the limit may
/// count jobs the tracker does not know), the held jobs are submitted in order until the
/// scheduler refuses again or `max_queued` is reached. Held jobs show as
/// [`Queued`](JobState::Queued) with native state [`NATIVE_STATE_HELD_LOCALLY`] and the
/// reason ([`HeldLocally`]); [`held`](Self::held) lists them, and
/// [`wait_submitted`](Self::wait_submitted) waits for one by its key. Held jobs live in
/// the tracker's memory only, like everything it saw: after a restart, submit the same
/// specs again; [`BatchBackend::submit`] is idempotent on the key, so a job that had left
/// the hold is found, not submitted twice. Held jobs cost no status call: polls ask only
/// about jobs in the scheduler.
///
/// Dropping the tracker stops its polling, its event run and its output streams. It needs
/// a tokio runtime, and its waits use tokio's clock, so tests can run them with paused
/// time.
pub struct Tracker {
    shared: Arc<Shared>,
    tasks: Vec<JoinHandle<()>>,
    /// The runtime it was started in, for the tasks of its output streams.
    runtime: tokio::runtime::Handle,
}

/// The settings of a [`Tracker`] beyond its backend and poll interval, from
/// [`Tracker::builder`].
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use batchbridge_core::{LocalBackend, Tracker};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> batchbridge_core::Result<()> {
/// let dir = tempfile::tempdir()?;
/// let backend = Arc::new(LocalBackend::new(dir.path())?);
/// let tracker = Tracker::builder(backend, Duration::from_secs(5))
///     .events(false)
///     .on_poll(|poll| println!("asked about {} jobs in {:?}", poll.jobs, poll.duration))
///     .build()?;
/// assert!(!tracker.event_health().enabled);
/// # Ok(()) }
/// ```
pub struct TrackerBuilder {
    backend: Arc<dyn BatchBackend>,
    interval: Duration,
    events: bool,
    on_poll: PollHook,
    max_queued: Option<usize>,
}

/// What one poll did, handed to the hook of [`Tracker::with_poll_hook`] (for metrics and
/// health reports).
#[derive(Debug)]
#[non_exhaustive]
pub struct PollReport<'a> {
    /// How many jobs the status call asked about.
    pub jobs: usize,
    /// How long the status call took.
    pub duration: Duration,
    /// Why it failed, if it did.
    pub failure: Option<&'a Arc<Error>>,
}

/// How a tracker's pushed events are going, from [`Tracker::event_health`] (for metrics
/// and health reports).
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct EventHealth {
    /// Whether the tracker uses events at all: the backend has an event source and events
    /// are on. Everything else stays zero when not.
    pub enabled: bool,
    /// Whether a run of the source is open now.
    pub connected: bool,
    /// How many runs were opened.
    pub runs: u64,
    /// How many events arrived, for any job.
    pub received: u64,
    /// How many of them changed a followed job's status.
    pub applied: u64,
    /// How many of them asked for an early poll (an ending they cannot decide).
    pub early_polls: u64,
    /// Why the last run ended or failed to open; stays after a new run opens, so a source
    /// that keeps dropping shows why.
    pub last_failure: Option<Arc<Error>>,
}

/// Where a tracker learned of a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SeenBy {
    /// A status call (including one an event asked for early).
    Poll,
    /// A pushed event.
    Event,
}

/// One status change a tracker observed, from [`Changes::recv_change`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Change {
    /// The job.
    pub id: JobId,
    /// Its new status.
    pub status: JobStatus,
    /// Where the tracker learned of it.
    pub seen: SeenBy,
}

/// The status changes a tracker observes, from [`Tracker::changes`]: polled and pushed
/// ones in one stream, in the order the tracker recorded them.
#[derive(Debug)]
pub struct Changes {
    events: mpsc::UnboundedReceiver<Batch>,
    /// The rest of the last batch received.
    pending: VecDeque<Event>,
}

impl Changes {
    /// The next job whose status changed, with its new status; `None` once the tracker is
    /// dropped.
    pub async fn recv(&mut self) -> Option<(JobId, JobStatus)> {
        let change = self.recv_change().await?;
        Some((change.id, change.status))
    }

    /// [`recv`](Self::recv), saying where the change was seen.
    pub async fn recv_change(&mut self) -> Option<Change> {
        loop {
            while let Some(event) = self.pending.pop_front() {
                if let Event::Changed(change) = event {
                    return Some(*change);
                }
            }
            let batch = self.events.recv().await?;
            self.pending.extend(batch.iter().cloned());
        }
    }
}

type PollHook = Box<dyn Fn(&PollReport<'_>) + Send + Sync>;

/// What the tracker tells its subscribers.
#[derive(Debug, Clone)]
enum Event {
    Changed(Box<Change>),
    PollFailed(Arc<Error>),
}

/// The events of one poll's answer (or of one pushed event), sent to each subscriber as
/// one message: a subscriber wakes once per batch, however many jobs it changed.
type Batch = Arc<[Event]>;

struct Shared {
    backend: Arc<dyn BatchBackend>,
    interval: Duration,
    state: Mutex<State>,
    /// Polls the jobs in [`State::due`] at once, without waiting out the interval.
    poll_now: Notify,
    on_poll: PollHook,
    /// Taken by every submit, so held jobs go to the scheduler in order and none passes them.
    submitting: tokio::sync::Mutex<()>,
    /// One of the tracker's jobs in the scheduler ended: held jobs may go.
    room_freed: Notify,
    /// A held job was submitted or refused.
    settled: Notify,
}

#[derive(Default)]
struct State {
    jobs: HashMap<JobId, Followed>,
    /// Jobs that want an early poll: newly followed ones, and those an event could not
    /// decide.
    due: HashSet<JobId>,
    subscribers: Vec<mpsc::UnboundedSender<Batch>>,
    /// Why the last poll failed; `None` once one succeeds.
    failure: Option<Arc<Error>>,
    polls: u64,
    events: EventHealth,
    /// How many changes events made: a poll answered with fewer made before it asked is
    /// older than them.
    event_changes: u64,
    /// The tracker was dropped: nothing will change any more.
    stopped: bool,
    /// The jobs held locally and the tracker's jobs in the scheduler.
    holds: Holds,
}

/// Why a job is followed, and what was seen of it.
#[derive(Default)]
struct Followed {
    /// Followed with [`Tracker::follow`], until [`Tracker::forget`].
    explicitly: bool,
    /// How many waits and output streams follow it.
    waits: usize,
    status: Option<JobStatus>,
    /// What events told of its tasks.
    events: TaskEvents,
    /// [`State::event_changes`] when an event last changed its status.
    changed_by_event: u64,
    /// An event told that the job ended but not how: the pause before it is polled again
    /// while polls still see it active, and when that poll is due.
    end_recheck: Option<(Duration, tokio::time::Instant)>,
}

impl Tracker {
    /// Starts following jobs on `backend`, polling every `interval`, with the backend's
    /// events when it has them.
    ///
    /// Fails with [`ErrorKind::InvalidInput`] for a zero interval or outside a tokio
    /// runtime.
    pub fn new(backend: Arc<dyn BatchBackend>, interval: Duration) -> Result<Self> {
        Self::builder(backend, interval).build()
    }

    /// A tracker of `backend` polling every `interval`, with more settings.
    pub fn builder(backend: Arc<dyn BatchBackend>, interval: Duration) -> TrackerBuilder {
        TrackerBuilder {
            backend,
            interval,
            events: true,
            on_poll: Box::new(|_| {}),
            max_queued: None,
        }
    }

    /// [`new`](Self::new), calling `on_poll` after every status call, failed ones too,
    /// before the changes it saw are delivered.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::sync::atomic::{AtomicU64, Ordering};
    /// use std::time::Duration;
    /// use batchbridge_core::{BatchBackend, JobKey, JobSpec, LocalBackend, Tracker};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> batchbridge_core::Result<()> {
    /// let dir = tempfile::tempdir()?;
    /// let backend = Arc::new(LocalBackend::new(dir.path())?);
    /// let polls = Arc::new(AtomicU64::new(0));
    /// let counted = Arc::clone(&polls);
    /// let tracker = Tracker::with_poll_hook(backend.clone(), Duration::from_millis(100), move |poll| {
    ///     if let Some(err) = poll.failure {
    ///         eprintln!("status of {} jobs failed after {:?}: {err}", poll.jobs, poll.duration);
    ///     }
    ///     counted.fetch_add(1, Ordering::Relaxed);
    /// })?;
    /// let id = backend.submit(&JobSpec::new(JobKey::new("hi")?, "hi", "echo hi")).await?;
    /// tracker.wait(&id, Duration::from_secs(30)).await?;
    /// assert_eq!(polls.load(Ordering::Relaxed), tracker.polls());
    /// # Ok(()) }
    /// ```
    pub fn with_poll_hook(
        backend: Arc<dyn BatchBackend>,
        interval: Duration,
        on_poll: impl Fn(&PollReport<'_>) + Send + Sync + 'static,
    ) -> Result<Self> {
        Self::builder(backend, interval).on_poll(on_poll).build()
    }

    /// The backend this tracker polls.
    pub fn backend(&self) -> &Arc<dyn BatchBackend> {
        &self.shared.backend
    }

    /// Follows job `id` until [`forget`](Self::forget); a job followed for the first time
    /// is polled at once.
    pub fn follow(&self, id: JobId) {
        self.shared.follow([id], |job| job.explicitly = true);
    }

    /// Stops following job `id` (unless a wait still follows it) and forgets what was seen
    /// of it.
    pub fn forget(&self, id: &JobId) {
        let mut state = self.shared.lock();
        let submitted = state.holds.is_in_scheduler(id);
        if let Some(job) = state.jobs.get_mut(id) {
            job.explicitly = false;
            // A job the tracker submitted stays followed until it ends: its end frees room
            // for the held ones.
            if job.waits == 0 && !submitted {
                state.jobs.remove(id);
            }
        }
    }

    /// The latest status a poll or an event saw for job `id`, while it is followed.
    pub fn status(&self, id: &JobId) -> Option<JobStatus> {
        self.shared.status(id)
    }

    /// How many jobs are followed.
    pub fn followed(&self) -> usize {
        self.shared.lock().jobs.len()
    }

    /// Why the last poll failed, unless one succeeded since.
    pub fn last_failure(&self) -> Option<Arc<Error>> {
        self.shared.lock().failure.clone()
    }

    /// How many status calls the tracker has made.
    pub fn polls(&self) -> u64 {
        self.shared.lock().polls
    }

    /// How the backend's pushed events are going.
    pub fn event_health(&self) -> EventHealth {
        self.shared.lock().events.clone()
    }

    /// Every status change the tracker observes from now on, polled or pushed, for every
    /// job it follows, in the order observed; a job's first observation counts as a change.
    /// Nothing is dropped: the channel is unbounded, so read it (or drop it) to keep memory
    /// small.
    pub fn changes(&self) -> Changes {
        Changes {
            events: self.shared.subscribe(),
            pending: VecDeque::new(),
        }
    }

    /// Submits `spec` and follows its job, or holds it locally when the scheduler's submit
    /// limit or the tracker's [`max_queued`](TrackerBuilder::max_queued) leaves no room, or
    /// when jobs are held already (it goes behind them). A key given before gets what its
    /// job got then: its id, or its place among the held.
    ///
    /// A submit whose answer was lost
    /// ([`SubmitOutcomeUnknown`](ErrorKind::SubmitOutcomeUnknown)) holds its job too
    /// ([`HeldLocally::OutcomeUnknown`]), first in line: the tracker submits the key again
    /// at its next round, which finds the job if the lost submit made one, so that the
    /// waits on the key see it end, and a job counts against `max_queued` once known.
    ///
    /// Fails as [`BatchBackend::submit`] does for any other refusal.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use batchbridge_core::tracker::{HeldLocally, Submitted};
    /// use batchbridge_core::{JobKey, JobSpec, JobState, LocalBackend, Tracker};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> batchbridge_core::Result<()> {
    /// let dir = tempfile::tempdir()?;
    /// let backend = Arc::new(LocalBackend::new(dir.path())?);
    /// let tracker = Tracker::builder(backend, Duration::from_millis(100))
    ///     .max_queued(1)
    ///     .build()?;
    /// let first = JobSpec::new(JobKey::new("first")?, "first", "sleep 1");
    /// let second = JobSpec::new(JobKey::new("second")?, "second", "true");
    /// assert!(matches!(tracker.submit(first).await?, Submitted::Job(_)));
    /// let held = tracker.submit(second.clone()).await?;
    /// assert_eq!(held, Submitted::Held(HeldLocally::MaxQueued { limit: 1 }));
    /// assert_eq!(tracker.held()[0].0, second.key);
    ///
    /// // Submitted once the first ends.
    /// let (_, status) = tracker.wait_submitted(&second.key, Duration::from_secs(30)).await?;
    /// assert_eq!(status.state, JobState::Succeeded);
    /// # Ok(()) }
    /// ```
    pub async fn submit(&self, spec: JobSpec) -> Result<Submitted> {
        let answer = self.submit_many(vec![spec]).await.into_iter().next();
        answer.unwrap_or_else(|| Err(not_answered_submit()))
    }

    /// [`submit`](Self::submit) for many jobs at once, answering each spec in order: those
    /// there is room for go to the backend in one [`BatchBackend::submit_many`] call (one
    /// remote command per batch where the backend batches), the others are held behind
    /// them in order. A key given twice gets one job.
    ///
    /// Each job keeps its own answer: the scheduler refusing one with its submit limit
    /// holds that one (a job after it in the same batch may still have got in), and any
    /// other refusal is that job's error.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use batchbridge_core::tracker::Submitted;
    /// use batchbridge_core::{JobKey, JobSpec, JobState, LocalBackend, Tracker};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> batchbridge_core::Result<()> {
    /// let dir = tempfile::tempdir()?;
    /// let backend = Arc::new(LocalBackend::new(dir.path())?);
    /// let tracker = Tracker::builder(backend, Duration::from_millis(100))
    ///     .max_queued(2)
    ///     .build()?;
    /// let specs = (0..3)
    ///     .map(|n| Ok(JobSpec::new(JobKey::new(format!("part-{n}"))?, "part", "true")))
    ///     .collect::<batchbridge_core::Result<Vec<_>>>()?;
    /// let keys: Vec<JobKey> = specs.iter().map(|spec| spec.key.clone()).collect();
    /// let answers = tracker.submit_many(specs).await;
    /// assert!(matches!(answers[0], Ok(Submitted::Job(_))));
    /// assert!(matches!(answers[1], Ok(Submitted::Job(_))));
    /// assert!(matches!(answers[2], Ok(Submitted::Held(_))));
    ///
    /// let mut ends = tracker.wait_each_submitted(keys, Duration::from_secs(30));
    /// while let Some(ended) = ends.next().await {
    ///     assert_eq!(ended?.status.state, JobState::Succeeded);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn submit_many(&self, specs: Vec<JobSpec>) -> Vec<Result<Submitted>> {
        let _turn = self.shared.submitting.lock().await;
        let mut answers: Vec<Option<Result<Submitted>>> = Vec::with_capacity(specs.len());
        // Each new spec with room goes in the batch, with where its answer goes.
        let mut batch: Vec<(usize, JobSpec)> = Vec::new();
        // A key given again in this call, and where the first one's answer is.
        let mut repeats: Vec<(usize, usize)> = Vec::new();
        {
            let mut state = self.shared.lock();
            let mut in_batch: HashMap<JobKey, usize> = HashMap::new();
            for (at, spec) in specs.into_iter().enumerate() {
                if let Some(&first) = in_batch.get(&spec.key) {
                    repeats.push((at, first));
                    answers.push(None);
                    continue;
                }
                let answer = match state.holds.fate(&spec.key) {
                    Some(Fate::Submitted(id)) => Some(Ok(Submitted::Job(id))),
                    Some(Fate::Held(why)) => Some(Ok(Submitted::Held(why))),
                    Some(Fate::Refused(err)) => Some(Err(refused_again(&err))),
                    None => match state.holds.room_for_new(batch.len()) {
                        Ok(()) => {
                            in_batch.insert(spec.key.clone(), at);
                            batch.push((at, spec));
                            None
                        }
                        Err(why) => {
                            state.holds.hold(spec, why.clone());
                            Some(Ok(Submitted::Held(why)))
                        }
                    },
                };
                answers.push(answer);
            }
        }
        if !batch.is_empty() {
            let specs: Vec<JobSpec> = batch.iter().map(|(_, spec)| spec.clone()).collect();
            let mut results = self.shared.backend.submit_many(&specs).await.into_iter();
            let mut submitted = Vec::new();
            let mut held = Vec::new();
            let mut state = self.shared.lock();
            for (at, spec) in batch {
                answers[at] = Some(
                    match results.next().unwrap_or_else(|| Err(not_answered_submit())) {
                        Ok(id) => {
                            submitted.push((spec.key, id.clone()));
                            Ok(Submitted::Job(id))
                        }
                        Err(err) => match held_by(&err) {
                            Some(why) => {
                                held.push((spec, why.clone()));
                                Ok(Submitted::Held(why))
                            }
                            None => Err(err),
                        },
                    },
                );
            }
            // The batch was given before any job this call held: the queue was empty then.
            state.holds.hold_ahead(held);
            drop(state);
            self.shared.submitted(submitted);
        }
        for (at, first) in repeats {
            answers[at] = Some(match &answers[first] {
                Some(Ok(submitted)) => Ok(submitted.clone()),
                Some(Err(err)) => Err(err.again()),
                None => Err(not_answered_submit()),
            });
        }
        answers
            .into_iter()
            .map(|answer| answer.unwrap_or_else(|| Err(not_answered_submit())))
            .collect()
    }

    /// The jobs held locally, in the order they will be submitted, each with why.
    pub fn held(&self) -> Vec<(JobKey, HeldLocally)> {
        self.shared.lock().holds.held()
    }

    /// How many of the jobs the tracker submitted are in the scheduler (not seen ended).
    pub fn in_scheduler(&self) -> usize {
        self.shared.lock().holds.in_scheduler()
    }

    /// Waits until the job given to [`submit`](Self::submit) with `key` is submitted (at
    /// once when it was not held) and then until it ends, returning its id and terminal
    /// status.
    ///
    /// Fails with [`ErrorKind::WaitTimedOut`] after `timeout` (saying whether the job was
    /// still held), with [`ErrorKind::NotFound`] for a key the tracker was not given, with
    /// the error of its submit when that failed for good once its turn came, or as
    /// [`wait`](Self::wait) does.
    pub async fn wait_submitted(
        &self,
        key: &JobKey,
        timeout: Duration,
    ) -> Result<(JobId, JobStatus)> {
        let deadline = tokio::time::Instant::now() + timeout;
        let id = loop {
            let settled = self.shared.settled.notified();
            let fate = self.shared.lock().holds.fate(key);
            match fate {
                Some(Fate::Submitted(id)) => break id,
                Some(Fate::Refused(err)) => return Err(refused_again(&err)),
                None => {
                    return Err(Error::new(
                        ErrorKind::NotFound,
                        format!("no job with key {key} was submitted through this tracker"),
                    ));
                }
                Some(Fate::Held(why)) => {
                    if tokio::time::timeout_at(deadline, settled).await.is_err() {
                        return Err(Error::new(
                            ErrorKind::WaitTimedOut,
                            format!("job {key} was not submitted within {timeout:?}: {why}"),
                        ));
                    }
                }
            }
        };
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let status = self.wait(&id, left).await?;
        Ok((id, status))
    }

    /// Waits until job `id` ends and returns its terminal status, following the job while
    /// it waits. It returns as soon as a poll or an event shows the end.
    ///
    /// Fails with [`ErrorKind::WaitTimedOut`] after `timeout` (the job goes on; the message
    /// says what was last seen of it), or with the error of a poll that failed permanently
    /// while it waited. Waits for many jobs share the tracker's polls.
    pub async fn wait(&self, id: &JobId, timeout: Duration) -> Result<JobStatus> {
        self.wait_with(id, timeout, |_| {}).await
    }

    /// [`wait`](Self::wait), calling `on_change` with each status of the job seen while it
    /// waits, starting with the latest already seen, each once, the terminal one last.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use batchbridge_core::{BatchBackend, JobKey, JobSpec, JobState, LocalBackend, Tracker};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> batchbridge_core::Result<()> {
    /// let dir = tempfile::tempdir()?;
    /// let backend = Arc::new(LocalBackend::new(dir.path())?);
    /// let tracker = Tracker::new(backend.clone(), Duration::from_millis(100))?;
    /// let id = backend.submit(&JobSpec::new(JobKey::new("nap")?, "nap", "sleep 1")).await?;
    ///
    /// let mut states = vec![JobState::Queued];
    /// let status = tracker
    ///     .wait_with(&id, Duration::from_secs(30), |status| {
    ///         if states.last() != Some(&status.state) {
    ///             states.push(status.state);
    ///         }
    ///     })
    ///     .await?;
    /// assert_eq!(status.state, JobState::Succeeded);
    /// assert_eq!(states, [JobState::Queued, JobState::Running, JobState::Succeeded]);
    /// # Ok(()) }
    /// ```
    pub async fn wait_with(
        &self,
        id: &JobId,
        timeout: Duration,
        mut on_change: impl FnMut(&JobStatus),
    ) -> Result<JobStatus> {
        let mut watch = self.watch(id.clone());
        let waited = tokio::time::timeout(timeout, async {
            loop {
                let status = watch.next().await?;
                on_change(&status);
                if status.state.is_terminal() {
                    return Ok(status);
                }
            }
        })
        .await;
        waited.unwrap_or_else(|_| Err(self.timed_out(id, timeout)))
    }

    /// Waits for every job of `ids` at once, yielding each as it ends ([`Ends::next`]),
    /// in the order they end: one subscription for the whole set, woken once per batch of
    /// changes (a poll's answer or a pushed event), where a [`wait`](Self::wait) per job
    /// would wake every one of them at each change. The jobs are followed while the
    /// returned [`Ends`] lives, each let go as it ends.
    ///
    /// Jobs already seen ended come first. After `timeout` from now, the next item is a
    /// [`ErrorKind::WaitTimedOut`] error naming the jobs still active (they go on), and the
    /// set ends; a poll that fails permanently ends it the same way.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use batchbridge_core::{BatchBackend, JobKey, JobSpec, JobState, LocalBackend, Tracker};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> batchbridge_core::Result<()> {
    /// let dir = tempfile::tempdir()?;
    /// let backend = Arc::new(LocalBackend::new(dir.path())?);
    /// let tracker = Tracker::new(backend.clone(), Duration::from_millis(100))?;
    /// let specs = (0..3)
    ///     .map(|n| Ok(JobSpec::new(JobKey::new(format!("nap-{n}"))?, "nap", format!("sleep 0.{n}"))))
    ///     .collect::<batchbridge_core::Result<Vec<_>>>()?;
    /// let ids = backend
    ///     .submit_many(&specs)
    ///     .await
    ///     .into_iter()
    ///     .collect::<batchbridge_core::Result<Vec<_>>>()?;
    ///
    /// let mut ends = tracker.wait_each(ids.clone(), Duration::from_secs(30));
    /// let mut ended = Vec::new();
    /// while let Some(end) = ends.next().await {
    ///     let end = end?;
    ///     assert_eq!(end.status.state, JobState::Succeeded);
    ///     ended.push(end.id);
    /// }
    /// ended.sort();
    /// let mut all = ids;
    /// all.sort();
    /// assert_eq!(ended, all);
    /// # Ok(()) }
    /// ```
    pub fn wait_each(&self, ids: impl IntoIterator<Item = JobId>, timeout: Duration) -> Ends {
        let mut ends = Ends::new(Arc::clone(&self.shared), timeout);
        ends.add(ids.into_iter().map(|id| (id, None)).collect());
        ends
    }

    /// [`wait_each`](Self::wait_each) for jobs given to [`submit`](Self::submit) or
    /// [`submit_many`](Self::submit_many), by key: a held job is waited for through its
    /// submit, then until it ends, and each [`Ended`] says its key. A key the tracker was
    /// not given yields an [`ErrorKind::NotFound`] error, and one whose held job was
    /// refused for good once its turn came yields that refusal (both naming the key);
    /// the other jobs go on.
    pub fn wait_each_submitted(
        &self,
        keys: impl IntoIterator<Item = JobKey>,
        timeout: Duration,
    ) -> Ends {
        let mut ends = Ends::new(Arc::clone(&self.shared), timeout);
        ends.held = keys.into_iter().collect();
        ends.settle();
        ends
    }

    /// Follows job `id` while the returned watch lives, to read each of its statuses once.
    pub(crate) fn watch(&self, id: JobId) -> Watch {
        Watch::start(Arc::clone(&self.shared), id)
    }

    /// The runtime the tracker was started in.
    pub(crate) fn runtime(&self) -> &tokio::runtime::Handle {
        &self.runtime
    }

    fn timed_out(&self, id: &JobId, timeout: Duration) -> Error {
        let seen = match self.status(id) {
            Some(status) => match status.reason {
                Some(reason) => format!("last seen {} ({reason})", status.state),
                None => format!("last seen {}", status.state),
            },
            None => "not seen by a poll yet".to_owned(),
        };
        let failure = self
            .last_failure()
            .map(|err| format!("; the last poll failed: {err}"))
            .unwrap_or_default();
        Error::new(
            ErrorKind::WaitTimedOut,
            format!("job {id} did not end within {timeout:?}: {seen}{failure}"),
        )
    }
}

impl TrackerBuilder {
    /// Whether to use the backend's pushed events, when it has an event source (the
    /// default: yes). Without them, the tracker learns everything from polls.
    #[must_use]
    pub fn events(mut self, on: bool) -> Self {
        self.events = on;
        self
    }

    /// Calls `on_poll` after every status call, failed ones too, before the changes it saw
    /// are delivered.
    #[must_use]
    pub fn on_poll(mut self, on_poll: impl Fn(&PollReport<'_>) + Send + Sync + 'static) -> Self {
        self.on_poll = Box::new(on_poll);
        self
    }

    /// Keeps at most `limit` of the jobs submitted through the tracker
    /// ([`Tracker::submit`]) in the scheduler at once, holding the others locally: a
    /// limit on queued jobs that the site does not enforce, or one below the site's.
    /// Without it, only the scheduler's own limit holds jobs.
    #[must_use]
    pub fn max_queued(mut self, limit: usize) -> Self {
        self.max_queued = Some(limit);
        self
    }

    /// Starts the tracker.
    ///
    /// Fails with [`ErrorKind::InvalidInput`] for a zero interval, a `max_queued` of zero,
    /// or outside a tokio runtime.
    pub fn build(self) -> Result<Tracker> {
        if self.interval.is_zero() {
            return Err(Error::invalid_input(
                "a tracker's poll interval must be longer than zero",
            ));
        }
        if self.max_queued == Some(0) {
            return Err(Error::invalid_input(
                "a tracker's max_queued must be at least 1: with 0 no job would ever be submitted",
            ));
        }
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
            Error::invalid_input("a tracker must be started inside a tokio runtime")
        })?;
        let source = self.backend.events().filter(|_| self.events);
        let state = State {
            events: EventHealth {
                enabled: source.is_some(),
                ..EventHealth::default()
            },
            holds: Holds::new(self.max_queued),
            ..State::default()
        };
        let shared = Arc::new(Shared {
            backend: self.backend,
            interval: self.interval,
            state: Mutex::new(state),
            poll_now: Notify::new(),
            on_poll: self.on_poll,
            submitting: tokio::sync::Mutex::new(()),
            room_freed: Notify::new(),
            settled: Notify::new(),
        });
        let mut tasks = vec![
            runtime.spawn(poll_forever(Arc::clone(&shared))),
            runtime.spawn(submit_held_forever(Arc::clone(&shared))),
        ];
        if let Some(source) = source {
            tasks.push(runtime.spawn(follow_events(Arc::clone(&shared), source)));
        }
        Ok(Tracker {
            shared,
            tasks,
            runtime,
        })
    }
}

impl std::fmt::Debug for TrackerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TrackerBuilder")
            .field("backend", &self.backend.name())
            .field("interval", &self.interval)
            .field("events", &self.events)
            .field("max_queued", &self.max_queued)
            .finish_non_exhaustive()
    }
}

impl Drop for Tracker {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
        // Output streams still hold the shared state: closing the subscriptions ends them.
        let mut state = self.shared.lock();
        state.stopped = true;
        state.subscribers.clear();
    }
}

impl std::fmt::Debug for Tracker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tracker")
            .field("backend", &self.shared.backend.name())
            .field("interval", &self.shared.interval)
            .field("followed", &self.followed())
            .finish_non_exhaustive()
    }
}

/// One job's statuses as a tracker sees them, each once, while the watch keeps the job
/// followed (even if dropped midway: a caller's own timeout).
pub(crate) struct Watch {
    shared: Arc<Shared>,
    id: JobId,
    events: mpsc::UnboundedReceiver<Batch>,
    last: Option<JobStatus>,
    /// What the last batch received held for the job, not yet returned.
    pending: VecDeque<Result<JobStatus>>,
}

impl Watch {
    fn start(shared: Arc<Shared>, id: JobId) -> Self {
        shared.follow([id.clone()], |job| job.waits += 1);
        // Subscribed before reading the current status, so no change falls in between; one
        // seen both ways is the same status, passed on once.
        let events = shared.subscribe();
        Self {
            shared,
            id,
            events,
            last: None,
            pending: VecDeque::new(),
        }
    }

    /// The job's next status: the latest already seen first, then each change. Fails
    /// with the error of a poll that failed permanently, or once the tracker is dropped.
    ///
    /// Cancel-safe: a status is taken from the channel and returned without another await.
    pub(crate) async fn next(&mut self) -> Result<JobStatus> {
        if self.last.is_none()
            && let Some(status) = self.shared.status(&self.id)
        {
            self.last = Some(status.clone());
            return Ok(status);
        }
        loop {
            if let Some(next) = self.pending.pop_front() {
                return next;
            }
            let Some(batch) = self.events.recv().await else {
                return Err(tracker_stopped());
            };
            for event in batch.iter() {
                match event {
                    Event::Changed(change) if change.id == self.id => {
                        if self.last.as_ref() != Some(&change.status) {
                            self.last = Some(change.status.clone());
                            self.pending.push_back(Ok(change.status.clone()));
                        }
                    }
                    Event::PollFailed(err) if !err.is_temporary() => {
                        self.pending.push_back(Err(poll_failed(err)));
                    }
                    Event::Changed(..) | Event::PollFailed(_) => {}
                }
            }
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.shared.wait_ended([&self.id]);
    }
}

/// A job that ended, from [`Ends::next`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Ended {
    /// The job.
    pub id: JobId,
    /// Its key, when the set was given keys ([`Tracker::wait_each_submitted`]).
    pub key: Option<JobKey>,
    /// Its terminal status.
    pub status: JobStatus,
}

/// Many jobs waited for at once, each yielded as it ends: from [`Tracker::wait_each`] and
/// [`Tracker::wait_each_submitted`]. Dropping it stops following the jobs not yet ended
/// (unless something else follows them).
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use futures::StreamExt;
/// use batchbridge_core::{BatchBackend, JobKey, JobSpec, JobState, LocalBackend, Tracker};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> batchbridge_core::Result<()> {
/// let dir = tempfile::tempdir()?;
/// let backend = Arc::new(LocalBackend::new(dir.path())?);
/// let tracker = Tracker::new(backend.clone(), Duration::from_millis(100))?;
/// let id = backend.submit(&JobSpec::new(JobKey::new("one")?, "one", "true")).await?;
///
/// let ends = tracker.wait_each([id.clone()], Duration::from_secs(30));
/// assert_eq!(ends.remaining(), 1);
/// let ended: Vec<_> = ends.into_stream().collect().await;
/// let ended = ended.into_iter().collect::<batchbridge_core::Result<Vec<_>>>()?;
/// assert_eq!(ended.len(), 1);
/// assert_eq!((&ended[0].id, ended[0].status.state), (&id, JobState::Succeeded));
/// # Ok(()) }
/// ```
pub struct Ends {
    shared: Arc<Shared>,
    /// Jobs not seen ended yet, each with its key when known; this set waits on each.
    waiting: HashMap<JobId, Option<JobKey>>,
    /// Keys whose jobs are still held by the tracker, in the order given.
    held: Vec<JobKey>,
    events: mpsc::UnboundedReceiver<Batch>,
    /// What to yield next.
    ready: VecDeque<Result<Ended>>,
    deadline: tokio::time::Instant,
    timeout: Duration,
    /// Timed out, or stopped by a permanent poll failure or the tracker's end.
    over: bool,
}

impl Ends {
    fn new(shared: Arc<Shared>, timeout: Duration) -> Self {
        // Subscribed before any status is read, so no change falls in between.
        let events = shared.subscribe();
        Self {
            shared,
            waiting: HashMap::new(),
            held: Vec::new(),
            events,
            ready: VecDeque::new(),
            deadline: tokio::time::Instant::now() + timeout,
            timeout,
            over: false,
        }
    }

    /// How many jobs have not ended yet (held ones included).
    pub fn remaining(&self) -> usize {
        self.waiting.len() + self.held.len()
    }

    /// The next job to end, with its terminal status; `None` once every job was yielded
    /// (or after the error that ended the set).
    ///
    /// Cancel-safe: dropping the future before it is ready loses no job.
    pub async fn next(&mut self) -> Option<Result<Ended>> {
        loop {
            if let Some(next) = self.ready.pop_front() {
                return Some(next);
            }
            if self.over || self.remaining() == 0 {
                return None;
            }
            let shared = Arc::clone(&self.shared);
            let settled = shared.settled.notified();
            tokio::pin!(settled);
            // Registered before the fates are read: a submit settled after is not missed.
            settled.as_mut().enable();
            self.settle();
            if !self.ready.is_empty() {
                continue;
            }
            tokio::select! {
                batch = self.events.recv() => match batch {
                    Some(batch) => self.take(&batch),
                    None => self.end_with(tracker_stopped()),
                },
                () = settled, if !self.held.is_empty() => {}
                () = tokio::time::sleep_until(self.deadline) => {
                    let err = self.timed_out();
                    self.end_with(err);
                }
            }
        }
    }

    /// The same as a stream (`futures::Stream`), for combinators.
    pub fn into_stream(self) -> impl futures::Stream<Item = Result<Ended>> {
        futures::stream::unfold(self, |mut ends| async move {
            let next = ends.next().await?;
            Some((next, ends))
        })
    }

    /// Waits on `jobs` too, yielding those already seen ended.
    fn add(&mut self, jobs: Vec<(JobId, Option<JobKey>)>) {
        let mut new = Vec::new();
        for (id, key) in jobs {
            if let Entry::Vacant(waiting) = self.waiting.entry(id) {
                new.push(waiting.key().clone());
                waiting.insert(key);
            }
        }
        self.shared
            .follow(new.iter().cloned(), |job| job.waits += 1);
        let ended: Vec<(JobId, JobStatus)> = {
            let state = self.shared.lock();
            new.into_iter()
                .filter_map(|id| {
                    let status = state.jobs.get(&id)?.status.clone()?;
                    status.state.is_terminal().then_some((id, status))
                })
                .collect()
        };
        for (id, status) in ended {
            self.ended(&id, status);
        }
    }

    /// Moves the held keys that were submitted meanwhile to the jobs waited on.
    fn settle(&mut self) {
        if self.held.is_empty() {
            return;
        }
        let mut submitted = Vec::new();
        let mut still_held = Vec::new();
        {
            let state = self.shared.lock();
            for key in std::mem::take(&mut self.held) {
                match state.holds.fate(&key) {
                    Some(Fate::Submitted(id)) => submitted.push((id, Some(key))),
                    Some(Fate::Held(_)) => still_held.push(key),
                    Some(Fate::Refused(err)) => self.ready.push_back(Err(Error::new(
                        err.kind(),
                        format!("job {key}: {}", err.message()),
                    ))),
                    None => self.ready.push_back(Err(Error::new(
                        ErrorKind::NotFound,
                        format!("no job with key {key} was submitted through this tracker"),
                    ))),
                }
            }
        }
        self.held = still_held;
        self.add(submitted);
    }

    /// Takes the ends of waited jobs out of `batch`.
    fn take(&mut self, batch: &[Event]) {
        for event in batch {
            match event {
                Event::Changed(change)
                    if change.status.state.is_terminal()
                        && self.waiting.contains_key(&change.id) =>
                {
                    self.ended(&change.id, change.status.clone());
                }
                Event::PollFailed(err) if !err.is_temporary() => self.end_with(poll_failed(err)),
                Event::Changed(_) | Event::PollFailed(_) => {}
            }
        }
    }

    fn ended(&mut self, id: &JobId, status: JobStatus) {
        if let Some(key) = self.waiting.remove(id) {
            self.shared.wait_ended([id]);
            self.ready.push_back(Ok(Ended {
                id: id.clone(),
                key,
                status,
            }));
        }
    }

    fn end_with(&mut self, err: Error) {
        self.ready.push_back(Err(err));
        self.over = true;
    }

    fn timed_out(&self) -> Error {
        const NAMED: usize = 5;
        let state = self.shared.lock();
        let mut active: Vec<String> = self
            .waiting
            .keys()
            .take(NAMED)
            .map(
                |id| match state.jobs.get(id).and_then(|job| job.status.as_ref()) {
                    Some(status) => format!("{id} last seen {}", status.state),
                    None => format!("{id} not seen by a poll yet"),
                },
            )
            .collect();
        active.extend(
            self.held
                .iter()
                .take(NAMED)
                .map(|key| format!("{key} still held")),
        );
        let more = self.remaining().saturating_sub(active.len());
        let more = if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        };
        Error::new(
            ErrorKind::WaitTimedOut,
            format!(
                "{} jobs did not end within {:?}: {}{more}",
                self.remaining(),
                self.timeout,
                active.join(", ")
            ),
        )
    }
}

impl Drop for Ends {
    fn drop(&mut self) {
        self.shared.wait_ended(self.waiting.keys());
    }
}

impl std::fmt::Debug for Ends {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ends")
            .field("waiting", &self.waiting.len())
            .field("held", &self.held.len())
            .field("ready", &self.ready.len())
            .finish_non_exhaustive()
    }
}

/// What to make of a new observation of a job, given the last one.
#[derive(Debug, PartialEq, Eq)]
enum Observed {
    /// The first observation, or one that differs: record it and pass it on.
    Changed,
    /// The same as the last.
    Unchanged,
    /// It would take the job out of a terminal state: ignore it.
    Backwards,
}

fn observe(last: Option<&JobStatus>, next: &JobStatus) -> Observed {
    match last {
        None => Observed::Changed,
        Some(last) if last == next => Observed::Unchanged,
        Some(last) if last.state.transition(next.state).is_err() => Observed::Backwards,
        Some(_) => Observed::Changed,
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // The state stays consistent under a panic (plain map updates), so a poisoned lock
        // is still usable.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn status(&self, id: &JobId) -> Option<JobStatus> {
        self.lock().jobs.get(id)?.status.clone()
    }

    /// Follows `ids`, updating how with `why`; jobs new to the tracker are polled early
    /// (together).
    fn follow(&self, ids: impl IntoIterator<Item = JobId>, why: impl Fn(&mut Followed)) {
        let mut guard = self.lock();
        let state = &mut *guard;
        let mut new = false;
        for id in ids {
            match state.jobs.entry(id) {
                Entry::Occupied(mut job) => why(job.get_mut()),
                Entry::Vacant(job) => {
                    new = true;
                    state.due.insert(job.key().clone());
                    why(job.insert(Followed::default()));
                }
            }
        }
        drop(guard);
        if new {
            self.poll_now.notify_one();
        }
    }

    /// One wait on each of `ids` ended: a job no longer waited on, and not followed
    /// explicitly, is let go.
    fn wait_ended<'a>(&self, ids: impl IntoIterator<Item = &'a JobId>) {
        let mut state = self.lock();
        for id in ids {
            if let Some(job) = state.jobs.get_mut(id) {
                job.waits -= 1;
                if job.waits == 0 && !job.explicitly {
                    state.jobs.remove(id);
                }
            }
        }
    }

    fn subscribe(&self) -> mpsc::UnboundedReceiver<Batch> {
        let (sender, receiver) = mpsc::unbounded_channel();
        let mut state = self.lock();
        // A stopped tracker keeps no subscriber: the receiver ends at once.
        if !state.stopped {
            // Ended waits leave closed senders behind; polls that deliver nothing keep them.
            state
                .subscribers
                .retain(|subscriber| !subscriber.is_closed());
            state.subscribers.push(sender);
        }
        receiver
    }

    /// Asks the backend about every followed job (`all`), or only about those due for an
    /// early poll.
    async fn poll(&self, all: bool) {
        let (ids, asked_after): (Vec<JobId>, u64) = {
            let mut state = self.lock();
            let due = std::mem::take(&mut state.due);
            let ids = if all {
                state.jobs.keys().cloned().collect()
            } else {
                let mut ids: Vec<JobId> = due
                    .iter()
                    .filter(|id| state.jobs.contains_key(*id))
                    .cloned()
                    .collect();
                // Without events, an early poll that asks anything also asks about every
                // job last seen running: the call is one batched query whatever it asks,
                // and a job that ended meanwhile is seen now rather than at the next
                // interval (during a burst of submits, polls every second). With events,
                // their ends come pushed. An early poll with nothing due stays a no-op:
                // while the connection is down it would only hold up the others.
                if !ids.is_empty() && !state.events.connected {
                    ids.extend(
                        state
                            .jobs
                            .iter()
                            .filter(|(id, followed)| {
                                !due.contains(*id)
                                    && followed
                                        .status
                                        .as_ref()
                                        .is_some_and(|status| status.state == JobState::Running)
                            })
                            .map(|(id, _)| id.clone()),
                    );
                }
                ids
            };
            (ids, state.event_changes)
        };
        if ids.is_empty() {
            return;
        }
        let started = tokio::time::Instant::now();
        let result = self.backend.status(&ids).await;
        let duration = started.elapsed();
        let result = result.map_err(|err| {
            tracing::warn!(backend = self.backend.name(), error = %err, "status poll failed");
            Arc::new(err)
        });
        (self.on_poll)(&PollReport {
            jobs: ids.len(),
            duration,
            failure: result.as_ref().err(),
        });
        // Recorded and delivered under one lock, so that pushed changes recorded meanwhile
        // reach subscribers in the order they were recorded.
        let mut state = self.lock();
        state.polls += 1;
        let events = match result {
            Ok(answer) => {
                state.failure = None;
                state.record(self.backend.name(), &ids, answer, asked_after)
            }
            Err(err) => {
                state.failure = Some(Arc::clone(&err));
                vec![Event::PollFailed(err)]
            }
        };
        state.reschedule_end_rechecks(&ids, self.interval);
        let freed = state.free_room(&events);
        deliver(&mut state.subscribers, events);
        drop(state);
        if freed {
            self.room_freed.notify_one();
        }
    }

    /// Each key's job is in the scheduler as its id: followed until it ends, and counted
    /// against `max_queued` until then.
    fn submitted(&self, jobs: Vec<(JobKey, JobId)>) {
        if jobs.is_empty() {
            return;
        }
        let mut state = self.lock();
        for (key, id) in &jobs {
            state.holds.submitted(key, id.clone());
        }
        drop(state);
        self.follow(jobs.into_iter().map(|(_, id)| id), |job| {
            job.explicitly = true;
        });
        self.settled.notify_waiters();
    }

    /// Submits held jobs in order, a batch at a time (one job after another once the
    /// scheduler's own limit was met: see [`HeldBatch::one_by_one`]), while there is room,
    /// until the scheduler refuses one with its limit again, or fails to answer (they are
    /// tried again later).
    async fn submit_held(&self) {
        let _turn = self.submitting.lock().await;
        loop {
            let HeldBatch {
                jobs: batch,
                one_by_one,
            } = self.lock().holds.next_batch();
            if batch.is_empty() {
                return;
            }
            let answers = if one_by_one {
                let mut answers = Vec::with_capacity(batch.len());
                for spec in &batch {
                    let answer = self.backend.submit(spec).await;
                    let refused = answer.is_err();
                    answers.push(answer);
                    if refused {
                        break;
                    }
                }
                answers
            } else {
                self.backend.submit_many(&batch).await
            };
            let mut submitted = Vec::new();
            let mut go_on = answers.len() == batch.len();
            let mut refused = false;
            let mut state = self.lock();
            for (spec, answer) in batch.into_iter().zip(answers) {
                match answer {
                    Ok(id) => submitted.push((spec.key, id)),
                    Err(err) => {
                        go_on = false;
                        if let Some(why) = held_by(&err) {
                            state.holds.still_limited(&spec.key, why);
                        } else if err.is_temporary() {
                            tracing::warn!(backend = self.backend.name(), key = %spec.key, error = %err, "submitting a held job failed; trying again later");
                        } else {
                            state.holds.refused(&spec.key, Arc::new(err));
                            refused = true;
                        }
                    }
                }
            }
            drop(state);
            self.submitted(submitted);
            if refused {
                self.settled.notify_waiters();
            }
            if !go_on {
                return;
            }
        }
    }

    /// Merges one pushed event into what is known of its job.
    fn apply(&self, event: JobEvent) {
        let mut guard = self.lock();
        let state = &mut *guard;
        state.events.received += 1;
        let Some(job) = state.jobs.get_mut(&event.id) else {
            return;
        };
        let merged = merge(
            &event.id,
            job.status.as_ref(),
            &mut job.events,
            event.task,
            &event.kind,
            event.at.unwrap_or_else(SystemTime::now),
        );
        match merged {
            Merge::Observe(next) => {
                let backend = self.backend.name();
                if let Some(change) = job.observe(backend, &event.id, *next, SeenBy::Event) {
                    state.events.applied += 1;
                    state.event_changes += 1;
                    job.changed_by_event = state.event_changes;
                    let changes = vec![change];
                    let freed = state.free_room(&changes);
                    deliver(&mut state.subscribers, changes);
                    drop(guard);
                    if freed {
                        self.room_freed.notify_one();
                    }
                }
            }
            Merge::PollEarly => {
                state.events.early_polls += 1;
                // Polled now; rescheduled by that poll.
                job.end_recheck.get_or_insert((
                    END_RECHECK_MIN,
                    tokio::time::Instant::now() + END_RECHECK_MIN,
                ));
                state.due.insert(event.id);
                drop(guard);
                self.poll_now.notify_one();
            }
            Merge::Ignore => {}
        }
    }
}

impl Followed {
    /// Records status `next` of job `id`, seen by a poll or an event, returning the change
    /// to deliver, if it is one.
    fn observe(
        &mut self,
        backend: &str,
        id: &JobId,
        next: JobStatus,
        seen: SeenBy,
    ) -> Option<Event> {
        match observe(self.status.as_ref(), &next) {
            Observed::Changed => {
                self.status = Some(next.clone());
                Some(Event::Changed(Box::new(Change {
                    id: id.clone(),
                    status: next,
                    seen,
                })))
            }
            Observed::Unchanged => None,
            Observed::Backwards => {
                tracing::warn!(
                    backend,
                    job = %id,
                    from = ?self.status.as_ref().map(|s| s.state),
                    to = %next.state,
                    ?seen,
                    "ignored a status that would leave a terminal state"
                );
                None
            }
        }
    }
}

impl State {
    /// Records a status answer to a poll about `ids`, asked when events had made
    /// `asked_after` changes, returning the changes: each job's polled status, then its end
    /// if events already told it and the poll did not. A status that is not terminal is
    /// older than an event that changed the job while the call was in flight, and is
    /// skipped (an end is never stale).
    fn record(
        &mut self,
        backend: &str,
        ids: &[JobId],
        mut answer: HashMap<JobId, JobStatus>,
        asked_after: u64,
    ) -> Vec<Event> {
        let mut changes = Vec::new();
        for id in ids {
            // A job forgotten while the call was in flight stays forgotten.
            let Some(job) = self.jobs.get_mut(id) else {
                continue;
            };
            let next = answer.remove(id).unwrap_or_else(not_answered);
            job.events
                .keep_tasks_below(next.tasks.map_or(1, |tasks| tasks.total));
            if next.state.is_terminal() || job.changed_by_event <= asked_after {
                changes.extend(job.observe(backend, id, next, SeenBy::Poll));
            }
            let ended = job
                .status
                .as_ref()
                .and_then(|status| ended_by_events(id, status, &job.events));
            if let Some(ended) = ended {
                changes.extend(job.observe(backend, id, ended, SeenBy::Event));
            }
        }
        changes
    }

    /// After a poll about `ids` (answered or not), schedules the next poll of each of them
    /// whose end an event told and that is still active: after its pause, which doubles,
    /// until the pause reaches `interval`.
    fn reschedule_end_rechecks(&mut self, ids: &[JobId], interval: Duration) {
        let now = tokio::time::Instant::now();
        for id in ids {
            let Some(job) = self.jobs.get_mut(id) else {
                continue;
            };
            let ended = job.status.as_ref().is_some_and(|s| s.state.is_terminal());
            job.end_recheck = match job.end_recheck {
                Some((pause, _)) if !ended && pause < interval => Some((pause * 2, now + pause)),
                _ => None,
            };
        }
    }

    /// Counts the jobs `events` show ended out of the tracker's jobs in the scheduler,
    /// saying whether any was one; such a job that was forgotten while it ran is let go now.
    fn free_room(&mut self, events: &[Event]) -> bool {
        let mut freed = false;
        for event in events {
            if let Event::Changed(change) = event
                && change.status.state.is_terminal()
                && self.holds.ended(&change.id)
            {
                freed = true;
                if self
                    .jobs
                    .get(&change.id)
                    .is_some_and(|job| !job.explicitly && job.waits == 0)
                {
                    self.jobs.remove(&change.id);
                }
            }
        }
        freed
    }

    /// When the next job whose end an event told is due to be polled again.
    fn next_end_recheck(&self) -> Option<tokio::time::Instant> {
        self.jobs
            .values()
            .filter_map(|job| job.end_recheck.map(|(_, at)| at))
            .min()
    }

    /// Marks the jobs whose end recheck is due by `now` for the next early poll.
    fn end_rechecks_due(&mut self, now: tokio::time::Instant) {
        let due = self
            .jobs
            .iter()
            .filter(|(_, job)| job.end_recheck.is_some_and(|(_, at)| at <= now))
            .map(|(id, _)| id.clone());
        self.due.extend(due);
    }
}

/// Passes `events` on to every subscriber as one batch, dropping those whose receiver is
/// gone.
fn deliver(subscribers: &mut Vec<mpsc::UnboundedSender<Batch>>, events: Vec<Event>) {
    if events.is_empty() {
        return;
    }
    let batch: Batch = events.into();
    subscribers.retain(|subscriber| subscriber.send(Arc::clone(&batch)).is_ok());
}

async fn poll_forever(shared: Arc<Shared>) {
    let gap = shared.interval.min(EARLY_POLL_GAP);
    let start = tokio::time::Instant::now() + shared.interval;
    let mut ticks = tokio::time::interval_at(start, shared.interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last: Option<tokio::time::Instant> = None;
    loop {
        let recheck = shared.lock().next_end_recheck();
        let all = tokio::select! {
            _ = ticks.tick() => true,
            () = sleep_until_some(recheck) => {
                shared.lock().end_rechecks_due(tokio::time::Instant::now());
                false
            }
            () = shared.poll_now.notified() => false,
        };
        if !all && let Some(last) = last {
            tokio::time::sleep_until(last + gap).await;
        }
        last = Some(tokio::time::Instant::now());
        shared.poll(all).await;
    }
}

/// What a submit answers for a job the backend's batch gave no answer for.
fn not_answered_submit() -> Error {
    Error::new(
        ErrorKind::SubmitOutcomeUnknown,
        "the backend's batched submit gave no answer for this job",
    )
}

/// What a wait returns once the tracker is dropped.
fn tracker_stopped() -> Error {
    Error::new(ErrorKind::Io, "the tracker stopped")
}

/// What a wait returns for a poll that failed permanently while it waited.
fn poll_failed(err: &Error) -> Error {
    Error::new(err.kind(), err.message()).permanent()
}

/// Why a failed submit holds its job: the scheduler's submit limit, or an answer lost
/// (the job may be in the scheduler; submitting its key again finds it).
fn held_by(err: &Error) -> Option<HeldLocally> {
    let message = err.message().to_owned();
    if err.refusal() == Some(Refusal::SubmitLimit) {
        Some(HeldLocally::SubmitLimit { message })
    } else if err.kind() == ErrorKind::SubmitOutcomeUnknown {
        Some(HeldLocally::OutcomeUnknown { message })
    } else {
        None
    }
}

/// The refusal a held job met when its turn came, for each caller that asks about it.
fn refused_again(err: &Error) -> Error {
    err.again().permanent()
}

/// Submits held jobs when one of the tracker's jobs ends, and once per interval while any
/// are held: the scheduler's limit may count jobs the tracker does not follow, whose end
/// it never sees.
async fn submit_held_forever(shared: Arc<Shared>) {
    loop {
        tokio::select! {
            () = shared.room_freed.notified() => {}
            () = tokio::time::sleep(shared.interval) => {}
        }
        if shared.lock().holds.any_held() {
            shared.submit_held().await;
        }
    }
}

/// Sleeps until `at`, or forever without one.
async fn sleep_until_some(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Keeps one run of `source` open, merging its events, and opens it again with backoff
/// whenever it ends or fails to open.
async fn follow_events(shared: Arc<Shared>, source: Arc<dyn EventSource>) {
    let mut backoff = event_backoff();
    loop {
        let opened = tokio::time::Instant::now();
        let ended = match source.open().await {
            Ok(mut stream) => {
                {
                    let mut state = shared.lock();
                    state.events.connected = true;
                    state.events.runs += 1;
                }
                while let Some(event) = stream.recv().await {
                    shared.apply(event);
                }
                Error::new(ErrorKind::ConnectionLost, "the event source's run ended")
            }
            Err(err) => err,
        };
        if opened.elapsed() >= EVENT_RUN_HEALTHY {
            backoff = event_backoff();
        }
        let delay = backoff.next().unwrap_or(EVENT_RETRY_MAX);
        tracing::warn!(backend = shared.backend.name(), error = %ended, ?delay, "job events stopped; opening them again");
        {
            let mut state = shared.lock();
            state.events.connected = false;
            state.events.last_failure = Some(Arc::new(ended));
        }
        tokio::time::sleep(delay).await;
    }
}

/// The pauses between an event source's runs: [`EVENT_RETRY_MIN`] doubling to
/// [`EVENT_RETRY_MAX`], with jitter so that trackers that lost their source together (a
/// login node rebooted) do not all come back in the same second.
fn event_backoff() -> impl Iterator<Item = Duration> {
    let seed = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |since| since.as_nanos() as u64)
        ^ u64::from(std::process::id());
    ExponentialBuilder::default()
        .with_min_delay(EVENT_RETRY_MIN)
        .with_max_delay(EVENT_RETRY_MAX)
        .with_jitter()
        .with_jitter_seed(seed)
        .without_max_times()
        .build()
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use super::*;
    use crate::backend::MockBatchBackend;
    use crate::cause::{CancelledBy, FailureCause};
    use crate::events::EventKind;
    use crate::state::JobState;

    fn status(state: JobState) -> JobStatus {
        JobStatus::new(state, format!("{state:?}").to_uppercase())
    }

    /// What a status call answers when every id asked about is in `state`.
    fn every(ids: &[JobId], state: JobState) -> HashMap<JobId, JobStatus> {
        ids.iter().map(|id| (id.clone(), status(state))).collect()
    }

    /// A mock backend named `mock` with `source` as its event source, and no status
    /// answers yet.
    fn mock(source: Option<Arc<ScriptedSource>>) -> MockBatchBackend {
        let mut backend = MockBatchBackend::new();
        backend.expect_name().return_const("mock".to_owned());
        backend
            .expect_events()
            .returning(move || source.clone().map(|source| source as Arc<dyn EventSource>));
        backend
    }

    /// A backend whose status calls answer, in turn, each of `polls`: every id asked about
    /// in the given state, or the error. The last answer repeats.
    fn backend(polls: Vec<Result<JobState>>) -> Arc<dyn BatchBackend> {
        let mut polls = VecDeque::from(polls);
        let mut backend = mock(None);
        backend.expect_status().returning(move |ids| {
            let answer = if polls.len() > 1 {
                polls.pop_front()
            } else {
                polls.front().map(|last| match last {
                    Ok(state) => Ok(*state),
                    Err(err) => Err(Error::new(err.kind(), err.message())),
                })
            };
            let state = answer.unwrap_or(Ok(JobState::Unknown))?;
            Ok(every(ids, state))
        });
        Arc::new(backend)
    }

    fn tracker(backend: Arc<dyn BatchBackend>) -> Tracker {
        Tracker::new(backend, Duration::from_secs(10)).unwrap()
    }

    #[test]
    fn observations_follow_the_state_machine() {
        use JobState::*;
        let mut with_exit = status(Succeeded);
        with_exit.exit_code = Some(0);
        let cases = [
            (None, status(Queued), Observed::Changed),
            (Some(status(Queued)), status(Queued), Observed::Unchanged),
            (Some(status(Queued)), status(Running), Observed::Changed),
            (Some(status(Running)), status(Unknown), Observed::Changed),
            (Some(status(Unknown)), status(Failed), Observed::Changed),
            (
                Some(status(Succeeded)),
                with_exit.clone(),
                Observed::Changed,
            ),
            (Some(with_exit.clone()), with_exit, Observed::Unchanged),
            (
                Some(status(Succeeded)),
                status(Running),
                Observed::Backwards,
            ),
            (Some(status(Failed)), status(Unknown), Observed::Backwards),
            (
                Some(status(Cancelled)),
                status(Succeeded),
                Observed::Backwards,
            ),
        ];
        for (last, next, expected) in cases {
            assert_eq!(
                observe(last.as_ref(), &next),
                expected,
                "{last:?} -> {next:?}"
            );
        }
    }

    #[test]
    fn bad_settings_are_refused_with_a_clear_error() {
        let err = Tracker::new(backend(vec![]), Duration::from_secs(1)).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
        assert!(err.message().contains("tokio runtime"), "{err}");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let _inside = runtime.enter();
        let err = Tracker::new(backend(vec![]), Duration::ZERO).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
        assert!(err.message().contains("longer than zero"), "{err}");
    }

    /// One status call per poll for all followed jobs; only changes are delivered; a
    /// failed call is visible and delivers nothing; forgotten jobs are not asked about.
    #[tokio::test(start_paused = true)]
    async fn one_call_per_interval_and_changes_only_on_change() {
        let mut backend = mock(None);
        let mut calls = 0;
        backend.expect_status().returning(move |ids| {
            calls += 1;
            if calls == 3 {
                return Err(Error::new(ErrorKind::Unreachable, "connection refused"));
            }
            let running = calls >= 2;
            Ok(ids
                .iter()
                .map(|id| {
                    let state = if running && id.as_str() == "1" {
                        JobState::Running
                    } else {
                        JobState::Queued
                    };
                    (id.clone(), status(state))
                })
                .collect())
        });
        let polled = Arc::new(Mutex::new(Vec::new()));
        let report = Arc::clone(&polled);
        let tracker =
            Tracker::with_poll_hook(Arc::new(backend), Duration::from_secs(10), move |poll| {
                report
                    .lock()
                    .unwrap()
                    .push((poll.jobs, poll.failure.map(|e| e.kind())));
            })
            .unwrap();
        let mut changes = tracker.changes();
        tracker.follow(JobId::from("1"));
        tracker.follow(JobId::from("2"));
        let mut first = vec![changes.recv().await, changes.recv().await];
        first.sort_by_key(|c| c.as_ref().map(|(id, _)| id.clone()));
        assert_eq!(
            first,
            [
                Some((JobId::from("1"), status(JobState::Queued))),
                Some((JobId::from("2"), status(JobState::Queued)))
            ],
            "both seen for the first time"
        );
        assert_eq!(tracker.polls(), 1, "two jobs, one call");

        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(
            changes.recv().await,
            Some((JobId::from("1"), status(JobState::Running))),
            "only the job that changed"
        );
        assert_eq!(
            tracker.status(&JobId::from("1")).map(|s| s.state),
            Some(JobState::Running)
        );

        while tracker.polls() < 3 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        assert!(
            matches!(tracker.last_failure(), Some(err) if err.kind() == ErrorKind::Unreachable)
        );
        assert_eq!(
            *polled.lock().unwrap(),
            [(2, None), (2, None), (2, Some(ErrorKind::Unreachable))],
            "every poll is reported, failed ones too"
        );

        tracker.forget(&JobId::from("1"));
        tracker.forget(&JobId::from("2"));
        assert_eq!(tracker.followed(), 0);
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert_eq!(tracker.polls(), 3, "nothing followed, nothing asked");
        assert_eq!(tracker.status(&JobId::from("1")), None);
        drop(tracker);
        assert_eq!(
            changes.recv().await,
            None,
            "a failed poll delivers no change"
        );
    }

    /// A burst of newly followed jobs (a thousand submits at once) costs a poll per second,
    /// not a poll per job.
    #[tokio::test(start_paused = true)]
    async fn a_burst_of_new_jobs_is_polled_once_per_gap() {
        let tracker = tracker(backend(vec![Ok(JobState::Queued)]));
        for i in 0..100 {
            tracker.follow(JobId::from(i.to_string()));
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // Two seconds of new jobs: the first polled at once, then one poll a second.
        assert!(
            (2..=3).contains(&tracker.polls()),
            "{} polls",
            tracker.polls()
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(tracker.polls() <= 4, "{} polls", tracker.polls());
    }

    /// Many waits share the tracker's polls, and each job is followed only while waited on.
    #[tokio::test(start_paused = true)]
    async fn concurrent_waits_share_one_poll_per_interval() {
        let tracker = Arc::new(tracker(backend(vec![
            Ok(JobState::Queued),
            Ok(JobState::Running),
            Ok(JobState::Succeeded),
        ])));
        let ended = wait_all(&tracker, 20).await;
        for status in ended {
            assert_eq!(status.unwrap().state, JobState::Succeeded);
        }
        assert_eq!(tracker.polls(), 3, "20 waits, 3 polls");
        assert_eq!(tracker.followed(), 0, "no wait left, nothing followed");
    }

    /// Waits at once for jobs `0` to `jobs - 1`, each on its own task.
    async fn wait_all(tracker: &Arc<Tracker>, jobs: usize) -> Vec<Result<JobStatus>> {
        let mut waits = tokio::task::JoinSet::new();
        for i in 0..jobs {
            let tracker = Arc::clone(tracker);
            waits.spawn(async move {
                let id = JobId::from(i.to_string());
                tracker.wait(&id, Duration::from_secs(60)).await
            });
        }
        waits.join_all().await
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_times_out_with_what_was_last_seen() {
        let tracker = tracker(backend(vec![Ok(JobState::Running)]));
        let id = JobId::from("7");
        let err = tracker
            .wait(&id, Duration::from_secs(25))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::WaitTimedOut);
        assert!(err.is_temporary(), "waiting again can help");
        assert_eq!(
            err.to_string(),
            "wait timed out: job 7 did not end within 25s: last seen Running"
        );
        assert_eq!(
            tracker.followed(),
            0,
            "the wait's job is no longer followed"
        );
        assert_eq!(tracker.polls(), 3, "at once, then at 10 s and 20 s");
    }

    #[tokio::test(start_paused = true)]
    async fn temporary_poll_failures_are_visible_and_polling_goes_on() {
        let unreachable = || Err(Error::new(ErrorKind::Unreachable, "connection refused"));
        let tracker = tracker(backend(vec![
            unreachable(),
            unreachable(),
            Ok(JobState::Succeeded),
        ]));
        let id = JobId::from("7");
        tracker.follow(id.clone());
        while tracker.polls() < 1 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let failure = tracker.last_failure().unwrap();
        assert_eq!(failure.to_string(), "host unreachable: connection refused");
        let ended = tracker.wait(&id, Duration::from_secs(60)).await.unwrap();
        assert_eq!(ended.state, JobState::Succeeded);
        assert!(tracker.last_failure().is_none(), "cleared by a good poll");
        assert_eq!(tracker.followed(), 1, "followed until forgotten");
    }

    #[tokio::test(start_paused = true)]
    async fn a_permanent_poll_failure_ends_every_wait_with_it() {
        let denied = || {
            Err(Error::new(
                ErrorKind::PermissionDenied,
                "squeue: access denied",
            ))
        };
        let tracker = Arc::new(tracker(backend(vec![Ok(JobState::Queued), denied()])));
        for result in wait_all(&tracker, 2).await {
            let err = result.unwrap_err();
            assert_eq!(err.kind(), ErrorKind::PermissionDenied);
            assert!(!err.is_temporary());
            assert_eq!(err.message(), "squeue: access denied");
        }
        assert_eq!(tracker.polls(), 2);
    }

    /// A backend that leaves a job out of its answer breaks the contract: the job is
    /// Unknown with the reason, and nothing panics.
    #[tokio::test(start_paused = true)]
    async fn a_job_left_out_of_the_answer_is_unknown_with_a_reason() {
        let mut backend = mock(None);
        backend.expect_status().returning(|_| Ok(HashMap::new()));
        let tracker = tracker(Arc::new(backend));
        let mut changes = tracker.changes();
        let id = JobId::from("7");
        let err = tracker.wait(&id, Duration::from_secs(5)).await.unwrap_err();
        assert_eq!(
            err.message(),
            "job 7 did not end within 5s: last seen Unknown (the backend did not answer for this job)"
        );
        let (changed, status) = changes.recv().await.unwrap();
        assert_eq!(changed, id);
        assert_eq!(status, not_answered());
    }

    /// A status that would take a job out of a terminal state is ignored.
    #[tokio::test(start_paused = true)]
    async fn a_terminal_state_is_never_left() {
        let tracker = tracker(backend(vec![Ok(JobState::Failed), Ok(JobState::Running)]));
        let mut changes = tracker.changes();
        let id = JobId::from("7");
        tracker.follow(id.clone());
        tokio::time::sleep(Duration::from_secs(35)).await;
        assert_eq!(tracker.polls(), 4);
        assert_eq!(tracker.status(&id), Some(status(JobState::Failed)));
        assert_eq!(changes.recv().await, Some((id, status(JobState::Failed))));
        drop(tracker);
        assert_eq!(changes.recv().await, None, "one change only");
    }

    /// A wait passes on each status once, in order, starting with one seen before it.
    #[tokio::test(start_paused = true)]
    async fn wait_with_passes_on_each_status_once() {
        let tracker = tracker(backend(vec![
            Ok(JobState::Held),
            Ok(JobState::Queued),
            Ok(JobState::Queued),
            Ok(JobState::Running),
            Ok(JobState::Running),
            Ok(JobState::Succeeded),
        ]));
        let id = JobId::from("7");
        tracker.follow(id.clone());
        while tracker.polls() < 1 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let mut seen = Vec::new();
        let ended = tracker
            .wait_with(&id, Duration::from_secs(120), |s| seen.push(s.state))
            .await
            .unwrap();
        assert_eq!(ended.state, JobState::Succeeded);
        use JobState::*;
        assert_eq!(seen, [Held, Queued, Running, Succeeded]);
    }

    /// Waits that end leave nothing behind, even while no poll delivers anything.
    #[tokio::test(start_paused = true)]
    async fn ended_waits_leave_no_subscriber_behind() {
        let tracker = tracker(backend(vec![Ok(JobState::Running)]));
        let id = JobId::from("7");
        tracker.follow(id.clone());
        for _ in 0..100 {
            let err = tracker.wait(&id, Duration::from_millis(10)).await;
            assert_eq!(err.unwrap_err().kind(), ErrorKind::WaitTimedOut);
        }
        assert_eq!(
            tracker.polls(),
            1,
            "no poll, so no delivery, pruned the closed ones"
        );
        assert_eq!(
            tracker.shared.lock().subscribers.len(),
            1,
            "only the last wait's, until the next subscription or delivery"
        );
    }

    /// A wait dropped midway (the caller's own timeout) stops following its job.
    #[tokio::test(start_paused = true)]
    async fn a_dropped_wait_lets_its_job_go() {
        let tracker = tracker(backend(vec![Ok(JobState::Running)]));
        let id = JobId::from("7");
        let cut = tokio::time::timeout(
            Duration::from_secs(15),
            tracker.wait(&id, Duration::from_secs(60)),
        )
        .await;
        assert!(cut.is_err());
        assert_eq!(tracker.followed(), 0);
        let polls = tracker.polls();
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(tracker.polls(), polls, "nothing followed, nothing asked");
    }

    /// A test double of an event source (not a scheduler): each open fails with the next
    /// of the scripted errors, or, once they are used up, opens a run whose events the test
    /// sends through [`live`](Self::live); dropping that sender ends the run.
    #[derive(Debug, Default)]
    struct ScriptedSource {
        failures: Mutex<VecDeque<ErrorKind>>,
        live: Mutex<Option<mpsc::Sender<JobEvent>>>,
        opened: Mutex<Vec<tokio::time::Instant>>,
    }

    impl ScriptedSource {
        fn failing(failures: impl IntoIterator<Item = ErrorKind>) -> Arc<Self> {
            Arc::new(Self {
                failures: Mutex::new(failures.into_iter().collect()),
                ..Self::default()
            })
        }

        /// The sender of the open run, once there is one.
        async fn live(&self) -> mpsc::Sender<JobEvent> {
            loop {
                if let Some(sender) = self.live.lock().unwrap().take() {
                    return sender;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }

        /// The times of the opens so far, failed ones too.
        fn opened(&self) -> Vec<tokio::time::Instant> {
            self.opened.lock().unwrap().clone()
        }
    }

    #[async_trait::async_trait]
    impl EventSource for ScriptedSource {
        async fn open(&self) -> Result<crate::events::EventStream> {
            self.opened
                .lock()
                .unwrap()
                .push(tokio::time::Instant::now());
            if let Some(kind) = self.failures.lock().unwrap().pop_front() {
                return Err(Error::new(kind, "scripted failure"));
            }
            let (sender, events) = mpsc::channel(crate::events::EVENT_BUFFER);
            *self.live.lock().unwrap() = Some(sender);
            Ok(events)
        }
    }

    /// The ids each status call asked about, in order.
    type Asked = Arc<Mutex<Vec<Vec<JobId>>>>;

    /// A tracker polling hourly (so that, after a new job's first poll, only events and
    /// the polls they ask for change anything) of a backend with `source`, whose status
    /// calls answer with `answer` (given the call's number, from 0) and are recorded (their
    /// ids sorted).
    fn evented_tracker(
        source: &Arc<ScriptedSource>,
        answer: impl FnMut(usize, &JobId) -> JobStatus + Send + 'static,
    ) -> (Tracker, Asked) {
        recording_tracker(Some(Arc::clone(source)), answer)
    }

    /// [`evented_tracker`], with `source` or without events.
    fn recording_tracker(
        source: Option<Arc<ScriptedSource>>,
        mut answer: impl FnMut(usize, &JobId) -> JobStatus + Send + 'static,
    ) -> (Tracker, Asked) {
        let asked = Asked::default();
        let record = Arc::clone(&asked);
        let mut backend = mock(source);
        backend.expect_status().returning(move |ids| {
            let mut asked = record.lock().unwrap();
            let call = asked.len();
            let mut ids = ids.to_vec();
            ids.sort_by(|a, b| a.as_str().cmp(b.as_str()));
            asked.push(ids.clone());
            Ok(ids
                .iter()
                .map(|id| (id.clone(), answer(call, id)))
                .collect())
        });
        let tracker = Tracker::new(Arc::new(backend), Duration::from_secs(3600)).unwrap();
        (tracker, asked)
    }

    /// Without events, a newly followed job's early poll also asks about the jobs last seen
    /// running, so that one that ended meanwhile is seen then, not an interval later; a
    /// queued job waits for the interval.
    #[tokio::test(start_paused = true)]
    async fn without_events_an_early_poll_also_asks_about_running_jobs() {
        let (tracker, asked) = recording_tracker(None, |call, id| match (call, id.as_str()) {
            (0, "1") => status(JobState::Running),
            (0, _) => status(JobState::Queued),
            (_, "3") => status(JobState::Queued),
            _ => status(JobState::Succeeded),
        });
        let mut changes = tracker.changes();
        tracker.follow(JobId::from("1"));
        tracker.follow(JobId::from("2"));
        for _ in 0..2 {
            changes.recv_change().await.unwrap();
        }
        let started = tokio::time::Instant::now();
        tracker.follow(JobId::from("3"));
        let mut seen: Vec<(String, JobState)> = Vec::new();
        for _ in 0..2 {
            let change = changes.recv_change().await.unwrap();
            seen.push((change.id.as_str().to_owned(), change.status.state));
        }
        seen.sort();
        assert_eq!(
            seen,
            [
                ("1".to_owned(), JobState::Succeeded),
                ("3".to_owned(), JobState::Queued)
            ]
        );
        assert!(
            started.elapsed() <= EARLY_POLL_GAP,
            "{:?}",
            started.elapsed()
        );
        assert_eq!(
            *asked.lock().unwrap(),
            [
                vec![JobId::from("1"), JobId::from("2")],
                vec![JobId::from("1"), JobId::from("3")]
            ],
            "the queued job 2 waits for the interval"
        );
    }

    fn event(id: &str, kind: EventKind) -> JobEvent {
        JobEvent::new(JobId::from(id), 0, kind)
    }

    /// Events heard late (a follower restarted after an outage replays them) date the job
    /// by the times they carry, not by when they arrived: a 20 s job reads as 20 s.
    #[tokio::test(start_paused = true)]
    async fn late_events_date_the_job_by_their_own_times() {
        let source = Arc::new(ScriptedSource::default());
        let (tracker, _) = evented_tracker(&source, |_, _| status(JobState::Queued));
        let mut changes = tracker.changes();
        let id = JobId::from("1");
        tracker.follow(id.clone());
        changes.recv_change().await.unwrap();
        let started = SystemTime::now() - Duration::from_secs(50);
        let ended = started + Duration::from_secs(20);
        let live = source.live().await;
        live.send(event("1", EventKind::Started).at(started))
            .await
            .unwrap();
        live.send(event("1", EventKind::Exited(0)).at(ended))
            .await
            .unwrap();
        let done = tracker.wait(&id, Duration::from_secs(1)).await.unwrap();
        assert_eq!(done.state, JobState::Succeeded);
        assert_eq!(
            (done.started_at, done.ended_at),
            (Some(started), Some(ended))
        );
    }

    /// Started and ended by events alone, after one poll: Running, then Succeeded or Failed
    /// with the exit code's cause, in `changes()` as pushed changes; `wait` returns on the
    /// event; a later poll adds its details in a change of the same state and cannot take
    /// the job out.
    #[tokio::test(start_paused = true)]
    async fn events_start_and_end_jobs_between_polls() {
        let source = Arc::new(ScriptedSource::default());
        // The first poll sees the jobs queued; the next one (wrongly) running.
        let (tracker, asked) = evented_tracker(&source, |call, _| match call {
            0 => status(JobState::Queued),
            _ => status(JobState::Running),
        });
        let mut changes = tracker.changes();
        let (ok, bad) = (JobId::from("1"), JobId::from("2"));
        tracker.follow(ok.clone());
        tracker.follow(bad.clone());
        for _ in 0..2 {
            assert_eq!(changes.recv_change().await.unwrap().seen, SeenBy::Poll);
        }
        let live = source.live().await;
        for (id, kind) in [
            ("1", EventKind::Started),
            ("1", EventKind::Exited(0)),
            ("2", EventKind::Exited(3)),
        ] {
            live.send(event(id, kind)).await.unwrap();
        }
        let mut seen = Vec::new();
        for _ in 0..3 {
            let change = changes.recv_change().await.unwrap();
            seen.push((
                change.id.clone(),
                change.status.state,
                change.status.cause.clone(),
                change.seen,
            ));
        }
        assert_eq!(
            seen,
            [
                (ok.clone(), JobState::Running, None, SeenBy::Event),
                (ok.clone(), JobState::Succeeded, None, SeenBy::Event),
                (
                    bad.clone(),
                    JobState::Failed,
                    Some(FailureCause::ExitCode(3)),
                    SeenBy::Event
                ),
            ]
        );
        let done = tracker.wait(&ok, Duration::from_secs(1)).await.unwrap();
        assert_eq!((done.state, done.exit_code), (JobState::Succeeded, Some(0)));
        assert_eq!(done.native_state, crate::events::NATIVE_STATE_EVENT);
        assert!(
            done.started_at.is_some() && done.ended_at.is_some(),
            "{done:?}"
        );
        assert_eq!(
            asked.lock().unwrap().len(),
            1,
            "one poll: the ends came from events"
        );
        let health = tracker.event_health();
        assert!(health.enabled && health.connected, "{health:?}");
        assert_eq!((health.runs, health.received, health.applied), (1, 3, 3));

        // The hourly poll sees job 1 Running: too late, it ended.
        tokio::time::sleep(Duration::from_secs(3601)).await;
        assert_eq!(asked.lock().unwrap().len(), 2);
        assert_eq!(
            tracker.status(&ok).map(|s| s.state),
            Some(JobState::Succeeded)
        );
        drop(tracker);
        assert_eq!(
            changes.recv_change().await,
            None,
            "no change after the ends"
        );
    }

    /// Events of ids the tracker does not follow, or of tasks a job does not have, change
    /// nothing; each is counted as received.
    #[tokio::test(start_paused = true)]
    async fn events_of_jobs_not_followed_are_ignored() {
        let source = Arc::new(ScriptedSource::default());
        let (tracker, _) = evented_tracker(&source, |_, _| status(JobState::Queued));
        let mut changes = tracker.changes();
        let id = JobId::from("1");
        tracker.follow(id.clone());
        assert_eq!(changes.recv().await.unwrap().1.state, JobState::Queued);
        let live = source.live().await;
        for event in [
            event("999", EventKind::Exited(0)),
            event("../1; rm -rf ~", EventKind::Started),
            event("", EventKind::Removed),
            JobEvent::new(id.clone(), 5, EventKind::Exited(0)),
            event("1", EventKind::Started),
        ] {
            live.send(event).await.unwrap();
        }
        let (changed, running) = changes.recv().await.unwrap();
        assert_eq!(
            (changed, running.state),
            (id, JobState::Running),
            "only the last one counts"
        );
        let health = tracker.event_health();
        assert_eq!(
            (health.received, health.applied, health.early_polls),
            (5, 1, 0)
        );
        assert_eq!(tracker.polls(), 1, "no early poll for a job not followed");
    }

    /// A signal, a removal or an exit above 128 decides nothing: it asks for an early poll
    /// of that job alone, whose answer sets the state and cause; a repeat asks nothing.
    #[tokio::test(start_paused = true)]
    async fn an_ambiguous_end_asks_for_an_early_poll_of_that_job() {
        let source = Arc::new(ScriptedSource::default());
        let (tracker, asked) = evented_tracker(&source, |call, id| match (call, id.as_str()) {
            (0, _) => status(JobState::Running),
            (_, "1") => status(JobState::Cancelled)
                .with_cause(FailureCause::Cancelled(CancelledBy::Request)),
            _ => status(JobState::Failed).with_cause(FailureCause::MemoryExceeded),
        });
        let mut changes = tracker.changes();
        tracker.follow(JobId::from("1"));
        tracker.follow(JobId::from("2"));
        for _ in 0..2 {
            changes.recv().await.unwrap();
        }
        let live = source.live().await;
        live.send(event("1", EventKind::Signalled(15)))
            .await
            .unwrap();
        let change = changes.recv_change().await.unwrap();
        assert_eq!((change.id.as_str(), change.seen), ("1", SeenBy::Poll));
        assert_eq!(change.status.state, JobState::Cancelled);
        assert_eq!(
            change.status.cause,
            Some(FailureCause::Cancelled(CancelledBy::Request)),
            "the scheduler's words set the cause"
        );
        assert_eq!(
            *asked.lock().unwrap(),
            [
                vec![JobId::from("1"), JobId::from("2")],
                vec![JobId::from("1")]
            ],
            "the early poll asked about job 1 alone"
        );
        live.send(event("1", EventKind::Signalled(15)))
            .await
            .unwrap();
        live.send(event("2", EventKind::Exited(137))).await.unwrap();
        let change = changes.recv_change().await.unwrap();
        assert_eq!((change.id.as_str(), change.seen), ("2", SeenBy::Poll));
        assert_eq!(change.status.cause, Some(FailureCause::MemoryExceeded));
        assert_eq!(tracker.polls(), 3, "the repeated signal asked for nothing");
        assert_eq!(tracker.event_health().early_polls, 2);
    }

    /// A scheduler that still shows a signalled job active at the early poll (PBS keeps a
    /// killed job in `R`, then `E`, for seconds) is asked again after 2 s, 4 s, 8 s… until it
    /// shows the end, long before the hourly poll; then no more early polls.
    #[tokio::test(start_paused = true)]
    async fn a_signalled_job_still_active_at_its_early_poll_is_polled_again_until_it_ends() {
        let source = Arc::new(ScriptedSource::default());
        let (tracker, asked) = evented_tracker(&source, |call, _| match call {
            0..=2 => status(JobState::Running),
            _ => status(JobState::Cancelled)
                .with_cause(FailureCause::Cancelled(CancelledBy::Request)),
        });
        let mut changes = tracker.changes();
        let id = JobId::from("1");
        tracker.follow(id.clone());
        changes.recv().await.unwrap();
        let signalled = tokio::time::Instant::now();
        source
            .live()
            .await
            .send(event("1", EventKind::Signalled(15)))
            .await
            .unwrap();
        let change = changes.recv_change().await.unwrap();
        assert_eq!(change.status.state, JobState::Cancelled);
        assert_eq!(change.seen, SeenBy::Poll);
        let waited = signalled.elapsed();
        assert!(
            (Duration::from_secs(6)..Duration::from_secs(8)).contains(&waited),
            "polled at once, then 2 s and 4 s later: {waited:?}"
        );
        assert_eq!(asked.lock().unwrap().len(), 4);
        tokio::time::sleep(Duration::from_secs(1800)).await;
        assert_eq!(
            asked.lock().unwrap().len(),
            4,
            "no poll after the end until the interval's"
        );
        assert_eq!(tracker.event_health().early_polls, 1);
    }

    /// A source that fails to open, or whose run ends, is opened again after 1 s, 2 s,
    /// 4 s… (each plus up to as much again), and after 1 s again once a run lasted
    /// [`EVENT_RUN_HEALTHY`]; the health says what happened meanwhile.
    #[tokio::test(start_paused = true)]
    async fn a_source_that_fails_or_ends_is_opened_again_with_backoff() {
        let source = ScriptedSource::failing([
            ErrorKind::Unreachable,
            ErrorKind::ConnectionLost,
            ErrorKind::Unreachable,
        ]);
        let (tracker, _) = evented_tracker(&source, |_, _| status(JobState::Queued));
        let within = |gap: Duration, base: u64| {
            let base = Duration::from_secs(base);
            assert!(
                base <= gap && gap <= 2 * base,
                "{gap:?} for a pause of {base:?}"
            );
        };
        let live = source.live().await;
        let opened = source.opened();
        assert_eq!(opened.len(), 4, "three failed opens, then a run");
        for (pair, base) in opened.windows(2).zip([1, 2, 4]) {
            within(pair[1] - pair[0], base);
        }
        let health = tracker.event_health();
        assert!(health.connected, "{health:?}");
        assert_eq!(health.runs, 1);
        assert_eq!(health.last_failure.unwrap().kind(), ErrorKind::Unreachable);

        // A run that ends soon after it opened: the pause goes on growing.
        drop(live);
        let ended = tokio::time::Instant::now();
        tokio::time::sleep(Duration::from_millis(1)).await;
        let health = tracker.event_health();
        assert!(!health.connected, "{health:?}");
        let failure = health.last_failure.unwrap();
        assert_eq!(failure.kind(), ErrorKind::ConnectionLost);
        assert_eq!(failure.message(), "the event source's run ended");
        let live = source.live().await;
        within(*source.opened().last().unwrap() - ended, 8);

        // A run that lasted long enough was healthy: the next pause is the first again.
        tokio::time::sleep(EVENT_RUN_HEALTHY).await;
        drop(live);
        let ended = tokio::time::Instant::now();
        let _live = source.live().await;
        within(*source.opened().last().unwrap() - ended, 1);
        assert_eq!(tracker.event_health().runs, 3);
    }

    /// With events off, the source is never opened.
    #[tokio::test(start_paused = true)]
    async fn events_can_be_turned_off() {
        let source = Arc::new(ScriptedSource::default());
        let mut backend = mock(Some(Arc::clone(&source)));
        backend
            .expect_status()
            .returning(|ids| Ok(every(ids, JobState::Queued)));
        let tracker = Tracker::builder(Arc::new(backend), Duration::from_secs(10))
            .events(false)
            .build()
            .unwrap();
        tracker.follow(JobId::from("1"));
        tokio::time::sleep(Duration::from_secs(61)).await;
        assert!(source.opened().is_empty());
        assert!(!tracker.event_health().enabled);
        assert_eq!(tracker.polls(), 7, "at once, then every 10 s");
    }

    /// This process's resident memory, in KiB.
    fn resident_kib() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    /// A flood of 100,000 events (a hostile job's garbage: ids not followed with 4 KiB
    /// hold reasons, repeats, tasks a job does not have) changes only what it should and
    /// keeps nothing: the source's channel holds at most `EVENT_BUFFER` events, and what
    /// events told of a job holds one entry per task it has. The resident memory before
    /// and after is printed (run alone for a clean number).
    #[tokio::test(start_paused = true)]
    async fn a_flood_of_events_keeps_memory_bounded() {
        const FLOOD: u32 = 100_000;
        let source = Arc::new(ScriptedSource::default());
        let (tracker, _) = evented_tracker(&source, |_, _| status(JobState::Queued));
        let mut changes = tracker.changes();
        let id = JobId::from("1");
        tracker.follow(id.clone());
        changes.recv().await.unwrap();
        let live = source.live().await;
        let before = resident_kib();
        let reason = "x".repeat(4096);
        let producer = tokio::spawn(async move {
            for n in 0..FLOOD {
                let event = match n % 4 {
                    0 => event(
                        &format!("{}", 1_000_000 + n),
                        EventKind::Held(Some(reason.clone())),
                    ),
                    1 => event("1", EventKind::Started),
                    2 => JobEvent::new(JobId::from("1"), n, EventKind::Exited(1)),
                    _ => event("1", EventKind::Held(Some(reason.clone()))),
                };
                live.send(event).await.unwrap();
            }
            live.send(event("1", EventKind::Exited(0))).await.unwrap();
        });
        let mut seen = Vec::new();
        while seen.last() != Some(&JobState::Succeeded) {
            let change = changes.recv_change().await.unwrap();
            assert_eq!(change.seen, SeenBy::Event);
            seen.push(change.status.state);
        }
        producer.await.unwrap();
        let after = resident_kib();
        eprintln!("flood of {FLOOD} events: resident {before} KiB before, {after} KiB after");
        assert_eq!(
            seen,
            [JobState::Running, JobState::Held, JobState::Succeeded]
        );
        let health = tracker.event_health();
        assert_eq!((health.received, health.applied), (u64::from(FLOOD) + 1, 3));
        let state = tracker.shared.lock();
        assert_eq!(state.jobs[&id].events.tasks(), 1, "task 0 only");
        assert_eq!(state.jobs.len(), 1, "no job followed for an event");
    }

    /// A poll whose call was in flight while an event changed the job answered with what
    /// the scheduler said before that event: its non-terminal status is skipped, so the job
    /// stays Running (a replaying source would not tell the start again), until a poll
    /// asked after the event applies.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_poll_older_than_an_event_does_not_undo_it() {
        let source = Arc::new(ScriptedSource::default());
        let (applied, wait_applied) = std::sync::mpsc::channel::<()>();
        let wait_applied = Mutex::new(wait_applied);
        let pushing = Arc::clone(&source);
        let mut calls = 0;
        let mut backend = mock(Some(Arc::clone(&source)));
        backend.expect_status().returning(move |ids| {
            calls += 1;
            if calls == 2 {
                // The job starts while the scheduler's answer is on its way.
                let live = pushing.live.lock().unwrap().clone().unwrap();
                live.try_send(event("1", EventKind::Started)).unwrap();
                // Hands this worker's queue (where the event task was just woken) over, so
                // the event is applied while this call blocks.
                tokio::task::block_in_place(|| wait_applied.lock().unwrap().recv().unwrap());
            }
            // Queued until then; running once the scheduler has caught up.
            let state = if calls <= 2 {
                JobState::Queued
            } else {
                JobState::Running
            };
            Ok(every(ids, state))
        });
        let tracker = Tracker::new(Arc::new(backend), Duration::from_millis(200)).unwrap();
        let mut changes = tracker.changes();
        let id = JobId::from("1");
        tracker.follow(id.clone());
        assert_eq!(changes.recv().await.unwrap().1.state, JobState::Queued);
        let change = changes.recv_change().await.unwrap();
        assert_eq!(
            (change.status.state, change.seen),
            (JobState::Running, SeenBy::Event)
        );
        applied.send(()).unwrap();
        while tracker.polls() < 3 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(
            tracker.status(&id).unwrap().native_state,
            "RUNNING",
            "a later poll applies"
        );
        let received = std::iter::from_fn(|| changes.events.try_recv().ok());
        let after: Vec<JobState> = changes
            .pending
            .drain(..)
            .chain(received.flat_map(|batch| batch.to_vec()))
            .filter_map(|event| match event {
                Event::Changed(change) => Some(change.status.state),
                Event::PollFailed(_) => None,
            })
            .collect();
        assert_eq!(
            after,
            [JobState::Running],
            "the second poll's Queued was skipped"
        );
    }

    /// One set-wait for 500 jobs is one subscriber, yields each end once, and lets every
    /// job go as it ends; the jobs still active at its timeout are named in the error.
    #[tokio::test(start_paused = true)]
    async fn a_set_wait_is_one_subscriber_and_yields_each_end_once() {
        let waiting = tracker(backend(vec![
            Ok(JobState::Running),
            Ok(JobState::Succeeded),
        ]));
        let ids: Vec<JobId> = (0..500).map(|n| JobId::from(n.to_string())).collect();
        let mut ends = waiting.wait_each(
            ids.iter().cloned().chain([ids[0].clone()]),
            Duration::from_secs(60),
        );
        assert_eq!(waiting.shared.lock().subscribers.len(), 1);
        assert_eq!((ends.remaining(), waiting.followed()), (500, 500));
        let mut ended = HashSet::new();
        while let Some(end) = ends.next().await {
            let end = end.unwrap();
            assert_eq!(end.status.state, JobState::Succeeded);
            assert!(ended.insert(end.id), "each job once");
        }
        assert_eq!(ended.len(), 500);
        assert_eq!(waiting.followed(), 0, "each let go as it ended");

        let stuck = tracker(backend(vec![Ok(JobState::Running)]));
        let mut ends = stuck.wait_each(ids[..7].to_vec(), Duration::from_secs(30));
        let err = ends.next().await.unwrap().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::WaitTimedOut);
        assert!(
            err.message().starts_with("7 jobs did not end within 30s:"),
            "{err}"
        );
        assert!(
            err.message().contains("last seen Running") && err.message().ends_with("and 2 more"),
            "{err}"
        );
        assert!(ends.next().await.is_none());
        drop(ends);
        assert_eq!(stuck.followed(), 0);
    }

    /// A batch through the tracker: each spec gets its own answer in order; a submit-limit
    /// refusal holds its job (and the jobs after it not yet submitted go behind it), another
    /// refusal is that job's error, and a key given twice gets one job.
    #[tokio::test(start_paused = true)]
    async fn a_batch_keeps_each_jobs_own_answer() {
        let mut mock = mock(None);
        mock.expect_status()
            .returning(|ids| Ok(every(ids, JobState::Running)));
        let limit = || {
            Error::new(ErrorKind::Rejected, "QOSMaxSubmitJobPerUserLimit")
                .with_refusal(Refusal::SubmitLimit)
        };
        mock.expect_submit_many().times(1).returning(move |specs| {
            let keys: Vec<&str> = specs.iter().map(|spec| spec.key.as_str()).collect();
            assert_eq!(
                keys,
                ["a", "bad", "c", "d", "e"],
                "one batch, the repeat left out"
            );
            vec![
                Ok(JobId::from("1")),
                Err(Error::invalid_input("no such partition")),
                Err(limit()),
                Ok(JobId::from("4")),
                Err(limit()),
            ]
        });
        let tracker = tracker(Arc::new(mock));
        let specs: Vec<JobSpec> = ["a", "bad", "c", "a", "d", "e"]
            .iter()
            .map(|key| JobSpec::new(JobKey::new(*key).unwrap(), "batch", "true"))
            .collect();
        let answers: Vec<String> = tracker
            .submit_many(specs)
            .await
            .into_iter()
            .map(|answer| match answer {
                Ok(Submitted::Job(id)) => format!("job {id}"),
                Ok(Submitted::Held(why)) => format!("held: {why}"),
                Err(err) => format!("error: {err}"),
            })
            .collect();
        let held = "held: held locally: the scheduler's submit limit: QOSMaxSubmitJobPerUserLimit";
        assert_eq!(answers[0], "job 1");
        assert!(
            answers[1].starts_with("error: ") && answers[1].contains("no such partition"),
            "{answers:?}"
        );
        assert_eq!(&answers[2..], [held, "job 1", "job 4", held]);
        let held: Vec<String> = tracker
            .held()
            .iter()
            .map(|(key, _)| key.to_string())
            .collect();
        assert_eq!(held, ["c", "e"]);
        assert_eq!(tracker.in_scheduler(), 2);
        assert_eq!(tracker.followed(), 2);
    }

    /// A submit whose answer was lost holds its job ahead of the jobs held behind its
    /// batch; the tracker submits its key again at its next round (a backend finds the job
    /// the lost submit made), and the set-wait sees every job end once, each key submitted
    /// until it had its id and never after.
    #[tokio::test(start_paused = true)]
    async fn a_lost_submit_answer_holds_its_job_until_its_key_finds_it() {
        let calls: Arc<Mutex<Vec<Vec<String>>>> = Arc::default();
        let mut mock = mock(None);
        mock.expect_status()
            .returning(|ids| Ok(every(ids, JobState::Succeeded)));
        mock.expect_submit_many().returning({
            let calls = Arc::clone(&calls);
            move |specs| {
                let keys: Vec<String> = specs.iter().map(|spec| spec.key.to_string()).collect();
                let first = calls.lock().unwrap().is_empty();
                calls.lock().unwrap().push(keys.clone());
                keys.iter()
                    .map(|key| match key.as_str() {
                        "b" if first => Err(Error::new(
                            ErrorKind::SubmitOutcomeUnknown,
                            "sbatch timed out",
                        )
                        .temporary()),
                        key => Ok(JobId::from(format!("id-{key}"))),
                    })
                    .collect()
            }
        });
        let tracker = Tracker::builder(Arc::new(mock), Duration::from_secs(10))
            .max_queued(3)
            .build()
            .unwrap();
        let keys: Vec<JobKey> = ["a", "b", "c", "d"]
            .iter()
            .map(|key| JobKey::new(*key).unwrap())
            .collect();
        let specs = keys
            .iter()
            .map(|key| JobSpec::new(key.clone(), "batch", "true"))
            .collect();
        let answers = tracker.submit_many(specs).await;
        let lost = HeldLocally::OutcomeUnknown {
            message: "sbatch timed out".to_owned(),
        };
        assert_eq!(answers[1].as_ref().unwrap(), &Submitted::Held(lost));
        let held: Vec<String> = tracker
            .held()
            .iter()
            .map(|(key, _)| key.to_string())
            .collect();
        assert_eq!(held, ["b", "d"], "the lost one first, as it was given");
        let mut ends = tracker.wait_each_submitted(keys, Duration::from_secs(600));
        let mut ended = Vec::new();
        while let Some(end) = ends.next().await {
            let end = end.unwrap();
            assert_eq!(end.status.state, JobState::Succeeded);
            ended.push(format!("{} {}", end.key.unwrap(), end.id));
        }
        ended.sort();
        assert_eq!(ended, ["a id-a", "b id-b", "c id-c", "d id-d"]);
        let calls = calls.lock().unwrap().clone();
        assert_eq!(calls[0], ["a", "b", "c"]);
        assert_eq!(calls[1..].concat(), ["b", "d"], "{calls:?}");
        assert!(tracker.held().is_empty());
    }

    /// max_queued(1) on the local scheduler: the jobs go in one at a time, in submission
    /// order, the held ones show Queued "held locally", and a job forgotten while it runs
    /// still frees room when it ends (and is let go then).
    #[tokio::test]
    async fn held_jobs_go_in_order_as_room_frees() {
        let dir = tempfile::tempdir().unwrap();
        let backend = Arc::new(crate::LocalBackend::new(dir.path()).unwrap());
        let tracker = Tracker::builder(backend, Duration::from_millis(50))
            .max_queued(1)
            .build()
            .unwrap();
        // The first runs until the checks below are done: the others stay held till then,
        // however slow the machine.
        let go = dir.path().join("go");
        let specs: Vec<JobSpec> = (0..4)
            .map(|n| {
                let script = if n == 0 {
                    format!("while [ ! -e '{}' ]; do sleep 0.05; done", go.display())
                } else {
                    "sleep 0.1".to_owned()
                };
                JobSpec::new(JobKey::new(format!("held-{n}")).unwrap(), "held", script)
            })
            .collect();
        let mut first = None;
        for spec in &specs {
            match tracker.submit(spec.clone()).await.unwrap() {
                Submitted::Job(id) => first = Some(id),
                Submitted::Held(why) => {
                    assert_eq!(why, HeldLocally::MaxQueued { limit: 1 });
                    assert_eq!(why.status().native_state, NATIVE_STATE_HELD_LOCALLY);
                }
            }
        }
        let first = first.unwrap();
        let held: Vec<String> = tracker
            .held()
            .iter()
            .map(|(key, _)| key.to_string())
            .collect();
        assert_eq!(held, ["held-1", "held-2", "held-3"]);
        // Submitting a held key again changes nothing.
        assert!(matches!(
            tracker.submit(specs[2].clone()).await.unwrap(),
            Submitted::Held(_)
        ));
        assert_eq!(tracker.held().len(), 3);
        tracker.forget(&first);
        std::fs::write(&go, "").unwrap();

        let mut started = Vec::new();
        for spec in &specs {
            let (_, status) = tracker
                .wait_submitted(&spec.key, Duration::from_secs(30))
                .await
                .unwrap();
            assert_eq!(status.state, JobState::Succeeded, "{status:?}");
            started.push(status.started_at.unwrap());
        }
        assert!(
            started.windows(2).all(|pair| pair[0] <= pair[1]),
            "{started:?}"
        );
        assert_eq!(tracker.in_scheduler(), 0);
        assert!(
            tracker.status(&first).is_none(),
            "the forgotten job was let go"
        );
        let unknown = JobKey::new("never-given").unwrap();
        let err = tracker
            .wait_submitted(&unknown, Duration::from_secs(1))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::NotFound);
    }
}
