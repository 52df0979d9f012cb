//! The batchbridge Kubernetes operator: `BatchJob` and `BatchCluster` custom resources
//! reconciled onto any `BatchBackend`.
//!
//! A `BatchCluster` names a batch system (SLURM, HTCondor, the local backend or a custom
//! one) and how to reach it over SSH; a `BatchJob` is a script to run there. Both live in
//! the API group `batchbridge.dev`, version `v1alpha1`, and are namespaced: a job uses a
//! cluster, and the cluster a Secret, of its own namespace.
//!
//! This crate holds so far the resource types and their CRDs ([`crd`]); the `crdgen` binary
//! prints the CRDs as YAML, or writes them to `deploy/crds/` with `--write`. The reconciler
//! and the per-cluster poller come next.
//!
//! ```
//! use batchbridge_operator::crd::{BatchJob, BatchJobSpec};
//!
//! let spec: BatchJobSpec = serde_json::from_value(serde_json::json!({
//!     "clusterRef": {"name": "hpc"},
//!     "script": "echo hello",
//! })).unwrap();
//! let job = BatchJob::new("hello", spec);
//! assert_eq!(serde_json::to_value(&job).unwrap()["apiVersion"], "batchbridge.dev/v1alpha1");
//! ```

pub mod crd;
pub mod decision;
pub mod status;
