//! The SLURM backend for batchbridge: `sbatch`, `squeue`, `sacct` and `scancel` driven over a
//! [`Shell`](https://docs.rs/batchbridge-core/latest/batchbridge_core/shell/trait.Shell.html),
//! usually one multiplexed SSH connection to a login node.
//!
//! Not implemented yet: this crate is a placeholder in the workspace layout. Until it lands,
//! use `batchbridge_core::LocalBackend` or implement `BatchBackend` yourself.
