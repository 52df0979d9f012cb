//! [`LocalBackend`]: jobs as processes on this machine, the embedded default.
//!
//! Each job is a detached process group running a fixed bash wrapper (`wrapper.sh`) in its
//! own directory under a state directory; everything the backend knows lives in files
//! there, so a new `LocalBackend` on the same directory — after the program restarted —
//! sees and controls the jobs an earlier one started:
//!
//! ```text
//! STATE_DIR/keys/KEY                 the job id submitted with that key (claimed atomically)
//! STATE_DIR/last_id                  the highest id of a job cleaned up, so that none is reused
//! STATE_DIR/slots/N                  lock files, one per CPU of capacity (flock)
//! STATE_DIR/slots/queue              the lock a task waiting for slots holds while it tries them
//! STATE_DIR/jobs/ID/spec.json        the spec as submitted
//! STATE_DIR/jobs/ID/script.sh        the script, verbatim
//! STATE_DIR/jobs/ID/pgid             the process group and its leader's start time, once started
//! STATE_DIR/jobs/ID/cancelled        written before the group is signalled
//! STATE_DIR/jobs/ID/tasks/I/started  when task I got its CPUs
//! STATE_DIR/jobs/ID/tasks/I/stdout, stderr, exit_code
//! STATE_DIR/staged/KEY              the working directory of a job that stages files and
//!                                    names none (crate::staging)
//! STATE_DIR/events/ID.I.started, ID.I.exit.N
//!                                    the wrapper's job events (wrapper::WrapperEvents)
//! ```
//!
//! A task ended by a cancel's SIGTERM records `ID.I.signal.15`; the cancel's `cancelled`
//! file tells the poll why. One that ignores SIGTERM until the SIGKILL records no end
//! event, and the poll tells.

mod estimate;
mod job_dir;

use std::collections::HashMap;
use std::io::ErrorKind as IoErrorKind;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use async_trait::async_trait;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use crate::backend::{
    BatchBackend, Capabilities, JobId, JobOutput, OutputRequest, Withdrawal, refuse_active,
    succeeded_once_ended,
};
use crate::error::{Error, ErrorKind, Result};
use crate::estimate::{StartEstimate, refused_by_submit};
use crate::events::EventSource;
use crate::remote::StagingDir;
use crate::shell::LocalShell;
use crate::spec::{JobKey, JobSpec};
use crate::staging::{StageLimits, StageOut, StagedOutputs, Transfer};
use crate::state::JobStatus;
use crate::wrapper::{WrapperEvents, render_script};
use job_dir::JobDir;

/// The job wrapper, with `enter_working_dir` and the exit codes it shares with Rust.
static WRAPPER: LazyLock<String> = LazyLock::new(|| render_script(include_str!("wrapper.sh")));
/// The `PATH` of a job started with [`LocalBackend::clean_environment`].
const CLEAN_PATH: &str = "/usr/local/bin:/usr/bin:/bin";
/// What a malformed id is not, in the InvalidInput error or Unknown status it gets.
const LOCAL_JOB_ID: &str = "a local job id";
/// How long a cancelled job gets between SIGTERM and SIGKILL.
const CANCEL_GRACE: Duration = Duration::from_secs(3);

/// Runs jobs as local processes, with a CPU capacity shared by every `LocalBackend` on the
/// same state directory.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use batchbridge_core::{BatchBackend, JobKey, JobSpec, JobState, LocalBackend, OutputRequest, Tracker};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> batchbridge_core::Result<()> {
/// let dir = tempfile::tempdir()?;
/// let backend = Arc::new(LocalBackend::new(dir.path())?);
/// let tracker = Tracker::new(backend.clone(), Duration::from_millis(50))?;
/// let id = backend.submit(&JobSpec::new(JobKey::new("hello")?, "hello", "echo hello")).await?;
/// let status = tracker.wait(&id, Duration::from_secs(30)).await?;
/// assert_eq!(status.state, JobState::Succeeded);
/// let output = backend.fetch_output(&id, &OutputRequest::tail(1024)).await?;
/// assert_eq!(output.stdout.text(), "hello\n");
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct LocalBackend {
    inner: Arc<Inner>,
    /// The follower of `STATE_DIR/events`; none for a state directory whose path is not
    /// UTF-8, which no command can name.
    events: Option<Arc<dyn EventSource>>,
}

#[derive(Debug)]
struct Inner {
    root: PathBuf,
    capacity: u32,
    next_id: AtomicU64,
    clean_environment: AtomicBool,
}

impl LocalBackend {
    /// A backend keeping its state under `state_dir` (created if missing), with one CPU slot
    /// per core of this machine.
    pub fn new(state_dir: impl AsRef<Path>) -> Result<Self> {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Self::with_capacity(state_dir, u32::try_from(cores).unwrap_or(u32::MAX))
    }

    /// A backend with `capacity` CPU slots: jobs whose CPUs do not fit wait, Queued.
    pub fn with_capacity(state_dir: impl AsRef<Path>, capacity: u32) -> Result<Self> {
        if capacity == 0 {
            return Err(Error::invalid_input(
                "local backend capacity must be at least 1 CPU",
            ));
        }
        let root = state_dir.as_ref().to_path_buf();
        for sub in ["jobs", "keys", "slots", EVENTS] {
            std::fs::create_dir_all(root.join(sub)).map_err(|err| {
                Error::new(
                    ErrorKind::Io,
                    format!("cannot create state directory {}: {err}", root.display()),
                )
                .with_source(err)
                .permanent()
            })?;
        }
        let next_id = highest_job_id(&root.join("jobs"))?.max(last_cleaned_id(&root)?) + 1;
        let events = root.join(EVENTS).to_str().map(|dir| {
            Arc::new(WrapperEvents::in_dir(Arc::new(LocalShell), dir)) as Arc<dyn EventSource>
        });
        Ok(Self {
            events,
            inner: Arc::new(Inner {
                root,
                capacity,
                next_id: AtomicU64::new(next_id),
                clean_environment: AtomicBool::new(false),
            }),
        })
    }

    /// Starts jobs with none of this program's environment: only
    /// `PATH=/usr/local/bin:/usr/bin:/bin`, `HOME` (the job's directory), `LANG=C.UTF-8`, the
    /// `BATCHBRIDGE_*` variables and the spec's own environment. By default a job inherits
    /// this program's environment, as a child process does; a program holding credentials in
    /// its environment (a Kubernetes operator's service account variables, `KUBECONFIG`, cloud
    /// keys) should not let jobs see them.
    ///
    /// ```
    /// # fn main() -> batchbridge_core::Result<()> {
    /// let dir = tempfile::tempdir()?;
    /// let backend = batchbridge_core::LocalBackend::new(dir.path())?.clean_environment();
    /// # drop(backend);
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn clean_environment(self) -> Self {
        self.inner.clean_environment.store(true, Ordering::Relaxed);
        self
    }

    /// The CPU slots jobs share.
    pub fn capacity(&self) -> u32 {
        self.inner.capacity
    }

    /// Refuses a spec this backend cannot run, before anything is written.
    fn check(&self, spec: &JobSpec) -> Result<()> {
        spec.validate()?;
        self.capabilities().check(spec, self.name())?;
        if spec.resources.nodes.is_some_and(|n| n > 1) {
            return Err(Error::new(
                ErrorKind::Unsupported,
                format!(
                    "resources.nodes: the local backend runs a job on this one machine (job {})",
                    spec.key
                ),
            ));
        }
        Ok(())
    }
}

fn highest_job_id(jobs: &Path) -> Result<u64> {
    let mut highest = 0;
    for entry in std::fs::read_dir(jobs)? {
        if let Some(id) = entry?
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u64>().ok())
        {
            highest = highest.max(id);
        }
    }
    Ok(highest)
}

/// The highest id of a job cleaned up in `root` (0 when none was): its directory is gone,
/// and the next id must still be higher.
fn last_cleaned_id(root: &Path) -> Result<u64> {
    match std::fs::read_to_string(root.join(LAST_ID)) {
        Ok(text) => Ok(text.trim().parse().unwrap_or(0)),
        Err(err) if err.kind() == IoErrorKind::NotFound => Ok(0),
        Err(err) => Err(err.into()),
    }
}

/// The file holding [`last_cleaned_id`].
const LAST_ID: &str = "last_id";
/// The directory of the wrappers' event files.
const EVENTS: &str = "events";
/// The directory of the staging directories, one per key of a job that stages files and
/// names no working directory.
const STAGED: &str = "staged";
/// The time limit of a staging step on this machine (a transfer adds a second per MiB).
const STAGING_TIMEOUT: Duration = Duration::from_secs(60);

/// A path a command can name.
fn utf8(path: &Path) -> Result<String> {
    path.to_str().map(str::to_owned).ok_or_else(|| {
        Error::invalid_input(format!(
            "{}: staging needs a state directory whose path is UTF-8",
            path.display()
        ))
    })
}

impl Inner {
    /// The job's directory: `Err` (InvalidInput) for an id that cannot be a local job,
    /// `Ok(None)` for one that names no job here.
    fn job(&self, id: &JobId) -> Result<Option<JobDir>> {
        crate::wrapper::job_number_of(id.as_str(), LOCAL_JOB_ID)?;
        Ok(JobDir::open(&self.root.join("jobs"), id))
    }

    fn key_path(&self, key: &JobKey) -> PathBuf {
        self.root.join("keys").join(key.as_str())
    }

    fn find(&self, key: &JobKey) -> Result<Option<JobId>> {
        match std::fs::read_to_string(self.key_path(key)) {
            Ok(id) => Ok(Some(JobId::from(id.trim()))),
            Err(err) if err.kind() == IoErrorKind::NotFound => Ok(None),
            Err(err) => Err(err.into()),
        }
    }

    /// Creates the job directory under a fresh id, then claims the key by hard-linking a
    /// file holding the id: the link either appears whole or fails because another submit
    /// holds the key, so two racing submits of one key start one job.
    fn create(&self, spec: &JobSpec) -> Result<Result<JobDir, JobId>> {
        let jobs = self.root.join("jobs");
        let (id, dir) = loop {
            let id = JobId::from(self.next_id.fetch_add(1, Ordering::Relaxed).to_string());
            match std::fs::create_dir(jobs.join(id.as_str())) {
                Ok(()) => break (id.clone(), JobDir::new(&jobs, id)),
                Err(err) if err.kind() == IoErrorKind::AlreadyExists => continue,
                Err(err) => {
                    return Err(Error::new(
                        ErrorKind::Io,
                        format!("cannot create a job directory in {}: {err}", jobs.display()),
                    )
                    .with_source(err));
                }
            }
        };
        let spec_json = serde_json::to_vec_pretty(spec)
            .map_err(|err| Error::new(ErrorKind::Io, format!("cannot serialize spec: {err}")))?;
        std::fs::write(dir.path("spec.json"), spec_json)?;
        std::fs::write(dir.path("script.sh"), &spec.script)?;
        std::fs::write(dir.path("env.sh"), spec.environment_script()?)?;
        std::fs::write(dir.path("key.claim"), id.as_str())?;
        let claimed = std::fs::hard_link(dir.path("key.claim"), self.key_path(&spec.key));
        let _ = std::fs::remove_file(dir.path("key.claim"));
        match claimed {
            Ok(()) => Ok(Ok(dir)),
            Err(err) if err.kind() == IoErrorKind::AlreadyExists => {
                std::fs::remove_dir_all(dir.root())?;
                let winner = self.find(&spec.key)?.ok_or_else(|| {
                    Error::new(
                        ErrorKind::Io,
                        format!("key {} vanished while claimed", spec.key),
                    )
                })?;
                Ok(Err(winner))
            }
            Err(err) => {
                let _ = std::fs::remove_dir_all(dir.root());
                Err(err.into())
            }
        }
    }

    /// Removes the ended job `id` of `key`: first raises `last_id` to the id (under an
    /// exclusive lock, as backends in other processes may clean up at the same time), then
    /// the job's directory, then the key, so that a removal cut short is finished by the
    /// next one rather than leaving a directory nothing points to.
    fn remove(&self, key: &JobKey, id: &JobId) -> Result<()> {
        if let Ok(number) = id.as_str().parse::<u64>() {
            self.raise_last_id(number)?;
        }
        self.remove_events(id)?;
        if let Some(dir) = self.job(id)? {
            ignore_missing(std::fs::remove_dir_all(dir.root()))?;
        }
        ignore_missing(std::fs::remove_file(self.key_path(key)))
    }

    /// Removes the event files of job `id`: the names beginning `ID.`.
    fn remove_events(&self, id: &JobId) -> Result<()> {
        let prefix = format!("{id}.");
        let events = self.root.join(EVENTS);
        let entries = match std::fs::read_dir(&events) {
            Ok(entries) => entries,
            Err(err) if err.kind() == IoErrorKind::NotFound => return Ok(()),
            Err(err) => return Err(err.into()),
        };
        for entry in entries {
            let name = entry?.file_name();
            if name.to_str().is_some_and(|name| name.starts_with(&prefix)) {
                ignore_missing(std::fs::remove_file(events.join(name)))?;
            }
        }
        Ok(())
    }

    fn raise_last_id(&self, id: u64) -> Result<()> {
        use std::io::{Seek, Write};
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(self.root.join(LAST_ID))?;
        let mut file = job_dir::lock_exclusive(file, &self.root.join(LAST_ID))?;
        if last_cleaned_id(&self.root)? < id {
            file.set_len(0)?;
            file.rewind()?;
            file.write_all(format!("{id}\n").as_bytes())?;
        }
        Ok(())
    }

    fn start(&self, spec: &JobSpec, dir: &JobDir) -> Result<tokio::process::Child> {
        let cpus = spec.resources.cpus.unwrap_or(1);
        let tasks = spec.task_count();
        let parallel = concurrent_tasks(spec, self.capacity);
        let log = std::fs::File::create(dir.path("wrapper.log"))?;
        // The wrapper enters the working directory itself, per task, so that a directory
        // that is missing when a task starts fails that task with the reason why.
        let working_dir = spec
            .working_dir
            .as_ref()
            .map_or_else(|| dir.root().to_path_buf(), PathBuf::from);
        let mut command = tokio::process::Command::new("bash");
        if self.clean_environment.load(Ordering::Relaxed) {
            command
                .env_clear()
                .env("PATH", CLEAN_PATH)
                .env("HOME", dir.root())
                .env("LANG", "C.UTF-8");
        }
        let child = command
            .arg("-c")
            .arg(WRAPPER.as_str())
            .arg("bash")
            .arg(dir.root())
            .arg(self.root.join("slots"))
            .arg(self.capacity.to_string())
            .arg(tasks.to_string())
            .arg(parallel.to_string())
            .arg(cpus.to_string())
            .arg(working_dir)
            .env("BATCHBRIDGE_JOB_ID", dir.id().as_str())
            .env("BATCHBRIDGE_JOB_NAME", &spec.name)
            .env("BATCHBRIDGE_CPUS", cpus.to_string())
            .current_dir(dir.root())
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?;
        let leader = child.id().ok_or_else(|| {
            Error::new(
                ErrorKind::Io,
                "the job wrapper exited before it could be tracked",
            )
        })?;
        dir.record_group(leader)?;
        Ok(child)
    }
}

#[async_trait]
impl BatchBackend for LocalBackend {
    fn name(&self) -> &str {
        "local"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::NONE
            .with_arrays(true)
            .with_withdraw(true)
            .with_cleanup(true)
            .with_estimates(true)
            .with_staging(true)
    }

    async fn submit(&self, spec: &JobSpec) -> Result<JobId> {
        self.submit_with(spec, &Transfer::default()).await
    }

    /// The submit; a spec that stages files first copies them ([`StagingDir::stage_in`],
    /// over [`LocalShell`], as a remote backend would) to its working directory, its
    /// `workingDir` or else `STATE_DIR/staged/KEY`, which then becomes the job's.
    async fn submit_with(&self, spec: &JobSpec, transfer: &Transfer) -> Result<JobId> {
        self.check(spec)?;
        if let Some(id) = self.inner.find(&spec.key)? {
            return Ok(id);
        }
        let staged;
        let spec = if spec.stages_files() {
            let root = match &spec.working_dir {
                Some(dir) => dir.clone(),
                None => utf8(&self.inner.root.join(STAGED).join(spec.key.as_str()))?,
            };
            let inputs = StagingDir::new(&LocalShell, &root, STAGING_TIMEOUT)
                .stage_in(&spec.stage_in, &spec.stage_limits, transfer)
                .await?;
            let mut with_dir = spec.clone();
            with_dir.working_dir = Some(inputs.root);
            staged = with_dir;
            &staged
        } else {
            spec
        };
        let dir = match self.inner.create(spec)? {
            Ok(dir) => dir,
            Err(existing) => return Ok(existing),
        };
        let mut child = self.inner.start(spec, &dir)?;
        // Reap the wrapper when it ends; if this program ends first, the job lives on.
        tokio::spawn(async move {
            let _ = child.wait().await;
        });
        tracing::info!(id = %dir.id(), key = %spec.key, "local job submitted");
        Ok(dir.id().clone())
    }

    async fn find(&self, key: &JobKey) -> Result<Option<JobId>> {
        self.inner.find(key)
    }

    async fn status(&self, ids: &[JobId]) -> Result<HashMap<JobId, JobStatus>> {
        let inner = self.inner.clone();
        let ids = ids.to_vec();
        tokio::task::spawn_blocking(move || {
            ids.into_iter()
                .map(|id| {
                    let status = match inner.job(&id) {
                        Ok(Some(dir)) => dir.status(inner.capacity),
                        Ok(None) => JobStatus::unknown(format!("no local job {id}")),
                        Err(malformed) => JobStatus::unknown(malformed.message()),
                    };
                    (id, status)
                })
                .collect()
        })
        .await
        .map_err(|err| Error::new(ErrorKind::Io, format!("status task failed: {err}")))
    }

    async fn cancel(&self, id: &JobId) -> Result<()> {
        let Some(dir) = self.inner.job(id)? else {
            return Ok(());
        };
        if dir.status(self.inner.capacity).state.is_terminal() {
            return Ok(());
        }
        job_dir::write_atomically(&dir.path("cancelled"), b"")?;
        stop(&dir).await?;
        tracing::info!(%id, "local job cancelled");
        Ok(())
    }

    /// Marks a job none of whose tasks started cancelled under its start lock (which each
    /// task takes before it starts), then cancels it.
    async fn withdraw(&self, id: &JobId) -> Result<Withdrawal> {
        let Some(dir) = self.inner.job(id)? else {
            return Ok(Withdrawal::Ended);
        };
        let capacity = self.inner.capacity;
        let (withdrawal, dir) = tokio::task::spawn_blocking(move || (dir.withdraw(capacity), dir))
            .await
            .map_err(|err| Error::new(ErrorKind::Io, format!("withdraw task failed: {err}")))?;
        let withdrawal = withdrawal?;
        if withdrawal == Withdrawal::Withdrawn {
            stop(&dir).await?;
            tracing::info!(%id, "local job withdrawn");
        }
        Ok(withdrawal)
    }

    async fn fetch_output(&self, id: &JobId, request: &OutputRequest) -> Result<JobOutput> {
        let dir = self
            .inner
            .job(id)?
            .ok_or_else(|| Error::new(ErrorKind::NotFound, format!("no local job {id}")))?;
        let request = *request;
        tokio::task::spawn_blocking(move || dir.output(&request))
            .await
            .map_err(|err| Error::new(ErrorKind::Io, format!("output task failed: {err}")))?
    }

    /// Fetches the outputs of an ended job from the working directory its spec.json names
    /// (its job directory when none), over [`LocalShell`] like a remote backend's.
    async fn stage_out(
        &self,
        id: &JobId,
        outputs: &[StageOut],
        limits: &StageLimits,
        transfer: &Transfer,
    ) -> Result<StagedOutputs> {
        let Some(dir) = self.inner.job(id)? else {
            return Err(Error::new(
                ErrorKind::NotFound,
                format!("no local job {id}"),
            ));
        };
        let succeeded = succeeded_once_ended(id, &dir.status(self.inner.capacity))?;
        let root = match dir.spec().and_then(|spec| spec.working_dir) {
            Some(root) => root,
            None => utf8(dir.root())?,
        };
        StagingDir::new(&LocalShell, &root, STAGING_TIMEOUT)
            .stage_out(outputs, succeeded, limits, transfer)
            .await
    }

    /// Removes `STATE_DIR/jobs/ID`, `STATE_DIR/keys/KEY`, `STATE_DIR/events/ID.*` and the
    /// staging directory `STATE_DIR/staged/KEY` of an ended job.
    async fn cleanup(&self, key: &JobKey) -> Result<()> {
        let inner = self.inner.clone();
        let key = key.clone();
        tokio::task::spawn_blocking(move || {
            let Some(id) = inner.find(&key)? else {
                return Ok(());
            };
            // A directory already gone (a removal cut short) has nothing left to run.
            if let Some(dir) = inner.job(&id)? {
                refuse_active(&key, &id, &dir.status(inner.capacity))?;
            }
            inner.remove(&key, &id)?;
            ignore_missing(std::fs::remove_dir_all(
                inner.root.join(STAGED).join(key.as_str()),
            ))?;
            tracing::info!(%id, %key, "local job cleaned up");
            Ok(())
        })
        .await
        .map_err(|err| Error::new(ErrorKind::Io, format!("cleanup task failed: {err}")))?
    }

    /// Now when the CPU slots a task of `spec` needs are free, else Later; a spec it
    /// cannot run, or one asking more CPUs than its capacity, is InvalidInput.
    async fn estimate_start(&self, spec: &JobSpec) -> Result<StartEstimate> {
        self.check(spec).map_err(refused_by_submit)?;
        let inner = self.inner.clone();
        let cpus = spec.resources.cpus.unwrap_or(1).max(1);
        tokio::task::spawn_blocking(move || {
            estimate::estimate(&inner.root.join("slots"), inner.capacity, cpus)
        })
        .await
        .map_err(|err| Error::new(ErrorKind::Io, format!("estimate task failed: {err}")))?
    }

    /// The wrapper's records of each task's start and exit code in `STATE_DIR/events`,
    /// followed by one `sh` loop ([`WrapperEvents`]).
    fn events(&self) -> Option<Arc<dyn EventSource>> {
        self.events.clone()
    }

    /// `local (batchbridge-core VERSION)`, once the state directory is found to be there.
    async fn version(&self) -> Result<String> {
        let root = &self.inner.root;
        let unusable = |why: String| {
            Error::new(
                ErrorKind::Io,
                format!("local state directory {}: {why}", root.display()),
            )
        };
        match tokio::fs::metadata(root).await {
            Ok(meta) if meta.is_dir() => Ok(format!(
                "local (batchbridge-core {})",
                env!("CARGO_PKG_VERSION")
            )),
            Ok(_) => Err(unusable("not a directory".to_owned())),
            Err(err) => Err(unusable(err.to_string()).with_source(err)),
        }
    }
}

/// How many of a job's tasks the wrapper starts at once: its `maxParallel` (all tasks when
/// absent), but never more than can hold their CPUs at the same time. More would only be
/// processes waiting for a slot, and an array of ten thousand tasks would start ten
/// thousand of them.
fn concurrent_tasks(spec: &JobSpec, capacity: u32) -> u32 {
    let cpus = spec.resources.cpus.unwrap_or(1).max(1);
    let wanted = spec
        .array
        .and_then(|a| a.max_parallel)
        .unwrap_or_else(|| spec.task_count());
    wanted.min(capacity / cpus).max(1)
}

fn ignore_missing(removed: std::io::Result<()>) -> Result<()> {
    match removed {
        Err(err) if err.kind() != IoErrorKind::NotFound => Err(err.into()),
        _ => Ok(()),
    }
}

/// Ends the processes of the job in `dir`, one marked cancelled: SIGTERM to its group, then
/// SIGKILL after [`CANCEL_GRACE`].
async fn stop(dir: &JobDir) -> Result<()> {
    let Some(pgid) = dir.live_group() else {
        return Ok(());
    };
    let group = Pid::from_raw(pgid);
    signal_group(group, Signal::SIGTERM)?;
    let deadline = tokio::time::Instant::now() + CANCEL_GRACE;
    while dir.live_group().is_some() {
        if tokio::time::Instant::now() > deadline {
            signal_group(group, Signal::SIGKILL)?;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

fn signal_group(group: Pid, signal: Signal) -> Result<()> {
    match killpg(group, signal) {
        Ok(()) | Err(nix::errno::Errno::ESRCH) => Ok(()),
        Err(errno) => Err(Error::new(
            ErrorKind::PermissionDenied,
            format!("cannot signal process group {group}: {errno}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::ArraySpec;

    fn array(count: u32, max_parallel: Option<u32>, cpus: Option<u32>) -> JobSpec {
        let mut spec = JobSpec::new(JobKey::new("k").unwrap(), "n", "true");
        spec.array = Some(ArraySpec {
            count,
            max_parallel,
        });
        spec.resources.cpus = cpus;
        spec
    }

    #[test]
    fn the_wrapper_starts_no_more_tasks_than_can_hold_their_cpus() {
        let cases = [
            // (count, maxParallel, cpus, capacity) -> tasks started at once
            ((3, None, None, 16), 3),
            ((3, Some(2), None, 16), 2),
            ((10_000, None, None, 16), 16),
            ((10_000, None, Some(4), 16), 4),
            ((10_000, Some(2), Some(4), 16), 2),
            ((5, None, Some(64), 16), 1),
            ((1, None, None, 1), 1),
        ];
        for ((count, max_parallel, cpus, capacity), expected) in cases {
            let spec = array(count, max_parallel, cpus);
            assert_eq!(
                concurrent_tasks(&spec, capacity),
                expected,
                "{count} tasks, maxParallel {max_parallel:?}, {cpus:?} CPUs, capacity {capacity}"
            );
        }
        let single = JobSpec::new(JobKey::new("k").unwrap(), "n", "true");
        assert_eq!(concurrent_tasks(&single, 4), 1);
    }

    #[tokio::test]
    async fn a_huge_id_is_quoted_only_in_part() {
        let dir = tempfile::tempdir().unwrap();
        let backend = LocalBackend::with_capacity(dir.path(), 1).unwrap();
        let huge = JobId::from("9".repeat(1 << 20));
        let limit = 2 * crate::error::MAX_QUOTED;
        let status = &backend.status(std::slice::from_ref(&huge)).await.unwrap()[&huge];
        assert!(status.reason.as_ref().unwrap().len() < limit);
        let err = backend
            .fetch_output(&huge, &OutputRequest::tail(1))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
        assert!(err.message().len() < limit, "{} bytes", err.message().len());
    }

    #[tokio::test]
    async fn why_the_environment_could_not_be_set_is_the_tasks_stderr() {
        let dir = tempfile::tempdir().unwrap();
        let backend = LocalBackend::with_capacity(dir.path(), 1).unwrap();
        // UID is read-only in bash: sourcing env.sh fails and the task exits 70.
        let mut spec = JobSpec::new(JobKey::new("uid").unwrap(), "n", "echo never\n");
        spec.environment.insert("UID".into(), "0".into());
        let id = backend.submit(&spec).await.unwrap();
        let config = crate::conformance::Config {
            poll_interval: Duration::from_millis(50),
            ..crate::conformance::Config::default()
        };
        let status = crate::conformance::wait_terminal(&backend, &id, &config)
            .await
            .unwrap();
        assert_eq!(status.exit_code, Some(70), "{status:?}");
        let output = backend
            .fetch_output(&id, &OutputRequest::tail(4096))
            .await
            .unwrap();
        assert!(output.stdout.data.is_empty());
        assert!(
            output.stderr.text().contains("UID: readonly variable"),
            "{:?}",
            output.stderr.text()
        );

        // A job whose environment is fine keeps its stderr as before.
        let mut spec = JobSpec::new(
            JobKey::new("fine").unwrap(),
            "n",
            "echo out\necho err >&2\n",
        );
        spec.environment.insert("FINE".into(), "1".into());
        let id = backend.submit(&spec).await.unwrap();
        crate::conformance::wait_terminal(&backend, &id, &config)
            .await
            .unwrap();
        let output = backend
            .fetch_output(&id, &OutputRequest::tail(4096))
            .await
            .unwrap();
        assert_eq!(
            (&*output.stdout.text(), &*output.stderr.text()),
            ("out\n", "err\n")
        );
    }

    #[tokio::test]
    async fn an_array_too_large_to_track_is_refused_before_anything_starts() {
        let dir = tempfile::tempdir().unwrap();
        let backend = LocalBackend::with_capacity(dir.path(), 2).unwrap();
        let err = backend
            .submit(&array(u32::MAX, None, None))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
        assert!(
            err.message()
                .contains("array.count: must be at least 1 and at most 10000"),
            "{err}"
        );
        assert_eq!(
            std::fs::read_dir(dir.path().join("jobs")).unwrap().count(),
            0
        );
        assert!(
            backend
                .submit(&array(crate::spec::MAX_ARRAY_TASKS + 1, Some(1), None))
                .await
                .is_err()
        );
    }
}
