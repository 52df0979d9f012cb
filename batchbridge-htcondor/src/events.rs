//! HTCondor's own record of what happened to each job, its user job event log, as the
//! backend's [`EventSource`]: every submit description names one log per work directory
//! ([`EVENT_LOG`], `log = …`), which the schedd and the shadows append to on the submit node
//! that our shell reaches; [`EventLogFollower`] keeps one `tail` of it running through
//! [`Shell::stream`] and [`EventLogReader`] turns its lines into [`JobEvent`]s.
//!
//! The follower asks the scheduler nothing and replays nothing: events recorded while no
//! follower ran are left to the scheduler poll.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use batchbridge_core::error::excerpt;
use batchbridge_core::events::{EVENT_BUFFER, EventKind, EventSource, EventStream, JobEvent};
use batchbridge_core::remote::job_number;
use batchbridge_core::shell::{Command, Shell};
use batchbridge_core::{JobId, Result};
use tokio::sync::mpsc;

/// The user job event log's file name in the work directory: one log for all of its jobs.
pub const EVENT_LOG: &str = "job-events.log";

/// How often the follower writes an empty line: how long its remote processes outlive a
/// closed channel, and how long the stream outlives a `tail` killed on the submit node.
pub const HEARTBEAT: Duration = Duration::from_secs(10);

const FOLLOW_EVENTS: &str = include_str!("sh/follow_events.sh");

/// The [`EventSource`] of an [`HtcondorBackend`](crate::HtcondorBackend): a `tail -F` of
/// the work directory's [`EVENT_LOG`] over the backend's shell, read by an
/// [`EventLogReader`]. Each [`open`](EventSource::open) starts one remote command (a `tail`
/// and a small heartbeat loop, no scheduler query); dropping the stream ends it within
/// [`HEARTBEAT`].
///
/// ```no_run
/// use std::sync::Arc;
/// use batchbridge_core::BatchBackend;
/// use batchbridge_core::shell::LocalShell;
/// use batchbridge_htcondor::{HtcondorBackend, HtcondorConfig};
///
/// # async fn run() -> batchbridge_core::Result<()> {
/// let condor = HtcondorBackend::new(Arc::new(LocalShell), HtcondorConfig::default())?;
/// let mut events = condor.events().expect("HTCondor pushes events").open().await?;
/// while let Some(event) = events.recv().await {
///     println!("job {} task {}: {:?}", event.id, event.task, event.kind);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct EventLogFollower {
    shell: Arc<dyn Shell>,
    work_dir: String,
}

impl EventLogFollower {
    /// Follows `work_dir/`[`EVENT_LOG`] (absolute, or relative to the login directory) on
    /// the host `shell` reaches.
    pub fn new(shell: Arc<dyn Shell>, work_dir: impl Into<String>) -> Self {
        Self {
            shell,
            work_dir: work_dir.into(),
        }
    }

    /// The remote command: creates the work directory and the log if need be, then
    /// `tail -F -n 0 -- WORK_DIR/job-events.log` beside a heartbeat loop.
    fn command(&self) -> Command {
        Command::sh(
            FOLLOW_EVENTS,
            [
                self.work_dir.clone(),
                EVENT_LOG.to_owned(),
                HEARTBEAT.as_secs().to_string(),
            ],
        )
    }
}

#[async_trait]
impl EventSource for EventLogFollower {
    async fn open(&self) -> Result<EventStream> {
        let mut lines = self.shell.stream(&self.command()).await?;
        let (sender, events) = mpsc::channel(EVENT_BUFFER);
        tokio::spawn(async move {
            let mut reader = EventLogReader::default();
            loop {
                let line = tokio::select! {
                    line = lines.recv() => line,
                    () = sender.closed() => return,
                };
                let line = match line {
                    Some(Ok(line)) => line,
                    Some(Err(err)) => {
                        tracing::debug!("the HTCondor event log follower ended: {err}");
                        return;
                    }
                    None => return,
                };
                if let Some(event) = reader.read_line(&line)
                    && sender.send(event).await.is_err()
                {
                    return;
                }
            }
        });
        Ok(events)
    }
}

/// Reads a user job event log line by line, keeping only the event being read, so that
/// any log costs bounded memory: the header `NNN (CLUSTER.PROC.SUBPROC) DATE TIME text`, a
/// body, and a line `...` that ends the event, which is when it is handed over. An event
/// cut short by the next header is dropped; lines outside events and events other than
/// these are ignored:
///
/// | event | becomes |
/// |---|---|
/// | 001 execute | [`EventKind::Started`] |
/// | 004 evicted | [`EventKind::Evicted`] |
/// | 005 terminated, `Normal termination (return value N)` | [`EventKind::Exited`]`(N)` |
/// | 005 terminated, `Abnormal termination (signal N)` | [`EventKind::Signalled`]`(N)` |
/// | 009 aborted | [`EventKind::Removed`] |
/// | 012 held, with its first body line as the reason | [`EventKind::Held`] |
/// | 013 released | [`EventKind::Released`] |
///
/// The job id is the cluster, the task its proc. Events of jobs the backend never submitted
/// (a log shared with jobs submitted by hand) are handed over too: readers keep the ids
/// they follow.
///
/// ```
/// use batchbridge_core::JobId;
/// use batchbridge_core::events::EventKind;
/// use batchbridge_htcondor::events::EventLogReader;
///
/// let log = "005 (2266.002.000) 2026-11-23 17:39:48 Job terminated.\n\
///            \t(1) Normal termination (return value 3)\n\
///            ...\n";
/// let mut reader = EventLogReader::default();
/// let events: Vec<_> = log.lines().filter_map(|line| reader.read_line(line)).collect();
/// assert_eq!(events.len(), 1);
/// assert_eq!((events[0].id.clone(), events[0].task), (JobId::from("2266"), 2));
/// assert_eq!(events[0].kind, EventKind::Exited(3));
/// ```
#[derive(Debug, Default)]
pub struct EventLogReader {
    reading: Option<Reading>,
}

/// The event whose header was read and whose `...` was not yet.
#[derive(Debug)]
struct Reading {
    id: JobId,
    task: u32,
    event: LoggedEvent,
    /// What the event is, once its header or body said so.
    kind: Option<EventKind>,
    /// Whether a body line other than an empty one was read.
    body_read: bool,
}

/// The events read, by their number in the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LoggedEvent {
    Execute,
    Evicted,
    Terminated,
    Aborted,
    Held,
    Released,
    /// Any other event: its body is skipped.
    Other,
}

impl LoggedEvent {
    fn from_number(number: &str) -> Self {
        match number {
            "001" => Self::Execute,
            "004" => Self::Evicted,
            "005" => Self::Terminated,
            "009" => Self::Aborted,
            "012" => Self::Held,
            "013" => Self::Released,
            _ => Self::Other,
        }
    }

    /// What an event of this number is without reading its body.
    fn kind_from_header(self) -> Option<EventKind> {
        match self {
            Self::Execute => Some(EventKind::Started),
            Self::Evicted => Some(EventKind::Evicted),
            Self::Aborted => Some(EventKind::Removed),
            Self::Released => Some(EventKind::Released),
            // A hold without a body line is a hold without a reason.
            Self::Held => Some(EventKind::Held(None)),
            Self::Terminated | Self::Other => None,
        }
    }
}

/// What HTCondor writes as the reason of a hold it was given none for.
const NO_HOLD_REASON: &str = "Reason unspecified";

impl EventLogReader {
    /// Reads one line of the log (without its end); returns the event it completes.
    pub fn read_line(&mut self, line: &str) -> Option<JobEvent> {
        if line.trim_end() == "..." {
            let done = self.reading.take()?;
            return done
                .kind
                .map(|kind| JobEvent::new(done.id, done.task, kind));
        }
        if let Some((number, id, task)) = header(line) {
            let event = LoggedEvent::from_number(number);
            self.reading = Some(Reading {
                id,
                task,
                event,
                kind: event.kind_from_header(),
                body_read: false,
            });
            return None;
        }
        if let Some(reading) = &mut self.reading {
            reading.read_body_line(line.trim());
        }
        None
    }
}

impl Reading {
    fn read_body_line(&mut self, line: &str) {
        if line.is_empty() {
            return;
        }
        let first = !self.body_read;
        self.body_read = true;
        match self.event {
            // The reason is the first body line; `Code N Subcode M` follows.
            LoggedEvent::Held if first && line != NO_HOLD_REASON => {
                self.kind = Some(EventKind::Held(Some(excerpt(line).into_owned())));
            }
            LoggedEvent::Terminated if self.kind.is_none() => {
                self.kind = termination(line);
            }
            _ => {}
        }
    }
}

/// The end a terminated event's body line tells: `(1) Normal termination (return value
/// N)` or `(0) Abnormal termination (signal N)`.
fn termination(line: &str) -> Option<EventKind> {
    let number = |rest: &str| rest.strip_suffix(')')?.trim().parse::<i32>().ok();
    if let Some((_, rest)) = line.split_once("Normal termination (return value ") {
        return number(rest).map(EventKind::Exited);
    }
    if let Some((_, rest)) = line.split_once("Abnormal termination (signal ") {
        return number(rest).map(EventKind::Signalled);
    }
    None
}

/// The event number, cluster and proc of a header line
/// `NNN (CLUSTER.PROC.SUBPROC) DATE TIME text`, if `line` is one.
fn header(line: &str) -> Option<(&str, JobId, u32)> {
    let number = line.get(..3)?;
    if !number.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let (id, _) = line.get(3..)?.strip_prefix(" (")?.split_once(") ")?;
    let mut parts = id.split('.');
    let (cluster, proc, subproc) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || job_number(subproc).is_none() {
        return None;
    }
    // Leading zeros are the log's padding: the id is the number condor_submit printed.
    let cluster = job_number(cluster)?.parse::<u64>().ok()?;
    let proc = job_number(proc)?.parse::<u32>().ok()?;
    Some((number, JobId::from(cluster.to_string()), proc))
}

#[cfg(test)]
mod tests {
    use batchbridge_core::error::MAX_QUOTED;

    use super::*;

    /// A log the test bed's schedd wrote (tests/testbed/htcondor.sh, HTCondor 23.9): jobs
    /// exiting 0 and 3, one killed by signal 9, a cluster of 3 procs, one held and released
    /// by hand then removed, one vacated then removed, and one whose executable is missing
    /// (held by HTCondor, then removed).
    const CAPTURED: &str = include_str!("testdata/job-events.log");

    /// An event as (job id, task, kind).
    type Read = (String, u32, EventKind);

    fn read(log: &str) -> Vec<Read> {
        let mut reader = EventLogReader::default();
        log.lines()
            .filter_map(|line| reader.read_line(line))
            .map(|e| (e.id.to_string(), e.task, e.kind))
            .collect()
    }

    fn event(id: &str, task: u32, kind: EventKind) -> Read {
        (id.to_owned(), task, kind)
    }

    #[test]
    fn a_log_the_schedd_wrote_yields_every_start_end_hold_release_eviction_and_removal() {
        use EventKind::*;
        let missing = "Error from slot1_1@vm: Failed to execute '/nonexistent/bin/tool': \
                       (errno=2: 'No such file or directory')";
        assert_eq!(
            read(CAPTURED),
            [
                event("2265", 0, Started),
                event("2265", 0, Exited(0)),
                event("2266", 0, Started),
                event("2266", 0, Exited(3)),
                event("2267", 0, Started),
                event("2267", 0, Signalled(9)),
                event("2268", 0, Started),
                event("2268", 0, Exited(0)),
                event("2268", 1, Started),
                event("2268", 1, Exited(0)),
                event("2269", 0, Started),
                event("2268", 2, Started),
                event("2268", 2, Exited(0)),
                event("2270", 0, Started),
                event("2269", 0, Evicted),
                event(
                    "2269",
                    0,
                    Held(Some("via condor_hold (by user batch)".into()))
                ),
                event("2269", 0, Released),
                event("2269", 0, Started),
                event("2270", 0, Evicted),
                event("2270", 0, Removed),
                event("2269", 0, Evicted),
                event("2269", 0, Removed),
                event("2271", 0, Started),
                event("2271", 0, Evicted),
                event("2271", 0, Held(Some(missing.into()))),
                event("2271", 0, Removed),
            ]
        );
    }

    #[test]
    fn garbage_cut_events_and_foreign_formats_yield_nothing_or_only_whole_events() {
        use EventKind::*;
        let huge = "x".repeat(1 << 20);
        let exited = "005 (7.000.000) 2026-11-23 17:39:48 Job terminated.\n\
                      \t(1) Normal termination (return value 1)\n...\n";
        #[rustfmt::skip]
        let cases: Vec<(&str, String, Vec<Read>)> = vec![
            ("nothing", String::new(), vec![]),
            ("heartbeats", "\n\n\n".into(), vec![]),
            ("a whole event", exited.into(), vec![event("7", 0, Exited(1))]),
            ("Windows line ends", exited.replace('\n', "\r\n"), vec![event("7", 0, Exited(1))]),
            ("padded numbers", "001 (0042.010.000) x\n...\n".into(), vec![event("42", 10, Started)]),
            ("heartbeats inside an event",
             "005 (7.000.000) t\n\n\t(0) Abnormal termination (signal 15)\n\n...\n".into(),
             vec![event("7", 0, Signalled(15))]),
            ("an event without its end, then a whole one",
             format!("001 (6.000.000) t\n{exited}"), vec![event("7", 0, Exited(1))]),
            ("a terminated event cut before its body",
             "005 (7.000.000) t\n...\n".into(), vec![]),
            ("an end without an event", "...\n...\n".into(), vec![]),
            ("the body of an event cut off", "\t(1) Normal termination (return value 1)\n...\n".into(), vec![]),
            ("events HTCondor has that are no state",
             "006 (7.000.000) t\n\t0  -  MemoryUsage\n...\n000 (7.000.000) t\n...\n028 (7.000.000) t\n...\n".into(),
             vec![]),
            ("an exit code that is no number",
             "005 (7.000.000) t\n\t(1) Normal termination (return value x)\n...\n".into(), vec![]),
            ("a cluster beyond u64", "001 (99999999999999999999.000.000) t\n...\n".into(), vec![]),
            ("a proc beyond u32", "001 (7.4294967296.000) t\n...\n".into(), vec![]),
            ("an id of two parts", "001 (7.0) t\n...\n".into(), vec![]),
            ("an id that is a path", "001 (../7.0.0) t\n...\n".into(), vec![]),
            ("a header without its id", "001 t\n...\n".into(), vec![]),
            ("a number of four digits", "0001 (7.000.000) t\n...\n".into(), vec![]),
            ("multibyte text where the number would be", "é1 (7.000.000) t\n...\n".into(), vec![]),
            ("a hold HTCondor gave no reason",
             "012 (7.000.000) t\n\tReason unspecified\n\tCode 0 Subcode 0\n...\n".into(),
             vec![event("7", 0, Held(None))]),
            ("a hold with no body line", "012 (7.000.000) t\n...\n".into(), vec![event("7", 0, Held(None))]),
            ("a huge line inside an event",
             format!("004 (7.000.000) t\n{huge}\n...\n"), vec![event("7", 0, Evicted)]),
            ("a huge line outside events", format!("{huge}\n{exited}"), vec![event("7", 0, Exited(1))]),
            ("XML, which batchbridge's submits never ask for",
             "<c>\n<a n=\"MyType\"><s>ExecuteEvent</s></a>\n<a n=\"Cluster\"><i>7</i></a>\n</c>\n".into(),
             vec![]),
        ];
        for (name, log, expected) in cases {
            assert_eq!(read(&log), expected, "{name}");
        }
    }

    #[test]
    fn a_huge_hold_reason_is_kept_only_in_part() {
        let log = format!("012 (7.000.000) t\n\t{}\n...\n", "é".repeat(1 << 20));
        let events = read(&log);
        let [(_, _, EventKind::Held(Some(reason)))] = events.as_slice() else {
            panic!("one hold: {events:?}");
        };
        assert!(reason.len() < MAX_QUOTED + 40, "{} bytes", reason.len());
        assert!(reason.starts_with("éé"));
    }

    #[test]
    fn the_follower_tails_the_log_of_the_work_directory_it_is_given() {
        let follower = EventLogFollower::new(
            Arc::new(batchbridge_core::shell::LocalShell),
            "dir with 'quotes'",
        );
        let command = follower.command();
        let args = command.get_args();
        assert_eq!(command.get_program(), "sh");
        assert_eq!(
            args[args.len() - 3..],
            ["dir with 'quotes'", EVENT_LOG, "10"]
        );
        assert!(
            args[1].contains("exec tail -F -n 0 -- \"$log\""),
            "{}",
            args[1]
        );
    }
}
