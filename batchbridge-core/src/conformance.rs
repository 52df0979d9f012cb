//! A test suite any [`BatchBackend`] runs against itself to prove it keeps the contract.
//!
//! Each check is a public async function that submits real jobs, waits for them with
//! batched [`BatchBackend::status`] calls, and panics with a precise message when the
//! backend breaks the contract. [`conformance_tests!`](crate::conformance_tests) turns the
//! whole list into one `#[tokio::test]` per check:
//!
//! ```no_run
//! // tests/conformance.rs of a backend crate; needs tokio (macros, rt-multi-thread) as a
//! // dev-dependency.
//! use batchbridge_core::LocalBackend;
//!
//! batchbridge_core::conformance_tests!(async {
//!     let dir = tempfile::tempdir().unwrap().keep();
//!     LocalBackend::new(dir).unwrap()
//! });
//! ```
//!
//! What is checked, one function each: a job succeeds (with no failure cause) and its output
//! is readable; a failing job reports its exit code and the cause
//! [`ExitCode`](FailureCause::ExitCode); a queued and a running job can be cancelled, with
//! the cause [`Cancelled`](FailureCause::Cancelled), the queued one gone from the
//! scheduler's own listing once cleaned up (where nothing can hold a job back, a
//! resource request is refused instead of queued); a cancelled job whose script ignores
//! SIGTERM leaves no process behind; a job whose environment sets a `PATH` without `/bin`
//! still runs its script; cancelling a
//! finished or unknown job is Ok; submitting one key twice, one after the other or four
//! times at once, yields one job; a batch through `submit_many` answers each spec as `submit`
//! would (new keys, a key submitted before, an invalid spec, hostile scripts); `find` by key; `status` of 50 jobs in one call; an
//! unknown id is Unknown (its output NotFound); a malformed id is InvalidInput for cancel
//! and output and Unknown for status; output of a task the job does not have is
//! InvalidInput; output is bounded (tail and range); a hostile script and environment run
//! verbatim; an array of 3 tasks with one failing, whose cause is that task's exit code; a
//! working directory that does not exist fails the job, saying so, with the cause
//! [`NotStarted`](FailureCause::NotStarted); an invalid spec is refused and leaves nothing behind; the
//! version is one printable line; cleanup refuses an active job and removes an ended one;
//! an id keeps naming its job after the scheduler's numbering restarts (provoked only with
//! [`Config::restart_numbering`]); a running job put back in the queue waits as requeued
//! and runs again under its id (provoked only with [`Config::requeue`]); the capabilities
//! say what the backend does.
//! Through a [`Tracker`]: for a backend with pushed events, a run, a success, a failure and
//! a cancel reach the tracker without its interval's polls (a backend without events
//! passes that check only because it has none, and the check says so); and the tracker's
//! change stream never shows a job leaving a terminal state.
//!
//! # What each capability and setting gates
//!
//! Every optional feature is declared in [`BatchBackend::capabilities`] (events by
//! [`BatchBackend::events`]); a check of a feature fails when a declared one answers
//! Unsupported or an undeclared one does not, and says on stderr when it passed only
//! because the feature is not declared.
//!
//! | declared by | checks it gates |
//! | --- | --- |
//! | [`Capabilities::arrays`](crate::Capabilities::arrays) | [`array_with_one_failing_task`] (else the array is refused as Unsupported); the array half of [`output_of_a_missing_task_is_invalid_input`] |
//! | [`Capabilities::withdraw`](crate::Capabilities::withdraw) | [`withdraw_takes_only_a_job_that_has_not_started`] (else withdraw must say Unsupported) |
//! | [`Capabilities::cleanup`](crate::Capabilities::cleanup) | [`cleanup_removes_only_ended_jobs`], and the scheduler-side half of [`cancel_queued_job`] (else cleanup must say Unsupported) |
//! | [`Capabilities::estimates`](crate::Capabilities::estimates), [`containers`](crate::Capabilities::containers), [`gpus`](crate::Capabilities::gpus) | [`capabilities_say_what_the_backend_does`]: an undeclared one is refused as Unsupported; a declared estimate answers (declared containers and GPUs are not run: the suite cannot know the cluster has a runtime or a GPU) |
//! | [`Capabilities::accounting`](crate::Capabilities::accounting) | none: it tells callers whether a finished job is still known, which no check can provoke |
//! | [`BatchBackend::events`] returning a source | [`pushed_changes_arrive_for_run_succeed_fail_cancel`] (else it checks nothing); [`tracked_changes_never_leave_a_terminal_state`] with events or without |
//! | [`Config::unsatisfiable`] `None` | [`cancel_queued_job`] and the queued half of [`withdraw_takes_only_a_job_that_has_not_started`] check a refused resource request instead of a queued job |
//! | [`Config::restart_numbering`] | [`a_reused_id_never_shows_the_old_job`] (else it provokes nothing) |
//! | [`Config::requeue`] | [`requeued_job_runs_again_under_its_id`] (else it provokes nothing) |
//!
//! Every other check runs in full on every backend.
//!
//! For unit tests of a command-line backend's error paths, [`scripted`] is a shell that
//! answers with canned replies.

mod requeue;
pub mod scripted;

pub use requeue::requeued_job_runs_again_under_its_id;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::backend::{BatchBackend, JobId, OutputRequest, Withdrawal};
use crate::cause::FailureCause;
use crate::error::{ErrorKind, Result};
use crate::spec::{ArraySpec, JobKey, JobSpec, Resources};
use crate::state::{JobState, JobStatus};
use crate::tracker::{Change, Changes, SeenBy, Tracker};

/// How the suite treats a backend.
///
/// `#[non_exhaustive]`: outside this crate `Config { .., ..Config::default() }` is error
/// E0639; take the default and set the fields that differ:
///
/// ```
/// use batchbridge_core::conformance::Config;
///
/// let mut config = Config::default();
/// config.unsatisfiable = None; // nothing can hold a job back
/// config.timeout = std::time::Duration::from_secs(60);
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Config {
    /// Longest wait for any one expected state.
    pub timeout: Duration,
    /// Pause between status polls.
    pub poll_interval: Duration,
    /// Resources the backend accepts but cannot satisfy, so a job stays Queued. `None` for
    /// a backend that keeps no account of resources, so that nothing can hold a job back
    /// (`at`): it must refuse a resource request as Unsupported instead, which
    /// [`cancel_queued_job`] then checks.
    pub unsatisfiable: Option<Resources>,
    /// An id that names no job on the backend.
    pub unknown_id: JobId,
    /// An id that cannot be a job of the backend at all.
    pub malformed_id: JobId,
    /// Applied to every spec the suite submits (a partition, an account…).
    pub customize: fn(&mut JobSpec),
    /// How long after a cancel the processes of a job that ignores SIGTERM may live on:
    /// the scheduler's grace before its SIGKILL (SLURM's `KillWait`, 30 s unless the site
    /// sets it; PBS's `kill_delay`; HTCondor's `MachineMaxVacateTime`, 10 minutes unless
    /// the pool sets it), plus a margin.
    /// [`cancelled_job_that_traps_sigterm_leaves_no_process`] waits this long at most.
    pub kill_grace: Duration,
    /// Makes the scheduler start its job numbering again (restarts a task-spooler server,
    /// for instance), for a backend whose scheduler's numbers repeat;
    /// [`a_reused_id_never_shows_the_old_job`] calls it. `None` (the default) for a
    /// scheduler that never repeats a number, which that check then cannot provoke.
    pub restart_numbering: Option<RestartNumbering>,
    /// Puts the given running job back in the scheduler's queue under the same id, as a
    /// user or an administrator would (SLURM's `scontrol requeue`, PBS's `qrerun`,
    /// HTCondor's `condor_vacate_job`); [`requeued_job_runs_again_under_its_id`] calls it.
    /// `None` (the default) for a scheduler that cannot, which that check then cannot
    /// provoke.
    pub requeue: Option<Requeue>,
}

/// What [`Config::requeue`] runs: an async step, given the running job's id.
pub type Requeue =
    fn(JobId) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<()>> + Send>>;

/// What [`Config::restart_numbering`] runs: an async step, given the suite's backend's name.
pub type RestartNumbering =
    fn(&str) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<()>> + Send>>;

impl Default for Config {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(180),
            poll_interval: Duration::from_millis(250),
            unsatisfiable: Some(Resources::default().with_cpus(1024)),
            unknown_id: JobId::from("999999999"),
            malformed_id: JobId::from("../1; not a job"),
            customize: |_| {},
            kill_grace: Duration::from_secs(45),
            restart_numbering: None,
            requeue: None,
        }
    }
}

impl Config {
    /// The defaults with [`requeue`](Self::requeue) set, for a scheduler that can put a
    /// running job back in its queue.
    ///
    /// ```
    /// use batchbridge_core::conformance::Config;
    ///
    /// let config = Config::with_requeue(|_id| Box::pin(async { Ok(()) }));
    /// assert!(config.requeue.is_some());
    /// ```
    pub fn with_requeue(requeue: Requeue) -> Self {
        Self {
            requeue: Some(requeue),
            ..Self::default()
        }
    }
}

/// A key no earlier run of the suite used, on any machine sharing the cluster: `cf-`, the
/// letters and digits of `check`, then a time, process and counter tail. A backend's own
/// real-cluster tests use it too.
pub fn unique_key(check: &str) -> JobKey {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let tail = format!("{nanos:x}-{}-{n}", std::process::id());
    // Trim the check name, never the unique tail, when the whole is too long.
    let room = crate::spec::MAX_KEY_LEN - "cf--".len() - tail.len();
    let check: String = check
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .take(room)
        .collect();
    let key = format!("cf-{check}-{tail}");
    JobKey::new(key).unwrap_or_else(|err| panic!("the suite built an invalid key: {err}"))
}

fn spec(config: &Config, check: &str, script: &str) -> JobSpec {
    let mut spec = JobSpec::new(unique_key(check), check.replace('_', "-"), script);
    (config.customize)(&mut spec);
    spec
}

async fn status_of<B: BatchBackend + ?Sized>(backend: &B, id: &JobId) -> Result<JobStatus> {
    let mut statuses = backend.status(std::slice::from_ref(id)).await?;
    Ok(statuses
        .remove(id)
        .unwrap_or_else(|| panic!("status() left out job {id}, which it was asked about")))
}

/// Polls until `done` holds for the job's status, and returns that status.
pub async fn wait_for<B, F>(
    backend: &B,
    id: &JobId,
    config: &Config,
    what: &str,
    done: F,
) -> Result<JobStatus>
where
    B: BatchBackend + ?Sized,
    F: Fn(&JobStatus) -> bool,
{
    let deadline = Instant::now() + config.timeout;
    loop {
        let status = status_of(backend, id).await?;
        if done(&status) {
            return Ok(status);
        }
        assert!(
            Instant::now() < deadline,
            "job {id} did not become {what} within {:?}; last status: {status:?}",
            config.timeout
        );
        tokio::time::sleep(config.poll_interval).await;
    }
}

/// Polls until the job is terminal.
pub async fn wait_terminal<B: BatchBackend + ?Sized>(
    backend: &B,
    id: &JobId,
    config: &Config,
) -> Result<JobStatus> {
    wait_for(backend, id, config, "terminal", |s| s.state.is_terminal()).await
}

async fn run_to_end<B: BatchBackend + ?Sized>(
    backend: &B,
    spec: &JobSpec,
    config: &Config,
) -> Result<(JobId, JobStatus)> {
    let id = backend.submit(spec).await?;
    let status = wait_terminal(backend, &id, config).await?;
    Ok((id, status))
}

/// A job succeeds, reports exit code 0 and no failure cause, and its stdout and stderr are
/// readable.
pub async fn job_succeeds_and_output_is_readable<B: BatchBackend + ?Sized>(
    backend: &B,
    config: &Config,
) -> Result<()> {
    let spec = spec(
        config,
        "succeeds",
        "echo 'hello from batchbridge'\necho 'to stderr' >&2\n",
    );
    let (id, status) = run_to_end(backend, &spec, config).await?;
    assert_eq!(status.state, JobState::Succeeded, "{status:?}");
    assert_eq!(status.exit_code, Some(0), "{status:?}");
    assert_eq!(
        status.cause, None,
        "a job that succeeded has no failure cause"
    );
    let output = backend
        .fetch_output(&id, &OutputRequest::tail(4096))
        .await?;
    assert_eq!(output.stdout.text(), "hello from batchbridge\n");
    assert_eq!(output.stderr.text(), "to stderr\n");
    assert!(!output.stdout.is_truncated());
    Ok(())
}

/// A script exiting 3 is Failed with exit code 3 and the cause
/// [`ExitCode(3)`](FailureCause::ExitCode), which retry policies decide on.
pub async fn failing_job_reports_exit_code<B: BatchBackend + ?Sized>(
    backend: &B,
    config: &Config,
) -> Result<()> {
    let spec = spec(config, "fails", "echo about to fail\nexit 3\n");
    let (_, status) = run_to_end(backend, &spec, config).await?;
    assert_eq!(status.state, JobState::Failed, "{status:?}");
    assert_eq!(status.exit_code, Some(3), "{status:?}");
    assert_eq!(status.cause, Some(FailureCause::ExitCode(3)), "{status:?}");
    Ok(())
}

/// A job that cannot get its resources stays Queued, and cancelling it ends it Cancelled
/// with the cause [`Cancelled`](FailureCause::Cancelled), and the scheduler itself dropped
/// it: once [`cleanup`](BatchBackend::cleanup) removed what the backend recorded of the job
/// (so that no file of its own can say Cancelled), `find` by its key and `status` of its id
/// answer from the scheduler's own listing alone, and must show no job that is still
/// waiting or running (within [`Config::timeout`]); a leftover fails the check, named. A
/// backend that cannot clean up says so on stderr and is checked by its status alone.
/// A backend without [`Config::unsatisfiable`] resources must refuse a request for 1024
/// CPUs as Unsupported and leave no job behind.
pub async fn cancel_queued_job<B: BatchBackend + ?Sized>(
    backend: &B,
    config: &Config,
) -> Result<()> {
    let mut spec = spec(config, "cancel_queued", "echo must never run\n");
    let Some(unsatisfiable) = &config.unsatisfiable else {
        spec.resources.cpus = Some(1024);
        let err = backend
            .submit(&spec)
            .await
            .expect_err("a backend that keeps no account of resources accepted 1024 CPUs");
        assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
        assert_eq!(
            backend.find(&spec.key).await?,
            None,
            "a refused spec left a job behind"
        );
        return Ok(());
    };
    spec.resources = unsatisfiable.clone();
    let id = backend.submit(&spec).await?;
    let queued = wait_for(backend, &id, config, "Queued", |s| {
        s.state == JobState::Queued
    })
    .await?;
    assert!(
        queued.reason.is_some(),
        "a queued job says why it waits: {queued:?}"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let still = status_of(backend, &id).await?;
    assert_eq!(
        still.state,
        JobState::Queued,
        "unsatisfiable job left the queue: {still:?}"
    );
    backend.cancel(&id).await?;
    let status = wait_terminal(backend, &id, config).await?;
    assert_cancelled(&status);
    let cleaned = backend.cleanup(&spec.key).await;
    if !declared(backend, "cleanup", backend.capabilities().cleanup, &cleaned) {
        return Ok(());
    }
    cleaned?;
    let listed = backend.find(&spec.key).await?;
    let gone = "gone from the scheduler after its cancel (else a leftover that may yet run)";
    for id in std::iter::once(&id).chain(listed.as_ref()) {
        wait_for(backend, id, config, gone, |s| {
            s.state.is_terminal() || s.state == JobState::Unknown
        })
        .await?;
    }
    Ok(())
}

/// A running job can be cancelled and ends Cancelled, with the cause
/// [`Cancelled`](FailureCause::Cancelled).
pub async fn cancel_running_job<B: BatchBackend + ?Sized>(
    backend: &B,
    config: &Config,
) -> Result<()> {
    let spec = spec(
        config,
        "cancel_running",
        "echo started\nsleep 600\necho must not get here\n",
    );
    let id = backend.submit(&spec).await?;
    wait_for(backend, &id, config, "Running", |s| {
        s.state == JobState::Running
    })
    .await?;
    backend.cancel(&id).await?;
    let status = wait_terminal(backend, &id, config).await?;
    assert_cancelled(&status);
    Ok(())
}

/// The script of [`cancelled_job_that_traps_sigterm_leaves_no_process`]: it ignores
/// SIGTERM, starts `sleep 281` (which inherits that) and prints its host and the sleep's pid.
const TRAPPED_SCRIPT: &str = "trap '' TERM\nsleep 281 &\necho \"$HOSTNAME $!\"\nwait\n";

/// A cancelled job whose script ignores SIGTERM (`trap '' TERM`; to the job wrapper, a
/// script that saves its work on SIGTERM and goes on is the same) leaves no process behind: its `sleep 281`
/// (which inherits the ignored signal) is gone within [`Config::kill_grace`] of the end of
/// the cancel, as it is under the scheduler alone, which sends SIGKILL once its grace has
/// passed. A job wrapper that records the cancel and exits at once lets the script outlive
/// the job (re-parented to PID 1, out of reach of a scheduler that tracks processes by
/// their parents), while the status says Cancelled.
///
/// Whether the `sleep` still runs is asked by a second job on the same backend, which
/// looks for its pid in `/proc` of its host for up to [`Config::kill_grace`]. That needs
/// the second job on the first one's host: on a cluster of several nodes, pin one with
/// [`Config::customize`]. When it ran elsewhere the check fails and says so, rather than
/// pass without having looked.
pub async fn cancelled_job_that_traps_sigterm_leaves_no_process<B: BatchBackend + ?Sized>(
    backend: &B,
    config: &Config,
) -> Result<()> {
    let trapped = spec(config, "trapped_cancel", TRAPPED_SCRIPT);
    let id = backend.submit(&trapped).await?;
    wait_for(backend, &id, config, "Running", |s| {
        s.state == JobState::Running
    })
    .await?;
    let line = wait_line(backend, &id, config).await?;
    let (host, pid) = line
        .split_once(' ')
        .filter(|(_, pid)| pid.parse::<u32>().is_ok())
        .unwrap_or_else(|| panic!("job {id} printed {line:?}, not `HOST PID`"));
    backend.cancel(&id).await?;
    let status = wait_terminal(backend, &id, config).await?;
    assert_cancelled(&status);

    let grace = config.kill_grace.as_secs().max(1);
    // Builtins only, but for `sleep`, and a pid checked against the command line, so that a
    // pid reused by another process (or a zombie, whose command line is empty) reads as gone.
    let probe = format!(
        "pid={pid}\n\
         while {{ IFS= read -r -d '' name && IFS= read -r -d '' arg; }} 2>/dev/null </proc/$pid/cmdline &&\n\
         \x20   [ \"${{name##*/}} $arg\" = 'sleep 281' ]; do\n\
         \x20   if [ \"$SECONDS\" -ge {grace} ]; then echo \"$HOSTNAME alive\"; exit 0; fi\n\
         \x20   sleep 1\n\
         done\n\
         echo \"$HOSTNAME gone after $SECONDS s\"\n"
    );
    let (probe_id, probe_status) =
        run_to_end(backend, &spec(config, "trapped_probe", &probe), config).await?;
    assert_eq!(
        probe_status.state,
        JobState::Succeeded,
        "the job looking for the process failed: {probe_status:?}"
    );
    let seen = backend
        .fetch_output(&probe_id, &OutputRequest::tail(4096))
        .await?
        .stdout
        .text()
        .into_owned();
    let (probe_host, verdict) = seen.trim_end().split_once(' ').unwrap_or_default();
    assert_eq!(
        probe_host, host,
        "the job looking for process {pid} of job {id} ran on another host, where it cannot \
         see it: pin both to one node with Config::customize"
    );
    eprintln!(
        "cancelled_job_that_traps_sigterm_leaves_no_process: the sleep of cancelled job {id} \
         on {host}: {verdict}"
    );
    assert!(
        verdict.starts_with("gone"),
        "job {id} was cancelled ({status:?}), yet its `sleep 281` (pid {pid} on {host}) \
         still ran {grace} s later: the scheduler never got to kill it"
    );
    Ok(())
}

/// Waits until running job `id` printed a first whole line, and returns it.
async fn wait_line<B: BatchBackend + ?Sized>(
    backend: &B,
    id: &JobId,
    config: &Config,
) -> Result<String> {
    let deadline = Instant::now() + config.timeout;
    loop {
        let stdout = backend
            .fetch_output(id, &OutputRequest::tail(4096))
            .await?
            .stdout
            .text()
            .into_owned();
        if let Some((line, _)) = stdout.split_once('\n') {
            return Ok(line.to_owned());
        }
        assert!(
            Instant::now() < deadline,
            "job {id} printed no line within {:?} of running",
            config.timeout
        );
        tokio::time::sleep(config.poll_interval).await;
    }
}

/// A `PATH` of the job's environment that holds no shell and no tools.
pub const PATH_WITHOUT_BIN: &str = "/nonexistent/batchbridge-bin";

/// A job whose environment sets a `PATH` without `/bin` ([`PATH_WITHOUT_BIN`]: a tenant's
/// own tools only) still runs its script, with that `PATH`: the wrapper finds the shell
/// that runs the script before the job's environment applies, instead of failing every
/// such job with exit 127 before its script started.
pub async fn path_without_bin_still_runs_the_script<B: BatchBackend + ?Sized>(
    backend: &B,
    config: &Config,
) -> Result<()> {
    let mut spec = spec(
        config,
        "path_without_bin",
        "echo \"PATH=$PATH\"\ncommand -v cat || echo 'no cat'\n",
    );
    spec.environment
        .insert("PATH".into(), PATH_WITHOUT_BIN.into());
    let (id, status) = run_to_end(backend, &spec, config).await?;
    let output = backend
        .fetch_output(&id, &OutputRequest::tail(4096))
        .await?;
    assert_eq!(
        (status.state, status.exit_code),
        (JobState::Succeeded, Some(0)),
        "{status:?}; stderr: {:?}",
        output.stderr.text()
    );
    assert_eq!(
        output.stdout.text(),
        format!("PATH={PATH_WITHOUT_BIN}\nno cat\n")
    );
    Ok(())
}

/// [`withdraw`](BatchBackend::withdraw) takes only a job none of which started: a running
/// job is left running ([`Withdrawal::Started`]), an ended or unknown one is
/// [`Withdrawal::Ended`], a malformed id InvalidInput, and a job that cannot get its
/// resources ([`Config::unsatisfiable`]) is withdrawn and ends Cancelled without ever
/// starting. A backend that cannot withdraw must say Unsupported.
pub async fn withdraw_takes_only_a_job_that_has_not_started<B: BatchBackend + ?Sized>(
    backend: &B,
    config: &Config,
) -> Result<()> {
    let running = backend
        .submit(&spec(
            config,
            "withdraw_running",
            "echo started\nsleep 600\n",
        ))
        .await?;
    wait_for(backend, &running, config, "Running", |s| {
        s.state == JobState::Running
    })
    .await?;
    wait_printed(backend, &running, config, "started\n").await?;
    let withdrawal = backend.withdraw(&running).await;
    if !declared(
        backend,
        "withdraw",
        backend.capabilities().withdraw,
        &withdrawal,
    ) {
        backend.cancel(&running).await?;
        return Ok(());
    }
    assert_eq!(withdrawal?, Withdrawal::Started, "job {running}");
    let still = status_of(backend, &running).await?;
    assert_eq!(
        still.state,
        JobState::Running,
        "a withdraw stopped it: {still:?}"
    );
    backend.cancel(&running).await?;
    wait_terminal(backend, &running, config).await?;
    assert_eq!(backend.withdraw(&running).await?, Withdrawal::Ended);
    assert_eq!(
        backend.withdraw(&config.unknown_id).await?,
        Withdrawal::Ended
    );
    let malformed = backend
        .withdraw(&config.malformed_id)
        .await
        .expect_err("withdraw of a malformed id succeeded");
    assert_eq!(malformed.kind(), ErrorKind::InvalidInput, "{malformed}");

    let Some(unsatisfiable) = &config.unsatisfiable else {
        return Ok(());
    };
    let mut waiting = spec(config, "withdraw_waiting", "echo must never run\n");
    waiting.resources = unsatisfiable.clone();
    let id = backend.submit(&waiting).await?;
    wait_for(backend, &id, config, "Queued", |s| {
        s.state == JobState::Queued
    })
    .await?;
    assert_eq!(
        backend.withdraw(&id).await?,
        Withdrawal::Withdrawn,
        "job {id}"
    );
    let status = wait_terminal(backend, &id, config).await?;
    assert_cancelled(&status);
    assert_eq!(
        status.started_at, None,
        "a withdrawn job started: {status:?}"
    );
    Ok(())
}

/// Whether the check goes on with an optional feature: `answer` is what a call of it gave,
/// `declared` whether [`BatchBackend::capabilities`] declares it. A declared feature must
/// not answer [`Unsupported`](ErrorKind::Unsupported), and an undeclared one must (which
/// the check then says on stderr, as it checks no more of the feature).
fn declared<B: BatchBackend + ?Sized, T: std::fmt::Debug>(
    backend: &B,
    feature: &str,
    declared: bool,
    answer: &Result<T>,
) -> bool {
    let unsupported = matches!(answer, Err(err) if err.kind() == ErrorKind::Unsupported);
    match (declared, unsupported) {
        (true, true) => panic!(
            "the {} backend declares {feature} in its capabilities, yet answered {answer:?}",
            backend.name()
        ),
        (false, false) => panic!(
            "the {} backend does not declare {feature} in its capabilities, yet answered \
             {answer:?} instead of Unsupported",
            backend.name()
        ),
        (false, true) => {
            eprintln!(
                "the {} backend does not declare {feature}, and said Unsupported: the \
                 {feature} part of this check passes only because of that",
                backend.name()
            );
            false
        }
        (true, false) => true,
    }
}

/// Every optional feature the backend does not declare in
/// [`BatchBackend::capabilities`] is refused as [`Unsupported`](ErrorKind::Unsupported)
/// and leaves no job behind (containers, GPUs, estimates), and a declared estimate answers
/// something else. (Arrays, withdraw and cleanup are checked the same way by their own
/// checks.)
pub async fn capabilities_say_what_the_backend_does<B: BatchBackend + ?Sized>(
    backend: &B,
    config: &Config,
) -> Result<()> {
    let capabilities = backend.capabilities();
    let plain = spec(config, "estimate", "true\n");
    let estimate = backend.estimate_start(&plain).await;
    if declared(backend, "estimates", capabilities.estimates, &estimate) {
        estimate?;
    }
    let mut refused = Vec::new();
    if !capabilities.containers {
        let mut boxed = spec(config, "undeclared_container", "true\n");
        boxed.container = Some(crate::spec::Container::new("docker://alpine"));
        refused.push(("containers", boxed));
    }
    if !capabilities.gpus {
        let mut gpu = spec(config, "undeclared_gpu", "true\n");
        gpu.resources.gpus = Some(1);
        refused.push(("GPUs", gpu));
    }
    for (feature, spec) in refused {
        let Err(err) = backend.submit(&spec).await else {
            panic!(
                "the backend does not declare {feature}, yet accepted job {}",
                spec.key
            );
        };
        assert_eq!(err.kind(), ErrorKind::Unsupported, "{feature}: {err}");
        assert_eq!(
            backend.find(&spec.key).await?,
            None,
            "{feature}: a job left"
        );
    }
    Ok(())
}

/// Waits until running job `id` printed `stdout`: a scheduler may say Running a moment
/// before the script runs (and PBS loses a qdel that reaches pbs_mom while it is still
/// starting the job).
async fn wait_printed<B: BatchBackend + ?Sized>(
    backend: &B,
    id: &JobId,
    config: &Config,
    stdout: &str,
) -> Result<()> {
    let deadline = Instant::now() + config.timeout;
    while backend
        .fetch_output(id, &OutputRequest::tail(100))
        .await?
        .stdout
        .text()
        != stdout
    {
        assert!(
            Instant::now() < deadline,
            "job {id} did not print {stdout:?} within {:?} of running",
            config.timeout
        );
        tokio::time::sleep(config.poll_interval).await;
    }
    Ok(())
}

/// The status of a job the suite cancelled: Cancelled, and the cause says so (by whom is
/// the backend's to tell).
fn assert_cancelled(status: &JobStatus) {
    assert_eq!(status.state, JobState::Cancelled, "{status:?}");
    assert!(
        matches!(status.cause, Some(FailureCause::Cancelled(_))),
        "a cancelled job's cause is Cancelled: {status:?}"
    );
}

/// A job's id keeps naming that job after the scheduler's numbering starts again
/// ([`Config::restart_numbering`]): a job submitted afterwards gets another id, or its
/// submit is refused because the number is taken, and the old id still shows the old job's
/// end and output, never the new job's.
///
/// **Without `restart_numbering` this check provokes nothing**: it says so on stderr and
/// checks only that two jobs got two ids. `RemoteBackend` refuses a number already linked
/// to another key whatever the scheduler (core's unit test
/// `an_id_given_again_never_takes_over_the_old_job` shows it with a scheduler that always
/// answers 7); what only this check with a hook shows is that the backend's own status
/// and output do not ask the scheduler about the new job under the old number.
pub async fn a_reused_id_never_shows_the_old_job<B: BatchBackend + ?Sized>(
    backend: &B,
    config: &Config,
) -> Result<()> {
    let old = spec(config, "reused_old", "echo old\n");
    let (old_id, before) = run_to_end(backend, &old, config).await?;
    assert_eq!(before.state, JobState::Succeeded, "{before:?}");
    match config.restart_numbering {
        Some(restart) => restart(backend.name()).await?,
        None => eprintln!(
            "a_reused_id_never_shows_the_old_job: no Config::restart_numbering for the {} \
             backend; its scheduler is taken never to repeat a number, and nothing provokes it",
            backend.name()
        ),
    }
    let new = spec(config, "reused_new", "echo new\nexit 3\n");
    match backend.submit(&new).await {
        Ok(new_id) => {
            assert_ne!(
                new_id, old_id,
                "job {} got the id of job {}",
                new.key, old.key
            );
            wait_terminal(backend, &new_id, config).await?;
        }
        Err(err) if err.kind() == ErrorKind::UnexpectedOutput && !err.is_temporary() => {
            eprintln!("a_reused_id_never_shows_the_old_job: the new job was refused: {err}");
        }
        Err(err) => return Err(err),
    }
    let after = status_of(backend, &old_id).await?;
    assert_eq!(
        (after.state, after.exit_code),
        (JobState::Succeeded, Some(0)),
        "job {old_id} shows another job's status once its number was given again: {after:?}"
    );
    let output = backend
        .fetch_output(&old_id, &OutputRequest::tail(100))
        .await?;
    assert_eq!(output.stdout.text(), "old\n", "job {old_id}'s output");
    Ok(())
}

/// Cancelling a finished job, or an unknown one, is Ok and changes nothing.
pub async fn cancel_is_idempotent<B: BatchBackend + ?Sized>(
    backend: &B,
    config: &Config,
) -> Result<()> {
    let spec = spec(config, "cancel_finished", "true\n");
    let (id, status) = run_to_end(backend, &spec, config).await?;
    assert_eq!(status.state, JobState::Succeeded, "{status:?}");
    backend.cancel(&id).await?;
    backend.cancel(&id).await?;
    let after = status_of(backend, &id).await?;
    assert_eq!(
        after.state,
        JobState::Succeeded,
        "cancel changed a finished job: {after:?}"
    );
    backend.cancel(&config.unknown_id).await?;
    Ok(())
}

/// Submitting the same key twice yields one job.
pub async fn same_key_yields_one_job<B: BatchBackend + ?Sized>(
    backend: &B,
    config: &Config,
) -> Result<()> {
    let spec = spec(config, "same_key", "sleep 2\n");
    let first = backend.submit(&spec).await?;
    let second = backend.submit(&spec).await?;
    assert_eq!(
        first, second,
        "a second submit of key {} made a second job",
        spec.key
    );
    let status = wait_terminal(backend, &first, config).await?;
    assert_eq!(status.state, JobState::Succeeded, "{status:?}");
    let third = backend.submit(&spec).await?;
    assert_eq!(first, third, "a finished job's key made a new job");
    Ok(())
}

/// [`BatchBackend::submit_many`] answers each spec, in order, as [`BatchBackend::submit`]
/// would: a batch mixing new keys, a key submitted before (its job's id again, no second
/// job), an invalid spec (its own InvalidInput, nothing left behind) and the same key twice
/// (one job) submits the rest; a second batch of the same specs makes no job; and a batch of
/// hostile scripts and environment values, one job each, runs every one verbatim.
pub async fn submit_many_answers_each_job<B: BatchBackend + ?Sized>(
    backend: &B,
    config: &Config,
) -> Result<()> {
    let before = spec(config, "many_before", "echo before\n");
    let first_id = backend.submit(&before).await?;
    let mut invalid = spec(config, "many_invalid", "   \n");
    invalid.name = "not a valid name; rm -rf ~".into();
    let fresh = [
        spec(config, "many_new", "echo new-0\n"),
        spec(config, "many_new", "echo new-1\n"),
    ];
    let specs = vec![
        fresh[0].clone(),
        before.clone(),
        invalid.clone(),
        fresh[1].clone(),
        fresh[0].clone(),
    ];
    let answers = backend.submit_many(&specs).await;
    assert_eq!(
        answers.len(),
        specs.len(),
        "one answer per spec: {answers:?}"
    );
    let err = answers[2]
        .as_ref()
        .expect_err("the invalid spec was accepted");
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
    assert_eq!(
        backend.find(&invalid.key).await?,
        None,
        "a refused spec left a job"
    );
    let id = |index: usize| -> JobId {
        match &answers[index] {
            Ok(id) => id.clone(),
            Err(err) => panic!("spec {index} of the batch was not submitted: {err}"),
        }
    };
    assert_eq!(id(1), first_id, "a key submitted before made a second job");
    assert_eq!(id(4), id(0), "a key twice in one batch made two jobs");
    assert_ne!(id(0), id(3), "two keys share a job");
    let again = backend.submit_many(&specs).await;
    for index in [0, 1, 3, 4] {
        assert_eq!(
            again[index].as_ref().ok(),
            Some(&id(index)),
            "a batch again: {again:?}"
        );
    }
    for (index, spec) in [(0, &fresh[0]), (3, &fresh[1])] {
        assert_eq!(backend.find(&spec.key).await?, Some(id(index)));
        let status = wait_terminal(backend, &id(index), config).await?;
        assert_eq!(status.state, JobState::Succeeded, "{status:?}");
        let output = backend
            .fetch_output(&id(index), &OutputRequest::tail(100))
            .await?;
        assert_eq!(output.stdout.text(), format!("new-{}\n", index / 3));
    }

    let script = format!(
        "cat <<'BATCHBRIDGE_END'\n{HOSTILE_TEXT}BATCHBRIDGE_END\nprintf '%s\\n' \"$HOSTILE\"\n"
    );
    let hostile: Vec<JobSpec> = (0..3)
        .map(|_| {
            let mut spec = spec(config, "many_hostile", &script);
            spec.environment
                .insert("HOSTILE".into(), HOSTILE_VALUE.into());
            spec
        })
        .collect();
    let ids: Vec<JobId> = backend
        .submit_many(&hostile)
        .await
        .into_iter()
        .collect::<Result<_>>()?;
    for id in &ids {
        let status = wait_terminal(backend, id, config).await?;
        assert_eq!(status.state, JobState::Succeeded, "{status:?}");
        let output = backend.fetch_output(id, &OutputRequest::tail(4096)).await?;
        assert_eq!(
            output.stdout.text(),
            format!("{HOSTILE_TEXT}{HOSTILE_VALUE}\n")
        );
    }
    Ok(())
}

/// Four submits of one key at the same time, from one process, all return the id of one
/// job: the later ones wait for the first instead of failing while it is in flight.
pub async fn concurrent_submits_of_one_key_yield_one_job<B: BatchBackend + ?Sized>(
    backend: &B,
    config: &Config,
) -> Result<()> {
    let spec = spec(config, "concurrent_key", "echo once\n");
    let (a, b, c, d) = tokio::join!(
        backend.submit(&spec),
        backend.submit(&spec),
        backend.submit(&spec),
        backend.submit(&spec)
    );
    let ids = [a?, b?, c?, d?];
    assert!(
        ids.iter().all(|id| *id == ids[0]),
        "concurrent submits of key {} returned {ids:?}",
        spec.key
    );
    assert_eq!(backend.find(&spec.key).await?, Some(ids[0].clone()));
    let status = wait_terminal(backend, &ids[0], config).await?;
    assert_eq!(status.state, JobState::Succeeded, "{status:?}");
    let output = backend
        .fetch_output(&ids[0], &OutputRequest::tail(100))
        .await?;
    assert_eq!(output.stdout.text(), "once\n", "the script ran once");
    Ok(())
}

/// `find` returns the job submitted with a key, and nothing for a key never used.
pub async fn find_by_key<B: BatchBackend + ?Sized>(backend: &B, config: &Config) -> Result<()> {
    let spec = spec(config, "find", "true\n");
    let id = backend.submit(&spec).await?;
    assert_eq!(backend.find(&spec.key).await?, Some(id.clone()));
    wait_terminal(backend, &id, config).await?;
    assert_eq!(
        backend.find(&spec.key).await?,
        Some(id),
        "found again once finished"
    );
    assert_eq!(backend.find(&unique_key("never-used")).await?, None);
    Ok(())
}

/// One `status` call answers 50 jobs, and all of them succeed.
pub async fn status_of_50_jobs_in_one_call<B: BatchBackend + ?Sized>(
    backend: &B,
    config: &Config,
) -> Result<()> {
    let mut ids = Vec::with_capacity(50);
    for i in 0..50 {
        ids.push(
            backend
                .submit(&spec(config, "status_50", &format!("echo {i}\n")))
                .await?,
        );
    }
    let deadline = Instant::now() + config.timeout;
    let statuses: HashMap<JobId, JobStatus> = loop {
        let statuses = backend.status(&ids).await?;
        assert_eq!(
            statuses.len(),
            50,
            "status() answered {} of 50 ids",
            statuses.len()
        );
        for id in &ids {
            let status = &statuses[id];
            assert_ne!(
                status.state,
                JobState::Unknown,
                "job {id} just submitted is Unknown: {status:?}"
            );
        }
        if statuses.values().all(|s| s.state.is_terminal()) {
            break statuses;
        }
        assert!(
            Instant::now() < deadline,
            "50 jobs not finished within {:?}",
            config.timeout
        );
        tokio::time::sleep(config.poll_interval).await;
    };
    for (id, status) in &statuses {
        assert_eq!(status.state, JobState::Succeeded, "job {id}: {status:?}");
    }
    Ok(())
}

/// An id no job has is Unknown, never an error and never Succeeded; fetching its output is
/// an error.
pub async fn unknown_id_is_unknown<B: BatchBackend + ?Sized>(
    backend: &B,
    config: &Config,
) -> Result<()> {
    let status = status_of(backend, &config.unknown_id).await?;
    assert_eq!(status.state, JobState::Unknown, "{status:?}");
    let err = backend
        .fetch_output(&config.unknown_id, &OutputRequest::tail(10))
        .await
        .expect_err("fetch_output of an unknown id succeeded");
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
    Ok(())
}

/// An id that cannot be a job of the backend gets one answer: `cancel` and `fetch_output`
/// fail with InvalidInput, and `status` reports it Unknown with the same message as reason.
pub async fn malformed_id_is_invalid_input<B: BatchBackend + ?Sized>(
    backend: &B,
    config: &Config,
) -> Result<()> {
    let id = &config.malformed_id;
    let cancel = backend
        .cancel(id)
        .await
        .expect_err("cancel of a malformed id succeeded");
    assert_eq!(cancel.kind(), ErrorKind::InvalidInput, "{cancel}");
    let fetch = backend
        .fetch_output(id, &OutputRequest::tail(10))
        .await
        .expect_err("fetch_output of a malformed id succeeded");
    assert_eq!(fetch.kind(), ErrorKind::InvalidInput, "{fetch}");
    assert_eq!(
        fetch.message(),
        cancel.message(),
        "one message for one malformed id"
    );
    let status = status_of(backend, id).await?;
    assert_eq!(status.state, JobState::Unknown, "{status:?}");
    assert_eq!(
        status.reason.as_deref(),
        Some(cancel.message()),
        "status says why, as cancel did"
    );
    Ok(())
}

/// Output of a task the job does not have is InvalidInput: any task above 0 of a job that
/// is not an array, and a task beyond an array's count.
pub async fn output_of_a_missing_task_is_invalid_input<B: BatchBackend + ?Sized>(
    backend: &B,
    config: &Config,
) -> Result<()> {
    let mut jobs = vec![(spec(config, "one_task", "echo only\n"), 1)];
    if backend.capabilities().arrays {
        let mut array = spec(config, "two_tasks", "echo only\n");
        array.array = Some(ArraySpec::new(2));
        jobs.push((array, 2));
    }
    for (spec, tasks) in jobs {
        let (id, status) = run_to_end(backend, &spec, config).await?;
        assert_eq!(status.state, JobState::Succeeded, "{status:?}");
        let last = backend
            .fetch_output(&id, &OutputRequest::tail(100).for_task(tasks - 1))
            .await?;
        assert_eq!(last.stdout.text(), "only\n");
        for beyond in [tasks, 5] {
            let err = backend
                .fetch_output(&id, &OutputRequest::tail(100).for_task(beyond))
                .await
                .expect_err("output of a task the job does not have");
            assert_eq!(err.kind(), ErrorKind::InvalidInput, "task {beyond}: {err}");
            assert!(
                err.message().contains(&format!("no task {beyond}")),
                "{err}"
            );
        }
    }
    Ok(())
}

/// [`BatchBackend::fetch_outputs`] answers each request, in order, as
/// [`BatchBackend::fetch_output`] would: the windows of three ended jobs (one with binary
/// output and a stderr, one read by range, one asked for twice), and, each with its own
/// error that stops none of the others, a task the job does not have (InvalidInput), a
/// malformed id (InvalidInput) and an id of no job.
pub async fn output_of_many_jobs_in_one_call<B: BatchBackend + ?Sized>(
    backend: &B,
    config: &Config,
) -> Result<()> {
    let scripts = [
        "echo one\n",
        "printf 'two\\000\\377\\n'\necho err >&2\n",
        "head -c 5000 /dev/zero | tr '\\0' y\n",
    ];
    let mut ids = Vec::new();
    for script in scripts {
        let (id, status) =
            run_to_end(backend, &spec(config, "many_outputs", script), config).await?;
        assert_eq!(status.state, JobState::Succeeded, "{status:?}");
        ids.push(id);
    }
    let requests = vec![
        (ids[0].clone(), OutputRequest::tail(100)),
        (config.malformed_id.clone(), OutputRequest::tail(10)),
        (ids[1].clone(), OutputRequest::tail(100)),
        (ids[0].clone(), OutputRequest::tail(100).for_task(3)),
        (ids[2].clone(), OutputRequest::bytes(4990, 100)),
        (config.unknown_id.clone(), OutputRequest::tail(10)),
        (ids[0].clone(), OutputRequest::tail(2)),
    ];
    let answers = backend.fetch_outputs(&requests).await;
    assert_eq!(
        answers.len(),
        requests.len(),
        "one answer per request: {answers:?}"
    );
    for ((id, request), answer) in requests.iter().zip(&answers) {
        let alone = backend.fetch_output(id, request).await;
        match (answer, &alone) {
            (Ok(many), Ok(one)) => assert_eq!(many, one, "job {id}, {request:?}"),
            (Err(many), Err(one)) => {
                assert_eq!(
                    many.kind(),
                    one.kind(),
                    "job {id}, {request:?}: {many} / {one}"
                );
            }
            _ => panic!("job {id}, {request:?}: in one call {answer:?}, alone {alone:?}"),
        }
    }
    let read = |index: usize| match &answers[index] {
        Ok(output) => output,
        Err(err) => panic!("request {index} was not read: {err}"),
    };
    let refused = |index: usize| match &answers[index] {
        Ok(output) => panic!("request {index} was read: {output:?}"),
        Err(err) => err.kind(),
    };
    assert_eq!(read(0).stdout.text(), "one\n");
    assert_eq!(refused(1), ErrorKind::InvalidInput, "a malformed id");
    assert_eq!(
        read(2).stdout.data,
        b"two\0\xff\n",
        "binary output, byte for byte"
    );
    assert_eq!(read(2).stderr.text(), "err\n");
    assert_eq!(
        refused(3),
        ErrorKind::InvalidInput,
        "a task the job does not have"
    );
    let range = &read(4).stdout;
    assert_eq!(
        (range.data.as_slice(), range.offset, range.total_size),
        (&b"yyyyyyyyyy"[..], 4990, 5000)
    );
    assert!(answers[5].is_err(), "an id of no job: {:?}", answers[5]);
    assert_eq!(
        read(6).stdout.data,
        b"e\n",
        "the same job again, another window"
    );
    Ok(())
}

/// Output requests return only the bytes asked for and report the stream's full size.
pub async fn output_is_bounded<B: BatchBackend + ?Sized>(
    backend: &B,
    config: &Config,
) -> Result<()> {
    let spec = spec(
        config,
        "bounded_output",
        "head -c 1048576 /dev/zero | tr '\\0' x\nprintf 'END\\n'\n",
    );
    let (id, status) = run_to_end(backend, &spec, config).await?;
    assert_eq!(status.state, JobState::Succeeded, "{status:?}");
    let tail = backend
        .fetch_output(&id, &OutputRequest::tail(100))
        .await?
        .stdout;
    assert_eq!(tail.data.len(), 100);
    assert!(tail.data.ends_with(b"xxxxEND\n"));
    assert_eq!(tail.total_size, 1_048_580);
    assert_eq!(tail.offset, 1_048_480);
    assert!(tail.is_truncated());
    let head = backend
        .fetch_output(&id, &OutputRequest::bytes(0, 10))
        .await?
        .stdout;
    assert_eq!(head.data, b"xxxxxxxxxx");
    assert_eq!(head.offset, 0);
    let past_end = backend
        .fetch_output(&id, &OutputRequest::bytes(2_000_000, 10))
        .await?
        .stdout;
    assert!(past_end.data.is_empty());
    Ok(())
}

/// The text a hostile script must print, byte for byte.
pub const HOSTILE_TEXT: &str = "quotes: ' \" \\ \\\\\nsubstitution: $(echo EXPANDED) `echo EXPANDED` ${HOME:-EXPANDED} $((1+1))\ncontrol: ; && || | > < & # ! * ?\nunicode: ünïcødé ✓ 日本語 🚀\ntab:\tend\n";
/// An environment value that would run code if anything evaluated it.
pub const HOSTILE_VALUE: &str = "$(echo EXPANDED) `echo EXPANDED` '\"; echo INJECTED; \"' \\n ✓";

/// Variable names a job wrapper is likely to use for itself (`dir`, `task`…). A job's
/// environment may set them, and the wrapper must not trip over them.
pub const WRAPPER_NAMES: [&str; 8] = [
    "dir", "task", "rc", "id", "cluster", "work", "script", "key",
];

/// A script full of shell metacharacters, and an environment value likewise, reach the job
/// verbatim: nothing on the way evaluated them. Environment variables named like a
/// wrapper's own ([`WRAPPER_NAMES`]) reach it too, without breaking the wrapper.
pub async fn hostile_script_runs_verbatim<B: BatchBackend + ?Sized>(
    backend: &B,
    config: &Config,
) -> Result<()> {
    let script = format!(
        "cat <<'BATCHBRIDGE_END'\n{HOSTILE_TEXT}BATCHBRIDGE_END\nprintf '%s\\n' \"$HOSTILE\" \"$dir$task$rc$id$cluster$work$script$key\"\n"
    );
    let mut spec = spec(config, "hostile", &script);
    spec.environment
        .insert("HOSTILE".into(), HOSTILE_VALUE.into());
    for name in WRAPPER_NAMES {
        spec.environment.insert(name.into(), format!("/no/{name}"));
    }
    let (id, status) = run_to_end(backend, &spec, config).await?;
    assert_eq!(status.state, JobState::Succeeded, "{status:?}");
    let output = backend
        .fetch_output(&id, &OutputRequest::tail(4096))
        .await?;
    assert_eq!(
        output.stdout.text(),
        format!(
            "{HOSTILE_TEXT}{HOSTILE_VALUE}\n{}\n",
            WRAPPER_NAMES.map(|name| format!("/no/{name}")).concat()
        )
    );
    Ok(())
}

/// An array of 3 tasks where task 1 fails: Failed overall with the cause
/// [`ExitCode(4)`](FailureCause::ExitCode) of that task, 2 succeeded and 1 failed, each
/// task's output readable. A backend without arrays must refuse the spec as Unsupported.
pub async fn array_with_one_failing_task<B: BatchBackend + ?Sized>(
    backend: &B,
    config: &Config,
) -> Result<()> {
    let script = "echo \"task $BATCHBRIDGE_TASK_INDEX\"\nif [ \"$BATCHBRIDGE_TASK_INDEX\" = 1 ]; then exit 4; fi\n";
    let mut spec = spec(config, "array", script);
    spec.array = Some(ArraySpec::new(3).with_max_parallel(2));
    if !backend.capabilities().arrays {
        let err = backend
            .submit(&spec)
            .await
            .expect_err("arrays are not supported, yet submit accepted one");
        assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
        return Ok(());
    }
    let (id, status) = run_to_end(backend, &spec, config).await?;
    assert_eq!(status.state, JobState::Failed, "{status:?}");
    let tasks = status
        .tasks
        .unwrap_or_else(|| panic!("an array reports task counts: {status:?}"));
    assert_eq!(
        (tasks.total, tasks.succeeded, tasks.failed),
        (3, 2, 1),
        "{tasks:?}"
    );
    assert_eq!(
        status.cause,
        Some(FailureCause::ExitCode(4)),
        "a task exiting non-zero is a non-zero exit of the array: {status:?}"
    );
    for task in 0..3 {
        let output = backend
            .fetch_output(&id, &OutputRequest::tail(100).for_task(task))
            .await?;
        assert_eq!(output.stdout.text(), format!("task {task}\n"));
    }
    Ok(())
}

/// The working directory of [`working_dir_that_cannot_be_entered_fails_the_job`]: an
/// absolute path that exists on no machine.
pub const MISSING_WORKING_DIR: &str = "/nonexistent/batchbridge-conformance";

/// A job whose working directory does not exist ends Failed without running its script,
/// with the cause [`NotStarted`](FailureCause::NotStarted), the status's reason and the
/// task's stderr both naming the directory; it never runs somewhere else instead.
pub async fn working_dir_that_cannot_be_entered_fails_the_job<B: BatchBackend + ?Sized>(
    backend: &B,
    config: &Config,
) -> Result<()> {
    let mut spec = spec(config, "missing_workdir", "echo \"ran in $PWD\"\n");
    spec.working_dir = Some(MISSING_WORKING_DIR.to_owned());
    let (id, status) = run_to_end(backend, &spec, config).await?;
    assert_eq!(status.state, JobState::Failed, "{status:?}");
    let names_the_directory =
        |text: &str| text.contains("working directory") && text.contains(MISSING_WORKING_DIR);
    assert!(
        status.reason.as_deref().is_some_and(names_the_directory),
        "the reason says the working directory could not be entered: {status:?}"
    );
    assert_eq!(status.cause, Some(FailureCause::NotStarted), "{status:?}");
    let output = backend
        .fetch_output(&id, &OutputRequest::tail(4096))
        .await?;
    assert_eq!(output.stdout.text(), "", "the script never ran");
    assert!(
        names_the_directory(&output.stderr.text()),
        "stderr says why: {:?}",
        output.stderr.text()
    );
    Ok(())
}

/// An invalid spec is refused as InvalidInput and leaves no job behind.
pub async fn invalid_spec_is_refused<B: BatchBackend + ?Sized>(
    backend: &B,
    config: &Config,
) -> Result<()> {
    let mut spec = spec(config, "invalid", "   \n");
    spec.name = "not a valid name; rm -rf ~".into();
    let err = backend
        .submit(&spec)
        .await
        .expect_err("an empty script was accepted");
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
    assert!(!err.is_temporary());
    assert_eq!(
        backend.find(&spec.key).await?,
        None,
        "a refused spec left a job behind"
    );
    Ok(())
}

/// [`BatchBackend::version`] answers with a non-empty single line free of control
/// characters, fit for a status display.
pub async fn version_is_reported<B: BatchBackend + ?Sized>(
    backend: &B,
    _config: &Config,
) -> Result<()> {
    let version = backend.version().await?;
    assert!(
        !version.trim().is_empty(),
        "version() returned an empty string: {version:?}"
    );
    assert!(
        !version.contains(['\n', '\r']),
        "version() returned more than one line: {version:?}"
    );
    assert!(
        !version.chars().any(char::is_control),
        "version() returned control characters: {version:?}"
    );
    Ok(())
}

/// Cleanup: an active job is refused with [`ErrorKind::JobActive`] and keeps running; an
/// ended job's files go (its output is [`NotFound`](ErrorKind::NotFound)) and its key is
/// free, so that a submit with it starts a new job; cleaning up twice, or a key never used,
/// is Ok. A backend that cannot clean up must say [`Unsupported`](ErrorKind::Unsupported).
pub async fn cleanup_removes_only_ended_jobs<B: BatchBackend + ?Sized>(
    backend: &B,
    config: &Config,
) -> Result<()> {
    let ended = spec(config, "cleanup_ended", "echo done\n");
    let active = spec(config, "cleanup_active", "echo started\nsleep 600\n");
    let ended_id = backend.submit(&ended).await?;
    let active_id = backend.submit(&active).await?;
    let status = wait_terminal(backend, &ended_id, config).await?;
    assert_eq!(status.state, JobState::Succeeded, "{status:?}");
    let output = backend
        .fetch_output(&ended_id, &OutputRequest::tail(100))
        .await?;
    assert_eq!(output.stdout.text(), "done\n");
    let cleaned = backend.cleanup(&ended.key).await;
    if !declared(backend, "cleanup", backend.capabilities().cleanup, &cleaned) {
        backend.cancel(&active_id).await?;
        return Ok(());
    }
    cleaned?;
    let gone = backend
        .fetch_output(&ended_id, &OutputRequest::tail(100))
        .await
        .expect_err("the output of a job cleaned up is still readable");
    assert_eq!(gone.kind(), ErrorKind::NotFound, "{gone}");
    backend.cleanup(&ended.key).await?;
    backend.cleanup(&unique_key("never-used")).await?;

    wait_for(backend, &active_id, config, "Running", |s| {
        s.state == JobState::Running
    })
    .await?;
    wait_printed(backend, &active_id, config, "started\n").await?;
    let refused = backend
        .cleanup(&active.key)
        .await
        .expect_err("cleanup removed a running job");
    assert_eq!(refused.kind(), ErrorKind::JobActive, "{refused}");
    let still = status_of(backend, &active_id).await?;
    assert_eq!(still.state, JobState::Running, "{still:?}");
    let output = backend
        .fetch_output(&active_id, &OutputRequest::tail(100))
        .await?;
    assert_eq!(
        output.stdout.text(),
        "started\n",
        "a refused cleanup kept the files"
    );
    backend.cancel(&active_id).await?;
    wait_terminal(backend, &active_id, config).await?;
    backend.cleanup(&active.key).await?;

    let again = backend.submit(&ended).await?;
    assert_ne!(again, ended_id, "a key cleaned up is free for a new job");
    wait_terminal(backend, &again, config).await?;
    backend.cleanup(&ended.key).await?;
    Ok(())
}

/// The SHA-256 of `bytes`, lower-case hex, as `sha256sum` prints it.
fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    format!("{:x}", sha2::Sha256::digest(bytes))
}

/// Bytes that compress badly, so a transfer cannot shortcut them.
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

/// Staging ([`crate::staging`]): a local file, bytes and a local directory are staged in
/// before the submit, and the job finds each with its SHA-256 (it checks them with
/// `sha256sum -c` and fails otherwise); a glob and a directory are staged out after it
/// succeeded, byte for byte, an output only for failures is skipped, progress reaches
/// every file's total, a second submit of the key sends nothing and returns the same job,
/// a second stage-out fetches the same files again, a pattern matching nothing is
/// [`NotFound`](ErrorKind::NotFound) unless `missing_ok`, and after cleanup the staged
/// files are gone. A backend that cannot stage must say
/// [`Unsupported`](ErrorKind::Unsupported).
pub async fn staged_files_arrive_whole_and_outputs_come_back<B: BatchBackend + ?Sized>(
    backend: &B,
    config: &Config,
) -> Result<()> {
    use crate::staging::{StageIn, StageOut, StageWhen, Transfer};
    let local = tempfile::tempdir()?;
    let data = noise(300_000, 7);
    let leaf = b"a leaf\n".to_vec();
    let deep = noise(4096, 11);
    std::fs::write(local.path().join("data.csv"), &data)?;
    std::fs::create_dir_all(local.path().join("tree/sub"))?;
    std::fs::write(local.path().join("tree/leaf.txt"), &leaf)?;
    std::fs::write(local.path().join("tree/sub/deep.bin"), &deep)?;
    let manifest = format!(
        "{}  data.csv\n{}  inputs/tree/leaf.txt\n{}  inputs/tree/sub/deep.bin\n",
        sha256_hex(&data),
        sha256_hex(&leaf),
        sha256_hex(&deep)
    );
    let back = local.path().join("back");
    let mut spec = spec(
        config,
        "staging_round_trip",
        "sha256sum -c check.sha256 || exit 7\n\
         mkdir -p results out/deep\n\
         printf one > results/1.txt\nprintf two > results/2.txt\nprintf log > results/3.log\n\
         cp data.csv out/deep/copy.csv\n",
    );
    spec = spec
        .with_stage_in(StageIn::path(local.path().join("data.csv"), "data.csv"))
        .with_stage_in(StageIn::bytes(manifest.into_bytes(), "check.sha256"))
        .with_stage_in(StageIn::path(local.path().join("tree"), "inputs/tree"))
        .with_stage_out(StageOut::new("results/*.txt", &back))
        .with_stage_out(StageOut::new("out", &back).when(StageWhen::Always))
        .with_stage_out(StageOut::new("failure-notes", &back).when(StageWhen::OnFailure));
    let seen = Arc::new(std::sync::Mutex::new(std::collections::BTreeMap::new()));
    let progress = Arc::clone(&seen);
    let transfer = Transfer::default().with_progress(move |p| {
        let mut seen = progress
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        seen.insert(
            (
                p.direction == crate::staging::Direction::In,
                p.file.to_owned(),
            ),
            (p.done, p.total),
        );
    });
    let submitted = backend.submit_with(&spec, &transfer).await;
    if !declared(
        backend,
        "staging",
        backend.capabilities().staging,
        &submitted,
    ) {
        return Ok(());
    }
    let id = submitted?;
    let status = wait_terminal(backend, &id, config).await?;
    assert_eq!(
        status.state,
        JobState::Succeeded,
        "the job found its inputs damaged or missing: {status:?}"
    );
    {
        let seen = seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for file in [
            "data.csv",
            "check.sha256",
            "inputs/tree/leaf.txt",
            "inputs/tree/sub/deep.bin",
        ] {
            let (done, total) = seen
                .get(&(true, file.to_owned()))
                .copied()
                .unwrap_or_else(|| panic!("no progress for {file}: {seen:?}"));
            assert_eq!(done, total, "{file}");
        }
    }
    assert_eq!(
        backend.submit(&spec).await?,
        id,
        "a second submit of the key is the same job"
    );

    for round in 0..2 {
        let staged = backend
            .stage_out(&id, &spec.stage_out, &spec.stage_limits, &transfer)
            .await?;
        let remote: Vec<_> = staged.files.iter().map(|f| f.remote.as_str()).collect();
        assert_eq!(
            remote,
            ["out/deep/copy.csv", "results/1.txt", "results/2.txt"],
            "round {round}"
        );
        assert_eq!(staged.skipped, ["failure-notes"]);
        assert_eq!(std::fs::read(back.join("results/1.txt"))?, b"one");
        assert_eq!(std::fs::read(back.join("results/2.txt"))?, b"two");
        assert_eq!(
            std::fs::read(back.join("out/deep/copy.csv"))?,
            data,
            "byte for byte"
        );
        assert!(
            !back.join("results/3.log").exists(),
            "only what the glob matched"
        );
        let copy = &staged.files[0];
        assert_eq!(
            (copy.size, copy.sha256.as_str()),
            (data.len() as u64, sha256_hex(&data).as_str())
        );
    }
    let nothing = [StageOut::new("no-such-*", &back)];
    let missing = backend
        .stage_out(&id, &nothing, &spec.stage_limits, &transfer)
        .await
        .expect_err("a pattern matching nothing fetched something");
    assert_eq!(missing.kind(), ErrorKind::NotFound, "{missing}");
    let fine = [StageOut::new("no-such-*", &back).missing_ok(true)];
    let staged = backend
        .stage_out(&id, &fine, &spec.stage_limits, &transfer)
        .await?;
    assert!(staged.files.is_empty());

    if backend.capabilities().cleanup {
        backend.cleanup(&spec.key).await?;
        let gone = backend
            .stage_out(&id, &spec.stage_out, &spec.stage_limits, &transfer)
            .await
            .expect_err("the staged files outlived cleanup");
        assert!(
            matches!(gone.kind(), ErrorKind::NotFound | ErrorKind::InvalidInput),
            "{gone}"
        );
    }
    Ok(())
}

/// Staging refuses paths that leave the job's working directory, on both sides, and
/// writes nothing anywhere for them: on this side `../x`, `/etc/passwd`, names with a
/// newline or a quote, and a local directory holding a symlink to a file outside it are
/// [`InvalidInput`](ErrorKind::InvalidInput) before anything is sent (the key has no job);
/// on the cluster, in a working directory whose job left a symlink to `~/.ssh` and one to
/// `/etc/passwd`, a stage-in (of a file, or of a directory of small files, which go as one
/// tar stream) through the symlink and a stage-out of either symlink, or of
/// a directory holding one, are refused; a last job finds no canary file in `~/.ssh` or
/// the working directory, and nothing arrived locally.
pub async fn hostile_stage_paths_are_refused_on_both_sides<B: BatchBackend + ?Sized>(
    backend: &B,
    config: &Config,
) -> Result<()> {
    use crate::staging::{StageIn, StageOut, StageWhen};
    let local = tempfile::tempdir()?;
    let back = local.path().join("back");
    std::fs::create_dir_all(&back)?;
    let probe =
        spec(config, "staging_probe", "true\n").with_stage_in(StageIn::bytes(b"x".to_vec(), "x"));
    let probed = backend.submit(&probe).await;
    if !declared(backend, "staging", backend.capabilities().staging, &probed) {
        return Ok(());
    }
    wait_terminal(backend, &probed?, config).await?;

    for dest in [
        "../canary",
        "/etc/passwd",
        "a\ncanary",
        "it's'; touch canary; '",
        "a\"b",
        "sub/../../canary",
    ] {
        let hostile = spec(config, "staging_hostile", "true\n")
            .with_stage_in(StageIn::bytes(b"canary".to_vec(), dest));
        let err = backend
            .submit(&hostile)
            .await
            .expect_err("a hostile destination was staged");
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{dest:?}: {err}");
        assert_eq!(
            backend.find(&hostile.key).await?,
            None,
            "{dest:?}: a job was submitted"
        );
    }
    std::fs::create_dir_all(local.path().join("tree"))?;
    std::fs::write(local.path().join("secret"), "canary")?;
    std::os::unix::fs::symlink(local.path().join("secret"), local.path().join("tree/leak"))?;
    let leaky = spec(config, "staging_leaky_dir", "true\n")
        .with_stage_in(StageIn::path(local.path().join("tree"), "tree"));
    let err = backend
        .submit(&leaky)
        .await
        .expect_err("a symlink out of a staged directory was followed");
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");

    // A job leaves symlinks pointing outside its working directory.
    let trap = spec(
        config,
        "staging_trap",
        "ln -s ~/.ssh sshlink\nln -s /etc/passwd pw\nmkdir -p d\nln -s ~/.ssh/authorized_keys d/keys\npwd\n",
    )
    .with_stage_in(StageIn::bytes(b"x".to_vec(), "x"))
    .with_stage_out(StageOut::new("sshlink", &back).when(StageWhen::Always))
    .with_stage_out(StageOut::new("pw", &back).when(StageWhen::Always))
    .with_stage_out(StageOut::new("d", &back).when(StageWhen::Always));
    let trap_id = backend.submit(&trap).await?;
    let status = wait_terminal(backend, &trap_id, config).await?;
    assert_eq!(status.state, JobState::Succeeded, "{status:?}");
    let refused = backend
        .stage_out(
            &trap_id,
            &trap.stage_out,
            &trap.stage_limits,
            &Default::default(),
        )
        .await
        .expect_err("a symlink out of the working directory was fetched");
    assert_eq!(refused.kind(), ErrorKind::InvalidInput, "{refused}");
    let cwd = backend
        .fetch_output(&trap_id, &OutputRequest::tail(4096))
        .await?
        .stdout
        .text()
        .trim()
        .to_owned();
    assert!(cwd.starts_with('/'), "the trap job printed {cwd:?}");

    let mut through = spec(config, "staging_through_link", "true\n")
        .with_stage_in(StageIn::bytes(b"canary".to_vec(), "sshlink/canary"));
    through.working_dir = Some(cwd.clone());
    let err = backend
        .submit(&through)
        .await
        .expect_err("a stage-in went through a symlink");
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
    assert_eq!(backend.find(&through.key).await?, None);
    // Small files go as one tar stream: through the symlink it is refused all the same.
    std::fs::create_dir_all(local.path().join("small"))?;
    for i in 0..5 {
        std::fs::write(local.path().join(format!("small/canary{i}")), "canary")?;
    }
    let mut through_dir = spec(config, "staging_dir_through_link", "true\n").with_stage_in(
        StageIn::path(local.path().join("small"), "sshlink/canary-dir"),
    );
    through_dir.working_dir = Some(cwd.clone());
    let err = backend
        .submit(&through_dir)
        .await
        .expect_err("a directory was staged in through a symlink");
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
    assert_eq!(backend.find(&through_dir.key).await?, None);

    let mut check = spec(
        config,
        "staging_canaries",
        "ls -A ~/.ssh | grep -c canary && exit 9\nls -A | grep -c canary && exit 8\nexit 0\n",
    );
    check.working_dir = Some(cwd);
    let check_id = backend.submit(&check).await?;
    let status = wait_terminal(backend, &check_id, config).await?;
    assert_eq!(
        status.state,
        JobState::Succeeded,
        "a canary file was written: {status:?}"
    );
    let arrived: Vec<_> = walk(&back);
    assert!(arrived.is_empty(), "files arrived locally: {arrived:?}");
    Ok(())
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    walkdir::WalkDir::new(dir)
        .into_iter()
        .filter_map(std::result::Result::ok)
        .filter(|e| !e.file_type().is_dir())
        .map(|e| e.into_path())
        .collect()
}

/// A directory of `files` small files (one to a few KiB each, over a few subdirectories)
/// stages in, the job checks every digest and copies the directory, and the copy stages out
/// byte for byte, with no file left under a temporary name on either side. These move as
/// tar streams, a few remote commands for the lot. Not in
/// [`conformance_tests!`](crate::conformance_tests): a backend's staging tests call it.
pub async fn many_small_files_round_trip<B: BatchBackend + ?Sized>(
    backend: &B,
    config: &Config,
    files: usize,
) -> Result<()> {
    use crate::staging::{StageIn, StageOut, StageWhen, Transfer};
    let local = tempfile::tempdir()?;
    let tree = local.path().join("many");
    let mut manifest = String::new();
    let mut sent = Vec::with_capacity(files);
    for i in 0..files {
        let name = format!("d{}/f{i:04}.dat", i % 5);
        let bytes = noise(1024 + (i % 4) * 1000, i as u64 + 3);
        std::fs::create_dir_all(tree.join(format!("d{}", i % 5)))?;
        std::fs::write(tree.join(&name), &bytes)?;
        manifest.push_str(&format!("{}  many/{name}\n", sha256_hex(&bytes)));
        sent.push((name, bytes));
    }
    let back = local.path().join("back");
    let spec = spec(
        config,
        "staging_many_small",
        "sha256sum -c --quiet many.sha256 || exit 7\ncp -R many copy\n",
    )
    .with_stage_in(StageIn::path(&tree, "many"))
    .with_stage_in(StageIn::bytes(manifest.into_bytes(), "many.sha256"))
    .with_stage_out(StageOut::new("copy", &back).when(StageWhen::Always));
    let id = backend.submit_with(&spec, &Transfer::default()).await?;
    let status = wait_terminal(backend, &id, config).await?;
    assert_eq!(
        status.state,
        JobState::Succeeded,
        "the job found its inputs damaged or missing: {status:?}"
    );
    let staged = backend
        .stage_out(
            &id,
            &spec.stage_out,
            &spec.stage_limits,
            &Transfer::default(),
        )
        .await?;
    assert_eq!(staged.files.len(), files);
    for (name, bytes) in &sent {
        assert_eq!(
            std::fs::read(back.join("copy").join(name))?,
            *bytes,
            "{name} byte for byte"
        );
    }
    let arrived = walk(&back);
    assert_eq!(arrived.len(), files, "nothing else arrived: {arrived:?}");
    if backend.capabilities().cleanup {
        backend.cleanup(&spec.key).await?;
    }
    Ok(())
}

/// How big [`a_large_file_stages_in_and_out_in_bounded_memory`]'s file is.
pub const LARGE_STAGED_FILE: u64 = 200 << 20;

/// A 200 MiB file ([`LARGE_STAGED_FILE`], written at test time) stages in and out, its
/// digest checked by the job and the copy fetched byte for byte, while the peak resident
/// memory of this process (`VmHWM`, reset before through `/proc/self/clear_refs`) stays
/// under `max_rss`. Not in [`conformance_tests!`](crate::conformance_tests): run it in a
/// test binary of its own, where no other test's memory counts.
pub async fn a_large_file_stages_in_and_out_in_bounded_memory<B: BatchBackend + ?Sized>(
    backend: &B,
    config: &Config,
    max_rss: u64,
) -> Result<()> {
    use crate::staging::{StageIn, StageOut, Transfer};
    use std::io::Write;
    let local = tempfile::tempdir()?;
    let big = local.path().join("big.bin");
    let mut hasher = <sha2::Sha256 as sha2::Digest>::new();
    {
        let mut file = std::io::BufWriter::new(std::fs::File::create(&big)?);
        for chunk in 0..(LARGE_STAGED_FILE >> 20) {
            let block = noise(1 << 20, chunk + 1);
            sha2::Digest::update(&mut hasher, &block);
            file.write_all(&block)?;
        }
        file.flush()?;
    }
    let digest = format!("{:x}", sha2::Digest::finalize(hasher));
    let back = local.path().join("back");
    let spec = spec(
        config,
        "staging_large",
        "sha256sum -c big.sha256 || exit 7\nmkdir -p out && cp big.bin out/copy.bin\n",
    )
    .with_stage_in(StageIn::path(&big, "big.bin"))
    .with_stage_in(StageIn::bytes(
        format!("{digest}  big.bin\n").into_bytes(),
        "big.sha256",
    ))
    .with_stage_out(StageOut::new("out/*.bin", &back));
    reset_peak_rss();
    let id = backend.submit_with(&spec, &Transfer::default()).await?;
    let after_in = peak_rss();
    let status = wait_terminal(backend, &id, config).await?;
    assert_eq!(status.state, JobState::Succeeded, "{status:?}");
    reset_peak_rss();
    let staged = backend
        .stage_out(
            &id,
            &spec.stage_out,
            &spec.stage_limits,
            &Transfer::default(),
        )
        .await?;
    let after_out = peak_rss();
    assert_eq!(staged.files.len(), 1);
    assert_eq!(staged.files[0].sha256, digest);
    assert_eq!(
        file_sha256(&back.join("out/copy.bin"))?,
        digest,
        "byte for byte"
    );
    eprintln!(
        "peak RSS: stage-in {} KiB, stage-out {} KiB",
        after_in >> 10,
        after_out >> 10
    );
    assert!(
        after_in < max_rss && after_out < max_rss,
        "peak RSS {after_in} / {after_out} bytes, over {max_rss}"
    );
    if backend.capabilities().cleanup {
        backend.cleanup(&spec.key).await?;
    }
    Ok(())
}

/// The SHA-256 of a file, read in bounded memory.
pub fn file_sha256(path: &std::path::Path) -> Result<String> {
    let mut hasher = <sha2::Sha256 as sha2::Digest>::new();
    let mut file = std::io::BufReader::new(std::fs::File::open(path)?);
    std::io::copy(&mut file, &mut hasher)?;
    Ok(format!("{:x}", sha2::Digest::finalize(hasher)))
}

/// Resets this process's peak resident memory (`VmHWM`) to its current resident memory.
pub fn reset_peak_rss() {
    // Linux ≥ 4.0; without it the peak is the process's whole life, which only errs high.
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// This process's peak resident memory in bytes (`VmHWM` of `/proc/self/status`).
pub fn peak_rss() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("VmHWM:"))
                .and_then(|kib| kib.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kib| kib << 10)
}

/// How long the tracker of [`pushed_changes_arrive_for_run_succeed_fail_cancel`] waits
/// between polls: longer than any check, so that after a job's first poll only its events
/// (and the polls they ask for) can tell the tracker anything.
const NO_POLLS: Duration = Duration::from_secs(24 * 3600);

/// For a backend with pushed events ([`BatchBackend::events`]), a [`Tracker`] that polls
/// only once per job learns from events alone that a job runs, succeeds (exit 0), fails
/// (exit 3, the cause [`ExitCode(3)`](FailureCause::ExitCode)) and was cancelled (the cause
/// [`Cancelled`](FailureCause::Cancelled), from the early poll a signal or removal asks
/// for), each within [`Config::timeout`]; a job that was queued at its first poll has its
/// Running pushed. A job that already ended at its first poll tells events nothing: it is
/// submitted again, sleeping twice as long before it ends.
///
/// **A backend without events passes this check only because it has none**: the check
/// says so on stderr and checks nothing else.
pub async fn pushed_changes_arrive_for_run_succeed_fail_cancel<B: BatchBackend + 'static>(
    backend: Arc<B>,
    config: &Config,
) -> Result<()> {
    if backend.events().is_none() {
        eprintln!(
            "pushed_changes_arrive_for_run_succeed_fail_cancel: the {} backend has no event \
             source (BatchBackend::events is None): it passes only because it pushes nothing",
            backend.name()
        );
        return Ok(());
    }
    let tracker = Tracker::new(backend.clone(), NO_POLLS)?;
    let succeeded = pushed_end(&tracker, config, "pushed_succeeds", |pause| {
        format!("sleep {pause}\necho ok\n")
    })
    .await?;
    assert_eq!(succeeded.state, JobState::Succeeded, "{succeeded:?}");
    assert_eq!(succeeded.cause, None, "{succeeded:?}");
    let failed = pushed_end(&tracker, config, "pushed_fails", |pause| {
        format!("sleep {pause}\nexit 3\n")
    })
    .await?;
    assert_eq!(failed.state, JobState::Failed, "{failed:?}");
    assert_eq!(failed.cause, Some(FailureCause::ExitCode(3)), "{failed:?}");

    let id = backend
        .submit(&spec(config, "pushed_cancel", "echo started\nsleep 600\n"))
        .await?;
    let mut changes = tracker.changes();
    tracker.follow(id.clone());
    let first = next_change_of(&mut changes, &id, config).await;
    if first.status.state != JobState::Running {
        let running = next_change_of(&mut changes, &id, config).await;
        assert_eq!(
            (running.status.state, running.seen),
            (JobState::Running, SeenBy::Event),
            "a queued job's start is pushed: {running:?}"
        );
    }
    wait_printed(backend.as_ref(), &id, config, "started\n").await?;
    backend.cancel(&id).await?;
    let cancelled = ended_by_push(&tracker, &id, config).await;
    assert_cancelled(&cancelled);
    tracker.forget(&id);
    Ok(())
}

/// Submits the script `script(pause)` until a run of it was still active at its first poll
/// (doubling `pause`), and returns its end as the tracker learned it without another
/// interval's poll.
async fn pushed_end(
    tracker: &Tracker,
    config: &Config,
    check: &str,
    script: impl Fn(u64) -> String,
) -> Result<JobStatus> {
    let mut pause = 2;
    loop {
        let id = tracker
            .backend()
            .submit(&spec(config, check, &script(pause)))
            .await?;
        let mut changes = tracker.changes();
        tracker.follow(id.clone());
        let first = next_change_of(&mut changes, &id, config).await;
        if first.status.state.is_terminal() {
            tracker.forget(&id);
            pause *= 2;
            assert!(
                Duration::from_secs(pause) < config.timeout,
                "{check}: every job ended before its first poll, the last sleeping {}s",
                pause / 2
            );
            continue;
        }
        let ended = ended_by_push(tracker, &id, config).await;
        let mut seen = vec![first];
        while !seen.last().is_some_and(|c| c.status.state.is_terminal()) {
            seen.push(next_change_of(&mut changes, &id, config).await);
        }
        if matches!(seen[0].status.state, JobState::Queued | JobState::Held) {
            assert!(
                seen.iter()
                    .any(|c| c.status.state == JobState::Running && c.seen == SeenBy::Event),
                "{check}: job {id} was queued at its first poll, yet its start was not pushed: {seen:?}"
            );
        }
        tracker.forget(&id);
        return Ok(ended);
    }
}

/// The end of job `id`, which the tracker (polling only once a day) must learn of from
/// events within the suite's timeout.
async fn ended_by_push(tracker: &Tracker, id: &JobId, config: &Config) -> JobStatus {
    match tracker.wait(id, config.timeout).await {
        Ok(status) => status,
        Err(err) => panic!(
            "no pushed change ended job {id}: {err}; the events: {:?}",
            tracker.event_health()
        ),
    }
}

/// The next change of job `id` in `changes`, which must come within the suite's timeout.
async fn next_change_of(changes: &mut Changes, id: &JobId, config: &Config) -> Change {
    let next = async {
        loop {
            match changes.recv_change().await {
                Some(change) if change.id == *id => return change,
                Some(_) => {}
                None => panic!("the tracker stopped while job {id} was followed"),
            }
        }
    };
    tokio::time::timeout(config.timeout, next)
        .await
        .unwrap_or_else(|_| panic!("no change of job {id} within {:?}", config.timeout))
}

/// Dependencies ([`JobSpec::after`]) through [`Tracker::submit_after`], natively or on the
/// portable path: a job after one that succeeded runs and starts only after it ended; a job
/// after one that failed never runs and ends with
/// [`FailureCause::DependencyFailed`] naming it (unsubmitted on the portable path, ended
/// by the scheduler on the native one); a job after the failure (afternotok) runs. A
/// backend without native dependencies refuses a spec with them on a plain
/// [`submit`](BatchBackend::submit) as Unsupported, never ignoring them.
pub async fn dependencies_hold_and_end_their_dependents<B: BatchBackend + 'static>(
    backend: Arc<B>,
    config: &Config,
) -> Result<()> {
    use crate::after::Released;
    use crate::dependency::Dependency;

    let tracker = Tracker::new(backend.clone(), config.poll_interval)?;
    let succeeds = backend
        .submit(&spec(config, "dep_succeeds", "sleep 2\n"))
        .await?;
    let fails = backend
        .submit(&spec(config, "dep_fails", "sleep 2\nexit 3\n"))
        .await?;
    let after_success =
        spec(config, "after_success", "true\n").with_after(Dependency::after_ok(succeeds.clone()));
    let after_failure =
        spec(config, "after_failure", "true\n").with_after(Dependency::after_ok(fails.clone()));
    let rescue =
        spec(config, "rescue", "true\n").with_after(Dependency::after_not_ok(fails.clone()));
    if !backend.capabilities().dependencies {
        match backend.submit(&after_success).await {
            Err(err) => assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}"),
            Ok(id) => panic!("a submit without native dependencies ignored them: job {id}"),
        }
    }
    let (after_success, after_failure, rescue) = tokio::join!(
        tracker.submit_after(&after_success),
        tracker.submit_after(&after_failure),
        tracker.submit_after(&rescue),
    );
    let ended = |released: Result<Released>| {
        let backend = &backend;
        async move {
            match released? {
                Released::Submitted(id) => {
                    Ok(Some(wait_terminal(backend.as_ref(), &id, config).await?))
                }
                Released::DependencyFailed { .. } => Ok::<_, crate::Error>(None),
            }
        }
    };
    let dependency_status = wait_terminal(backend.as_ref(), &succeeds, config).await?;
    let status = ended(after_success)
        .await?
        .unwrap_or_else(|| panic!("the job after one that succeeded was not submitted"));
    assert_eq!(status.state, JobState::Succeeded, "{status:?}");
    if let (Some(started), Some(dependency_ended)) = (status.started_at, dependency_status.ended_at)
    {
        // Schedulers record whole seconds.
        assert!(
            started + Duration::from_secs(1) >= dependency_ended,
            "started before its dependency ended: {status:?} after {dependency_status:?}"
        );
    }
    let failed_cause = Some(FailureCause::DependencyFailed(fails.to_string()));
    match after_failure? {
        Released::DependencyFailed { dependency, status } => {
            assert_eq!(dependency.job, fails, "{dependency:?}");
            assert_eq!(status.state, JobState::Failed, "{status:?}");
        }
        Released::Submitted(id) => {
            let status = wait_terminal(backend.as_ref(), &id, config).await?;
            assert_eq!(status.state, JobState::Failed, "{status:?}");
            assert_eq!(status.cause, failed_cause, "{status:?}");
        }
    }
    let status = ended(rescue)
        .await?
        .unwrap_or_else(|| panic!("the job after one that failed (afternotok) was not submitted"));
    assert_eq!(status.state, JobState::Succeeded, "{status:?}");
    Ok(())
}

/// A [`Tracker`] with the backend's events when it has them, polling every
/// [`Config::poll_interval`], never shows a job in any state after a terminal one (no
/// Running after Succeeded, whether polled or pushed) in [`Tracker::changes`], for a job
/// that succeeds, one that fails and one cancelled while it runs, each ending in the state
/// it should; the jobs stay followed for two more polls after the last one ended.
pub async fn tracked_changes_never_leave_a_terminal_state<B: BatchBackend + 'static>(
    backend: Arc<B>,
    config: &Config,
) -> Result<()> {
    let tracker = Tracker::new(backend.clone(), config.poll_interval)?;
    let mut changes = tracker.changes();
    let mut expected = HashMap::new();
    for (check, script, state) in [
        (
            "ordered_succeeds",
            "sleep 1\necho ok\n",
            JobState::Succeeded,
        ),
        ("ordered_fails", "sleep 1\nexit 3\n", JobState::Failed),
        (
            "ordered_cancel",
            "echo started\nsleep 600\n",
            JobState::Cancelled,
        ),
    ] {
        let id = backend.submit(&spec(config, check, script)).await?;
        tracker.follow(id.clone());
        expected.insert(id, state);
    }
    let mut seen: HashMap<JobId, Vec<Change>> = HashMap::new();
    let cancel = expected
        .iter()
        .find(|(_, state)| **state == JobState::Cancelled)
        .map(|(id, _)| id.clone())
        .unwrap_or_else(|| panic!("the suite lost its cancelled job"));
    let mut cancelled = false;
    let deadline = Instant::now() + config.timeout;
    while !expected.keys().all(|id| {
        seen.get(id)
            .is_some_and(|c| c.iter().any(|c| c.status.state.is_terminal()))
    }) {
        let left = deadline.saturating_duration_since(Instant::now());
        let change = tokio::time::timeout(left, changes.recv_change())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "the jobs did not all end within {:?}: {seen:?}",
                    config.timeout
                )
            })
            .unwrap_or_else(|| panic!("the tracker stopped"));
        if !cancelled && change.id == cancel && change.status.state == JobState::Running {
            backend.cancel(&cancel).await?;
            cancelled = true;
        }
        seen.entry(change.id.clone()).or_default().push(change);
    }
    let polls = tracker.polls();
    while tracker.polls() < polls + 2 {
        tokio::time::sleep(config.poll_interval).await;
    }
    drop(tracker);
    while let Some(change) = changes.recv_change().await {
        seen.entry(change.id.clone()).or_default().push(change);
    }
    for (id, state) in &expected {
        let changes = &seen[id];
        let first_end = changes
            .iter()
            .position(|c| c.status.state.is_terminal())
            .unwrap_or_else(|| panic!("job {id} never ended: {changes:?}"));
        assert_eq!(
            changes[first_end].status.state, *state,
            "job {id}: {changes:?}"
        );
        for later in &changes[first_end..] {
            assert_eq!(
                later.status.state, *state,
                "job {id} left its terminal state in changes(): {changes:?}"
            );
        }
    }
    Ok(())
}

/// Generates one `#[tokio::test]` per conformance check for the backend that `$make` (an
/// async expression) builds, with an optional [`Config`] expression.
#[macro_export]
macro_rules! conformance_tests {
    ($make:expr) => {
        $crate::conformance_tests!($make, $crate::conformance::Config::default());
    };
    ($make:expr, $config:expr) => {
        $crate::conformance_tests!(@each $make, $config;
            job_succeeds_and_output_is_readable,
            failing_job_reports_exit_code,
            cancel_queued_job,
            cancel_running_job,
            cancelled_job_that_traps_sigterm_leaves_no_process,
            path_without_bin_still_runs_the_script,
            cancel_is_idempotent,
            same_key_yields_one_job,
            concurrent_submits_of_one_key_yield_one_job,
            submit_many_answers_each_job,
            find_by_key,
            status_of_50_jobs_in_one_call,
            unknown_id_is_unknown,
            malformed_id_is_invalid_input,
            output_of_a_missing_task_is_invalid_input,
            output_is_bounded,
            output_of_many_jobs_in_one_call,
            hostile_script_runs_verbatim,
            array_with_one_failing_task,
            working_dir_that_cannot_be_entered_fails_the_job,
            invalid_spec_is_refused,
            version_is_reported,
            cleanup_removes_only_ended_jobs,
            withdraw_takes_only_a_job_that_has_not_started,
            a_reused_id_never_shows_the_old_job,
            requeued_job_runs_again_under_its_id,
            capabilities_say_what_the_backend_does,
            staged_files_arrive_whole_and_outputs_come_back,
            hostile_stage_paths_are_refused_on_both_sides,
        );
        $crate::conformance_tests!(@tracked $make, $config;
            pushed_changes_arrive_for_run_succeed_fail_cancel,
            tracked_changes_never_leave_a_terminal_state,
            dependencies_hold_and_end_their_dependents,
        );
    };
    (@tracked $make:expr, $config:expr; $($check:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $check() {
                let backend = ::std::sync::Arc::new($make.await);
                let config = $config;
                if let Err(err) = $crate::conformance::$check(backend, &config).await {
                    panic!("{}: backend error: {err}", stringify!($check));
                }
            }
        )*
    };
    (@each $make:expr, $config:expr; $($check:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $check() {
                let backend = $make.await;
                let config = $config;
                if let Err(err) = $crate::conformance::$check(&backend, &config).await {
                    panic!("{}: backend error: {err}", stringify!($check));
                }
            }
        )*
    };
}
