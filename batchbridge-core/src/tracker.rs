//! Following jobs on one backend until they end: [`Tracker`].
//!
//! A tracker asks its backend about every job it follows in one batched
//! [`status`](BatchBackend::status) call per interval, whatever the number of jobs and of
//! tasks waiting on them (the backends answer any number of ids in a constant number of
//! commands). Waits ([`Tracker::wait`]) and change streams ([`Tracker::changes`]) all read
//! what those calls saw; none of them asks the backend itself.
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

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::{Notify, mpsc};
use tokio::task::JoinHandle;

use crate::backend::{BatchBackend, JobId, not_answered};
use crate::error::{Error, ErrorKind, Result};
use crate::state::JobStatus;

/// The least time between the starts of two polls when newly followed jobs ask for one
/// early: a burst of submits costs a poll per gap, not one per job.
pub const EARLY_POLL_GAP: Duration = Duration::from_secs(1);

/// Follows jobs on one backend with one batched status call per interval.
///
/// A job is followed from [`follow`](Self::follow) until [`forget`](Self::forget), and
/// while a [`wait`](Self::wait) for it runs; a job followed for the first time is polled at
/// once (at most one such early poll per [`EARLY_POLL_GAP`], however many jobs arrive),
/// then once per interval. What each poll sees goes through the state machine's rules
/// ([`JobState::transition`](crate::JobState::transition)): a job seen in a terminal state
/// stays there, and an observation that would take it out is ignored (and logged).
///
/// A poll that fails with a temporary error changes no job and is retried at the next
/// interval; [`last_failure`](Self::last_failure) shows it until a poll succeeds. A poll
/// that fails with a permanent error ends the waits running then with that error.
///
/// Dropping the tracker stops its polling. It needs a tokio runtime, and its waits use
/// tokio's clock, so tests can run them with paused time.
pub struct Tracker {
    shared: Arc<Shared>,
    task: JoinHandle<()>,
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

/// The status changes a tracker observes, from [`Tracker::changes`].
#[derive(Debug)]
pub struct Changes {
    events: mpsc::UnboundedReceiver<Event>,
}

impl Changes {
    /// The next job whose status changed, with its new status; `None` once the tracker is
    /// dropped.
    pub async fn recv(&mut self) -> Option<(JobId, JobStatus)> {
        loop {
            match self.events.recv().await? {
                Event::Changed(id, status) => return Some((id, *status)),
                Event::PollFailed(_) => {}
            }
        }
    }
}

type PollHook = Box<dyn Fn(&PollReport<'_>) + Send + Sync>;

/// What a poll tells the tracker's subscribers.
#[derive(Debug, Clone)]
enum Event {
    Changed(JobId, Box<JobStatus>),
    PollFailed(Arc<Error>),
}

struct Shared {
    backend: Arc<dyn BatchBackend>,
    interval: Duration,
    state: Mutex<State>,
    /// Polls at once, without waiting out the interval (a new job was followed).
    poll_now: Notify,
    on_poll: PollHook,
}

#[derive(Default)]
struct State {
    jobs: HashMap<JobId, Followed>,
    subscribers: Vec<mpsc::UnboundedSender<Event>>,
    /// Why the last poll failed; `None` once one succeeds.
    failure: Option<Arc<Error>>,
    polls: u64,
}

/// Why a job is followed, and what was seen of it.
#[derive(Default)]
struct Followed {
    /// Followed with [`Tracker::follow`], until [`Tracker::forget`].
    explicitly: bool,
    /// How many waits follow it.
    waits: usize,
    status: Option<JobStatus>,
}

impl Tracker {
    /// Starts following jobs on `backend`, polling every `interval`.
    ///
    /// Fails with [`ErrorKind::InvalidInput`] for a zero interval or outside a tokio
    /// runtime.
    pub fn new(backend: Arc<dyn BatchBackend>, interval: Duration) -> Result<Self> {
        Self::with_poll_hook(backend, interval, |_| {})
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
        if interval.is_zero() {
            return Err(Error::invalid_input(
                "a tracker's poll interval must be longer than zero",
            ));
        }
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
            Error::invalid_input("a tracker must be started inside a tokio runtime")
        })?;
        let shared = Arc::new(Shared {
            backend,
            interval,
            state: Mutex::new(State::default()),
            poll_now: Notify::new(),
            on_poll: Box::new(on_poll),
        });
        let task = runtime.spawn(poll_forever(Arc::clone(&shared)));
        Ok(Self { shared, task })
    }

    /// The backend this tracker polls.
    pub fn backend(&self) -> &Arc<dyn BatchBackend> {
        &self.shared.backend
    }

    /// Follows job `id` until [`forget`](Self::forget); a job followed for the first time
    /// is polled at once.
    pub fn follow(&self, id: JobId) {
        let mut state = self.shared.lock();
        let new = !state.jobs.contains_key(&id);
        state.jobs.entry(id).or_default().explicitly = true;
        drop(state);
        if new {
            self.shared.poll_now.notify_one();
        }
    }

    /// Stops following job `id` (unless a wait still follows it) and forgets what was seen
    /// of it.
    pub fn forget(&self, id: &JobId) {
        let mut state = self.shared.lock();
        if let Some(job) = state.jobs.get_mut(id) {
            job.explicitly = false;
            if job.waits == 0 {
                state.jobs.remove(id);
            }
        }
    }

    /// The latest status a poll saw for job `id`, while it is followed.
    pub fn status(&self, id: &JobId) -> Option<JobStatus> {
        self.shared.lock().jobs.get(id)?.status.clone()
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

    /// Every status change the tracker observes from now on, for every job it follows, in
    /// the order observed; a job's first observation counts as a change. Nothing is
    /// dropped: the channel is unbounded, so read it (or drop it) to keep memory small.
    pub fn changes(&self) -> Changes {
        Changes {
            events: self.subscribe(),
        }
    }

    /// Waits until job `id` ends and returns its terminal status, following the job while
    /// it waits.
    ///
    /// Fails with [`ErrorKind::WaitTimedOut`] after `timeout` (the job goes on; the message
    /// says what was last seen of it), or with the error of a poll that failed permanently
    /// while it waited. Waits for many jobs share the tracker's polls.
    pub async fn wait(&self, id: &JobId, timeout: Duration) -> Result<JobStatus> {
        self.wait_with(id, timeout, |_| {}).await
    }

    /// [`wait`](Self::wait), calling `on_change` with each status of the job the polls see
    /// while it waits, starting with the latest already seen, each once, the terminal one
    /// last.
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
        let _waiting = Waiting::start(&self.shared, id);
        // Subscribed before reading the current status, so no change falls in between; one
        // seen both ways is the same status, passed on once.
        let mut events = self.subscribe();
        let mut last: Option<JobStatus> = None;
        let mut seen = |status: JobStatus| {
            if last.as_ref() != Some(&status) {
                on_change(&status);
                last = Some(status);
            }
            last.as_ref().filter(|s| s.state.is_terminal()).cloned()
        };
        let waited = tokio::time::timeout(timeout, async {
            if let Some(done) = self.status(id).and_then(&mut seen) {
                return Ok(done);
            }
            while let Some(event) = events.recv().await {
                match event {
                    Event::Changed(changed, status) if changed == *id => {
                        if let Some(done) = seen(*status) {
                            return Ok(done);
                        }
                    }
                    Event::PollFailed(err) if !err.is_temporary() => {
                        return Err(Error::new(err.kind(), err.message()).permanent());
                    }
                    Event::Changed(..) | Event::PollFailed(_) => {}
                }
            }
            Err(Error::new(ErrorKind::Io, "the tracker stopped polling"))
        })
        .await;
        waited.unwrap_or_else(|_| Err(self.timed_out(id, timeout)))
    }

    fn subscribe(&self) -> mpsc::UnboundedReceiver<Event> {
        let (sender, receiver) = mpsc::unbounded_channel();
        let mut state = self.shared.lock();
        // Ended waits leave closed senders behind; polls that deliver nothing keep them.
        state
            .subscribers
            .retain(|subscriber| !subscriber.is_closed());
        state.subscribers.push(sender);
        receiver
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

impl Drop for Tracker {
    fn drop(&mut self) {
        self.task.abort();
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

/// A wait's hold on its job: the job stays followed while the wait runs, even if it is
/// dropped midway (a caller's own timeout).
struct Waiting<'a> {
    shared: &'a Shared,
    id: &'a JobId,
}

impl<'a> Waiting<'a> {
    fn start(shared: &'a Shared, id: &'a JobId) -> Self {
        let mut state = shared.lock();
        let new = !state.jobs.contains_key(id);
        state.jobs.entry(id.clone()).or_default().waits += 1;
        drop(state);
        if new {
            shared.poll_now.notify_one();
        }
        Self { shared, id }
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let mut state = self.shared.lock();
        if let Some(job) = state.jobs.get_mut(self.id) {
            job.waits -= 1;
            if job.waits == 0 && !job.explicitly {
                state.jobs.remove(self.id);
            }
        }
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

    async fn poll(&self) {
        let ids: Vec<JobId> = self.lock().jobs.keys().cloned().collect();
        if ids.is_empty() {
            return;
        }
        let started = tokio::time::Instant::now();
        let result = self.backend.status(&ids).await;
        let duration = started.elapsed();
        let (events, failure) = {
            let mut state = self.lock();
            state.polls += 1;
            match result {
                Ok(answer) => {
                    state.failure = None;
                    (state.record(self.backend.name(), &ids, answer), None)
                }
                Err(err) => {
                    tracing::warn!(backend = self.backend.name(), error = %err, "status poll failed");
                    let err = Arc::new(err);
                    state.failure = Some(Arc::clone(&err));
                    (vec![Event::PollFailed(Arc::clone(&err))], Some(err))
                }
            }
        };
        (self.on_poll)(&PollReport {
            jobs: ids.len(),
            duration,
            failure: failure.as_ref(),
        });
        if !events.is_empty() {
            // A subscriber whose receiver is gone is dropped.
            self.lock()
                .subscribers
                .retain(|subscriber| events.iter().all(|e| subscriber.send(e.clone()).is_ok()));
        }
    }
}

impl State {
    /// Records a status answer to a poll about `ids`, returning the changes.
    fn record(
        &mut self,
        backend: &str,
        ids: &[JobId],
        mut answer: HashMap<JobId, JobStatus>,
    ) -> Vec<Event> {
        let mut changes = Vec::new();
        for id in ids {
            // A job forgotten while the call was in flight stays forgotten.
            let Some(job) = self.jobs.get_mut(id) else {
                continue;
            };
            let next = answer.remove(id).unwrap_or_else(not_answered);
            match observe(job.status.as_ref(), &next) {
                Observed::Changed => {
                    job.status = Some(next.clone());
                    changes.push(Event::Changed(id.clone(), Box::new(next)));
                }
                Observed::Unchanged => {}
                Observed::Backwards => tracing::warn!(
                    backend,
                    job = %id,
                    from = ?job.status.as_ref().map(|s| s.state),
                    to = %next.state,
                    "ignored a status that would leave a terminal state"
                ),
            }
        }
        changes
    }
}

async fn poll_forever(shared: Arc<Shared>) {
    let gap = shared.interval.min(EARLY_POLL_GAP);
    let start = tokio::time::Instant::now() + shared.interval;
    let mut ticks = tokio::time::interval_at(start, shared.interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last: Option<tokio::time::Instant> = None;
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            () = shared.poll_now.notified() => {
                if let Some(last) = last {
                    tokio::time::sleep_until(last + gap).await;
                }
            }
        }
        last = Some(tokio::time::Instant::now());
        shared.poll().await;
        // A poll for a newly followed job counts as the interval's poll.
        ticks.reset();
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use super::*;
    use crate::backend::MockBatchBackend;
    use crate::state::JobState;

    fn status(state: JobState) -> JobStatus {
        JobStatus::new(state, format!("{state:?}").to_uppercase())
    }

    /// A backend whose status calls answer, in turn, each of `polls`: every id asked about
    /// in the given state, or the error. The last answer repeats.
    fn backend(polls: Vec<Result<JobState>>) -> Arc<dyn BatchBackend> {
        let mut polls = VecDeque::from(polls);
        let mut backend = MockBatchBackend::new();
        backend.expect_name().return_const("mock".to_owned());
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
            Ok(ids.iter().map(|id| (id.clone(), status(state))).collect())
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
        let mut backend = MockBatchBackend::new();
        backend.expect_name().return_const("mock".to_owned());
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
        let mut backend = MockBatchBackend::new();
        backend.expect_name().return_const("mock".to_owned());
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
}
