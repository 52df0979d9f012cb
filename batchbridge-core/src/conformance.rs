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
//! the cause [`Cancelled`](FailureCause::Cancelled) (where nothing can hold a job back, a
//! resource request is refused instead of queued); cancelling a
//! finished or unknown job is Ok; submitting one key twice, one after the other or four
//! times at once, yields one job; `find` by key; `status` of 50 jobs in one call; an
//! unknown id is Unknown (its output NotFound); a malformed id is InvalidInput for cancel
//! and output and Unknown for status; output of a task the job does not have is
//! InvalidInput; output is bounded (tail and range); a hostile script and environment run
//! verbatim; an array of 3 tasks with one failing, whose cause is that task's exit code; a
//! working directory that does not exist fails the job, saying so, with the cause
//! [`NotStarted`](FailureCause::NotStarted); an invalid spec is refused and leaves nothing behind; the
//! version is one printable line; cleanup refuses an active job and removes an ended one.
//!
//! For unit tests of a command-line backend's error paths, [`scripted`] is a shell that
//! answers with canned replies.

pub mod scripted;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::backend::{BatchBackend, JobId, OutputRequest};
use crate::cause::FailureCause;
use crate::error::{ErrorKind, Result};
use crate::spec::{ArraySpec, JobKey, JobSpec, Resources};
use crate::state::{JobState, JobStatus};

/// How the suite treats a backend.
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
}

impl Default for Config {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(180),
            poll_interval: Duration::from_millis(250),
            unsatisfiable: Some(Resources::default().with_cpus(1024)),
            unknown_id: JobId::from("999999999"),
            malformed_id: JobId::from("../1; not a job"),
            customize: |_| {},
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
/// with the cause [`Cancelled`](FailureCause::Cancelled).
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

/// The status of a job the suite cancelled: Cancelled, and the cause says so (by whom is
/// the backend's to tell).
fn assert_cancelled(status: &JobStatus) {
    assert_eq!(status.state, JobState::Cancelled, "{status:?}");
    assert!(
        matches!(status.cause, Some(FailureCause::Cancelled(_))),
        "a cancelled job's cause is Cancelled: {status:?}"
    );
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
    match backend.cleanup(&ended.key).await {
        Err(err) if err.kind() == ErrorKind::Unsupported => {
            backend.cancel(&active_id).await?;
            return Ok(());
        }
        cleaned => cleaned?,
    }
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
    // A scheduler may say Running a moment before the script printed its first line.
    let deadline = Instant::now() + config.timeout;
    while backend
        .fetch_output(&active_id, &OutputRequest::tail(100))
        .await?
        .stdout
        .text()
        != "started\n"
    {
        assert!(
            Instant::now() < deadline,
            "job {active_id} printed nothing within {:?} of running",
            config.timeout
        );
        tokio::time::sleep(config.poll_interval).await;
    }
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
            cancel_is_idempotent,
            same_key_yields_one_job,
            concurrent_submits_of_one_key_yield_one_job,
            find_by_key,
            status_of_50_jobs_in_one_call,
            unknown_id_is_unknown,
            malformed_id_is_invalid_input,
            output_of_a_missing_task_is_invalid_input,
            output_is_bounded,
            hostile_script_runs_verbatim,
            array_with_one_failing_task,
            working_dir_that_cannot_be_entered_fails_the_job,
            invalid_spec_is_refused,
            version_is_reported,
            cleanup_removes_only_ended_jobs,
        );
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
