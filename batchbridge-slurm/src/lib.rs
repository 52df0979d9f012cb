//! The SLURM backend for batchbridge: `sbatch`, `squeue`, `sacct` and `scancel` driven over a
//! [`Shell`](batchbridge_core::shell::Shell), usually one multiplexed SSH connection to a
//! login node, as the user that connection logs in as. Nothing is installed on the cluster.
//!
//! [`SlurmBackend`] implements [`BatchBackend`](batchbridge_core::BatchBackend):
//!
//! - **submit** writes the job's script, environment file and a generated batch script into
//!   a job directory under [`SlurmConfig::work`] and runs `sbatch --parsable`, all in one
//!   remote command. The job's key is its `--comment`, and its directory is claimed with an
//!   atomic `mkdir`, so one key never makes two jobs. The batch script writes each task's exit
//!   code to `task-N.exit` beside `task-N.stdout` and `task-N.stderr`.
//! - **status** asks one `squeue -t all` for every id, one `sacct` for those squeue no longer
//!   holds (while accounting answers; after a failure it is retried every
//!   [`SlurmConfig::accounting_recheck`]), and reads the exit-code files for what neither
//!   knows. Every SLURM state maps onto [`JobState`](batchbridge_core::JobState) with its
//!   reason kept ([`state`]); arrays report per-task counts.
//! - **cancel** is `scancel`; **fetch_output** streams a bounded window with `dd`.
//! - **version** is what `sinfo --version` prints, trimmed (`slurm-wlm 22.05.8`).
//!
//! Connect to a login node, submit, wait for the job to end:
//!
//! ```no_run
//! use std::sync::Arc;
//! use std::time::Duration;
//! use batchbridge_core::shell::{HostKeys, SshAuth, SshConfig, SshShell};
//! use batchbridge_core::{BatchBackend, JobKey, JobSpec, Tracker};
//! use batchbridge_slurm::{SlurmBackend, SlurmConfig};
//!
//! # async fn run() -> batchbridge_core::Result<()> {
//! let ssh = SshShell::new(SshConfig::new(
//!     "login.hpc.example.edu",
//!     "alice",
//!     SshAuth::KeyFile("/home/alice/.ssh/id_ed25519".into()),
//!     HostKeys::File("/home/alice/.ssh/known_hosts".into()),
//! ))?;
//! let slurm = Arc::new(SlurmBackend::new(Arc::new(ssh), SlurmConfig::default())?);
//! let tracker = Tracker::new(slurm.clone(), Duration::from_secs(30))?;
//!
//! let id = slurm.submit(&JobSpec::new(JobKey::new("align-17")?, "align", "./align 17\n")).await?;
//! let status = tracker.wait(&id, Duration::from_secs(4 * 3600)).await?;
//! println!("{id}: {} ({})", status.state, status.native_state); // Succeeded (COMPLETED)
//! # Ok(()) }
//! ```

mod backend;
pub mod directives;
pub mod estimate;
pub mod parse;
pub mod script;
pub mod state;
mod status;

pub use backend::{Slurm, SlurmBackend, SlurmConfig};
pub use batchbridge_core::remote::SubmitDefaults;

/// The crate README's examples, compiled as doctests so they cannot go stale.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
