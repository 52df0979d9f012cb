//! The HTCondor backend for batchbridge: `condor_submit`, `condor_q`, `condor_history` and
//! `condor_rm` driven over a [`Shell`](batchbridge_core::shell::Shell), usually one
//! multiplexed SSH connection to a submit node, as the user that connection logs in as.
//! Nothing is installed on the pool.
//!
//! [`HtcondorBackend`] implements [`BatchBackend`](batchbridge_core::BatchBackend):
//!
//! - **submit** writes the job's script, environment file, a constant wrapper and a
//!   generated submit description ([`description`]) into a job directory under
//!   [`HtcondorConfig::work_dir`] and runs `condor_submit -terse`, all in one remote
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
//!
//! ```
//! use batchbridge_core::JobState;
//! use batchbridge_htcondor::parse::parse_ads;
//! use batchbridge_htcondor::state::proc_status;
//!
//! let ads = parse_ads(r#"[ { "ClusterId": 9, "ProcId": 0, "JobStatus": 3,
//!                            "RemoveReason": "via condor_rm (by user alice)" } ]"#)?;
//! let status = proc_status(&ads[0]);
//! assert_eq!(status.state, JobState::Cancelled);
//! assert_eq!(status.reason.as_deref(), Some("via condor_rm (by user alice)"));
//! # Ok::<(), batchbridge_core::Error>(())
//! ```

mod backend;
pub mod description;
pub mod parse;
pub mod state;

pub use backend::{HtcondorBackend, HtcondorConfig};

/// The crate README's examples, compiled as doctests so they cannot go stale.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
