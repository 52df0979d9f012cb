//! The [`BatchBackend`] trait every scheduler implements, and the types it speaks.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::directives::DirectiveReport;
use crate::error::{Error, Result};
use crate::estimate::StartEstimate;
use crate::events::EventSource;
use crate::spec::{JobKey, JobSpec};
use crate::staging::{StageLimits, StageOut, StagedOutputs, Transfer};
use crate::state::JobStatus;

/// Here as well as at the crate root: the type the trait speaks, by its old path.
pub use crate::job_id::JobId;

/// The most bytes one [`BatchBackend::fetch_output`] call returns per stream.
pub const MAX_OUTPUT_CHUNK: u64 = 16 * 1024 * 1024;

/// The status of a job a backend left out of its answer to [`BatchBackend::status`].
pub(crate) fn not_answered() -> JobStatus {
    JobStatus::unknown("the backend did not answer for this job")
}

/// What a backend supports beyond the contract every backend keeps: every optional
/// feature, declared here so that callers and the conformance suite know what to expect (a
/// backend's pushed events are declared by [`BatchBackend::events`] returning a source). A
/// feature not declared is refused as [`Unsupported`](crate::ErrorKind::Unsupported); a
/// declared one never is.
///
/// `#[non_exhaustive]`: outside this crate build it from [`Capabilities::NONE`] (or the
/// default) with the `with_*` setters, not a struct literal (error E0639).
///
/// ```
/// use batchbridge_core::Capabilities;
///
/// let capabilities = Capabilities::NONE.with_arrays(true).with_accounting(true);
/// assert!(capabilities.arrays && !capabilities.containers);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
#[non_exhaustive]
pub struct Capabilities {
    /// Array jobs ([`JobSpec::array`]).
    pub arrays: bool,
    /// Container jobs ([`JobSpec::container`]).
    pub containers: bool,
    /// GPU requests.
    pub gpus: bool,
    /// An accounting source that remembers finished jobs (sacct, condor_history, PBS's
    /// `qstat -x`).
    pub accounting: bool,
    /// [`BatchBackend::withdraw`]: taking back a job none of which started.
    pub withdraw: bool,
    /// [`BatchBackend::cleanup`]: removing an ended job's files.
    pub cleanup: bool,
    /// [`BatchBackend::estimate_start`]: when a job would start.
    pub estimates: bool,
    /// Stage-in and stage-out ([`JobSpec::stage_in`], [`JobSpec::stage_out`],
    /// [`BatchBackend::stage_out`]).
    pub staging: bool,
    /// Native dependencies ([`JobSpec::after`]): the backend hands them to its scheduler,
    /// which holds the job until they are met, and reports a job its scheduler ended
    /// because one can no longer be met as Failed with
    /// [`FailureCause::DependencyFailed`](crate::FailureCause::DependencyFailed). Without
    /// it, [`check`](Self::check) refuses a spec with dependencies, and
    /// [`Tracker::submit_after`](crate::Tracker::submit_after) holds such a spec on the
    /// client instead (the portable path every backend gets).
    pub dependencies: bool,
}

impl Capabilities {
    /// No optional capability.
    pub const NONE: Self = Self {
        arrays: false,
        containers: false,
        gpus: false,
        accounting: false,
        withdraw: false,
        cleanup: false,
        estimates: false,
        staging: false,
        dependencies: false,
    };

    /// Sets [`Capabilities::arrays`].
    pub const fn with_arrays(mut self, yes: bool) -> Self {
        self.arrays = yes;
        self
    }

    /// Sets [`Capabilities::containers`].
    pub const fn with_containers(mut self, yes: bool) -> Self {
        self.containers = yes;
        self
    }

    /// Sets [`Capabilities::gpus`].
    pub const fn with_gpus(mut self, yes: bool) -> Self {
        self.gpus = yes;
        self
    }

    /// Sets [`Capabilities::accounting`].
    pub const fn with_accounting(mut self, yes: bool) -> Self {
        self.accounting = yes;
        self
    }

    /// Sets [`Capabilities::withdraw`].
    pub const fn with_withdraw(mut self, yes: bool) -> Self {
        self.withdraw = yes;
        self
    }

    /// Sets [`Capabilities::cleanup`].
    pub const fn with_cleanup(mut self, yes: bool) -> Self {
        self.cleanup = yes;
        self
    }

    /// Sets [`Capabilities::estimates`].
    pub const fn with_estimates(mut self, yes: bool) -> Self {
        self.estimates = yes;
        self
    }

    /// Sets [`Capabilities::staging`].
    pub const fn with_staging(mut self, yes: bool) -> Self {
        self.staging = yes;
        self
    }

    /// Sets [`Capabilities::dependencies`].
    pub const fn with_dependencies(mut self, yes: bool) -> Self {
        self.dependencies = yes;
        self
    }

    /// Refuses a spec that asks for something this backend cannot do.
    ///
    /// ```
    /// use batchbridge_core::{Capabilities, ArraySpec, JobKey, JobSpec};
    ///
    /// let mut spec = JobSpec::new(JobKey::new("k")?, "n", "true");
    /// spec.array = Some(ArraySpec::new(3));
    /// assert!(Capabilities::NONE.check(&spec, "mine").is_err());
    /// assert!(Capabilities::NONE.with_arrays(true).check(&spec, "mine").is_ok());
    /// # Ok::<(), batchbridge_core::Error>(())
    /// ```
    pub fn check(&self, spec: &JobSpec, backend: &str) -> Result<()> {
        let missing = [
            (spec.array.is_some() && !self.arrays, "array jobs"),
            (spec.container.is_some() && !self.containers, "containers"),
            (
                spec.stages_files() && !self.staging,
                "staging files in and out",
            ),
            (
                spec.resources.gpus.is_some_and(|g| g > 0) && !self.gpus,
                "GPUs",
            ),
            (
                !spec.after.is_empty() && !self.dependencies,
                "dependencies natively (Tracker::submit_after holds such a job until they are met)",
            ),
        ];
        match missing.iter().find(|(unsupported, _)| *unsupported) {
            Some((_, what)) => Err(Error::new(
                crate::ErrorKind::Unsupported,
                format!(
                    "the {backend} backend does not support {what} (job {})",
                    spec.key
                ),
            )),
            None => Ok(()),
        }
    }
}

/// Which part of an output stream to fetch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub enum OutputRange {
    /// The last `n` bytes.
    Tail(u64),
    /// `len` bytes from byte `offset`.
    Bytes {
        /// First byte.
        offset: u64,
        /// How many bytes at most.
        len: u64,
    },
}

/// A bounded request for a job's output.
///
/// ```
/// use batchbridge_core::{OutputRange, OutputRequest};
///
/// let last_kib = OutputRequest::tail(1024);
/// assert_eq!(last_kib.range, OutputRange::Tail(1024));
/// let third_task = OutputRequest::tail(1024).for_task(2);
/// assert_eq!(third_task.task, Some(2));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct OutputRequest {
    /// Which bytes; lengths above [`MAX_OUTPUT_CHUNK`] are clamped to it.
    pub range: OutputRange,
    /// For array jobs, the task index; task 0 when absent.
    pub task: Option<u32>,
}

impl OutputRequest {
    /// The last `bytes` bytes of each stream.
    pub fn tail(bytes: u64) -> Self {
        Self {
            range: OutputRange::Tail(bytes),
            task: None,
        }
    }

    /// `len` bytes from `offset` of each stream.
    pub fn bytes(offset: u64, len: u64) -> Self {
        Self {
            range: OutputRange::Bytes { offset, len },
            task: None,
        }
    }

    /// The same request for one task of an array.
    pub fn for_task(mut self, task: u32) -> Self {
        self.task = Some(task);
        self
    }

    /// The most bytes this request returns of each stream, whatever the stream's size: its
    /// length, at most [`MAX_OUTPUT_CHUNK`]. For bounding what many requests answered at
    /// once hold.
    ///
    /// ```
    /// use batchbridge_core::OutputRequest;
    ///
    /// assert_eq!(OutputRequest::tail(4096).max_len(), 4096);
    /// assert_eq!(OutputRequest::bytes(1 << 40, 10).max_len(), 10);
    /// assert_eq!(OutputRequest::tail(u64::MAX).max_len(), batchbridge_core::backend::MAX_OUTPUT_CHUNK);
    /// ```
    pub fn max_len(&self) -> u64 {
        let len = match self.range {
            OutputRange::Tail(n) => n,
            OutputRange::Bytes { len, .. } => len,
        };
        len.min(MAX_OUTPUT_CHUNK)
    }

    /// The byte window `(offset, len)` this request selects from a stream of `size` bytes,
    /// never longer than [`MAX_OUTPUT_CHUNK`].
    ///
    /// ```
    /// use batchbridge_core::OutputRequest;
    ///
    /// assert_eq!(OutputRequest::tail(10).window(100), (90, 10));
    /// assert_eq!(OutputRequest::tail(10).window(4), (0, 4));
    /// assert_eq!(OutputRequest::bytes(95, 10).window(100), (95, 5));
    /// assert_eq!(OutputRequest::bytes(200, 10).window(100), (100, 0));
    /// ```
    pub fn window(&self, size: u64) -> (u64, u64) {
        match self.range {
            OutputRange::Tail(n) => {
                let len = n.min(size).min(MAX_OUTPUT_CHUNK);
                (size - len, len)
            }
            OutputRange::Bytes { offset, len } => {
                let offset = offset.min(size);
                (offset, len.min(size - offset).min(MAX_OUTPUT_CHUNK))
            }
        }
    }
}

/// A bounded piece of one output stream.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct OutputChunk {
    /// The bytes, as written by the job (not necessarily UTF-8).
    pub data: Vec<u8>,
    /// Where `data` starts in the stream.
    pub offset: u64,
    /// The stream's size when it was read.
    pub total_size: u64,
}

impl OutputChunk {
    /// `data`, read from byte `offset` of a stream of `total_size` bytes.
    pub fn new(data: Vec<u8>, offset: u64, total_size: u64) -> Self {
        Self {
            data,
            offset,
            total_size,
        }
    }

    /// Whether the stream holds bytes outside this chunk.
    pub fn is_truncated(&self) -> bool {
        self.offset > 0 || self.offset + (self.data.len() as u64) < self.total_size
    }

    /// The bytes as text, with invalid UTF-8 replaced.
    pub fn text(&self) -> std::borrow::Cow<'_, str> {
        String::from_utf8_lossy(&self.data)
    }
}

/// A job's stdout and stderr, each bounded by the [`OutputRequest`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct JobOutput {
    /// Standard output.
    pub stdout: OutputChunk,
    /// Standard error.
    pub stderr: OutputChunk,
}

impl JobOutput {
    /// The two streams.
    pub fn new(stdout: OutputChunk, stderr: OutputChunk) -> Self {
        Self { stdout, stderr }
    }
}

/// What [`BatchBackend::withdraw`] found, and did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub enum Withdrawal {
    /// No part of the job had started: it is cancelled, and none of it will start.
    Withdrawn,
    /// The job (a task of it, for an array) had started: it was left as it was.
    Started,
    /// The job had ended, or the backend does not know it: there was nothing to withdraw.
    Ended,
}

/// The answer of a backend named `backend` that cannot [withdraw](BatchBackend::withdraw)
/// job `id`.
pub(crate) fn cannot_withdraw(backend: &str, id: &JobId) -> Error {
    Error::new(
        crate::ErrorKind::Unsupported,
        format!("the {backend} backend cannot cancel a job only while it waits (job {id})"),
    )
}

/// A batch system: submit jobs, watch them, cancel them, read their output.
///
/// The contract every implementation keeps, checked by the conformance suite (`conformance`,
/// behind the cargo feature of that name):
///
/// - `submit` is idempotent on [`JobSpec::key`]: a second submit with a key that already
///   has a job returns that job's id and starts nothing. A job whose resources cannot be
///   met is accepted and stays [`Queued`](crate::JobState::Queued) with a reason; a
///   backend that keeps no account of resources refuses a resource request as
///   [`Unsupported`](crate::ErrorKind::Unsupported) instead.
/// - A submit whose reply was lost fails with
///   [`ErrorKind::SubmitOutcomeUnknown`](crate::ErrorKind::SubmitOutcomeUnknown): verify
///   with [`find`](Self::find), never blindly resubmit.
/// - `status` answers every id asked about, with O(1) remote commands for N ids; an id no
///   source knows is [`Unknown`](crate::JobState::Unknown), never silently Succeeded.
/// - `cancel` is idempotent: cancelling a finished or unknown job is `Ok`.
/// - `fetch_output` returns at most [`MAX_OUTPUT_CHUNK`] bytes per stream and says how large
///   the stream is. A [`for_task`](OutputRequest::for_task) the job does not have (any task
///   above 0 of a job that is not an array, or one beyond the array's count) is
///   [`InvalidInput`](crate::ErrorKind::InvalidInput); an id that names no job is
///   [`NotFound`](crate::ErrorKind::NotFound).
/// - A malformed id, one that cannot be a job of this backend (`"../x"` where ids are
///   numbers), gets one answer everywhere: `cancel` and `fetch_output` (and any other
///   method taking one id) fail with [`InvalidInput`](crate::ErrorKind::InvalidInput), and
///   `status`, which answers every id, reports it
///   [`Unknown`](crate::JobState::Unknown) with the same message as its reason (`"../x"
///   is not a SLURM job id`). Nothing about a malformed id reaches a scheduler.
/// - `version` is one non-empty line without control characters.
/// - `cleanup` removes an ended job's files and releases its key; it refuses an active job
///   with [`ErrorKind::JobActive`](crate::ErrorKind::JobActive) and is idempotent.
///
/// The trait is object safe, so `Arc<dyn BatchBackend>` works:
///
/// ```
/// use std::sync::Arc;
/// use batchbridge_core::{BatchBackend, LocalBackend};
///
/// # fn main() -> batchbridge_core::Result<()> {
/// let dir = tempfile::tempdir()?;
/// let backend: Arc<dyn BatchBackend> = Arc::new(LocalBackend::new(dir.path())?);
/// assert_eq!(backend.name(), "local");
/// # Ok(()) }
/// ```
///
/// # Implementing it
///
/// The methods are `async`, through the [`async_trait`](macro@crate::async_trait) attribute that
/// this crate re-exports (a plain `async fn` in the impl fails with E0195), so an
/// implementation needs no dependency of its own on `async-trait`. Here, a backend that
/// refuses GPU jobs and hands everything else to a [`LocalBackend`](crate::LocalBackend):
///
/// ```
/// use std::collections::HashMap;
/// use batchbridge_core::{
///     BatchBackend, Capabilities, Error, ErrorKind, JobId, JobKey, JobOutput, JobSpec, JobState,
///     JobStatus, LocalBackend, OutputRequest, Result, async_trait,
/// };
///
/// #[derive(Debug)]
/// struct CpuOnly(LocalBackend);
///
/// #[async_trait]
/// impl BatchBackend for CpuOnly {
///     fn name(&self) -> &str {
///         "cpu-only"
///     }
///     fn capabilities(&self) -> Capabilities {
///         // Only what it passes on: no withdraw, cleanup or estimates.
///         Capabilities::NONE.with_arrays(true)
///     }
///     async fn submit(&self, spec: &JobSpec) -> Result<JobId> {
///         if spec.resources.gpus.is_some() {
///             return Err(Error::new(ErrorKind::Unsupported, "resources.gpus: no GPUs here"));
///         }
///         self.0.submit(spec).await
///     }
///     async fn find(&self, key: &JobKey) -> Result<Option<JobId>> {
///         self.0.find(key).await
///     }
///     async fn status(&self, ids: &[JobId]) -> Result<HashMap<JobId, JobStatus>> {
///         self.0.status(ids).await
///     }
///     async fn cancel(&self, id: &JobId) -> Result<()> {
///         self.0.cancel(id).await
///     }
///     async fn fetch_output(&self, id: &JobId, request: &OutputRequest) -> Result<JobOutput> {
///         self.0.fetch_output(id, request).await
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<()> {
/// let dir = tempfile::tempdir()?;
/// let backend = CpuOnly(LocalBackend::new(dir.path())?);
/// let mut spec = JobSpec::new(JobKey::new("train-1")?, "train", "true");
/// spec.resources.gpus = Some(1);
/// let err = backend.submit(&spec).await.unwrap_err();
/// assert_eq!(err.kind(), ErrorKind::Unsupported);
///
/// spec.resources.gpus = None;
/// let id = backend.submit(&spec).await?;
/// let statuses = backend.status(&[id.clone()]).await?;
/// assert!(statuses.get(&id).is_some_and(|status| status.state != JobState::Unknown));
/// # Ok(()) }
/// ```
// The mock is public under the `conformance` feature: code that drives a backend (a tracker,
// an operator's poller) unit-tests its error paths with it.
#[cfg_attr(any(test, feature = "conformance"), mockall::automock)]
#[async_trait]
pub trait BatchBackend: Send + Sync {
    /// A short name for logs and messages (`"slurm"`, `"local"`).
    fn name(&self) -> &str;

    /// What this backend supports beyond the base contract.
    fn capabilities(&self) -> Capabilities;

    /// Submits a job, or returns the id of the job already submitted with the same key.
    ///
    /// A backend with [`Capabilities::staging`] first sends the spec's
    /// [`stage_in`](JobSpec::stage_in) files (see [`crate::staging`]) and submits only when
    /// every one arrived whole; one without refuses a spec that stages anything.
    async fn submit(&self, spec: &JobSpec) -> Result<JobId>;

    /// [`submit`](Self::submit), with the stage-in's progress reported to, and its
    /// concurrency taken from, `transfer`. The default ignores `transfer`.
    async fn submit_with(&self, spec: &JobSpec, transfer: &Transfer) -> Result<JobId> {
        let _ = transfer;
        self.submit(spec).await
    }

    /// Submits every spec of `specs`, answering for each one, in the same order, what
    /// [`submit`](Self::submit) would have: its id, or its own error. One spec's failure
    /// does not stop the others, and each keeps `submit`'s guarantee: a key submitted
    /// again, in this call or a later one, never makes a second job.
    ///
    /// The default submits them one after another. A backend that can send many jobs in
    /// one round trip to its scheduler overrides it.
    ///
    /// ```
    /// use batchbridge_core::{BatchBackend, JobKey, JobSpec, LocalBackend};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> batchbridge_core::Result<()> {
    /// let dir = tempfile::tempdir()?;
    /// let backend = LocalBackend::new(dir.path())?;
    /// let specs = vec![
    ///     JobSpec::new(JobKey::new("prep-1")?, "prep", "true"),
    ///     JobSpec::new(JobKey::new("prep-2")?, "prep", "true"),
    /// ];
    /// let ids = backend.submit_many(&specs).await;
    /// assert_eq!(ids.len(), 2);
    /// assert!(ids.iter().all(Result::is_ok));
    /// # Ok(()) }
    /// ```
    async fn submit_many(&self, specs: &[JobSpec]) -> Vec<Result<JobId>> {
        let mut answers = Vec::with_capacity(specs.len());
        for spec in specs {
            answers.push(self.submit(spec).await);
        }
        answers
    }

    /// Fetches job `id`'s `outputs` (see [`crate::staging`]) after it ended, those whose
    /// [`StageWhen`](crate::staging::StageWhen) matches how its status says it ended:
    /// each file to a temporary name in its local directory, its size and SHA-256 checked
    /// against the cluster's, then renamed. Running it again fetches every file afresh, so
    /// an interrupted stage-out is finished by running it again. The caps in `limits` apply.
    ///
    /// A job that has not ended is refused ([`JobActive`](crate::ErrorKind::JobActive)).
    /// The default says Unsupported, as does a backend without [`Capabilities::staging`].
    async fn stage_out(
        &self,
        id: &JobId,
        outputs: &[StageOut],
        limits: &StageLimits,
        transfer: &Transfer,
    ) -> Result<StagedOutputs> {
        let _ = (outputs, limits, transfer);
        Err(Error::new(
            crate::ErrorKind::Unsupported,
            format!(
                "the {} backend cannot stage out files (job {id})",
                self.name()
            ),
        ))
    }

    /// The job submitted with this key, if any.
    async fn find(&self, key: &JobKey) -> Result<Option<JobId>>;

    /// The status of every job in `ids`, in one batched query.
    async fn status(&self, ids: &[JobId]) -> Result<HashMap<JobId, JobStatus>>;

    /// The status of one job: [`status`](Self::status) for `id` alone. A backend that
    /// leaves the id out of its answer (which breaks the contract) yields an
    /// [`Unknown`](crate::JobState::Unknown) status whose reason says so, never a panic.
    /// To follow a job until it ends, or many jobs at once, use a
    /// [`Tracker`](crate::Tracker).
    ///
    /// ```
    /// use batchbridge_core::{BatchBackend, JobId, JobState, LocalBackend};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> batchbridge_core::Result<()> {
    /// let dir = tempfile::tempdir()?;
    /// let backend = LocalBackend::new(dir.path())?;
    /// let status = backend.status_of(&JobId::from("no-such-job")).await?;
    /// assert_eq!(status.state, JobState::Unknown);
    /// # Ok(()) }
    /// ```
    async fn status_of(&self, id: &JobId) -> Result<JobStatus> {
        let mut statuses = self.status(std::slice::from_ref(id)).await?;
        Ok(statuses.remove(id).unwrap_or_else(not_answered))
    }

    /// Cancels a job; Ok if it already ended or is unknown.
    async fn cancel(&self, id: &JobId) -> Result<()>;

    /// Cancels job `id` only if no part of it has started, in a way that cannot race with
    /// the scheduler starting it (a hold first, say): for taking a waiting job back to
    /// submit it elsewhere without ever killing one that started meanwhile. A job that had
    /// started is left running ([`Withdrawal::Started`]); one that ended, or an unknown id,
    /// is [`Withdrawal::Ended`]. A malformed id is InvalidInput, as for [`cancel`](Self::cancel).
    ///
    /// The default implementation says Unsupported: a caller that must move a job anyway
    /// falls back to [`cancel`](Self::cancel), which can kill a job that starts in the
    /// moment between its last status and the cancel.
    ///
    /// ```
    /// use batchbridge_core::{BatchBackend, JobKey, JobSpec, LocalBackend, Withdrawal};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> batchbridge_core::Result<()> {
    /// let dir = tempfile::tempdir()?;
    /// let backend = LocalBackend::new(dir.path())?;
    /// let mut spec = JobSpec::new(JobKey::new("waits")?, "waits", "echo never");
    /// spec.resources.cpus = Some(1024); // more than this machine has: it waits
    /// let id = backend.submit(&spec).await?;
    /// assert_eq!(backend.withdraw(&id).await?, Withdrawal::Withdrawn);
    /// assert_eq!(backend.withdraw(&id).await?, Withdrawal::Ended);
    /// # Ok(()) }
    /// ```
    async fn withdraw(&self, id: &JobId) -> Result<Withdrawal> {
        Err(cannot_withdraw(self.name(), id))
    }

    /// A bounded part of the job's stdout and stderr.
    async fn fetch_output(&self, id: &JobId, request: &OutputRequest) -> Result<JobOutput>;

    /// [`fetch_output`](Self::fetch_output) for each of `requests` (a job and the part of
    /// its output to read), answering each, in the same order, what `fetch_output` would
    /// have: its output, or its own error. One request's failure does not stop the others.
    ///
    /// The default reads them one after another. A backend that can read many jobs'
    /// output in one round trip overrides it: the remote skeleton reads them in one
    /// command, which is what lets the operator collect the output of thousands of jobs
    /// that end at once.
    ///
    /// ```
    /// use batchbridge_core::{BatchBackend, JobKey, JobSpec, LocalBackend, OutputRequest};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> batchbridge_core::Result<()> {
    /// let dir = tempfile::tempdir()?;
    /// let backend = LocalBackend::new(dir.path())?;
    /// let id = backend.submit(&JobSpec::new(JobKey::new("hello")?, "hello", "echo hello")).await?;
    /// # while !backend.status(std::slice::from_ref(&id)).await?[&id].state.is_terminal() {
    /// #     tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    /// # }
    /// let outputs = backend
    ///     .fetch_outputs(&[(id.clone(), OutputRequest::tail(100)), ("no-such-job".into(), OutputRequest::tail(100))])
    ///     .await;
    /// assert_eq!(outputs[0].as_ref().unwrap().stdout.text(), "hello\n");
    /// assert!(outputs[1].is_err());
    /// # Ok(()) }
    /// ```
    async fn fetch_outputs(&self, requests: &[(JobId, OutputRequest)]) -> Vec<Result<JobOutput>> {
        let mut outputs = Vec::with_capacity(requests.len());
        for (id, request) in requests {
            outputs.push(self.fetch_output(id, request).await);
        }
        outputs
    }

    /// Checks that the scheduler can be reached and returns its version, such as
    /// `"slurm 22.05.8"` or `"htcondor 23.9.6"`: one line of printable text naming the
    /// scheduler, for status displays. Failing to reach it is an error of the same kinds
    /// as the other methods return (temporary when retrying can help).
    ///
    /// How deep the check goes is up to the backend. The SLURM, HTCondor and PBS backends ask
    /// the scheduler's command-line tools for their version over their shell, which proves
    /// the connection and the installation, not that slurmctld or the schedd answers.
    ///
    /// The default implementation runs `status(&[])` and returns [`name`](Self::name), so
    /// that backends written before this method keep compiling. It checks only what an
    /// empty status query checks, which for many backends is nothing at all; override it
    /// with a real round trip to the scheduler.
    ///
    /// ```
    /// use batchbridge_core::{BatchBackend, LocalBackend};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> batchbridge_core::Result<()> {
    /// let dir = tempfile::tempdir()?;
    /// let backend = LocalBackend::new(dir.path())?;
    /// let version = backend.version().await?;
    /// assert!(version.starts_with("local (batchbridge-core "), "{version}");
    /// # Ok(()) }
    /// ```
    async fn version(&self) -> Result<String> {
        self.status(&[]).await?;
        Ok(self.name().to_owned())
    }

    /// Removes the files the backend keeps for the job submitted with `key` (its script,
    /// its output, its directory), once the job has ended, and releases the key.
    ///
    /// - A job that is not over ([`JobState::is_active`](crate::JobState::is_active), which
    ///   includes `Unknown`, since such a job may still run) is refused with
    ///   [`ErrorKind::JobActive`](crate::ErrorKind::JobActive) and keeps running with its
    ///   files: cancel it and wait until it ends first.
    /// - Cleaning up a key that has no job, or whose job was cleaned up already, is `Ok`.
    /// - Only that job's files go; a key can never name anything outside the backend's own
    ///   directories.
    /// - Afterwards the job's output is gone ([`fetch_output`](Self::fetch_output) is
    ///   [`NotFound`](crate::ErrorKind::NotFound)) and the key is free: a later
    ///   [`submit`](Self::submit) with it starts a *new* job, since the record that made
    ///   submits idempotent was part of what was removed. [`find`](Self::find) may still
    ///   return the old id where the scheduler itself remembers the key (SLURM accounting,
    ///   HTCondor history). Do not clean up a key that is being submitted.
    ///
    /// The default implementation keeps everything and says so with
    /// [`ErrorKind::Unsupported`](crate::ErrorKind::Unsupported), so that a caller (the
    /// operator) can tell "nothing was removed" from "nothing was left"; a backend that keeps
    /// no files of its own should override it with `Ok(())`.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use batchbridge_core::{BatchBackend, JobKey, JobSpec, LocalBackend, Tracker};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> batchbridge_core::Result<()> {
    /// let dir = tempfile::tempdir()?;
    /// let backend = Arc::new(LocalBackend::new(dir.path())?);
    /// let tracker = Tracker::new(backend.clone(), Duration::from_millis(100))?;
    /// let key = JobKey::new("nightly-report")?;
    /// let id = backend.submit(&JobSpec::new(key.clone(), "report", "echo done")).await?;
    /// tracker.wait(&id, Duration::from_secs(30)).await?;
    /// backend.cleanup(&key).await?;
    /// assert_eq!(backend.find(&key).await?, None);
    /// backend.cleanup(&key).await?; // again: nothing left, still Ok
    /// # Ok(()) }
    /// ```
    async fn cleanup(&self, key: &JobKey) -> Result<()> {
        Err(Error::new(
            crate::ErrorKind::Unsupported,
            format!(
                "the {} backend cannot clean up job files (job {key}); they are kept",
                self.name()
            ),
        ))
    }

    /// When and where a job of `spec` would start if it were submitted now, without
    /// submitting it (SLURM's `sbatch --test-only`, HTCondor's idle slots that match), for
    /// placing a job on the cluster where it starts first.
    ///
    /// The default implementation says Unsupported ([`cannot_estimate`](crate::estimate::cannot_estimate)):
    /// a backend that cannot tell is skipped by placement policies that need an estimate.
    /// A backend that can estimate refuses a spec it could not run as its submit would,
    /// with Unsupported turned into InvalidInput
    /// ([`refused_by_submit`](crate::estimate::refused_by_submit)).
    async fn estimate_start(&self, spec: &JobSpec) -> Result<StartEstimate> {
        Err(crate::estimate::cannot_estimate(self.name(), &spec.key))
    }

    /// `spec` with the scheduler directives of its script applied (`#SBATCH`, `#PBS` lines
    /// in the script's header), and what became of each line: see [`crate::directives`].
    /// Fields `spec` sets already win over directives, as a scheduler's command line wins
    /// over its script's directives; an empty [`JobSpec::name`] counts as unset (a caller
    /// with no name of its own passes `""` and fills in its default afterwards), so that a
    /// directive's job name can be taken. A refused line leaves the spec without it and is in
    /// the report; the caller must stop at [`DirectiveReport::check`] before submitting,
    /// after showing the report if it likes (a dry run). `Err` is for a spec that cannot
    /// be read for directives at all, never for a refused line. It runs no command.
    ///
    /// The default implementation reads no directives: `spec` unchanged, an empty report.
    ///
    /// ```
    /// use batchbridge_core::{BatchBackend, JobKey, JobSpec, LocalBackend};
    ///
    /// # fn main() -> batchbridge_core::Result<()> {
    /// let dir = tempfile::tempdir()?;
    /// let backend = LocalBackend::new(dir.path())?;
    /// let spec = JobSpec::new(JobKey::new("k")?, "n", "#!/bin/sh\n#SBATCH -t 5\necho hi\n");
    /// let (applied, report) = backend.apply_directives(spec.clone())?;
    /// report.check()?;
    /// assert!(report.is_empty());
    /// assert_eq!(applied, spec);
    /// # Ok(()) }
    /// ```
    ///
    /// [`DirectiveReport::check`]: crate::directives::DirectiveReport::check
    fn apply_directives(&self, spec: JobSpec) -> Result<(JobSpec, DirectiveReport)> {
        Ok((spec, DirectiveReport::default()))
    }

    /// Where this backend's job events come from, if it pushes any (the default: none, and
    /// a [`Tracker`](crate::Tracker) learns everything from polls).
    fn events(&self) -> Option<Arc<dyn EventSource>> {
        None
    }
}

/// Refuses to clean up job `id` (submitted with `key`) unless `status` shows it ended: the
/// check every [`BatchBackend::cleanup`] makes before it removes anything.
///
/// ```
/// use batchbridge_core::{ErrorKind, JobId, JobKey, JobState, JobStatus, refuse_active};
///
/// let key = JobKey::new("k")?;
/// let id = JobId::from("7");
/// let done = JobStatus::new(JobState::Succeeded, "COMPLETED");
/// assert!(refuse_active(&key, &id, &done).is_ok());
/// let running = JobStatus::new(JobState::Running, "RUNNING");
/// let err = refuse_active(&key, &id, &running).unwrap_err();
/// assert_eq!(err.kind(), ErrorKind::JobActive);
/// # Ok::<(), batchbridge_core::Error>(())
/// ```
pub fn refuse_active(key: &JobKey, id: &JobId, status: &JobStatus) -> Result<()> {
    if status.state.is_terminal() {
        return Ok(());
    }
    Err(Error::new(
        crate::ErrorKind::JobActive,
        format!(
            "job {id} (key {key}) is {:?}, not ended: its files stay until it ends; cancel it \
             and wait for it to end before cleaning up",
            status.state
        ),
    ))
}

/// Whether job `id` succeeded, which picks the outputs a [`BatchBackend::stage_out`] fetches
/// ([`StageWhen`](crate::staging::StageWhen)); refused
/// ([`JobActive`](crate::ErrorKind::JobActive)) unless `status` shows it ended.
pub(crate) fn succeeded_once_ended(id: &JobId, status: &JobStatus) -> Result<bool> {
    if !status.state.is_terminal() {
        return Err(Error::new(
            crate::ErrorKind::JobActive,
            format!(
                "job {id} is {}: its outputs are staged out once it ended",
                status.state
            ),
        ));
    }
    Ok(status.state == crate::JobState::Succeeded)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A backend written before [`BatchBackend::version`] and [`BatchBackend::status_of`]
    /// existed: it overrides neither, and its status answers no job.
    #[derive(Default)]
    struct Minimal {
        asked: std::sync::Mutex<Vec<Vec<JobId>>>,
    }

    #[async_trait]
    impl BatchBackend for Minimal {
        fn name(&self) -> &str {
            "minimal"
        }

        fn capabilities(&self) -> Capabilities {
            Capabilities::NONE
        }

        async fn submit(&self, _: &JobSpec) -> Result<JobId> {
            Err(Error::invalid_input("not in this test"))
        }

        async fn find(&self, _: &JobKey) -> Result<Option<JobId>> {
            Ok(None)
        }

        async fn status(&self, ids: &[JobId]) -> Result<HashMap<JobId, JobStatus>> {
            self.asked.lock().unwrap().push(ids.to_vec());
            Ok(HashMap::new())
        }

        async fn cancel(&self, _: &JobId) -> Result<()> {
            Ok(())
        }

        async fn fetch_output(&self, _: &JobId, _: &OutputRequest) -> Result<JobOutput> {
            Err(Error::invalid_input("not in this test"))
        }
    }

    #[tokio::test]
    async fn the_default_cleanup_keeps_everything_and_says_so() {
        let backend: &dyn BatchBackend = &Minimal::default();
        let err = backend
            .cleanup(&JobKey::new("k").unwrap())
            .await
            .unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::Unsupported, "{err}");
        assert!(err.message().contains("minimal backend"), "{err}");
    }

    #[test]
    fn only_ended_jobs_may_be_cleaned_up() {
        let key = JobKey::new("k").unwrap();
        let id = JobId::from("7");
        for state in crate::state::ALL_STATES {
            let refused = refuse_active(&key, &id, &JobStatus::new(state, "X"));
            assert_eq!(refused.is_ok(), state.is_terminal(), "{state:?}");
            if let Err(err) = refused {
                assert_eq!(err.kind(), crate::ErrorKind::JobActive, "{state:?}");
                assert!(!err.is_temporary());
            }
        }
    }

    #[test]
    fn only_ended_jobs_have_their_outputs_staged_out() {
        let id = JobId::from("7");
        for state in crate::state::ALL_STATES {
            let succeeded = succeeded_once_ended(&id, &JobStatus::new(state, "X"));
            match succeeded {
                Ok(succeeded) => {
                    assert!(state.is_terminal(), "{state:?}");
                    assert_eq!(succeeded, state == crate::JobState::Succeeded, "{state:?}");
                }
                Err(err) => {
                    assert!(!state.is_terminal(), "{state:?}");
                    assert_eq!(err.kind(), crate::ErrorKind::JobActive, "{state:?}");
                }
            }
        }
    }

    #[tokio::test]
    async fn the_default_version_is_the_name_after_an_empty_status_query() {
        let minimal = Minimal::default();
        let backend: &dyn BatchBackend = &minimal;
        assert_eq!(backend.version().await.unwrap(), "minimal");
        assert_eq!(*minimal.asked.lock().unwrap(), [Vec::<JobId>::new()]);
    }

    #[tokio::test]
    async fn status_of_a_job_left_out_of_the_answer_is_unknown_with_a_reason() {
        let minimal = Minimal::default();
        let id = JobId::from("7");
        let status = minimal.status_of(&id).await.unwrap();
        assert_eq!(status.state, crate::JobState::Unknown);
        assert_eq!(
            status.reason.as_deref(),
            Some("the backend did not answer for this job")
        );
        assert_eq!(*minimal.asked.lock().unwrap(), [vec![id]]);
    }
}
