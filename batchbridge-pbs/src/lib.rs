//! The PBS backend for batchbridge: `qsub`, `qstat` and `qdel` driven over a
//! [`Shell`](batchbridge_core::shell::Shell), usually one multiplexed SSH connection to a
//! login node, as the user that connection logs in as. Nothing is installed on the cluster.
//! Tested against OpenPBS 23.06 with job history on (`job_history_enable`), which
//! `qstat -x` needs to report finished jobs.
//!
//! [`PbsBackend`] is core's [`RemoteBackend`](batchbridge_core::remote::RemoteBackend)
//! driving [`Pbs`], and so implements [`BatchBackend`](batchbridge_core::BatchBackend):
//!
//! - **submit** writes the job's script, environment file and a generated job script into
//!   a job directory under [`PbsConfig::work`] and runs `qsub`, all in one remote
//!   command. The job's key travels in the job variable `BATCHBRIDGE_JOB_KEY` (`qsub -v`),
//!   which nothing else sets: users pass their environment through the spec, and `-v` is
//!   refused among passthrough options. The job directory is claimed with an atomic `mkdir`,
//!   so one key never makes two jobs. Resources become one select statement
//!   (`-l select=N:ncpus=C:mem=Mmb:ngpus=G`) and `-l walltime`; an array is `-J 0-N`, its
//!   `max_parallel` OpenPBS's `%M` (`max_run_subjobs`). The job script writes each task's
//!   end to `task-N.exit` beside `task-N.stdout` and `task-N.stderr`.
//! - **status** asks one `qstat -x -f -F json -t` for every id and reads the exit-code
//!   files only for what PBS no longer knows or cannot explain. Every PBS state and the
//!   `Exit_status` conventions map onto [`JobState`](batchbridge_core::JobState) and
//!   [`FailureCause`](batchbridge_core::FailureCause) ([`state`]); arrays report per-subjob
//!   counts.
//! - **apply_directives** reads the `#PBS` lines of a script's header as qsub does and
//!   applies them to the spec, reporting each one's fate ([`directives`]); the CLI and the
//!   operator call it before a submit.
//! - **cancel** is `qdel`; **fetch_output** streams a bounded window with `dd`.
//! - **version** is `OpenPBS 23.06.06`, from `qstat --version`.
//!
//! Connect to a login node, submit, wait for the job to end:
//!
//! ```no_run
//! use std::sync::Arc;
//! use std::time::Duration;
//! use batchbridge_core::shell::{HostKeys, SshAuth, SshConfig, SshShell};
//! use batchbridge_core::{BatchBackend, JobKey, JobSpec, Tracker};
//! use batchbridge_pbs::{PbsBackend, PbsConfig};
//!
//! # async fn run() -> batchbridge_core::Result<()> {
//! let ssh = SshShell::new(SshConfig::new(
//!     "login.hpc.example.edu",
//!     "alice",
//!     SshAuth::KeyFile("/home/alice/.ssh/id_ed25519".into()),
//!     HostKeys::File("/home/alice/.ssh/known_hosts".into()),
//! ))?;
//! let pbs = Arc::new(PbsBackend::new(Arc::new(ssh), PbsConfig::default())?);
//! let tracker = Tracker::new(pbs.clone(), Duration::from_secs(30))?;
//!
//! let id = pbs.submit(&JobSpec::new(JobKey::new("align-17")?, "align", "./align 17\n")).await?;
//! let status = tracker.wait(&id, Duration::from_secs(4 * 3600)).await?;
//! println!("{id}: {} ({})", status.state, status.native_state); // Succeeded (F)
//! # Ok(()) }
//! ```

mod backend;
pub mod directives;
pub mod estimate;
pub mod parse;
pub mod script;
pub mod state;

pub use backend::{Pbs, PbsBackend, PbsConfig};
pub use batchbridge_core::remote::SubmitDefaults;

/// The crate README's examples, compiled as doctests so they cannot go stale.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
