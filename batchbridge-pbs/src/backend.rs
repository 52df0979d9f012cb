//! [`PbsBackend`]: core's [`RemoteBackend`] driving [`Pbs`], which renders `qsub`, asks
//! `qstat` and `qdel` and reads their answers.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use batchbridge_core::directives::DirectiveReport;
use batchbridge_core::error::excerpt;
use batchbridge_core::estimate::StartEstimate;
use batchbridge_core::events::EventSource;
use batchbridge_core::remote::{
    CliScheduler, JobDirs, JobFiles, MAX_IDS_ON_COMMAND_LINE, NOT_STARTED_EXIT_CODE, RemoteBackend,
    SubmitCommand, SubmitDefaults, WorkSettings,
};
use batchbridge_core::shell::{Command, Output};
use batchbridge_core::{
    Capabilities, Error, ErrorKind, JobId, JobKey, JobSpec, JobState, JobStatus, Refusal, Result,
};

use crate::directives::apply_directives;
use crate::parse::{
    KEY_VARIABLE, PbsId, QstatJob, Sighting, parse_qstat, pbs_version, qsub_refusal,
};
use crate::script::{job_script, qsub_options};
use crate::state::{SUBSTATE_DELETED, job_status};

const CANCEL: &str = include_str!("sh/cancel.sh");
const WITHDRAW: &str = include_str!("sh/withdraw.sh");
const FIND: &str = include_str!("sh/find.sh");
/// qstat's and qdel's exit code for an id the server does not know (`PBSE_UNKJOBID`).
const UNKNOWN_JOB_EXIT: i32 = 153;
/// The most a listing of every job may print: 64 MiB, the history of some 30,000 jobs.
const WHOLE_LISTING_LIMIT: usize = 64 << 20;

/// How a [`PbsBackend`] works on its cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PbsConfig {
    /// Where job directories live on the cluster (on a file system the execution hosts
    /// share with the login node), and the longest any one remote command may take.
    pub work: WorkSettings,
    /// Queue and account for specs that do not choose.
    pub defaults: SubmitDefaults,
}

impl Default for PbsConfig {
    fn default() -> Self {
        Self {
            work: WorkSettings::new(".batchbridge/pbs"),
            defaults: SubmitDefaults::default(),
        }
    }
}

batchbridge_core::work_settings_builders!(PbsConfig);

impl PbsConfig {
    /// Sets the queue for specs that do not choose one.
    ///
    /// ```
    /// use std::time::Duration;
    /// use batchbridge_pbs::PbsConfig;
    ///
    /// let config = PbsConfig::default()
    ///     .with_work_dir("/scratch/alice/batchbridge")
    ///     .with_queue("workq")
    ///     .with_account("proj-17")
    ///     .with_command_timeout(Duration::from_secs(30));
    /// assert_eq!(config.defaults.queue.as_deref(), Some("workq"));
    /// assert_eq!(config.work.work_dir, "/scratch/alice/batchbridge");
    /// ```
    pub fn with_queue(mut self, queue: impl Into<String>) -> Self {
        self.defaults.queue = Some(queue.into());
        self
    }

    /// Sets the account string (`-A`) every job is charged to.
    pub fn with_account(mut self, account: impl Into<String>) -> Self {
        self.defaults.account = Some(account.into());
        self
    }
}

/// Runs jobs on a PBS (OpenPBS, PBS Professional) cluster through a
/// [`Shell`](batchbridge_core::shell::Shell), usually one multiplexed SSH connection to a
/// login node: core's [`RemoteBackend`] driving [`Pbs`]. Nothing is installed on the
/// cluster: every job gets a directory under [`PbsConfig::work`] holding its script,
/// output and exit-code files.
///
/// A status cycle costs one `qstat -x -f -F json -t` for all jobs asked about (with job
/// history on, finished jobs included), and one read of job directories for the jobs PBS
/// no longer knows or that ended in a way only those files explain, whatever the number
/// of jobs.
///
/// ```no_run
/// use std::sync::Arc;
/// use batchbridge_core::shell::{SshShell, SshConfig, SshAuth, HostKeys};
/// use batchbridge_core::{BatchBackend, JobKey, JobSpec};
/// use batchbridge_pbs::{PbsBackend, PbsConfig};
///
/// # async fn run() -> batchbridge_core::Result<()> {
/// let ssh = SshShell::new(SshConfig::new(
///     "login.cluster.example",
///     "alice",
///     SshAuth::KeyFile("/home/alice/.ssh/id_ed25519".into()),
///     HostKeys::File("/home/alice/.ssh/known_hosts".into()),
/// ))?;
/// let pbs = PbsBackend::new(Arc::new(ssh), PbsConfig::default())?;
/// let id = pbs.submit(&JobSpec::new(JobKey::new("hello-1")?, "hello", "hostname")).await?;
/// println!("{:?}", pbs.status_of(&id).await?.state); // `status` asks about many at once
/// # Ok(()) }
/// ```
pub type PbsBackend = RemoteBackend<Pbs>;

/// PBS's half of a [`PbsBackend`]: `qsub`, `qstat`, `qdel` and `qstat --version`, with the
/// configured queue and account defaults.
#[derive(Debug)]
pub struct Pbs {
    defaults: SubmitDefaults,
}

impl Pbs {
    /// What qstat says of the jobs with sequence numbers `numbers` (arrays with their
    /// subjobs), by sequence number; jobs PBS does not know are absent. PBS names an array
    /// `N[]` and a job `N`, and batchbridge's id is N either way, so both are asked for:
    /// with `-E`, qstat sends one request for all of them and passes over ids it does
    /// not know (without it, one request per id, about 250 ms each on the test bed).
    async fn qstat(&self, jobs: &JobDirs, numbers: &[&str]) -> Result<HashMap<String, Sighting>> {
        let mut command = qstat().arg("-t");
        if numbers.len() <= MAX_IDS_ON_COMMAND_LINE {
            for number in numbers {
                command = command.arg(*number).arg(format!("{number}[]"));
            }
        } else {
            // Every job the server holds, its history too: about 2 KB each.
            command = command.output_limit(WHOLE_LISTING_LIMIT);
        }
        let output = jobs.run(command).await?;
        if output.stdout_truncated {
            return Err(Error::new(
                ErrorKind::UnexpectedOutput,
                format!(
                    "qstat printed more than {} MiB for {} jobs; ask for fewer at a time",
                    output.stdout.len() >> 20,
                    numbers.len()
                ),
            ));
        }
        if output.success() {
            return parse_qstat(&output.stdout_text());
        }
        // When PBS knows none of the ids, qstat -E fails instead of printing no jobs.
        let stderr = output.stderr_text();
        let mut complaints = stderr.lines().filter(|line| !line.trim().is_empty());
        if output.exit_code == Some(UNKNOWN_JOB_EXIT)
            && complaints.all(|line| line.contains("Unknown Job Id"))
        {
            return Ok(HashMap::new());
        }
        Err(self.failure("qstat", &output))
    }
}

/// `qstat -E -x -f -F json`: one request for all ids, history included, full records as
/// JSON, times printed in UTC.
fn qstat() -> Command {
    Command::new("env").args(["TZ=UTC0", "qstat", "-E", "-x", "-f", "-F", "json"])
}

/// Whether the job directory must have its say on `sighting`: PBS no longer knows the job,
/// or it finished in a way only the files explain (a script that never started, a deletion
/// or a kill by signal batchbridge may have asked for, no exit status at all).
fn needs_files(sighting: Option<&Sighting>) -> bool {
    let Some(sighting) = sighting else {
        return true;
    };
    let Some(job) = &sighting.job else {
        return true;
    };
    let finished = |j: &QstatJob| {
        matches!(j.job_state.as_str(), "F" | "X")
            && (j.substate == Some(SUBSTATE_DELETED)
                || j.exit_status
                    .is_none_or(|e| e == NOT_STARTED_EXIT_CODE || e > 256))
    };
    finished(job) || sighting.subjobs.values().any(finished)
}

/// The status of job `number` from what qstat saw of it and its job directory: an array's
/// subjobs each by their own record, the job directory deciding for any PBS no longer
/// knows (or knows without saying how it ended).
fn resolve(number: &str, sighting: Option<&Sighting>, files: Option<&JobFiles>) -> JobStatus {
    let from_files = |task: u32| files.and_then(|f| f.task_status(task));
    let tasks = files.map_or(1, |f| f.tasks);
    let Some(job) = sighting.and_then(|s| s.job.as_ref()) else {
        // Says where the answer came from, as SLURM's backend does.
        let from_files = |task: u32| {
            from_files(task).map(|mut status| {
                status.reason.get_or_insert_with(|| {
                    "from the exit-code file: PBS no longer knows the job".to_owned()
                });
                status
            })
        };
        if tasks > 1 {
            let statuses: Vec<Option<JobStatus>> = (0..tasks).map(from_files).collect();
            let refs: Vec<Option<&JobStatus>> = statuses.iter().map(Option::as_ref).collect();
            return JobStatus::of_array(number, "PBS", &refs);
        }
        return from_files(0).unwrap_or_else(|| {
            JobStatus::unknown(format!(
                "PBS does not know job {number} (not queued, not in its history) and its \
                 job directory records no end"
            ))
        });
    };
    let one = |record: &QstatJob, task: u32| {
        let status = job_status(record, files, task);
        if status.state == JobState::Unknown
            && let Some(decided) = from_files(task)
        {
            return decided;
        }
        status
    };
    if job.array.as_deref() != Some("True") {
        return one(job, 0);
    }
    let subjobs = sighting.map(|s| &s.subjobs);
    let count = subjobs
        .map_or(0, |s| s.len())
        .max(usize::try_from(tasks).unwrap_or(0));
    let statuses: Vec<Option<JobStatus>> = (0..count)
        .map(|index| {
            let task = u32::try_from(index).unwrap_or(u32::MAX);
            match subjobs.and_then(|s| s.get(&task)) {
                Some(record) => Some(one(record, task)),
                None => from_files(task),
            }
        })
        .collect();
    let refs: Vec<Option<&JobStatus>> = statuses.iter().map(Option::as_ref).collect();
    let mut status = JobStatus::of_array(number, "PBS", &refs);
    if status.queue.is_none() {
        status.queue.clone_from(&job.queue);
    }
    status
}

#[async_trait]
impl CliScheduler for Pbs {
    type Config = PbsConfig;
    const NAME: &'static str = "pbs";
    const SCHEDULER: &'static str = "PBS";
    const JOB_ID: &'static str = "a PBS job id";
    /// The server did not answer: callers retry instead of giving up on the job.
    const UNREACHABLE: &'static [&'static str] = &[
        "cannot connect to server",
        "Couldn't connect to cluster",
        "Connection refused",
        "timed out",
        "Server not available",
        "Communication failure",
        "Premature end of message",
    ];

    /// Refuses defaults no PBS name can be ([`SubmitDefaults::validate`]).
    fn configure(config: PbsConfig) -> Result<(Self, WorkSettings)> {
        config.defaults.validate("PbsConfig")?;
        Ok((
            Self {
                defaults: config.defaults,
            },
            config.work,
        ))
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::NONE
            .with_arrays(true)
            .with_containers(true)
            .with_gpus(true)
            .with_accounting(true)
            .with_withdraw(true)
            .with_estimates(true)
            .with_dependencies(true)
    }

    /// The script's `#PBS` lines, read as qsub reads them ([`apply_directives`]).
    fn apply_directives(&self, spec: JobSpec) -> Result<(JobSpec, DirectiveReport)> {
        Ok(apply_directives(spec))
    }

    /// `qsub -f OPTIONS DIR/job.sh`; -f: no background helper left holding the session's
    /// output open.
    fn render_submit(&self, spec: &JobSpec, dir: &str) -> Result<SubmitCommand> {
        Ok(SubmitCommand::batch_job(
            &["qsub", "-f"],
            qsub_options(spec, &self.defaults, dir)?,
            dir,
            job_script(spec, dir)?,
        ))
    }

    fn refusal(&self, refusal: &Output) -> Option<Refusal> {
        qsub_refusal(&refusal.stderr_text())
    }

    fn rejection_context(&self, spec: &JobSpec, _refusal: &Output) -> String {
        self.defaults
            .queue_for(spec)
            .map(|q| format!(" in queue {q:?}"))
            .unwrap_or_default()
    }

    /// The job PBS itself holds with `key` in its key variable, history included.
    /// The cluster narrows the history to this user's jobs that mention the key
    /// (`sh/find.sh`); their records are then read whole, to match the key exactly.
    async fn find(&self, jobs: &JobDirs, key: &JobKey, _dir: &str) -> Result<Option<JobId>> {
        let output = jobs
            .run(Command::sh(FIND, [KEY_VARIABLE, key.as_str()]))
            .await?;
        if !output.success() {
            return Err(self.failure("qstat", &output));
        }
        let listed = output.stdout_text();
        let mut numbers: Vec<&str> = listed
            .lines()
            .filter_map(PbsId::parse)
            .map(PbsId::sequence)
            .collect();
        numbers.sort_unstable();
        numbers.dedup();
        if numbers.is_empty() {
            return Ok(None);
        }
        let seen = self.qstat(jobs, &numbers).await?;
        let mut found: Vec<&String> = seen
            .iter()
            .filter(|(_, s)| s.job.as_ref().and_then(|j| j.key()) == Some(key.as_str()))
            .map(|(number, _)| number)
            .collect();
        found.sort_unstable_by_key(|n| (n.len(), n.as_str()));
        Ok(found.first().map(|n| JobId::from(n.as_str())))
    }

    async fn status(&self, jobs: &JobDirs, numbers: &[&str]) -> Result<Vec<JobStatus>> {
        let seen = self.qstat(jobs, numbers).await?;
        let for_files: Vec<&str> = numbers
            .iter()
            .copied()
            .filter(|n| needs_files(seen.get(*n)))
            .collect();
        let files = jobs.job_files(&for_files).await?;
        Ok(numbers
            .iter()
            .map(|number| resolve(number, seen.get(*number), files.get(*number)))
            .collect())
    }

    /// A mark in the job's directory, then qdel (of `N[]` for an array); a finished or
    /// unknown job is not an error.
    fn cancel_command(&self, work: &str, number: &str) -> Command {
        Command::sh(CANCEL, [work, number])
    }

    fn cancelled(&self, number: &str, output: &Output) -> Result<()> {
        if output.success() {
            return Ok(());
        }
        if output.stderr_text().contains("Unauthorized Request") {
            return Err(Error::new(
                ErrorKind::PermissionDenied,
                format!(
                    "PBS refused to delete job {number}: {}",
                    excerpt(output.stderr_text().trim())
                ),
            ));
        }
        Err(self.failure("qdel", output))
    }

    /// qhold, the job's state, then qdel when it was held before it started, or qrls when it
    /// had started (`sh/withdraw.sh`).
    fn withdraw_command(&self, work: &str, number: &str) -> Option<Command> {
        Some(Command::sh(WITHDRAW, [work, number]))
    }

    /// Each task's start and end, as the job wrapper records them in the work directory's
    /// `events/`, followed by one command per work directory.
    fn events(&self, jobs: &JobDirs) -> Option<Arc<dyn EventSource>> {
        Some(Arc::new(jobs.wrapper_events()))
    }

    /// `qstat --version` needs no server: a server that is down does not fail it.
    fn version_command(&self) -> Command {
        Command::new("qstat").arg("--version")
    }

    /// `OpenPBS 23.06.06`, from what qstat printed (`pbs_version = 23.06.06`).
    fn parse_version(&self, output: &Output) -> Result<String> {
        pbs_version(&output.stdout_text())
    }

    /// Whether enough nodes have a free chunk of the job's select now, and the jobs queued
    /// ([`crate::estimate`]).
    async fn estimate_start(
        &self,
        jobs: &JobDirs,
        spec: &JobSpec,
        _dir: &str,
    ) -> Result<StartEstimate> {
        crate::estimate::estimate_start(self, jobs, spec, self.defaults.queue_for(spec)).await
    }
}

#[cfg(test)]
mod tests {
    use batchbridge_core::conformance::scripted::{reply, scripted_shell};
    use batchbridge_core::remote::{self, parse_job_files};
    use batchbridge_core::{BatchBackend, CancelledBy, FailureCause, TaskCounts};

    use super::*;

    /// `qstat -E -x -f -F json -t` as the test bed's OpenPBS 23.06.06 printed it for jobs
    /// submitted by `batch` (see each file's `Submit_arguments`): mid-run, then after
    /// `qdel` of the held, queued and running ones, and a job past its walltime.
    const MID_RUN: &str = include_str!("testdata/qstat-mid-run.json");
    const AFTER_QDEL: &str = include_str!("testdata/qstat-after-qdel.json");
    const WALLTIME: &str = include_str!("testdata/qstat-walltime.json");
    const CANCEL_RACE: &str = include_str!("testdata/qstat-cancel-race.json");
    /// `-W depend=` chains: 6015 exits 1; 6016 (afterok:6015) and 6017 (afterok:6016)
    /// deleted by the server, 6018 (afternotok:6015) ran; 6019 waited for a job that does
    /// not exist; 6021 was qdel'd while it waited.
    const DEPENDENCY: &str = include_str!("testdata/qstat-dependency.json");

    fn status_in(capture: &str, number: &str) -> JobStatus {
        let seen = parse_qstat(capture).unwrap();
        resolve(number, seen.get(number), None)
    }

    /// capture, job, state, native state, exit code, signal, cause, words of the reason.
    type Case = (
        &'static str,
        &'static str,
        JobState,
        &'static str,
        Option<i32>,
        Option<i32>,
        Option<FailureCause>,
        &'static str,
    );

    #[test]
    fn real_qstat_records_map_to_states_and_causes() {
        use JobState::*;
        let deleted_by_batch = FailureCause::Cancelled(CancelledBy::Account("batch".into()));
        #[rustfmt::skip]
        let cases: [Case; 20] = [
            // capture, job, state, native, exit code, signal, cause, reason contains
            (MID_RUN, "123", Succeeded, "F", Some(0), None, None, "and finished"),
            (MID_RUN, "124", Failed, "F", Some(3), None, Some(FailureCause::ExitCode(3)), "and failed"),
            (MID_RUN, "125", Failed, "F", None, Some(9), Some(FailureCause::Signal(9)), "signal 9"),
            (MID_RUN, "126", Cancelled, "F", None, Some(15), Some(deleted_by_batch.clone()), "deleted while running"),
            (MID_RUN, "127", Cancelled, "F", None, None, Some(FailureCause::Cancelled(CancelledBy::Unknown)), "deleted before it ran"),
            (MID_RUN, "128", Running, "R", None, None, None, "Job run at"),
            (MID_RUN, "129", Held, "H", None, None, None, "hold types u"),
            (MID_RUN, "130", Queued, "Q", None, None, None, "Can Never Run: Insufficient amount of resource: ncpus"),
            (MID_RUN, "131", Failed, "F", Some(1), None, Some(FailureCause::ExitCode(1)), "task 1: Job run at"),
            (MID_RUN, "132", Running, "Q,R", None, None, None, ""),
            (AFTER_QDEL, "129", Cancelled, "F", None, None, Some(FailureCause::Cancelled(CancelledBy::Unknown)), "deleted before it ran"),
            (AFTER_QDEL, "130", Cancelled, "F", None, None, Some(FailureCause::Cancelled(CancelledBy::Unknown)), "deleted before it ran"),
            (AFTER_QDEL, "132", Cancelled, "F", None, None, Some(deleted_by_batch), "deleted while running"),
            (WALLTIME, "134", Failed, "F", None, None, Some(FailureCause::WallTimeExceeded), "walltime exceeded (Exit_status -29)"),
            (DEPENDENCY, "6015", Failed, "F", Some(1), None, Some(FailureCause::ExitCode(1)), "and failed"),
            (DEPENDENCY, "6016", Failed, "F", None, None, Some(FailureCause::DependencyFailed("6015".into())), "its dependency on 6015 can never be met"),
            (DEPENDENCY, "6017", Failed, "F", None, None, Some(FailureCause::DependencyFailed("6016".into())), "deleted by PBS without running"),
            (DEPENDENCY, "6018", Succeeded, "F", Some(0), None, None, "and finished"),
            (DEPENDENCY, "6019", Failed, "F", None, None, Some(FailureCause::DependencyFailed("99999".into())), "99999"),
            (DEPENDENCY, "6021", Cancelled, "F", None, None, Some(FailureCause::Cancelled(CancelledBy::Unknown)), "deleted before it ran"),
        ];
        for (capture, number, state, native, exit_code, signal, cause, reason) in cases {
            let status = status_in(capture, number);
            let what = format!("job {number}: {status:?}");
            assert_eq!(status.state, state, "{what}");
            assert_eq!(status.native_state, native, "{what}");
            assert_eq!(
                (status.exit_code, status.signal),
                (exit_code, signal),
                "{what}"
            );
            assert_eq!(status.cause, cause, "{what}");
            assert!(
                status.reason.as_deref().unwrap_or("").contains(reason),
                "{what}"
            );
            assert_eq!(status.queue.as_deref(), Some("workq"), "{what}");
            assert!(status.submitted_at.is_some(), "{what}");
        }
    }

    #[test]
    fn arrays_count_their_subjobs() {
        let cases = [
            (MID_RUN, "131", (3, 0, 0, 1, 2, 0)),
            (MID_RUN, "132", (4, 3, 1, 0, 0, 0)),
            (AFTER_QDEL, "132", (4, 0, 0, 0, 0, 4)),
        ];
        for (capture, number, (total, pending, running, succeeded, failed, cancelled)) in cases {
            let tasks = status_in(capture, number).tasks.unwrap();
            let mut expected = TaskCounts::from_states([]);
            (expected.total, expected.pending, expected.running) = (total, pending, running);
            (expected.succeeded, expected.failed, expected.cancelled) =
                (succeeded, failed, cancelled);
            assert_eq!(tasks, expected, "array {number}");
        }
    }

    #[test]
    fn times_are_read_as_utc() {
        let status = status_in(MID_RUN, "123");
        let since_epoch = |t: Option<std::time::SystemTime>| {
            t.unwrap()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs()
        };
        // "ctime": "Mon Nov 23 15:20:13 2026" with TZ=UTC0.
        let ctime = since_epoch(status.submitted_at);
        assert_eq!(ctime % 86_400, 15 * 3600 + 20 * 60 + 13, "{status:?}");
        assert!(since_epoch(status.ended_at) >= since_epoch(status.started_at));
    }

    #[test]
    fn a_job_pbs_forgot_is_decided_by_its_files_or_unknown() {
        let files = parse_job_files(concat!(
            "7 tasks 1 0\n7 task 0 exit 0\n",
            "8 tasks 1 0\n8 task 0 exit 5\n",
            "9 tasks 1 1\n9 task 0 signal 15\n",
            "10 tasks 1 0\n10 task 0 signal 9\n",
            "11 tasks 1 0\n11 task 0 exit 70\n11 why 0 the script never ran: no dir\n",
            "12 tasks 2 0\n12 task 0 exit 0\n12 task 1 exit 3\n",
        ));
        let cases = [
            ("7", JobState::Succeeded, None),
            ("8", JobState::Failed, Some(FailureCause::ExitCode(5))),
            (
                "9",
                JobState::Cancelled,
                Some(FailureCause::Cancelled(CancelledBy::Request)),
            ),
            ("10", JobState::Failed, Some(FailureCause::Signal(9))),
            ("11", JobState::Failed, Some(FailureCause::NotStarted)),
            ("12", JobState::Failed, Some(FailureCause::ExitCode(3))),
            ("13", JobState::Unknown, None),
        ];
        for (number, state, cause) in cases {
            let status = resolve(number, None, files.get(number));
            assert_eq!(
                (status.state, status.cause.clone()),
                (state, cause),
                "{status:?}"
            );
            if state != JobState::Unknown {
                assert_eq!(status.native_state, remote::NATIVE_STATE_EXIT_FILE);
            }
        }
    }

    /// A qdel that reached the execution host as it was starting the job: PBS killed the
    /// job at the end of its kill delay and called it failed (substate 93, Exit_status
    /// 265). Job 2111, captured on the test bed; its directory held the cancel mark.
    #[test]
    fn a_kill_after_batchbridge_cancelled_is_cancelled_by_request() {
        let seen = parse_qstat(CANCEL_RACE).unwrap();
        let sighting = seen.get("2111");
        assert!(
            needs_files(sighting),
            "a kill by signal consults the job directory"
        );
        let cases = [
            (
                "2111 tasks 1 1\n",
                JobState::Cancelled,
                FailureCause::Cancelled(CancelledBy::Request),
            ),
            (
                "2111 tasks 1 0\n",
                JobState::Failed,
                FailureCause::Signal(9),
            ),
        ];
        for (files, state, cause) in cases {
            let files = parse_job_files(files);
            let status = resolve("2111", sighting, files.get("2111"));
            assert_eq!(
                (status.state, status.cause),
                (state, Some(cause)),
                "{files:?}"
            );
            assert_eq!(status.signal, Some(9));
        }
    }

    #[tokio::test]
    async fn a_server_that_does_not_answer_fails_status_and_cancel_temporarily() {
        // What qstat and qdel printed on the test bed with pbs_server stopped.
        let (shell, _) = scripted_shell(
            "/w",
            vec![
                reply(
                    255,
                    "",
                    "Connection refused\nqstat: cannot connect to server pbs (errno=15010)\n",
                ),
                reply(
                    162,
                    "",
                    "Connection refused\nCouldn't connect to cluster: pbs\n",
                ),
            ],
        );
        let pbs = PbsBackend::new(shell, PbsConfig::default()).unwrap();
        let err = pbs.status(&[JobId::from("5")]).await.unwrap_err();
        assert!(err.is_temporary(), "{err}");
        let err = pbs.cancel(&JobId::from("5")).await.unwrap_err();
        assert!(err.is_temporary(), "{err}");
    }

    #[tokio::test]
    async fn ids_pbs_does_not_know_at_all_are_unknown_not_an_error() {
        let (shell, _) = scripted_shell(
            "/w",
            vec![
                reply(153, "", "qstat: Unknown Job Id 999999999[].pbs\n"),
                reply(0, "", ""),
            ],
        );
        let pbs = PbsBackend::new(shell, PbsConfig::default()).unwrap();
        let statuses = pbs.status(&[JobId::from("999999999")]).await.unwrap();
        assert_eq!(statuses[&JobId::from("999999999")].state, JobState::Unknown);
    }

    #[test]
    fn defaults_that_no_pbs_name_can_be_are_refused_up_front() {
        for (queue, account, ok) in [
            (Some("workq"), Some("lab-1"), true),
            (None, Some("x; touch /tmp/c"), false),
            (Some("-h"), None, false),
            (Some(""), None, false),
            (Some("workq\n-J 0-3"), None, false),
        ] {
            let mut config = PbsConfig::default();
            config.defaults.queue = queue.map(str::to_owned);
            config.defaults.account = account.map(str::to_owned);
            let (shell, _) = scripted_shell("/w", Vec::new());
            match PbsBackend::new(shell, config) {
                Ok(_) => assert!(ok, "{queue:?} {account:?}"),
                Err(err) => {
                    assert!(!ok, "{queue:?} {account:?}: {err}");
                    assert!(err.message().starts_with("PbsConfig defaults."), "{err}");
                }
            }
        }
    }
}
