//! `batchbridge-operator-with-at`: the batchbridge operator with the `at` backend
//! registered, the way a platform team ships its own backend. A BatchCluster whose
//! `scheduler` is `at` (and that has `ssh`, `secretRef` and `knownHosts` like any SSH
//! cluster) runs its jobs with `at` on the machine it logs in to; slurm and htcondor keep
//! working as in the stock operator.
//!
//! It reads `KUBECONFIG` (or the in-cluster configuration), `WATCH_NAMESPACE` (watch only
//! that namespace; every namespace when unset) and `RUST_LOG` (default `info`), and stops on
//! SIGTERM or Ctrl-C. The stock binary's other settings (metrics, leader election, the local
//! scheduler) are [`Operator`] builder calls to add the same way.

use std::process::ExitCode;
use std::sync::Arc;

use batchbridge_at::{AtBackend, AtConfig};
use batchbridge_core::shell::SshShell;
use batchbridge_core::{BatchBackend, Error};
use batchbridge_operator::Operator;
use batchbridge_operator::cluster::BackendFactory;
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> ExitCode {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let client = match kube::Client::try_default().await {
        Ok(client) => client,
        Err(err) => {
            tracing::error!(error = %err, "cannot reach the Kubernetes API");
            return ExitCode::FAILURE;
        }
    };
    let mut operator = Operator::new(client).backend("at", at_backend());
    if let Ok(namespace) = std::env::var("WATCH_NAMESPACE")
        && !namespace.is_empty()
    {
        operator = operator.namespace(namespace);
    }
    tracing::info!("batchbridge-operator-with-at starting");
    operator.run(batchbridge_operator::shutdown_signal()).await;
    ExitCode::SUCCESS
}

/// Builds an [`AtBackend`] for an `at` BatchCluster: over SSH with the configuration the
/// operator made from the cluster's `ssh`, `knownHosts` and Secret, with the cluster's
/// `workDir` when it has one.
fn at_backend() -> BackendFactory {
    Arc::new(|spec, ssh| {
        let ssh = ssh.ok_or_else(|| {
            Error::invalid_input(
                "an at BatchCluster is reached over SSH: spec.ssh, spec.secretRef and \
                 spec.knownHosts are required",
            )
        })?;
        let mut config = AtConfig::default();
        if let Some(work_dir) = &spec.work_dir {
            config.work.work_dir.clone_from(work_dir);
        }
        let backend: Arc<dyn BatchBackend> =
            Arc::new(AtBackend::new(Arc::new(SshShell::new(ssh)?), config)?);
        Ok(backend)
    })
}
