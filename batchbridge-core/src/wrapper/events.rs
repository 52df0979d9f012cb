//! [`WrapperEvents`]: the job events a job wrapper records, and the one long-lived follower
//! per work directory that carries them back.
//!
//! A wrapper calls `job_event` ([`JOB_EVENT`], `@JOB_EVENT@` in a template) when a task
//! starts and when it ends, which creates an empty file whose name is the whole record:
//!
//! ```text
//! WORK/events/ID.TASK.started      task TASK of job ID (the id submit returned) started
//! WORK/events/ID.TASK.exit.N       its script exited with code N
//! WORK/events/ID.TASK.signal.N     signal N ended it (a cancel, a time limit)
//! ```
//!
//! Each name ends in `.tSECONDS` (the Unix time, by the cluster's clock; a name without it,
//! from an older wrapper, is read too), so that an event heard late, after a follower's
//! restart or an outage, still stamps the job with when it started or ended.
//!
//! The follower ([`WrapperEvents::open`]) is one POSIX sh loop on the cluster, run through
//! [`Shell::stream`] on the connection the backend already holds: every [`EVENT_TICK`] it
//! lists the events directory once (no file is opened or read, no scheduler asked) and
//! prints the names it has not printed yet, on start every name already there, so that a
//! restarted follower replays them; a `.` heartbeat every few ticks ends it once the channel
//! is gone. Event files go with their job's [`cleanup`](crate::BatchBackend::cleanup); the
//! follower removes files older than [`EVENT_MAX_AGE_DAYS`] (jobs nobody cleaned up), so the
//! directory stays bounded. [`parse_event`] reads the names strictly: a job runs as the
//! same user and can create any file there.

use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use async_trait::async_trait;
use tokio::sync::mpsc;

use super::job_number;
use crate::backend::JobId;
use crate::error::Result;
use crate::events::{EVENT_BUFFER, EventKind, EventSource, EventStream, JobEvent};
use crate::shell::{Command, Shell};

/// A POSIX shell function, `job_event JOB_DIR ID TASK WHAT [N]`, that job wrappers define
/// (`@JOB_EVENT@` in a template, filled in by [`render_script`](super::render_script)) and
/// call when a task starts (`started`) and ends (`exit N`, `signal N`). It creates the
/// empty file `ID.TASK.WHAT[.N].tSECONDS` in `WORK/events/` (JOB_DIR is `WORK/jobs/KEY`),
/// with the Unix time it happened (no process started under bash, one `date` under other
/// shells), and never fails the job.
///
/// ```
/// use batchbridge_core::wrapper::JOB_EVENT;
///
/// let work = tempfile::tempdir()?;
/// std::fs::create_dir_all(work.path().join("events"))?;
/// let job_dir = work.path().join("jobs/key-1");
/// let script = format!("{JOB_EVENT}\njob_event \"$1\" 42 0 started\njob_event \"$1\" 42 0 exit 3");
/// let run = std::process::Command::new("sh")
///     .args(["-c", script.as_str(), "sh", job_dir.to_str().unwrap()])
///     .status()?;
/// assert!(run.success());
/// let mut names: Vec<_> = std::fs::read_dir(work.path().join("events"))?
///     .map(|entry| entry.unwrap().file_name().into_string().unwrap())
///     .collect();
/// names.sort();
/// // Each name ends with when it happened: `.tSECONDS`.
/// assert!(names[0].starts_with("42.0.exit.3.t") && names[1].starts_with("42.0.started.t"));
/// # Ok::<(), std::io::Error>(())
/// ```
pub const JOB_EVENT: &str = include_str!("job_event.sh");
/// The follower: `sh -c FOLLOW sh EVENTS TICK BEAT SWEEP DAYS`.
const FOLLOW: &str = include_str!("follow.sh");

/// How often the follower lists the events directory: the most an event waits on the
/// cluster side before it is sent (plus what an NFS client's caching adds, see
/// ARCHITECTURE.md), and the only file operation it makes per tick.
pub const EVENT_TICK: Duration = Duration::from_millis(500);
/// Every how many listings the follower prints its `.` heartbeat: how long (in ticks) a
/// follower whose channel is gone lingers before its next write ends it.
const HEARTBEAT_TICKS: u32 = 10;
/// Every how many listings the follower removes old event files (an hour of ticks).
const SWEEP_TICKS: u32 = 7200;
/// Event files older than this many days are removed by the follower: events of jobs that
/// were never cleaned up, and anything else a job left in the events directory.
pub const EVENT_MAX_AGE_DAYS: u32 = 7;
/// The longest event name: the longest the wrapper writes (a 20-digit id, a task index, a
/// kind and a code) fits; anything longer is not an event.
pub const MAX_EVENT_NAME: usize = 64;
/// The follower's heartbeat line.
const HEARTBEAT: &str = ".";

/// The event an event file's name records, or `None` for anything else: the follower's
/// heartbeat, garbage, names longer than [`MAX_EVENT_NAME`], numbers with leading zeros or
/// signs, exit codes beyond 0–255 and signals beyond 1–64. The cost is bounded by the
/// length check, whatever the line.
///
/// ```
/// use batchbridge_core::JobId;
/// use batchbridge_core::events::EventKind;
/// use batchbridge_core::wrapper::parse_event;
///
/// let event = parse_event("4242.3.exit.1").unwrap();
/// assert_eq!((event.id, event.task, event.kind), (JobId::from("4242"), 3, EventKind::Exited(1)));
/// assert_eq!(parse_event("4242.0.signal.15").unwrap().kind, EventKind::Signalled(15));
/// assert_eq!(parse_event("4242.0.started").unwrap().kind, EventKind::Started);
/// assert_eq!(parse_event("4242.0.exit.256"), None);
/// // Wrappers running in bash record when it happened, by the cluster's clock.
/// let late = parse_event("4242.0.exit.0.t1764120000").unwrap();
/// assert_eq!(late.kind, EventKind::Exited(0));
/// assert_eq!(late.at, Some(std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_764_120_000)));
/// assert_eq!(parse_event("4242.0.exit.0.t"), None);
/// assert_eq!(parse_event("../4242.0.started"), None);
/// ```
pub fn parse_event(name: &str) -> Option<JobEvent> {
    if name.len() > MAX_EVENT_NAME {
        return None;
    }
    let mut parts = name.split('.');
    let id = canonical_number(parts.next()?)?;
    let task = canonical_number(parts.next()?)?.parse().ok()?;
    // At most 4 parts are left: the name is short, and anything longer is no event.
    let mut rest: Vec<&str> = parts.take(4).collect();
    let at = match rest.last().and_then(|last| last.strip_prefix('t')) {
        Some(seconds) => {
            let seconds: u64 = canonical_number(seconds)?.parse().ok()?;
            rest.pop();
            Some(UNIX_EPOCH + Duration::from_secs(seconds))
        }
        None => None,
    };
    let kind = match rest.as_slice() {
        ["started"] => EventKind::Started,
        ["exit", code] => EventKind::Exited(number_within(code, 0, 255)?),
        ["signal", signal] => EventKind::Signalled(number_within(signal, 1, 64)?),
        _ => return None,
    };
    let event = JobEvent::new(JobId::from(id), task, kind);
    Some(match at {
        Some(at) => event.at(at),
        None => event,
    })
}

/// `text` if it is a [`job_number`] written the one way a shell prints a number: no
/// leading zeros (so that `042` never names job `42` a second way).
fn canonical_number(text: &str) -> Option<&str> {
    job_number(text).filter(|digits| digits.len() == 1 || !digits.starts_with('0'))
}

fn number_within(text: &str, low: i32, high: i32) -> Option<i32> {
    let number = canonical_number(text)?.parse().ok()?;
    (low..=high).contains(&number).then_some(number)
}

/// An events directory known only once asked for on the cluster: a command-line backend's
/// work directory, resolved there on first use.
#[async_trait]
pub(crate) trait ResolvedDir: std::fmt::Debug + Send + Sync {
    /// The events directory's absolute path, asked through `shell`.
    async fn events_dir(&self, shell: &dyn Shell) -> Result<String>;
}

/// Where the follower looks: a directory resolved on the first open, or one known up front.
#[derive(Debug)]
enum EventsDir {
    Resolved(Arc<dyn ResolvedDir>),
    Fixed(String),
}

/// The [`EventSource`] of a backend whose job wrappers record events with [`JOB_EVENT`]:
/// each [`open`](EventSource::open) starts one follower on the cluster through the shell's
/// [`stream`](Shell::stream) (one per work directory, however many jobs) and hands over
/// the events it prints. [`RemoteBackend`](crate::remote::RemoteBackend) returns it for schedulers
/// that ask ([`CliScheduler::events`](crate::remote::CliScheduler::events)),
/// [`LocalBackend`](crate::LocalBackend) for its own jobs.
///
/// ```
/// use std::sync::Arc;
/// use batchbridge_core::events::{EventKind, EventSource};
/// use batchbridge_core::wrapper::WrapperEvents;
/// use batchbridge_core::shell::LocalShell;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> batchbridge_core::Result<()> {
/// let dir = tempfile::tempdir()?;
/// std::fs::write(dir.path().join("7.0.exit.3"), "")?;
/// std::fs::write(dir.path().join("not an event"), "")?;
/// let events = WrapperEvents::in_dir(Arc::new(LocalShell), dir.path().to_str().unwrap());
/// let mut stream = events.open().await?;
/// let event = stream.recv().await.unwrap();
/// assert_eq!((event.id.as_str(), event.task, event.kind), ("7", 0, EventKind::Exited(3)));
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct WrapperEvents {
    shell: Arc<dyn Shell>,
    dir: EventsDir,
}

impl WrapperEvents {
    /// Follows the events directory `dir` on the host `shell` reaches.
    pub fn in_dir(shell: Arc<dyn Shell>, dir: impl Into<String>) -> Self {
        Self {
            shell,
            dir: EventsDir::Fixed(dir.into()),
        }
    }

    /// Follows the events directory `dir` names, resolved on the first open.
    pub(crate) fn resolved(shell: Arc<dyn Shell>, dir: Arc<dyn ResolvedDir>) -> Self {
        Self {
            shell,
            dir: EventsDir::Resolved(dir),
        }
    }

    /// The follower command for the events directory `dir`, every value a positional
    /// parameter.
    ///
    /// ```
    /// use batchbridge_core::wrapper::WrapperEvents;
    ///
    /// let command = WrapperEvents::follower("/home/me/.batchbridge/slurm/events");
    /// assert_eq!(command.get_program(), "sh");
    /// assert_eq!(command.get_args()[3..], ["/home/me/.batchbridge/slurm/events", "0.5", "10", "7200", "7"]);
    /// ```
    pub fn follower(dir: &str) -> Command {
        let tick = format!("{}", EVENT_TICK.as_secs_f64());
        Command::sh(
            FOLLOW,
            [
                dir.to_owned(),
                tick,
                HEARTBEAT_TICKS.to_string(),
                SWEEP_TICKS.to_string(),
                EVENT_MAX_AGE_DAYS.to_string(),
            ],
        )
    }

    async fn events_dir(&self) -> Result<String> {
        match &self.dir {
            EventsDir::Resolved(dir) => dir.events_dir(self.shell.as_ref()).await,
            EventsDir::Fixed(dir) => Ok(dir.clone()),
        }
    }
}

#[async_trait]
impl EventSource for WrapperEvents {
    /// Starts a follower and hands over the events it prints, every one already recorded
    /// first. The stream ends when the follower or its connection does; dropping it stops
    /// the follower (at its next write, within a heartbeat).
    async fn open(&self) -> Result<EventStream> {
        let dir = self.events_dir().await?;
        let mut lines = self.shell.stream(&Self::follower(&dir)).await?;
        let (events, stream) = mpsc::channel(EVENT_BUFFER);
        tokio::spawn(async move {
            loop {
                let line = tokio::select! {
                    line = lines.recv() => line,
                    () = events.closed() => return,
                };
                match line {
                    None => return,
                    Some(Err(err)) => {
                        tracing::info!(%dir, %err, "the job event follower ended");
                        return;
                    }
                    Some(Ok(line)) => match parse_event(&line) {
                        Some(event) => {
                            if events.send(event).await.is_err() {
                                return;
                            }
                        }
                        None if line == HEARTBEAT => {}
                        None => tracing::debug!(%dir, "skipping a line that is no job event"),
                    },
                }
            }
        });
        Ok(stream)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A line and the (id, task, kind) it holds, if any.
    type Case = (&'static str, Option<(&'static str, u32, EventKind)>);

    #[test]
    fn event_names() {
        // The first lines: printed by the follower on the test bed's SLURM 22.05 login node.
        #[rustfmt::skip]
        let cases: &[Case] = &[
            ("17053.0.started", Some(("17053", 0, EventKind::Started))),
            ("17038.2.started", Some(("17038", 2, EventKind::Started))),
            ("17038.1.exit.1", Some(("17038", 1, EventKind::Exited(1)))),
            ("17036.0.signal.15", Some(("17036", 0, EventKind::Signalled(15)))),
            ("17037.0.exit.3", Some(("17037", 0, EventKind::Exited(3)))),
            ("17035.0.exit.0", Some(("17035", 0, EventKind::Exited(0)))),
            (".", None),
            ("0.0.exit.255", Some(("0", 0, EventKind::Exited(255)))),
            ("12345678901234567890.9999.signal.64", Some(("12345678901234567890", 9999, EventKind::Signalled(64)))),
            // What a job could write there, or a connection could cut short.
            ("", None),
            ("17053.0.start", None),
            ("17053.0.exit", None),
            ("17053.0.exit.", None),
            ("17053.0.exit.256", None),
            ("17053.0.exit.-1", None),
            ("17053.0.exit.+1", None),
            ("17053.0.exit.03", None),
            ("17053.0.signal.0", None),
            ("17053.0.signal.65", None),
            ("17053.0.started.1", None),
            ("17053.0.exit.1.2", None),
            ("017053.0.started", None),
            ("17053.00.started", None),
            ("17053.+1.started", None),
            ("17053.4294967296.started", None),
            ("123456789012345678901.0.started", None),
            ("17053..started", None),
            (".17053.0.started", None),
            ("17053.0.started ", None),
            (" 17053.0.started", None),
            ("../17053.0.started", None),
            ("17053.0.EXIT.1", None),
            ("١٢.0.started", None),
        ];
        for (line, expected) in cases {
            let parsed = parse_event(line).map(|e| (e.id.as_str().to_owned(), e.task, e.kind));
            let expected = expected
                .clone()
                .map(|(id, task, kind)| (id.to_owned(), task, kind));
            assert_eq!(parsed, expected, "{line:?}");
        }
    }

    #[test]
    fn a_huge_line_costs_no_more_than_a_short_one() {
        let huge = format!("1.0.exit.{}", "9".repeat(crate::shell::MAX_STREAM_LINE));
        assert_eq!(parse_event(&huge), None);
        let long = format!("1.0.started{}", ".".repeat(MAX_EVENT_NAME));
        assert_eq!(parse_event(&long), None);
    }
}
