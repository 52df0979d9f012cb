//! Job events pushed from the cluster side: what a backend's [`EventSource`] reads on the
//! cluster (a job wrapper's start and end records, HTCondor's user job event log) and
//! carries back over the shell the backend already holds, one long-lived command per
//! cluster.
//!
//! Events are observations, like a poll's answer: they go through the state machine's rules
//! ([`JobState::transition`](crate::JobState::transition)), so an event never moves a job
//! backwards, and the scheduler poll stays the safety net for what events cannot tell
//! (a job cancelled before it started, a node failure, a purge).
//!
//! ```
//! use batchbridge_core::events::{EventKind, JobEvent};
//! use batchbridge_core::JobId;
//!
//! let event = JobEvent::new(JobId::from("4242"), 0, EventKind::Exited(3));
//! assert_eq!(event.kind, EventKind::Exited(3));
//! ```

use std::fmt::Debug;
use std::time::SystemTime;

use async_trait::async_trait;
use tokio::sync::mpsc;

use crate::error::Result;
use crate::job_id::JobId;

/// The most events an [`EventStream`] holds before its reader waits: a flood of events
/// (a tenant's job writing garbage into the events a follower reads) costs bounded memory.
pub const EVENT_BUFFER: usize = 1024;

/// The [`JobStatus::native_state`](crate::JobStatus::native_state) of a status a
/// [`Tracker`](crate::Tracker) took from an event rather than from the scheduler; the next
/// poll replaces it with the scheduler's own word.
///
/// ```
/// assert_eq!(batchbridge_core::events::NATIVE_STATE_EVENT, "job event");
/// ```
pub const NATIVE_STATE_EVENT: &str = "job event";

/// One thing that happened to one task of a job, as the cluster side recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct JobEvent {
    /// The backend's id of the job.
    pub id: JobId,
    /// The task of an array job (0 for a job without an array).
    pub task: u32,
    /// What happened.
    pub kind: EventKind,
    /// When it happened, by the cluster's clock, when the source records it; otherwise the
    /// tracker takes the time the event arrived.
    pub at: Option<SystemTime>,
}

impl JobEvent {
    /// An event of `kind` for task `task` of job `id`, its time unknown.
    pub fn new(id: JobId, task: u32, kind: EventKind) -> Self {
        Self {
            id,
            task,
            kind,
            at: None,
        }
    }

    /// The event, happened at `at`.
    ///
    /// ```
    /// use std::time::{Duration, SystemTime};
    /// use batchbridge_core::JobId;
    /// use batchbridge_core::events::{EventKind, JobEvent};
    ///
    /// let ended = SystemTime::UNIX_EPOCH + Duration::from_secs(1_764_120_000);
    /// let event = JobEvent::new(JobId::from("42"), 0, EventKind::Exited(0)).at(ended);
    /// assert_eq!(event.at, Some(ended));
    /// ```
    pub fn at(mut self, at: SystemTime) -> Self {
        self.at = Some(at);
        self
    }
}

/// What happened to a task.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum EventKind {
    /// The task began running.
    Started,
    /// The task's script exited with this code.
    Exited(i32),
    /// A signal ended the task's script.
    Signalled(i32),
    /// The scheduler held the task, with its reason when it gave one.
    Held(Option<String>),
    /// A held task was released into the queue.
    Released,
    /// The task was taken off its node and went back to the queue.
    Evicted,
    /// The task was removed from the queue (cancelled) before or while it ran.
    Removed,
}

/// The receiving end of one run of an event source's remote command: events arrive as
/// the command prints them, and the channel closes when the command or its connection
/// ends. Bounded by [`EVENT_BUFFER`].
pub type EventStream = mpsc::Receiver<JobEvent>;

/// Where a backend's events come from. A backend that has one returns it from
/// [`BatchBackend::events`](crate::BatchBackend::events); the [`Tracker`](crate::Tracker)
/// keeps one [`open`](Self::open) run going per backend, restarting it with backoff when it
/// ends.
#[async_trait]
pub trait EventSource: Send + Sync + Debug {
    /// Starts one run of the source on the cluster. Events already recorded may be sent
    /// again by each run (readers de-duplicate through the state machine's rules).
    async fn open(&self) -> Result<EventStream>;
}
