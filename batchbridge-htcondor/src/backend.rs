//! [`HtcondorBackend`]: the [`BatchBackend`] that drives `condor_submit`, `condor_q`,
//! `condor_history` and `condor_rm` through a [`Shell`].

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use batchbridge_core::estimate::StartEstimate;
use batchbridge_core::events::EventSource;
use batchbridge_core::remote::{
    CliScheduler, JobDirs, MAX_IDS_ON_COMMAND_LINE, NOT_STARTED_EXIT_CODE, RemoteBackend,
    SubmitCommand, WorkSettings, render_script,
};
use batchbridge_core::shell::{Command, Output};
use batchbridge_core::{
    Capabilities, Error, ErrorKind, JobId, JobKey, JobSpec, JobStatus, Refusal, Result,
};

use crate::description::{KEY_ATTRIBUTE, submit_description};
use crate::events::{EVENT_LOG, EventLogFollower};
use crate::parse::{
    ATTRIBUTES, ProcAd, condor_submit_refusal, condor_version, first_cluster, parse_ads,
    parse_not_started,
};
use crate::state::{CANCEL_REASON, cluster_status};

const JOB_WRAPPER: &str = include_str!("sh/job.sh");
const NOT_STARTED: &str = include_str!("sh/not_started.sh");
const CANCEL: &str = include_str!("sh/cancel.sh");
const WITHDRAW: &str = include_str!("sh/withdraw.sh");
/// The hold reason of the procs a withdraw holds while it looks whether one started; the
/// ones it leaves are released by it.
const WITHDRAW_HOLD_REASON: &str = "held by batchbridge while it withdraws the job";

/// How an [`HtcondorBackend`] works on its pool.
///
/// ```
/// use std::time::Duration;
/// use batchbridge_htcondor::HtcondorConfig;
///
/// let config = HtcondorConfig::default()
///     .with_work_dir("/home/alice/batchbridge")
///     .with_command_timeout(Duration::from_secs(30));
/// assert_eq!(config.work.work_dir, "/home/alice/batchbridge");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HtcondorConfig {
    /// Where job directories live on the submit node (not under /tmp or /var/tmp, which
    /// HTCondor makes private to each job), and the longest any one remote command may
    /// take.
    pub work: WorkSettings,
}

impl Default for HtcondorConfig {
    fn default() -> Self {
        Self {
            work: WorkSettings::new(".batchbridge/htcondor"),
        }
    }
}

batchbridge_core::work_settings_builders!(HtcondorConfig);

/// Runs jobs on an HTCondor pool through a [`Shell`](batchbridge_core::shell::Shell) to a
/// submit node, usually one multiplexed SSH connection: core's [`RemoteBackend`] driving
/// [`Htcondor`]. Nothing is installed on the pool: every job gets a directory under
/// [`HtcondorConfig::work`] with its script, a small wrapper, and its output; HTCondor
/// itself remembers how each proc ended (`condor_history`).
///
/// A status cycle costs one `condor_q` for all jobs asked about and one `condor_history`
/// for those no longer (wholly) in the queue, whatever the number of jobs.
///
/// ```no_run
/// use std::sync::Arc;
/// use batchbridge_core::shell::{SshShell, SshConfig, SshAuth, HostKeys};
/// use batchbridge_core::{BatchBackend, JobKey, JobSpec};
/// use batchbridge_htcondor::{HtcondorBackend, HtcondorConfig};
///
/// # async fn run() -> batchbridge_core::Result<()> {
/// let ssh = SshShell::new(SshConfig::new(
///     "submit.pool.example",
///     "alice",
///     SshAuth::KeyFile("/home/alice/.ssh/id_ed25519".into()),
///     HostKeys::File("/home/alice/.ssh/known_hosts".into()),
/// ))?;
/// let condor = HtcondorBackend::new(Arc::new(ssh), HtcondorConfig::default())?;
/// let id = condor.submit(&JobSpec::new(JobKey::new("hello-1")?, "hello", "hostname")).await?;
/// println!("{:?}", condor.status_of(&id).await?.state); // `status` asks about many at once
/// # Ok(()) }
/// ```
pub type HtcondorBackend = RemoteBackend<Htcondor>;

/// HTCondor's half of an [`HtcondorBackend`]: `condor_submit`, `condor_q`,
/// `condor_history`, `condor_rm` and `condor_version`.
#[derive(Debug)]
pub struct Htcondor;

impl Htcondor {
    /// Job ads of `clusters` from `condor_q` or `condor_history` (`tool`).
    async fn ads(&self, jobs: &JobDirs, tool: &str, clusters: &[&str]) -> Result<Vec<ProcAd>> {
        let mut command = Command::new(tool).args(["-json", "-attributes", ATTRIBUTES]);
        if clusters.len() <= MAX_IDS_ON_COMMAND_LINE {
            command = command.args(clusters.iter().copied());
        } else if tool == "condor_history" {
            let numbers = clusters.iter().filter_map(|c| c.parse::<u64>().ok());
            let (low, high) = (numbers.clone().min(), numbers.max());
            if let (Some(low), Some(high)) = (low, high) {
                command = command.args([
                    "-constraint".to_owned(),
                    format!("ClusterId >= {low} && ClusterId <= {high}"),
                ]);
            }
        }
        let output = jobs.run(command).await?;
        if !output.success() {
            return Err(self.failure(tool, &output));
        }
        parse_ads(&output.stdout_text())
    }

    /// Adds to each proc that exited [`NOT_STARTED_EXIT_CODE`] why its script never ran,
    /// from its job directory's `task-PROC.reason`: one remote command, and only when such a
    /// proc is among `ads`.
    /// Says why idle container jobs find no slot when the pool has none that runs
    /// containers: HTCondor's own reason is only "no match found", which such a job keeps
    /// for ever. One `condor_status` per status cycle, and only while such a job waits
    /// after a negotiation; a collector that does not answer leaves HTCondor's words.
    async fn explain_container_waits(&self, jobs: &JobDirs, ads: &mut [ProcAd]) {
        let unmatched = |ad: &ProcAd| {
            ad.job_status == 1
                && ad.want_container == Some(true)
                && ad.last_rej_match_reason.is_some()
        };
        if !ads.iter().any(unmatched) {
            return;
        }
        let command = Command::new("condor_status")
            .args(["-constraint", "HasContainer =?= true", "-af", "Name"])
            .output_limit(4096);
        match jobs.run(command).await {
            Ok(output) if output.success() && output.stdout_text().trim().is_empty() => {}
            _ => return,
        }
        for ad in ads.iter_mut().filter(|ad| unmatched(ad)) {
            let said = ad
                .last_rej_match_reason
                .as_deref()
                .unwrap_or_default()
                .trim();
            ad.last_rej_match_reason = Some(format!(
                "{said}: no slot in the pool runs containers (none has HasContainer), which \
                 a container job needs"
            ));
        }
    }

    async fn add_not_started_reasons(&self, jobs: &JobDirs, ads: &mut [ProcAd]) -> Result<()> {
        let mut procs: Vec<String> = ads
            .iter()
            .filter(|ad| ad.job_status == 4 && ad.exit_code == Some(NOT_STARTED_EXIT_CODE))
            .map(|ad| format!("{}/task-{}", ad.cluster_id, ad.proc_id))
            .collect();
        if procs.is_empty() {
            return Ok(());
        }
        // The command line stays short; beyond it, a proc keeps the reason its ad gives.
        procs.truncate(MAX_IDS_ON_COMMAND_LINE);
        let work = jobs.work().await?;
        let output = jobs
            .run(Command::sh(
                NOT_STARTED,
                std::iter::once(work).chain(procs.iter().map(String::as_str)),
            ))
            .await?
            .check("reading why scripts never ran")?;
        let reasons = parse_not_started(&output.stdout_text());
        for ad in ads {
            if let Some(why) = reasons.get(&(ad.cluster_id, ad.proc_id)) {
                ad.not_started = Some(why.clone());
            }
        }
        Ok(())
    }
}

#[async_trait]
impl CliScheduler for Htcondor {
    type Config = HtcondorConfig;
    const NAME: &'static str = "htcondor";
    const SCHEDULER: &'static str = "HTCondor";
    const JOB_ID: &'static str = "an HTCondor cluster id";
    /// The schedd did not answer: callers retry instead of giving up on the job.
    const UNREACHABLE: &'static [&'static str] = &[
        "Can't find address",
        "Failed to connect",
        "Failed to fetch ads",
        "Connection refused",
        "timed out",
    ];

    fn configure(config: HtcondorConfig) -> Result<(Self, WorkSettings)> {
        Ok((Self, config.work))
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::NONE
            .with_arrays(true)
            .with_containers(true)
            .with_gpus(true)
            .with_accounting(true)
            .with_withdraw(true)
            .with_estimates(true)
    }

    fn render_submit(&self, spec: &JobSpec, dir: &str) -> Result<SubmitCommand> {
        // The job directory is WORK/jobs/KEY; the event log, one for the work directory's
        // jobs, is where the follower tails it.
        let work = dir
            .strip_suffix(&format!("/jobs/{}", spec.key))
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::InvalidInput,
                    format!("the job directory {dir:?} is not WORK/jobs/{}", spec.key),
                )
            })?;
        let event_log = format!("{work}/{EVENT_LOG}");
        Ok(SubmitCommand {
            files: vec![
                ("job.sh", render_script(JOB_WRAPPER)),
                ("job.sub", submit_description(spec, dir, &event_log)?),
            ],
            command: vec![
                "condor_submit".to_owned(),
                "-terse".to_owned(),
                format!("{dir}/job.sub"),
            ],
        })
    }

    /// A schedd's limit on queued jobs ([`condor_submit_refusal`]).
    fn refusal(&self, refusal: &Output) -> Option<Refusal> {
        condor_submit_refusal(&refusal.stderr_text())
    }

    /// The cluster HTCondor itself holds with `key` in its key attribute: the queue first,
    /// then the history.
    async fn find(&self, jobs: &JobDirs, key: &JobKey, _dir: &str) -> Result<Option<JobId>> {
        // Keys are tokens of letters, digits and `._-`: safe inside a ClassAd string.
        let constraint = format!("{KEY_ATTRIBUTE} =?= \"{key}\"");
        for (tool, extra) in [("condor_q", None), ("condor_history", Some("1"))] {
            let mut command = Command::new(tool).args(["-constraint", constraint.as_str()]);
            if let Some(limit) = extra {
                command = command.args(["-limit", limit]);
            }
            let output = jobs.run(command.args(["-af", "ClusterId"])).await?;
            if !output.success() {
                return Err(self.failure(tool, &output));
            }
            if let Some(cluster) = first_cluster(&output.stdout_text()) {
                return Ok(Some(JobId::from(cluster)));
            }
        }
        Ok(None)
    }

    async fn status(&self, jobs: &JobDirs, clusters: &[&str]) -> Result<Vec<JobStatus>> {
        let mut queue = self.ads(jobs, "condor_q", clusters).await?;
        self.explain_container_waits(jobs, &mut queue).await;
        let mut in_queue: HashMap<String, Vec<&ProcAd>> = HashMap::new();
        for ad in &queue {
            in_queue
                .entry(ad.cluster_id.to_string())
                .or_default()
                .push(ad);
        }
        // A cluster wholly in the queue is settled by it; any other may have procs that
        // have left for the history (finished procs of an array, or the whole job).
        let for_history: Vec<&str> = clusters
            .iter()
            .copied()
            .filter(|c| {
                in_queue.get(*c).is_none_or(|ads| {
                    let tasks = ads.iter().find_map(|ad| ad.batch_bridge_tasks).unwrap_or(1);
                    ads.len() < usize::try_from(tasks).unwrap_or(usize::MAX)
                })
            })
            .collect();
        let mut history = if for_history.is_empty() {
            Vec::new()
        } else {
            self.ads(jobs, "condor_history", &for_history).await?
        };
        self.add_not_started_reasons(jobs, &mut history).await?;
        let mut in_history: HashMap<String, Vec<&ProcAd>> = HashMap::new();
        for ad in &history {
            in_history
                .entry(ad.cluster_id.to_string())
                .or_default()
                .push(ad);
        }
        Ok(clusters
            .iter()
            .map(|cluster| {
                let queued = in_queue
                    .get(*cluster)
                    .map(Vec::as_slice)
                    .unwrap_or_default();
                let ended = in_history
                    .get(*cluster)
                    .map(Vec::as_slice)
                    .unwrap_or_default();
                cluster_status(cluster, queued, ended)
            })
            .collect())
    }

    /// condor_rm, idempotent; the procs it refused that are still queued are printed.
    fn cancel_command(&self, _work: &str, cluster: &str) -> Command {
        Command::sh(CANCEL, [cluster, CANCEL_REASON])
    }

    fn cancelled(&self, cluster: &str, output: &Output) -> Result<()> {
        if !output.success() {
            return Err(self.failure("condor_rm", output));
        }
        // Lines are procs condor_rm refused that are still in the queue, not being removed.
        match output.stdout_text().lines().next() {
            None => Ok(()),
            Some(proc) => Err(Error::new(
                ErrorKind::PermissionDenied,
                format!(
                    "HTCondor refused to remove cluster {cluster}, which is still queued (owner \
                     and JobStatus: {proc})"
                ),
            )),
        }
    }

    /// Holds the idle procs, condor_q of the procs' JobStatus, then condor_rm when none
    /// started, or a release when one did (`sh/withdraw.sh`).
    fn withdraw_command(&self, _work: &str, cluster: &str) -> Option<Command> {
        Some(Command::sh(
            WITHDRAW,
            [cluster, WITHDRAW_HOLD_REASON, CANCEL_REASON],
        ))
    }

    /// A `tail` of the work directory's user job event log ([`EventLogFollower`]).
    fn events(&self, jobs: &JobDirs) -> Option<Arc<dyn EventSource>> {
        Some(Arc::new(EventLogFollower::new(
            jobs.shared_shell(),
            jobs.configured_work_dir(),
        )))
    }

    /// Whether idle slots match the spec's resources now, and the idle jobs ahead
    /// ([`crate::estimate`]).
    async fn estimate_start(
        &self,
        jobs: &JobDirs,
        spec: &JobSpec,
        _dir: &str,
    ) -> Result<StartEstimate> {
        crate::estimate::estimate_start(self, jobs, spec).await
    }

    /// condor_version does not ask the schedd, so a schedd that is down does not fail it;
    /// it proves the shell reaches the submit node and finds HTCondor's tools there.
    fn version_command(&self) -> Command {
        Command::new("condor_version")
    }

    /// `htcondor VERSION`, from the first line of what condor_version printed.
    fn parse_version(&self, output: &Output) -> Result<String> {
        condor_version(&output.stdout_text())
    }
}

#[cfg(test)]
mod tests {
    use batchbridge_core::conformance::scripted::{Programs, reply, scripted_shell, submit_record};
    use std::time::Duration;

    use batchbridge_core::error::excerpt;
    use batchbridge_core::{BatchBackend, JobState};

    use super::*;

    fn ok(stdout: &str) -> Result<Output> {
        reply(0, stdout, "")
    }

    fn failed(stderr: &str) -> Result<Output> {
        reply(1, "", stderr)
    }

    /// A backend whose shell answers its commands with `replies`, in order.
    fn backend(replies: Vec<Result<Output>>) -> (HtcondorBackend, Programs) {
        let (shell, programs) = scripted_shell("/home/u/w", replies);
        let backend = HtcondorBackend::new(shell, HtcondorConfig::default()).unwrap();
        (backend, programs)
    }

    fn spec() -> JobSpec {
        JobSpec::new(JobKey::new("key-1").unwrap(), "job", "true")
    }

    const SCHEDD_DOWN: &str = "Error: Can't find address for schedd vm\n";

    #[tokio::test]
    async fn a_schedd_that_does_not_answer_fails_status_temporarily() {
        let (condor, _) = backend(vec![failed(SCHEDD_DOWN)]);
        let err = condor.status(&[JobId::from("5")]).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::CommandFailed, "{err}");
        assert!(err.is_temporary(), "{err}");
    }

    #[tokio::test]
    async fn a_submit_refused_because_the_schedd_is_down_is_temporary() {
        let refused = submit_record(
            "key-1",
            "71",
            None,
            "ERROR: Can't find address of local schedd\n",
        );
        let (condor, _) = backend(vec![refused]);
        let err = condor.submit(&spec()).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::CommandFailed, "{err}");
        assert!(err.is_temporary(), "{err}");
    }

    #[tokio::test]
    async fn a_refusal_that_echoes_a_huge_value_is_quoted_only_in_part() {
        let echo = format!(
            "ERROR: Parse error in expression: {}\n",
            "x".repeat(1 << 20)
        );
        let (condor, _) = backend(vec![submit_record("key-1", "71", None, &echo)]);
        let err = condor.submit(&spec()).await.unwrap_err();
        assert_eq!(
            err.kind(),
            ErrorKind::Rejected,
            "{}",
            excerpt(err.message())
        );
        assert!(err.message().contains("Parse error in expression"));
        assert!(err.message().len() < 2 * batchbridge_core::error::MAX_QUOTED);

        let (condor, _) = backend(vec![reply(1, "", &echo)]);
        let err = condor.status(&[JobId::from("5")]).await.unwrap_err();
        assert!(err.message().len() < 2 * batchbridge_core::error::MAX_QUOTED);
    }

    #[tokio::test]
    async fn cancelling_a_huge_id_quotes_it_only_in_part() {
        let (condor, _) = backend(Vec::new());
        let err = condor
            .cancel(&JobId::from(format!("1;{}", "x".repeat(1 << 20))))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
        assert!(err.message().len() < 2 * batchbridge_core::error::MAX_QUOTED);
    }

    #[tokio::test]
    async fn a_key_claimed_by_a_submit_in_flight_is_looked_up_in_queue_then_history() {
        // The key's recorded id (none yet), condor_q, condor_history.
        let (condor, _) = backend(vec![
            submit_record("key-1", "claimed", None, ""),
            ok(""),
            ok(""),
            ok("42\n"),
        ]);
        assert_eq!(condor.submit(&spec()).await.unwrap(), JobId::from("42"));

        // condor_submit had not returned at the first look: the second finds its record.
        let (condor, _) = backend(vec![
            submit_record("key-1", "claimed", None, ""),
            ok(""),
            ok(""),
            ok(""),
            ok("42\n"),
        ]);
        assert_eq!(condor.submit(&spec()).await.unwrap(), JobId::from("42"));

        // A claim cut off: nothing anywhere until the wait ends, with the command time
        // limit (here at once).
        let (shell, _) = scripted_shell(
            "/home/u/w",
            vec![
                submit_record("key-1", "claimed", None, ""),
                ok(""),
                ok(""),
                ok(""),
            ],
        );
        let config = HtcondorConfig::default().with_command_timeout(Duration::from_millis(1));
        let condor = HtcondorBackend::new(shell, config).unwrap();
        let err = condor.submit(&spec()).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::SubmitOutcomeUnknown, "{err}");
        assert!(err.is_temporary());
    }

    #[test]
    fn a_cancel_gives_condor_rm_the_reason_that_tells_it_from_one_by_hand() {
        let command = Htcondor.cancel_command("/w", "5");
        let args = command.get_args();
        assert_eq!(args[args.len() - 2..], ["5", CANCEL_REASON]);
        assert!(
            args[1].contains("condor_rm -reason \"$2\" \"$1\""),
            "{}",
            args[1]
        );
    }

    #[test]
    fn the_wrapper_gets_cores_exit_codes() {
        let submit = Htcondor.render_submit(&spec(), "/w/jobs/key-1").unwrap();
        let (_, wrapper) = submit.files.iter().find(|(n, _)| *n == "job.sh").unwrap();
        assert!(!wrapper.contains('@'), "{wrapper}");
        assert!(wrapper.contains(&format!("|| exit {NOT_STARTED_EXIT_CODE}")));
        assert!(wrapper.contains("enter_working_dir() {"));
        assert_eq!(
            submit.command,
            ["condor_submit", "-terse", "/w/jobs/key-1/job.sub"]
        );
    }

    #[test]
    fn every_job_of_a_work_directory_writes_the_one_event_log_the_follower_tails() {
        let submit = Htcondor.render_submit(&spec(), "/w/jobs/key-1").unwrap();
        let (_, description) = submit.files.iter().find(|(n, _)| *n == "job.sub").unwrap();
        assert!(
            description.contains("\nlog = /w/job-events.log\n"),
            "{description}"
        );
        let err = Htcondor.render_submit(&spec(), "/w/elsewhere").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
    }

    #[tokio::test]
    async fn version_is_read_from_condor_version() {
        let printed = "$CondorVersion: 23.9.6 2026-07-12 PackageID: 23.9.6+dfsg-2.1+b10 $\n\
                       $CondorPlatform: X86_64-Debian_13 $\n";
        let (condor, programs) = backend(vec![ok(printed)]);
        assert_eq!(condor.version().await.unwrap(), "htcondor 23.9.6");
        assert_eq!(*programs.lock().unwrap(), ["condor_version"]);

        let (condor, _) = backend(vec![reply(127, "", "sh: condor_version: not found\n")]);
        let err = condor.version().await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::CommandFailed, "{err}");
        assert!(!err.is_temporary(), "{err}");
    }

    #[tokio::test]
    async fn a_cluster_wholly_in_the_queue_costs_one_command() {
        let queue = r#"[ { "ClusterId": 5, "ProcId": 0, "JobStatus": 2, "BatchBridgeTasks": 1 } ]"#;
        let (condor, programs) = backend(vec![ok(queue)]);
        let statuses = condor.status(&[JobId::from("5")]).await.unwrap();
        assert_eq!(statuses[&JobId::from("5")].state, JobState::Running);
        assert_eq!(*programs.lock().unwrap(), ["condor_q"]);

        let (condor, programs) = backend(vec![ok(""), ok("[ ]\n")]);
        let statuses = condor
            .status(&[JobId::from("6"), JobId::from("not-a-number")])
            .await
            .unwrap();
        assert_eq!(statuses[&JobId::from("6")].state, JobState::Unknown);
        assert_eq!(
            statuses[&JobId::from("not-a-number")].state,
            JobState::Unknown
        );
        assert_eq!(*programs.lock().unwrap(), ["condor_q", "condor_history"]);
    }
}
