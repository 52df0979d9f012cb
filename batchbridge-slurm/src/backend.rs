//! [`SlurmBackend`]: the [`BatchBackend`] that drives `sbatch`, `squeue`, `sacct` and
//! `scancel` through a [`Shell`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use batchbridge_core::directives::DirectiveReport;
use batchbridge_core::estimate::StartEstimate;
use batchbridge_core::events::EventSource;
use batchbridge_core::remote::{
    CliScheduler, JobDirs, MAX_IDS_ON_COMMAND_LINE, RemoteBackend, SubmitCommand, SubmitDefaults,
    WorkSettings, rejected,
};
use batchbridge_core::shell::{Command, Output};
use batchbridge_core::{
    Capabilities, Error, ErrorKind, JobId, JobKey, JobSpec, JobStatus, Refusal, Result,
};

use crate::estimate::{estimate_command, parse_test_only};
use crate::parse::{
    self, Row, SACCT_FIELDS, SQUEUE_FIELDS, parse_sacct, parse_squeue, sbatch_refusal,
};
use crate::script::{batch_script, sbatch_options};
use crate::status::{Sightings, resolve};

const CANCEL: &str = include_str!("sh/cancel.sh");
const WITHDRAW: &str = include_str!("sh/withdraw.sh");
/// scancel's exit code when the user may not cancel the job.
const SCANCEL_PERMISSION_DENIED: i32 = 210;
/// How far back `find` searches sacct for a key whose job directory is gone.
const FIND_WINDOW: &str = "now-30days";

/// How a [`SlurmBackend`] works on its cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SlurmConfig {
    /// Where job directories live on the cluster (on a file system the compute nodes share
    /// with the login node), and the longest any one remote command may take.
    pub work: WorkSettings,
    /// Partition (`queue`) and account for specs that do not choose.
    pub defaults: SubmitDefaults,
    /// After sacct fails, how long to go without it before trying it again.
    pub accounting_recheck: Duration,
}

impl Default for SlurmConfig {
    fn default() -> Self {
        Self {
            work: WorkSettings::new(".batchbridge/slurm"),
            defaults: SubmitDefaults::default(),
            accounting_recheck: Duration::from_secs(300),
        }
    }
}

batchbridge_core::work_settings_builders!(SlurmConfig);

impl SlurmConfig {
    /// Sets the partition for specs that do not choose one.
    ///
    /// ```
    /// use std::time::Duration;
    /// use batchbridge_slurm::SlurmConfig;
    ///
    /// let config = SlurmConfig::default()
    ///     .with_work_dir("/scratch/alice/batchbridge")
    ///     .with_partition("short")
    ///     .with_account("proj-17")
    ///     .with_command_timeout(Duration::from_secs(30));
    /// assert_eq!(config.defaults.queue.as_deref(), Some("short"));
    /// assert_eq!(config.work.work_dir, "/scratch/alice/batchbridge");
    /// ```
    pub fn with_partition(mut self, partition: impl Into<String>) -> Self {
        self.defaults.queue = Some(partition.into());
        self
    }

    /// Sets the account every job is charged to.
    pub fn with_account(mut self, account: impl Into<String>) -> Self {
        self.defaults.account = Some(account.into());
        self
    }

    /// Sets [`SlurmConfig::accounting_recheck`].
    pub fn with_accounting_recheck(mut self, recheck: Duration) -> Self {
        self.accounting_recheck = recheck;
        self
    }
}

/// The version probe: sinfo's version line, then `$1` when sacct answers.
const VERSION_SCRIPT: &str = "sinfo --version || exit
timeout 10 sacct -X -n -j 1 -o JobID >/dev/null 2>&1 && echo \"$1\"
exit 0";
/// What the version probe prints when sacct answered.
const ACCOUNTING_ANSWERS: &str = "accounting";

/// What is known of the cluster's accounting (slurmdbd behind sacct).
#[derive(Debug, Clone, Copy)]
enum Accounting {
    Untried,
    Available,
    Unavailable { since: Instant },
}

/// Runs jobs on a SLURM cluster through a [`Shell`](batchbridge_core::shell::Shell), usually one multiplexed SSH connection
/// to a login node: core's [`RemoteBackend`] driving [`Slurm`]. Nothing is installed on the
/// cluster: every job gets a directory under [`SlurmConfig::work`] holding its script,
/// output and exit-code files.
///
/// A status cycle costs one `squeue` for all jobs asked about, one `sacct` for those squeue
/// has forgotten (skipped while accounting is down), and one read of job directories for
/// finished jobs, whatever the number of jobs.
///
/// ```no_run
/// use std::sync::Arc;
/// use batchbridge_core::shell::{SshShell, SshConfig, SshAuth, HostKeys};
/// use batchbridge_core::{BatchBackend, JobKey, JobSpec, OutputRequest};
/// use batchbridge_slurm::{SlurmBackend, SlurmConfig};
///
/// # async fn run() -> batchbridge_core::Result<()> {
/// let ssh = SshShell::new(SshConfig::new(
///     "login.cluster.example",
///     "alice",
///     SshAuth::KeyFile("/home/alice/.ssh/id_ed25519".into()),
///     HostKeys::File("/home/alice/.ssh/known_hosts".into()),
/// ))?;
/// let slurm = SlurmBackend::new(Arc::new(ssh), SlurmConfig::default())?;
/// let id = slurm.submit(&JobSpec::new(JobKey::new("hello-1")?, "hello", "hostname")).await?;
/// let status = slurm.status_of(&id).await?; // one job; `status` asks about many at once
/// println!("{:?}", status.state);
/// # Ok(()) }
/// ```
pub type SlurmBackend = RemoteBackend<Slurm>;

/// SLURM's half of a [`SlurmBackend`]: `sbatch`, `squeue`, `sacct`, `scancel` and
/// `sinfo --version`, and what is known of the cluster's accounting.
#[derive(Debug)]
pub struct Slurm {
    config: SlurmConfig,
    accounting: Mutex<Accounting>,
}

impl Slurm {
    fn accounting(&self) -> Accounting {
        *self
            .accounting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn set_accounting(&self, state: Accounting) {
        *self
            .accounting
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = state;
    }

    /// Whether sacct is worth a query: always, except within `accounting_recheck` of a
    /// failure.
    fn accounting_worth_trying(&self) -> bool {
        match self.accounting() {
            Accounting::Untried | Accounting::Available => true,
            Accounting::Unavailable { since } => since.elapsed() >= self.config.accounting_recheck,
        }
    }

    /// Runs sacct, remembering whether accounting answered. `None` when it did not.
    async fn sacct(&self, jobs: &JobDirs, args: &[&str]) -> Result<Option<String>> {
        if !self.accounting_worth_trying() {
            return Ok(None);
        }
        let command = Command::new("env")
            .args(["SLURM_TIME_FORMAT=%s", "sacct", "-X", "-n", "-P"])
            .args(args.iter().copied());
        let output = jobs.run(command).await?;
        if output.success() {
            self.set_accounting(Accounting::Available);
            return Ok(Some(output.stdout_text()));
        }
        tracing::warn!(
            host = jobs.shell().host(),
            stderr = %output.stderr_text().trim(),
            recheck_in = ?self.config.accounting_recheck,
            "sacct failed; going on without accounting"
        );
        self.set_accounting(Accounting::Unavailable {
            since: Instant::now(),
        });
        Ok(None)
    }

    /// squeue's rows for `ids`; empty when SLURM knows none of them.
    async fn squeue(&self, jobs: &JobDirs, ids: &[&str]) -> Result<Vec<Row>> {
        let mut command = Command::new("env").args([
            "SLURM_TIME_FORMAT=%s",
            "squeue",
            "-h",
            "-r",
            "-t",
            "all",
            "-O",
            SQUEUE_FIELDS,
        ]);
        command = if ids.len() <= MAX_IDS_ON_COMMAND_LINE {
            command.arg("-j").arg(ids.join(","))
        } else {
            // --local: without it, squeue --me first asks slurmctld for the federation, a
            // third RPC per cycle (REQUEST_FED_INFO, measured on 22.05 and 24.11); -j asks
            // this cluster alone already.
            command.args(["--me", "--local"])
        };
        let output = jobs.run(command).await?;
        if output.success() {
            return Ok(parse_squeue(&output.stdout_text()));
        }
        // When every id asked about has been purged, squeue fails instead of printing nothing.
        if output.stderr_text().contains("Invalid job id specified") {
            return Ok(Vec::new());
        }
        Err(self.failure("squeue", &output))
    }
}

/// Adds each row to the sightings of the job it belongs to, in the list `slot` picks; rows
/// of jobs nobody asked about (squeue `--me` lists them all) are dropped.
fn sort_into<'a>(
    seen: &mut HashMap<&str, Sightings<'a>>,
    rows: &'a [Row],
    slot: for<'s> fn(&'s mut Sightings<'a>) -> &'s mut Vec<&'a Row>,
) {
    for row in rows {
        if let Some(sighting) = seen.get_mut(row.job.as_str()) {
            slot(sighting).push(row);
        }
    }
}

#[async_trait]
impl CliScheduler for Slurm {
    type Config = SlurmConfig;
    const NAME: &'static str = "slurm";
    const SCHEDULER: &'static str = "SLURM";
    const JOB_ID: &'static str = "a SLURM job id";
    /// The controller or the database did not answer: callers retry instead of giving up
    /// on the job.
    const UNREACHABLE: &'static [&'static str] = &[
        "Unable to contact slurm controller",
        "Connection refused",
        "timed out",
        "Transport endpoint is not connected",
        "Zero Bytes were transmitted or received",
        // slurmctld 24.11 under a burst of submits (the capped drain) dropped a squeue.
        "Connection reset by peer",
    ];

    /// Refuses defaults whose partition or account is empty or holds whitespace or control
    /// characters, which no SLURM name has.
    fn configure(config: SlurmConfig) -> Result<(Self, WorkSettings)> {
        config.defaults.validate("SlurmConfig")?;
        let settings = config.work.clone();
        let slurm = Self {
            config,
            accounting: Mutex::new(Accounting::Untried),
        };
        Ok((slurm, settings))
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::NONE
            .with_arrays(true)
            .with_containers(true)
            .with_gpus(true)
            .with_accounting(!matches!(self.accounting(), Accounting::Unavailable { .. }))
            .with_withdraw(true)
            .with_estimates(true)
            .with_dependencies(true)
    }

    /// The script's `#SBATCH` lines ([`crate::directives`]).
    fn apply_directives(&self, spec: JobSpec) -> Result<(JobSpec, DirectiveReport)> {
        Ok(crate::directives::apply_directives(spec))
    }

    fn render_submit(&self, spec: &JobSpec, dir: &str) -> Result<SubmitCommand> {
        Ok(SubmitCommand::batch_job(
            &["sbatch", "--parsable"],
            sbatch_options(spec, &self.config.defaults, dir)?,
            dir,
            batch_script(spec, dir)?,
        ))
    }

    fn refusal(&self, refusal: &Output) -> Option<Refusal> {
        sbatch_refusal(&refusal.stderr_text())
    }

    fn rejection_context(&self, spec: &JobSpec, refusal: &Output) -> String {
        let mut context = self
            .config
            .defaults
            .queue_for(spec)
            .map(|p| format!(" on partition {p:?}"))
            .unwrap_or_default();
        // sbatch does not say why an array is invalid; the usual cause is a cluster whose
        // MaxArraySize is below batchbridge's own maximum.
        if let Some(array) = spec.array
            && refusal
                .stderr_text()
                .contains("Invalid job array specification")
        {
            context.push_str(&format!(
                " (an array of {} tasks: the cluster's MaxArraySize, `scontrol show config`, \
                 may be lower)",
                array.count
            ));
        }
        context
    }

    /// The job SLURM itself holds with `key` as its comment: squeue for live jobs, then
    /// sacct (which records the comment only once a job ends).
    async fn find(&self, jobs: &JobDirs, key: &JobKey, _dir: &str) -> Result<Option<JobId>> {
        let output = jobs
            .run(Command::new("squeue").args([
                "--me",
                "--local",
                "-h",
                "-t",
                "all",
                "-o",
                parse::SQUEUE_FIND_FORMAT,
            ]))
            .await?;
        if !output.success() {
            return Err(self.failure("squeue", &output));
        }
        if let Some(id) = parse::find_commented(&output.stdout_text(), key.as_str()) {
            return Ok(Some(JobId::from(id)));
        }
        let found = self
            .sacct(jobs, &["-S", FIND_WINDOW, "-o", parse::SACCT_FIND_FIELDS])
            .await?
            .and_then(|text| parse::find_commented(&text, key.as_str()));
        Ok(found.map(JobId::from))
    }

    async fn status(&self, jobs: &JobDirs, numbers: &[&str]) -> Result<Vec<JobStatus>> {
        let squeue = self.squeue(jobs, numbers).await?;
        let mut seen: HashMap<&str, Sightings<'_>> = numbers
            .iter()
            .map(|id| (*id, Sightings::default()))
            .collect();
        sort_into(&mut seen, &squeue, |sighting| &mut sighting.squeue);

        let for_sacct: Vec<&str> = numbers
            .iter()
            .copied()
            .filter(|id| seen[id].squeue.is_empty() || seen[id].is_array())
            .collect();
        let sacct = if for_sacct.is_empty() {
            Vec::new()
        } else {
            self.sacct(jobs, &["-o", SACCT_FIELDS, "-j", &for_sacct.join(",")])
                .await?
                .map(|text| parse_sacct(&text))
                .unwrap_or_default()
        };
        sort_into(&mut seen, &sacct, |sighting| &mut sighting.sacct);

        let for_files: Vec<&str> = numbers
            .iter()
            .copied()
            .filter(|id| !seen[id].settled_by_scheduler())
            .collect();
        let files = jobs.job_files(&for_files).await?;
        for (id, sighting) in &mut seen {
            sighting.files = files.get(*id);
        }
        Ok(numbers.iter().map(|id| resolve(id, &seen[id])).collect())
    }

    /// `sbatch --test-only` with the submit's own options and batch script
    /// ([`crate::estimate`]): slurmctld's answer, without a job. A spec sbatch refuses (more
    /// CPUs than any node has, an unknown partition) is [`Rejected`](ErrorKind::Rejected),
    /// saying why; a controller that does not answer fails temporarily.
    async fn estimate_start(
        &self,
        jobs: &JobDirs,
        spec: &JobSpec,
        dir: &str,
    ) -> Result<StartEstimate> {
        let output = jobs
            .run(estimate_command(spec, &self.config.defaults, dir)?)
            .await?;
        if output.success() {
            return parse_test_only(&output.stderr_text(), &output.stdout_text());
        }
        let failure = self.failure("sbatch --test-only", &output);
        // sbatch exits 1 when it refuses the job; anything else is a failure to ask.
        if failure.is_temporary() || output.exit_code != Some(1) {
            return Err(failure);
        }
        Err(rejected(
            &spec.key,
            Self::SCHEDULER,
            &self.rejection_context(spec, &output),
            &output,
        ))
    }

    /// scancel, then a mark in the job's directory; an unknown or finished job is not an
    /// error.
    fn cancel_command(&self, work: &str, number: &str) -> Command {
        Command::sh(CANCEL, [work, number])
    }

    fn cancelled(&self, number: &str, output: &Output) -> Result<()> {
        if output.success() || output.stderr_text().contains("Invalid job id") {
            return Ok(());
        }
        if output.exit_code == Some(SCANCEL_PERMISSION_DENIED)
            || output.stderr_text().contains("ermission denied")
        {
            return Err(Error::new(
                ErrorKind::PermissionDenied,
                format!(
                    "SLURM refused to cancel job {number}: {}",
                    output.stderr_text().trim()
                ),
            ));
        }
        Err(self.failure("scancel", output))
    }

    /// `scancel --state=PENDING` of a job that waits, then squeue says whether it was
    /// cancelled; for an array a hold first, squeue of its tasks, then that cancel when
    /// every task still waits, or a release when one started (`sh/withdraw.sh`).
    fn withdraw_command(&self, work: &str, number: &str) -> Option<Command> {
        Some(Command::sh(WITHDRAW, [work, number]))
    }

    /// Each task's start and end, as the batch script records them in the work directory's
    /// `events/`, followed by one command per work directory.
    fn events(&self, jobs: &JobDirs) -> Option<Arc<dyn EventSource>> {
        Some(Arc::new(jobs.wrapper_events()))
    }

    /// `sinfo --version` prints the version without asking slurmctld, so a controller that
    /// is down does not fail it; it proves the shell reaches the login node and finds
    /// SLURM's tools there. Then one sacct of a single job id tells whether accounting
    /// answers (many small clusters run without slurmdbd), bounded by `timeout` so a
    /// slurmdbd that does not answer cannot make the cluster look unreachable.
    fn version_command(&self) -> Command {
        Command::sh(VERSION_SCRIPT, [ACCOUNTING_ANSWERS])
    }

    /// What sinfo printed, trimmed: `slurm 22.05.8`, or `slurm-wlm 22.05.8` from Debian's
    /// packages. Whether sacct answered is remembered as the accounting
    /// [`capabilities`](batchbridge_core::BatchBackend::capabilities) report.
    fn parse_version(&self, output: &Output) -> Result<String> {
        let text = output.stdout_text();
        let (version, accounting) = text.split_once('\n').unwrap_or((&text, ""));
        let version = parse::sinfo_version(version)?;
        self.set_accounting(if accounting.trim() == ACCOUNTING_ANSWERS {
            Accounting::Available
        } else {
            Accounting::Unavailable {
                since: Instant::now(),
            }
        });
        Ok(version)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use batchbridge_core::conformance::scripted::{reply, scripted_shell, submit_record};
    use batchbridge_core::{BatchBackend, JobState};

    use super::*;

    fn ok(stdout: &str) -> Result<Output> {
        reply(0, stdout, "")
    }

    /// A backend whose shell answers its commands with `replies`, in order.
    fn backend(replies: Vec<Result<Output>>) -> SlurmBackend {
        let (shell, _) = scripted_shell("/w", replies);
        SlurmBackend::new(shell, SlurmConfig::default()).unwrap()
    }

    fn spec() -> JobSpec {
        JobSpec::new(JobKey::new("key-1").unwrap(), "job", "true")
    }

    #[tokio::test]
    async fn a_submit_cut_off_mid_way_is_an_unknown_outcome_worth_retrying() {
        let slurm = backend(vec![Err(Error::new(
            ErrorKind::ConnectionLost,
            "master died",
        ))]);
        let err = slurm.submit(&spec()).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::SubmitOutcomeUnknown, "{err}");
        assert!(err.is_temporary());
        assert!(
            err.message().contains("key never makes a second job"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn a_key_claimed_by_a_submit_in_flight_is_looked_up_in_squeue() {
        // The key's recorded id (none yet), then squeue.
        let slurm = backend(vec![
            submit_record("key-1", "claimed", None, ""),
            ok(""),
            ok("41|RUNNING|node1|other\n42|PENDING||key-1\n"),
        ]);
        assert_eq!(slurm.submit(&spec()).await.unwrap(), JobId::from("42"));

        // SLURM 24.11 keeps a submission it refused as a FAILED job without nodes. The
        // wait for the other submit ends with the command time limit (here at once).
        let (shell, _) = scripted_shell(
            "/w",
            vec![
                submit_record("key-1", "claimed", None, ""),
                ok(""),
                ok("41|RUNNING|node1|other\n43|FAILED||key-1\n"),
                ok("43|FAILED|None assigned|key-1\n"),
            ],
        );
        let config = SlurmConfig::default().with_command_timeout(Duration::from_millis(1));
        let slurm = SlurmBackend::new(shell, config).unwrap();
        let err = slurm.submit(&spec()).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::SubmitOutcomeUnknown, "{err}");
        assert!(err.is_temporary());
    }

    #[tokio::test]
    async fn a_controller_that_does_not_answer_fails_status_temporarily() {
        let down = Output {
            exit_code: Some(1),
            stderr: "slurm_load_jobs error: Unable to contact slurm controller (connect failure)"
                .into(),
            ..Output::default()
        };
        let slurm = backend(vec![Ok(down)]);
        let err = slurm.status(&[JobId::from("5")]).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::CommandFailed, "{err}");
        assert!(err.is_temporary(), "{err}");
    }

    #[tokio::test]
    async fn accounting_that_fails_is_skipped_until_the_recheck() {
        let dbd_down = Output {
            exit_code: Some(1),
            stderr: "sacct: error: Problem talking to the database: Connection refused".into(),
            ..Output::default()
        };
        // Cycle 1: squeue forgot job 5, sacct fails, the files decide. Cycle 2: no sacct.
        let slurm = backend(vec![
            ok(""),
            Ok(dbd_down),
            ok("5 tasks 1 0\n5 task 0 exit 0\n"),
            ok(""),
            ok("5 tasks 1 0\n5 task 0 exit 0\n"),
        ]);
        for _ in 0..2 {
            let statuses = slurm.status(&[JobId::from("5")]).await.unwrap();
            assert_eq!(statuses[&JobId::from("5")].state, JobState::Succeeded);
            assert!(!slurm.capabilities().accounting);
        }
    }

    #[tokio::test]
    async fn estimates_sbatch_refuses_are_rejected_and_a_silent_controller_is_temporary() {
        let mut spec = spec();
        spec.queue = Some("debug".into());
        let slurm = backend(vec![reply(
            1,
            "1795455578\n",
            "allocation failure: Requested node configuration is not available\n",
        )]);
        let err = slurm.estimate_start(&spec).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Rejected, "{err}");
        assert_eq!(
            err.message(),
            "SLURM refused job key-1 on partition \"debug\": allocation failure: Requested \
             node configuration is not available"
        );

        let slurm = backend(vec![reply(
            1,
            "1795455578\n",
            "allocation failure: Unable to contact slurm controller (connect failure)\n",
        )]);
        let err = slurm.estimate_start(&spec).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::CommandFailed, "{err}");
        assert!(err.is_temporary(), "{err}");

        let slurm = backend(vec![reply(127, "", "sh: 1: sbatch: not found\n")]);
        let err = slurm.estimate_start(&spec).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::CommandFailed, "{err}");
        assert!(!err.is_temporary(), "{err}");
    }

    #[tokio::test]
    async fn version_is_what_sinfo_prints_with_the_command_timeout() {
        let config = SlurmConfig::default().with_command_timeout(Duration::from_secs(7));
        let mut shell = batchbridge_core::shell::MockShell::new();
        shell.expect_host().return_const("scripted".to_owned());
        shell
            .expect_run()
            .withf(|command| {
                command.get_program() == "sh"
                    && command.get_args()[1].starts_with("sinfo --version")
                    && command.get_timeout() == Duration::from_secs(7)
            })
            .times(1)
            .returning(|_| ok("slurm-wlm 22.05.8\n"));
        let slurm = SlurmBackend::new(Arc::new(shell), config).unwrap();
        assert_eq!(slurm.version().await.unwrap(), "slurm-wlm 22.05.8");
        assert!(
            !slurm.capabilities().accounting,
            "sacct did not answer the probe"
        );

        let slurm = backend(vec![ok("slurm-wlm 22.05.8\naccounting\n")]);
        assert_eq!(slurm.version().await.unwrap(), "slurm-wlm 22.05.8");
        assert!(slurm.capabilities().accounting, "sacct answered the probe");
    }

    #[tokio::test]
    async fn version_fails_with_the_usual_kinds() {
        let slurm = backend(vec![reply(127, "", "bash: sinfo: command not found\n")]);
        let err = slurm.version().await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::CommandFailed, "{err}");
        assert!(!err.is_temporary(), "{err}");
        assert!(err.message().contains("command not found"), "{err}");

        let slurm = backend(vec![Err(Error::new(
            ErrorKind::ConnectionLost,
            "master died",
        ))]);
        let err = slurm.version().await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::ConnectionLost, "{err}");

        let slurm = backend(vec![ok("")]);
        let err = slurm.version().await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::UnexpectedOutput, "{err}");
    }

    #[test]
    fn defaults_that_no_slurm_name_can_be_are_refused_up_front() {
        for (partition, account, ok) in [
            (Some("debug"), Some("lab-1"), true),
            (Some("debug,single"), None, true),
            (None, Some("x; touch /tmp/c"), false),
            (None, Some("lab\0"), false),
            (Some(""), None, false),
            (Some("debug\n--wrap=x"), None, false),
        ] {
            let mut config = SlurmConfig::default();
            config.defaults.queue = partition.map(str::to_owned);
            config.defaults.account = account.map(str::to_owned);
            let (shell, _) = scripted_shell("/w", Vec::new());
            match SlurmBackend::new(shell, config) {
                Ok(_) => assert!(ok, "{partition:?} {account:?}"),
                Err(err) => {
                    assert!(!ok, "{partition:?} {account:?}: {err}");
                    assert_eq!(err.kind(), ErrorKind::InvalidInput);
                    assert!(err.message().starts_with("SlurmConfig defaults."), "{err}");
                }
            }
        }
    }

    #[test]
    fn a_scheduler_that_echoes_a_huge_value_is_quoted_only_in_part() {
        let output = Output {
            exit_code: Some(1),
            stderr: format!(
                "sbatch: error: Invalid time specification (pos=0): {}",
                "x".repeat(1 << 20)
            )
            .into_bytes(),
            ..Output::default()
        };
        let error = backend(Vec::new()).scheduler().failure("sbatch", &output);
        assert!(error.message().len() < 2 * batchbridge_core::error::MAX_QUOTED);
    }

    #[tokio::test]
    async fn cancelling_a_huge_id_quotes_it_only_in_part() {
        let slurm = backend(Vec::new());
        let err = slurm
            .cancel(&JobId::from(format!("1;{}", "x".repeat(1 << 20))))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
        assert!(err.message().len() < 2 * batchbridge_core::error::MAX_QUOTED);
    }

    #[test]
    fn failures_are_temporary_only_when_slurm_did_not_answer() {
        let cases = [
            (
                "sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)",
                true,
            ),
            (
                "sacct: error: Problem talking to the database: Connection refused",
                true,
            ),
            (
                "squeue: error: Socket timed out on send/recv operation",
                true,
            ),
            // From the test bed's 24.11 during a capped drain of 200 jobs.
            ("slurm_load_jobs error: Connection reset by peer", true),
            (
                "sbatch: error: Batch job submission failed: Invalid partition name specified",
                false,
            ),
            ("sacct: error: Slurm accounting storage is disabled", false),
            ("", false),
        ];
        for (stderr, temporary) in cases {
            let output = Output {
                exit_code: Some(1),
                stderr: stderr.into(),
                ..Output::default()
            };
            let error = backend(Vec::new()).scheduler().failure("x", &output);
            assert_eq!(error.is_temporary(), temporary, "{stderr}");
            assert!(error.message().contains(stderr), "{error}");
        }
    }
}
