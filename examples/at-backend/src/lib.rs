//! A batchbridge backend for Debian's `at` and its batch queue (`atd`), written the way a
//! third party writes one for its own scheduler: [`At`] implements core's
//! [`CliScheduler`] with `at`, `atq` and `atrm`, and [`AtBackend`], core's
//! [`RemoteBackend`] over it, is the [`BatchBackend`](batchbridge_core::BatchBackend) run
//! through a [`Shell`](batchbridge_core::shell::Shell) (an SSH connection, or this
//! machine). Everything that is not at's comes from [`batchbridge_core::remote`]: the job
//! directory, the idempotent submit, `find` by the recorded number, bounded output reads,
//! cleanup and the exit-code files.
//!
//! - **submit** writes the script, its environment and a small wrapper (`job.sh`) into a
//!   job directory and queues the wrapper with `at -q b -f job.sh now` from that directory,
//!   all in one remote command
//!   ([`JobDirs::submit`](batchbridge_core::remote::JobDirs::submit)).
//! - **status** is one `atq` for any number of ids (queue `=` means running) and one read of
//!   the job directories for jobs at no longer holds: the wrapper records how the script
//!   ended in `task-0.exit`, and why it never ran when it cannot enter the spec's working
//!   directory ([`ENTER_WORKING_DIR`](batchbridge_core::remote::ENTER_WORKING_DIR)). A job
//!   neither knows is Unknown.
//! - **find** reads the job number the submit recorded; for a key whose submit was cut off
//!   before that, it asks `at -c` of each job at holds for the directory it was queued
//!   from (one remote command).
//! - **cancel** is SIGTERM to a running job's wrapper (which records its end), then `atrm`;
//!   idempotent.
//! - **version** is `at -V`'s, e.g. `at 3.2.5`.
//!
//! at has no arrays, GPUs, containers or resource accounts: such specs are refused as
//! [`Unsupported`](ErrorKind::Unsupported). A spec's `queue` is an at queue letter (`b`
//! when absent).
//!
//! ```
//! use batchbridge_at::{job_status, parse_atq};
//! use batchbridge_core::JobState;
//!
//! let queue = parse_atq("7\tMon Nov 23 11:45:00 2026 = batch\n8\tMon Nov 23 11:46:00 2026 b batch\n");
//! assert_eq!(job_status("7", queue.get("7").copied(), None).state, JobState::Running);
//! assert_eq!(job_status("8", queue.get("8").copied(), None).state, JobState::Queued);
//! assert_eq!(job_status("9", None, None).state, JobState::Unknown);
//! ```

use std::collections::HashMap;
use std::sync::Arc;

use batchbridge_core::error::excerpt;
use batchbridge_core::events::EventSource;
use batchbridge_core::remote::{
    CliScheduler, JobDirs, JobFiles, RemoteBackend, SubmitCommand, WorkSettings, job_number,
    render_script,
};
use batchbridge_core::shell::{Command, Output};
use batchbridge_core::{
    CancelledBy, Capabilities, Error, ErrorKind, FailureCause, JobId, JobKey, JobSpec, JobState,
    JobStatus, Resources, Result,
};

const QUEUE: &str = include_str!("sh/queue.sh");
const JOB_WRAPPER: &str = include_str!("sh/job.sh");
const CANCEL: &str = include_str!("sh/cancel.sh");
const FIND: &str = include_str!("sh/find.sh");
/// at's batch queue: its jobs start when the load average permits.
const BATCH_QUEUE: &str = "b";
/// The queue `atq` shows for a job that is running.
const RUNNING: char = '=';

/// How an [`AtBackend`] works on its machine: where job directories live and how long a
/// command may take, core's [`WorkSettings`] with its builders.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AtConfig {
    /// The work directory (absolute, or relative to the login directory) and command
    /// time limit.
    pub work: WorkSettings,
}

impl Default for AtConfig {
    fn default() -> Self {
        Self {
            work: WorkSettings::new(".batchbridge/at"),
        }
    }
}

batchbridge_core::work_settings_builders!(AtConfig);

/// Runs jobs with `at` through a [`Shell`](batchbridge_core::shell::Shell), as the user the
/// shell logs in as: core's [`RemoteBackend`] driving [`At`].
///
/// ```no_run
/// use std::sync::Arc;
/// use batchbridge_at::{AtBackend, AtConfig};
/// use batchbridge_core::shell::{HostKeys, SshAuth, SshConfig, SshShell};
/// use batchbridge_core::{BatchBackend, JobKey, JobSpec};
///
/// # async fn run() -> batchbridge_core::Result<()> {
/// let ssh = SshShell::new(SshConfig::new(
///     "box.example",
///     "alice",
///     SshAuth::KeyFile("/home/alice/.ssh/id_ed25519".into()),
///     HostKeys::File("/home/alice/.ssh/known_hosts".into()),
/// ))?;
/// let at = AtBackend::new(Arc::new(ssh), AtConfig::default())?;
/// let id = at.submit(&JobSpec::new(JobKey::new("hello-1")?, "hello", "hostname")).await?;
/// println!("{:?}", at.status(&[id.clone()]).await?[&id].state);
/// # Ok(()) }
/// ```
pub type AtBackend = RemoteBackend<At>;

/// at's half of an [`AtBackend`]: `at`, `atq`, `atrm` and `at -V`.
#[derive(Debug)]
pub struct At;

impl At {
    /// The queue of every job of the user that at holds, by job number.
    async fn atq(&self, jobs: &JobDirs) -> Result<HashMap<String, char>> {
        let output = jobs.run(Command::new("atq")).await?;
        if !output.success() {
            return Err(self.failure("atq", &output));
        }
        Ok(parse_atq(&output.stdout_text()))
    }
}

// core re-exports async_trait: the trait's async methods stay object safe without a
// dependency of our own.
#[batchbridge_core::async_trait]
impl CliScheduler for At {
    type Config = AtConfig;
    const NAME: &'static str = "at";
    const SCHEDULER: &'static str = "at";
    const JOB_ID: &'static str = "an at job number";
    /// at has no daemon to ask: its tools read and write the spool directly.
    const UNREACHABLE: &'static [&'static str] = &[];

    fn configure(config: AtConfig) -> Result<(Self, WorkSettings)> {
        Ok((Self, config.work))
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::NONE
    }

    fn check(&self, spec: &JobSpec) -> Result<()> {
        check_spec(spec)
    }

    /// The wrapper, the working directory (if the spec names one), and `at -q QUEUE -f
    /// job.sh now` run from the job directory by `queue.sh`, which prints the job's
    /// number alone.
    fn render_submit(&self, spec: &JobSpec, dir: &str) -> Result<SubmitCommand> {
        let mut files = vec![("job.sh", render_script(JOB_WRAPPER))];
        if let Some(working_dir) = &spec.working_dir {
            files.push(("workdir", working_dir.clone()));
        }
        let queue = spec.queue.as_deref().unwrap_or(BATCH_QUEUE);
        Ok(SubmitCommand {
            files,
            command: ["sh", "-c", QUEUE, "sh", dir, queue]
                .map(str::to_owned)
                .to_vec(),
        })
    }

    /// The job at holds that was queued from `dir`: how a key whose submit was cut off
    /// before its number was recorded finds its job.
    async fn find(&self, jobs: &JobDirs, _key: &JobKey, dir: &str) -> Result<Option<JobId>> {
        let output = jobs
            .run(Command::sh(FIND, [dir]))
            .await?
            .check("looking for a job in atq")?;
        Ok(job_number(output.stdout_text().trim()).map(JobId::from))
    }

    /// One `atq`, and one read of the job directories of the jobs it shows running or no
    /// longer holds.
    async fn status(&self, jobs: &JobDirs, numbers: &[&str]) -> Result<Vec<JobStatus>> {
        let queue = self.atq(jobs).await?;
        // A job waiting in a queue has not started, so its directory has nothing to say.
        let for_files: Vec<&str> = numbers
            .iter()
            .copied()
            .filter(|n| queue.get(*n).is_none_or(|q| *q == RUNNING))
            .collect();
        let files = jobs.job_files(&for_files).await?;
        Ok(numbers
            .iter()
            .map(|n| job_status(n, queue.get(*n).copied(), files.get(*n)))
            .collect())
    }

    /// A mark in the job's directory, SIGTERM to a running job's wrapper (waiting a moment
    /// for it to record its end), then `atrm`; idempotent.
    fn cancel_command(&self, work: &str, number: &str) -> Command {
        Command::sh(CANCEL, [work, number])
    }

    fn cancelled(&self, _number: &str, output: &Output) -> Result<()> {
        if output.success() {
            Ok(())
        } else {
            Err(self.failure("atrm", output))
        }
    }

    /// Each task's start and end, as the job wrapper records them in the work directory's
    /// `events/`, followed by one command per work directory.
    fn events(&self, jobs: &JobDirs) -> Option<Arc<dyn EventSource>> {
        Some(Arc::new(jobs.wrapper_events()))
    }

    fn version_command(&self) -> Command {
        Command::new("at").arg("-V")
    }

    /// `at 3.2.5`, from what `at -V` prints (on stderr).
    fn parse_version(&self, output: &Output) -> Result<String> {
        at_version(&output.stderr_text())
    }
}

/// Refuses what at cannot do beyond what [`Capabilities::check`] refuses (arrays, GPUs and
/// containers): any resource request (at keeps no account of resources), native options,
/// and a queue that is not one letter.
fn check_spec(spec: &JobSpec) -> Result<()> {
    if spec.resources != Resources::default() {
        return Err(Error::new(
            ErrorKind::Unsupported,
            format!(
                "the at backend keeps no account of resources, so it cannot honour those of \
                 job {} (cpus, memory, disk, wallTime, nodes): leave them out",
                spec.key
            ),
        ));
    }
    if spec
        .passthrough
        .get("at")
        .is_some_and(|options| !options.is_empty())
    {
        return Err(Error::new(
            ErrorKind::Unsupported,
            format!("the at backend takes no native options (job {})", spec.key),
        ));
    }
    if let Some(queue) = &spec.queue
        && !(queue.len() == 1 && queue.bytes().all(|b| b.is_ascii_alphabetic()))
    {
        return Err(Error::invalid_input(format!(
            "queue {:?} of job {}: at's queues are single letters, a to z and A to Z (b is \
             the batch queue)",
            excerpt(queue),
            spec.key
        )));
    }
    Ok(())
}

/// The queue of each job in what `atq` prints: `ID<TAB>DATE QUEUE USER` a line. atd
/// starts a job by linking its spool file under the running name before it removes the
/// queued one, so atq may list a job in both for a moment: running wins.
///
/// ```
/// let queue = batchbridge_at::parse_atq("12\tMon Nov 23 11:45:00 2026 b batch\n");
/// assert_eq!(queue["12"], 'b');
/// ```
pub fn parse_atq(text: &str) -> HashMap<String, char> {
    let mut queues = HashMap::new();
    for line in text.lines() {
        let Some((id, rest)) = line.split_once('\t') else {
            continue;
        };
        let mut letters = rest.split_whitespace().rev().nth(1).unwrap_or("").chars();
        if let (Some(id), Some(queue), None) = (job_number(id), letters.next(), letters.next()) {
            let seen = queues.entry(id.to_owned()).or_insert(queue);
            if queue == RUNNING {
                *seen = RUNNING;
            }
        }
    }
    queues
}

/// Job `id`'s status from its queue in `atq` (if at holds it) and its job directory (if it
/// was submitted through this work directory). The wrapper's record of how the script
/// ended wins: at may still show the job running for a moment after.
///
/// at itself says only whether a job waits (and in which queue, the status's `queue`) or
/// runs; the failure cause comes from the wrapper's record
/// ([`JobFiles::task_status`]): an exit code, a signal, a cancel through this backend, a
/// script that never ran.
///
/// ```
/// use batchbridge_core::{CancelledBy, FailureCause, JobState};
/// use batchbridge_core::remote::parse_job_files;
///
/// let files = parse_job_files("4 tasks 1 0\n4 task 0 exit 3\n5 tasks 1 1\n");
/// let failed = batchbridge_at::job_status("4", None, files.get("4"));
/// assert_eq!(failed.cause, Some(FailureCause::ExitCode(3)));
/// let removed = batchbridge_at::job_status("5", None, files.get("5"));
/// assert_eq!(removed.cause, Some(FailureCause::Cancelled(CancelledBy::Request)));
/// let waiting = batchbridge_at::job_status("6", Some('b'), None);
/// assert_eq!((waiting.state, waiting.queue.as_deref()), (JobState::Queued, Some("b")));
/// ```
pub fn job_status(id: &str, queue: Option<char>, files: Option<&JobFiles>) -> JobStatus {
    let cancelled = files.is_some_and(|f| f.cancel_requested);
    match (files.and_then(|f| f.task_status(0)), queue) {
        (Some(status), _) => status,
        (None, Some(RUNNING)) => JobStatus::new(JobState::Running, RUNNING.to_string()),
        (None, Some(queue)) => JobStatus::new(JobState::Queued, queue.to_string())
            .with_reason(format!("waiting in at's queue {queue} for atd to start it"))
            .with_queue(queue.to_string()),
        (None, None) if cancelled => JobStatus::new(JobState::Cancelled, "")
            .with_reason("removed from at's queue before it started")
            .with_cause(FailureCause::Cancelled(CancelledBy::Request)),
        (None, None) if files.is_some() => JobStatus::unknown(format!(
            "at no longer holds job {id}, and its wrapper recorded no end (killed, or lost \
             with the machine)"
        )),
        (None, None) => JobStatus::unknown(format!(
            "at holds no job {id}, and it was not submitted through this work directory"
        )),
    }
}

/// The version in what `at -V` prints (`at version 3.2.5`), as `at 3.2.5`.
///
/// ```
/// assert_eq!(batchbridge_at::at_version("at version 3.2.5\nPlease report bugs\n").unwrap(), "at 3.2.5");
/// assert!(batchbridge_at::at_version("bash: at: command not found\n").is_err());
/// ```
pub fn at_version(text: &str) -> Result<String> {
    text.lines()
        .next()
        .and_then(|line| line.strip_prefix("at version "))
        .map(str::trim)
        .filter(|v| {
            !v.is_empty() && !v.contains(char::is_whitespace) && !v.contains(char::is_control)
        })
        .map(|v| format!("at {v}"))
        .ok_or_else(|| {
            Error::new(
                ErrorKind::UnexpectedOutput,
                format!(
                    "at -V printed {:?}, not `at version X`",
                    excerpt(text.trim())
                ),
            )
        })
}

/// The README's examples, compiled as doctests so they cannot go stale.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::time::Duration;

    use batchbridge_core::conformance::scripted::scripted_shell;
    use batchbridge_core::remote::parse_job_files;
    use batchbridge_core::{ArraySpec, BatchBackend};

    use super::*;

    #[test]
    fn statuses_from_atq_and_the_job_directory() {
        let files = parse_job_files(
            "1 tasks 1 0\n1 task 0 exit 0\n2 tasks 1 0\n2 task 0 exit 3\n\
             3 tasks 1 1\n3 task 0 signal 15\n4 tasks 1 0\n4 task 0 signal 9\n\
             5 tasks 1 1\n6 tasks 1 0\n7 tasks 1 0\n\
             9 tasks 1 0\n9 task 0 exit 70\n9 why 0 the script never ran: cannot enter /gone\n",
        );
        const EXIT: &str = batchbridge_core::remote::NATIVE_STATE_EXIT_FILE;
        // (id, atq's queue) -> (state, exit code, signal, native state, cause)
        use CancelledBy::Request;
        use FailureCause as C;
        #[rustfmt::skip]
        let cases = [
            (("1", None), (JobState::Succeeded, Some(0), None, EXIT, None)),
            (("1", Some('=')), (JobState::Succeeded, Some(0), None, EXIT, None)),
            (("2", None), (JobState::Failed, Some(3), None, EXIT, Some(C::ExitCode(3)))),
            (("3", Some('=')), (JobState::Cancelled, None, Some(15), EXIT, Some(C::Cancelled(Request)))),
            (("4", None), (JobState::Failed, None, Some(9), EXIT, Some(C::Signal(9)))),
            (("5", None), (JobState::Cancelled, None, None, "", Some(C::Cancelled(Request)))),
            (("6", Some('=')), (JobState::Running, None, None, "=", None)),
            (("7", Some('b')), (JobState::Queued, None, None, "b", None)),
            (("7", None), (JobState::Unknown, None, None, "", None)),
            (("8", Some('a')), (JobState::Queued, None, None, "a", None)),
            (("8", None), (JobState::Unknown, None, None, "", None)),
            (("9", None), (JobState::Failed, Some(70), None, EXIT, Some(C::NotStarted))),
        ];
        for ((id, queue), (state, exit_code, signal, native, cause)) in cases {
            let status = job_status(id, queue, files.get(id));
            assert_eq!(
                (
                    status.state,
                    status.exit_code,
                    status.signal,
                    status.native_state.as_str(),
                    status.cause.clone(),
                ),
                (state, exit_code, signal, native, cause),
                "job {id} in queue {queue:?}: {status:?}"
            );
            if state == JobState::Queued {
                assert_eq!(status.queue, queue.map(String::from), "{status:?}");
            }
            if matches!(state, JobState::Queued | JobState::Unknown) {
                assert!(status.reason.is_some(), "{status:?}");
            }
            let never_ran = files.get(id).and_then(|f| f.not_started.get(&0));
            if status.exit_code.is_some() {
                assert_eq!(status.reason.as_ref(), never_ran, "job {id}: {status:?}");
            }
        }
    }

    #[test]
    fn atq_lines() {
        let text = "3\tMon Nov 23 11:45:00 2026 = batch\n\
                    41\tTue Nov 24 09:00:00 2026 a batch\n\
                    x\tMon Nov 23 11:45:00 2026 b batch\n\
                    no tab here\n\
                    5\tMon Nov 23 11:45:00 2026 bb batch\n\
                    6\tMon Nov 23 11:45:00 2026 = batch\n\
                    6\tMon Nov 23 11:45:00 2026 b batch\n";
        let queue = parse_atq(text);
        assert_eq!(queue.len(), 3, "{queue:?}");
        assert_eq!((queue["3"], queue["41"], queue["6"]), ('=', 'a', '='));
    }

    #[tokio::test]
    async fn specs_at_cannot_run_are_refused_before_anything_is_sent() {
        type Change = fn(&mut JobSpec);
        let cases: [(Change, Option<ErrorKind>); 9] = [
            (|_| {}, None),
            (|s| s.queue = Some("c".into()), None),
            (|s| s.queue = Some("Z".into()), None),
            (
                |s| s.queue = Some("=".into()),
                Some(ErrorKind::InvalidInput),
            ),
            (
                |s| s.queue = Some("ab".into()),
                Some(ErrorKind::InvalidInput),
            ),
            (|s| s.resources.cpus = Some(1), Some(ErrorKind::Unsupported)),
            (
                |s| s.resources.wall_time = Some(Duration::from_secs(60)),
                Some(ErrorKind::Unsupported),
            ),
            (
                |s| s.array = Some(ArraySpec::new(2)),
                Some(ErrorKind::Unsupported),
            ),
            (
                |s| {
                    s.passthrough.insert("at".into(), vec!["-m".into()]);
                },
                Some(ErrorKind::Unsupported),
            ),
        ];
        for (change, refused) in cases {
            let mut spec = JobSpec::new(JobKey::new("key-1").unwrap(), "job", "true");
            change(&mut spec);
            // A spec at can run reaches the submit command, here cut off.
            let cut_off = Err(Error::new(ErrorKind::ConnectionLost, "gone"));
            let (shell, programs) = scripted_shell("/w", vec![cut_off]);
            let at = AtBackend::new(shell, AtConfig::default()).unwrap();
            let kind = at.submit(&spec).await.unwrap_err().kind();
            let sent = programs.lock().unwrap().len();
            match refused {
                Some(refused) => assert_eq!((kind, sent), (refused, 0), "{spec:?}"),
                None => assert_eq!(
                    (kind, sent),
                    (ErrorKind::SubmitOutcomeUnknown, 1),
                    "{spec:?}"
                ),
            }
        }
    }

    #[test]
    fn the_wrapper_gets_cores_exit_codes() {
        let mut spec = JobSpec::new(JobKey::new("key-1").unwrap(), "job", "true");
        spec.working_dir = Some("/data/run 1".into());
        let submit = At.render_submit(&spec, "/w/jobs/key-1").unwrap();
        let file = |name: &str| {
            let (_, content) = submit.files.iter().find(|(n, _)| *n == name).unwrap();
            content.clone()
        };
        let wrapper = file("job.sh");
        assert!(!wrapper.contains('@'), "{wrapper}");
        let not_started = batchbridge_core::remote::NOT_STARTED_EXIT_CODE;
        assert!(wrapper.contains(&format!("record exit {not_started}")));
        assert_eq!(file("workdir"), "/data/run 1");
        assert_eq!(submit.command[4..], ["/w/jobs/key-1", "b"]);
    }

    #[test]
    fn versions() {
        for (text, version) in [
            ("at version 3.2.5\nPlease report bugs\n", Some("at 3.2.5")),
            ("at version 3.1.23\n", Some("at 3.1.23")),
            ("", None),
            ("at version \n", None),
            ("bash: line 1: at: command not found\n", None),
        ] {
            assert_eq!(at_version(text).ok().as_deref(), version, "{text:?}");
        }
    }
}
