//! The batchbridge domain: everything a program needs to drive batch jobs, with no
//! Kubernetes in sight.
//!
//! - [`JobSpec`] says what to run; [`JobSpec::validate`] refuses bad input with a clear
//!   message before anything reaches a cluster.
//! - [`JobState`] and [`JobStatus`] are the one state machine every backend maps onto; the
//!   transition rules live in [`state`].
//! - [`BatchBackend`] is the trait every scheduler implements: `submit` (idempotent on the
//!   spec's [`JobKey`]), `find`, batched `status`, idempotent `cancel`, bounded
//!   `fetch_output`, `capabilities`, and `version`, a probe that names the scheduler.
//! - [`Error`] carries an [`ErrorKind`] and whether retrying can help.
//! - [`shell`] is the transport backends drive schedulers through: [`shell::LocalShell`]
//!   and [`shell::SshShell`] (one multiplexed OpenSSH connection per host).
//! - [`LocalBackend`] runs jobs as local processes: the embedded default.
//! - [`remote`] is the job directory that command-line backends (SLURM, HTCondor) keep on a
//!   cluster, with the submit and output commands they share.
//! - [`conformance`] is the test suite any backend runs against itself.
//!
//! ```
//! use batchbridge_core::{BatchBackend, JobKey, JobSpec, JobState, LocalBackend, OutputRequest};
//! use batchbridge_core::conformance::{wait_terminal, Config};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> batchbridge_core::Result<()> {
//! let state_dir = tempfile::tempdir()?;
//! let backend = LocalBackend::new(state_dir.path())?;
//! let mut spec = JobSpec::new(JobKey::new("report-2026-11")?, "report", "echo \"sum: $((2 + 3))\"");
//! spec.resources.cpus = Some(1);
//!
//! let id = backend.submit(&spec).await?;
//! assert_eq!(backend.submit(&spec).await?, id, "same key, same job");
//!
//! let status = wait_terminal(&backend, &id, &Config::default()).await?;
//! assert_eq!(status.state, JobState::Succeeded);
//! let output = backend.fetch_output(&id, &OutputRequest::tail(1024)).await?;
//! assert_eq!(output.stdout.text(), "sum: 5\n");
//! # Ok(()) }
//! ```

pub mod backend;
pub mod conformance;
pub mod error;
pub mod local;
pub mod remote;
pub mod shell;
pub mod spec;
pub mod state;

pub use backend::{
    BatchBackend, Capabilities, JobId, JobOutput, MAX_OUTPUT_CHUNK, OutputChunk, OutputRange,
    OutputRequest, refuse_active,
};
pub use error::{Error, ErrorKind, Result};
pub use local::LocalBackend;
pub use spec::{
    ArraySpec, Container, ContainerRuntime, JobKey, JobSpec, MAX_KEY_LEN, MAX_NAME_LEN, Resources,
};
pub use state::{ALL_STATES, InvalidTransition, JobState, JobStatus, TaskCounts};
