//! The HTCondor backend for batchbridge: `condor_submit`, `condor_q`, `condor_history` and
//! `condor_rm` driven over a [`Shell`](batchbridge_core::shell::Shell), usually one
//! multiplexed SSH connection to a submit node, as the user that connection logs in as.
//! Nothing is installed on the pool.
//!
//! [`HtcondorBackend`] implements [`BatchBackend`](batchbridge_core::BatchBackend):
//!
//! - **submit** writes the job's script, environment file, a constant wrapper and a
//!   generated submit description ([`description`]) into a job directory under
//!   [`HtcondorConfig::work`] and runs `condor_submit -terse`, all in one remote
//!   command. The key is claimed with an atomic `mkdir` and stored in the job attribute
//!   `BatchBridgeKey`, which `find` matches exactly (`=?=`). An array is one cluster of N
//!   procs (`queue N`); the script reads its proc number in `$BATCHBRIDGE_TASK_INDEX`.
//! - **status** asks one `condor_q -json` for every cluster and one `condor_history -json`
//!   for those no longer wholly in the queue, with only the attributes it reads
//!   ([`parse::ATTRIBUTES`]). `JobStatus` 1–7 maps onto
//!   [`JobState`](batchbridge_core::JobState) with the hold or remove reason kept
//!   ([`state`]); clusters of several procs report per-task counts.
//! - **cancel** is `condor_rm`, idempotent; **fetch_output** streams a bounded window with
//!   `dd`.
//! - **version** reads the first line of `condor_version` (`htcondor 23.9.6`).
//! - **events** ([`events`]) follows the user job event log every submit names
//!   (`WORK/job-events.log`) with one `tail` on the submit node: each proc's start, end,
//!   hold, release, eviction and removal, pushed as HTCondor writes them.
//!
//! Connect to a submit node, submit, wait for the job to end:
//!
//! ```no_run
//! use std::sync::Arc;
//! use std::time::Duration;
//! use batchbridge_core::shell::{HostKeys, SshAuth, SshConfig, SshShell};
//! use batchbridge_core::{BatchBackend, JobKey, JobSpec, Tracker};
//! use batchbridge_htcondor::{HtcondorBackend, HtcondorConfig};
//!
//! # async fn run() -> batchbridge_core::Result<()> {
//! let ssh = SshShell::new(SshConfig::new(
//!     "submit.chtc.example.edu",
//!     "alice",
//!     SshAuth::KeyFile("/home/alice/.ssh/id_ed25519".into()),
//!     HostKeys::File("/home/alice/.ssh/known_hosts".into()),
//! ))?;
//! let condor = Arc::new(HtcondorBackend::new(Arc::new(ssh), HtcondorConfig::default())?);
//! let tracker = Tracker::new(condor.clone(), Duration::from_secs(30))?;
//!
//! let id = condor.submit(&JobSpec::new(JobKey::new("fit-3")?, "fit", "./fit 3\n")).await?;
//! let status = tracker.wait(&id, Duration::from_secs(4 * 3600)).await?;
//! println!("{id}: {} (exit code {:?})", status.state, status.exit_code);
//! # Ok(()) }
//! ```

mod backend;
pub mod description;
pub mod estimate;
pub mod events;
pub mod parse;
pub mod state;

pub use backend::{Htcondor, HtcondorBackend, HtcondorConfig};

/// The crate README's examples, compiled as doctests so they cannot go stale.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
