//! The SLURM backend for batchbridge: `sbatch`, `squeue`, `sacct` and `scancel` driven over a
//! [`Shell`](batchbridge_core::shell::Shell), usually one multiplexed SSH connection to a
//! login node, as the user that connection logs in as. Nothing is installed on the cluster.
//!
//! [`SlurmBackend`] implements [`BatchBackend`](batchbridge_core::BatchBackend):
//!
//! - **submit** writes the job's script, environment file and a generated batch script into
//!   a job directory under [`SlurmConfig::work_dir`] and runs `sbatch --parsable`, all in one
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
//! ```
//! use batchbridge_core::JobState;
//! use batchbridge_slurm::state::{map_state, status_from};
//!
//! assert_eq!(map_state("CANCELLED by 1001", "None"), JobState::Cancelled);
//! let status = status_from("TIMEOUT", "TimeLimit", Some("0:15"));
//! assert_eq!((status.state, status.signal), (JobState::Failed, Some(15)));
//! ```

mod backend;
pub mod parse;
pub mod script;
pub mod state;
mod status;

pub use backend::{SlurmBackend, SlurmConfig};
pub use script::SubmitDefaults;
pub use status::NATIVE_STATE_EXIT_FILE;

/// The crate README's examples, compiled as doctests so they cannot go stale.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
