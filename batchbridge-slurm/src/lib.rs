//! The SLURM backend for batchbridge: `sbatch`, `squeue`, `sacct` and `scancel` driven over a
//! [`Shell`](batchbridge_core::shell::Shell), usually one multiplexed SSH connection to a
//! login node.
//!
//! Work in progress: so far this crate holds the pure mapping of SLURM's states and exit
//! codes onto batchbridge's [`JobState`](batchbridge_core::JobState); the backend itself is
//! not implemented yet. Until it lands, use `batchbridge_core::LocalBackend` or implement
//! `BatchBackend` yourself.
//!
//! ```
//! use batchbridge_core::JobState;
//! use batchbridge_slurm::state::{map_state, status_from};
//!
//! assert_eq!(map_state("CANCELLED by 1001", "None"), JobState::Cancelled);
//! let status = status_from("TIMEOUT", "TimeLimit", Some("0:15"));
//! assert_eq!((status.state, status.signal), (JobState::Failed, Some(15)));
//! ```

pub mod state;
