//! The batchbridge Kubernetes operator: `BatchJob` and `BatchCluster` custom resources
//! reconciled onto any `BatchBackend`.
//!
//! A `BatchCluster` names a batch system (SLURM, HTCondor, PBS, the local backend or a
//! custom one) and how to reach it over SSH; a `BatchJob` is a script to run there. Both
//! live in the API group `batchbridge.dev`, version `v1alpha1`, and are namespaced: a job
//! uses a cluster, and the cluster a Secret, of its own namespace.
//!
//! - [`crd`]: the resource types and their CRDs; the `crdgen` binary prints them as YAML, or
//!   writes them to `deploy/crds/` with `--write`.
//! - [`decision`] and [`status`]: the lifecycle as one pure step ([`decision::step`]) and
//!   the status mapping; [`reason`]: the reasons and condition types they write, and why a
//!   cluster cannot be used.
//! - [`cluster`]: one connection (backend, SSH connection, poller) per BatchCluster; its
//!   [`registry`](cluster::registry) is the one place that names the built-in backends.
//! - [`controller`]: the kube glue; [`Operator`] runs both controllers.
//! - [`output`]: what is kept of a finished job's output, and the log pods' `fetch-output`
//!   mode.
//! - [`metrics`], [`endpoints`] and [`leader`]: Prometheus metrics, `/metrics`, `/healthz`
//!   and `/readyz`, and leader election on a Lease for running several replicas.
//!
//! A program can embed the operator, with its own backends registered under a scheduler
//! name ([`Operator::backend`]); the `batchbridge-operator` binary runs it with the built-in
//! ones.
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

pub mod cluster;
pub mod controller;
pub mod crd;
pub mod decision;
pub mod endpoints;
pub mod leader;
pub mod metrics;
pub mod output;
pub mod reason;
pub mod staging;
pub mod status;

pub use controller::Operator;

/// The field manager of everything the operator writes with server-side apply.
pub const FIELD_MANAGER: &str = "batchbridge-operator";

/// Resolves when the process is asked to stop: SIGTERM (Kubernetes stopping the pod) or
/// Ctrl-C. Pass it to [`Operator::run`], as the `batchbridge-operator` binary does; a
/// binary that registers its own backends does the same.
pub async fn shutdown_signal() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminate => {}
    }
}
