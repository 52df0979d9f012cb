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
//! - [`Tracker`] follows jobs on one backend with one batched status call per interval,
//!   merging the job events the backend pushes ([`events`]): [`Tracker::wait`] for a job
//!   to end (with a time limit), [`Tracker::changes`] for every status change of every job
//!   it follows, polled or pushed, [`Tracker::follow_output`] for a job's output as it
//!   runs.
//! - [`follow::OutputFollower`] passes a job's output on as it grows, until the job ends.
//! - [`Error`] carries an [`ErrorKind`] and whether retrying can help.
//! - [`shell`] is the transport backends drive schedulers through: [`shell::LocalShell`]
//!   and [`shell::SshShell`] (one multiplexed OpenSSH connection per host).
//! - [`LocalBackend`] runs jobs as local processes: the embedded default.
//! - [`remote`] is the skeleton of backends driving a scheduler's command-line tools
//!   (SLURM, HTCondor, PBS, the at example): implement [`remote::CliScheduler`] (render the
//!   submit, query and parse statuses, cancel, version) and [`remote::RemoteBackend`] is
//!   the [`BatchBackend`], with the job directories, the idempotent submit, `find`, output,
//!   cleanup and exit-code files they share.
//! - `conformance` is the test suite any backend runs against itself, behind the cargo
//!   feature of the same name (off by default): add `batchbridge-core = { version = "0.1",
//!   features = ["conformance"] }` to the backend crate's `[dev-dependencies]`.
//! - For implementing [`BatchBackend`] outside this crate, [`async_trait`](macro@async_trait)
//!   (the trait's methods are `async`) and [`bytesize`] (the [`ByteSize`] in [`Resources`])
//!   are re-exported, so a backend crate needs neither as a dependency of its own.
//!
//! # Building values: every struct is `#[non_exhaustive]`
//!
//! So that a field added later breaks no caller, no public struct can be built with a
//! struct literal outside this crate, not even with `..Default::default()`:
//!
//! ```compile_fail
//! use batchbridge_core::Resources;
//!
//! // error[E0639]: cannot create non-exhaustive struct using struct expression
//! let resources = Resources { cpus: Some(4), ..Default::default() };
//! ```
//!
//! Build each one with its constructor and `with_*` setters, or take its default and set
//! public fields: [`JobSpec::new`] (then `with_resources`, `with_queue`, `with_env`, …),
//! `Resources::default().with_cpus(4)`, [`ArraySpec::new`], [`Container::new`],
//! `Capabilities::NONE.with_arrays(true)`, [`JobStatus::new`] (then `with_reason`,
//! `with_exit_code`, …), [`OutputRequest::tail`], [`OutputChunk::new`], [`JobOutput::new`],
//! [`shell::SshConfig::new`] (then `.port(2222)`, or set a field), and the conformance
//! suite's `Config::default()` with its fields set one by one.
//!
//! ```
//! use std::time::Duration;
//! use batchbridge_core::{Capabilities, JobKey, JobSpec, JobState, JobStatus, Resources};
//!
//! let resources = Resources::default().with_cpus(4).with_wall_time(Duration::from_secs(600));
//! let spec = JobSpec::new(JobKey::new("k-1")?, "n", "true")
//!     .with_resources(resources)
//!     .with_queue("debug");
//! assert_eq!(spec.resources.cpus, Some(4));
//! let capabilities = Capabilities::NONE.with_arrays(true);
//! assert!(capabilities.arrays);
//! let status = JobStatus::new(JobState::Queued, "PENDING").with_reason("Priority");
//! assert_eq!(status.reason.as_deref(), Some("Priority"));
//! # Ok::<(), batchbridge_core::Error>(())
//! ```
//!
//! Open a backend, submit, wait, read the output:
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use batchbridge_core::{BatchBackend, JobKey, JobSpec, JobState, LocalBackend, OutputRequest, Tracker};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> batchbridge_core::Result<()> {
//! let state_dir = tempfile::tempdir()?;
//! let backend = Arc::new(LocalBackend::new(state_dir.path())?);
//! let tracker = Tracker::new(backend.clone(), Duration::from_millis(200))?;
//!
//! let mut spec = JobSpec::new(JobKey::new("report-2026-11")?, "report", "echo \"sum: $((2 + 3))\"");
//! spec.resources.cpus = Some(1);
//! let id = backend.submit(&spec).await?;
//! assert_eq!(backend.submit(&spec).await?, id, "same key, same job");
//!
//! let status = tracker.wait(&id, Duration::from_secs(60)).await?;
//! assert_eq!(status.state, JobState::Succeeded);
//! let output = backend.fetch_output(&id, &OutputRequest::tail(1024)).await?;
//! assert_eq!(output.stdout.text(), "sum: 5\n");
//! # Ok(()) }
//! ```

// docs.rs builds with `--cfg docsrs` and every feature: mark what needs one.
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod after;
pub mod backend;
pub mod cause;
pub mod directives;
// Also under `test`: the unit tests wait with it, and the packaged crate (whose manifest
// loses the dev-dependency that turns the feature on) must still pass its own tests.
#[cfg(any(test, feature = "conformance"))]
#[cfg_attr(docsrs, doc(cfg(feature = "conformance")))]
pub mod conformance;
pub mod dependency;
pub mod error;
pub mod estimate;
pub mod events;
pub mod follow;
mod job_id;
pub mod local;
pub mod placement;
pub mod remote;
pub mod shell;
pub mod spec;
pub mod staging;
pub mod state;
pub mod tracker;
pub mod wrapper;

pub use async_trait::async_trait;
pub use backend::{
    BatchBackend, Capabilities, JobOutput, MAX_OUTPUT_CHUNK, OutputChunk, OutputRange,
    OutputRequest, Withdrawal, refuse_active,
};
pub use bytesize::{self, ByteSize};
pub use cause::{CancelledBy, FailureCause};
pub use dependency::Dependency;
pub use error::{Error, ErrorKind, Refusal, Result};
pub use job_id::JobId;
pub use local::LocalBackend;
pub use spec::{
    ArraySpec, Container, ContainerRuntime, JobKey, JobSpec, MAX_KEY_LEN, MAX_NAME_LEN, Resources,
};
pub use state::{ALL_STATES, InvalidTransition, JobState, JobStatus, TaskCounts};
pub use tracker::{
    Change, Changes, Ended, Ends, EventHealth, PollReport, SeenBy, Tracker, TrackerBuilder,
};

/// The crate README's examples, compiled as doctests so they cannot go stale.
// With the feature only: the README shows the conformance suite.
#[doc = include_str!("../README.md")]
#[cfg(all(doctest, feature = "conformance"))]
pub struct ReadmeDoctests;
