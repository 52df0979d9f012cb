//! The HTCondor backend for batchbridge: `condor_submit`, `condor_q`, `condor_history` and
//! `condor_rm` driven over a
//! [`Shell`](https://docs.rs/batchbridge-core/latest/batchbridge_core/shell/trait.Shell.html).
//!
//! Not implemented yet. So far its tests prove the test bed's HTCondor pool
//! (`tests/testbed/htcondor.sh`) behaves as the backend will rely on.
