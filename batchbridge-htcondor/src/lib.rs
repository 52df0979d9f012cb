//! The HTCondor backend for batchbridge: `condor_submit`, `condor_q`, `condor_history` and
//! `condor_rm` driven over a
//! [`Shell`](https://docs.rs/batchbridge-core/latest/batchbridge_core/shell/trait.Shell.html).
//!
//! Not implemented yet: this crate is a placeholder in the workspace layout.
