//! The operator binary.
//!
//! `batchbridge-operator` runs the controllers. It reads its settings from the environment:
//! `WATCH_NAMESPACE` (watch only that namespace; every namespace when unset),
//! `OPERATOR_IMAGE` (the image log pods run), `ENABLE_LOCAL_SCHEDULER` (`true` enables the
//! `local` scheduler, whose jobs run with the operator's rights; off by default, see
//! SECURITY.md), `LOCAL_STATE_DIR` (where `local` clusters keep their jobs),
//! `XDG_RUNTIME_DIR` (where the SSH connections keep their private directories; the
//! system's temporary directory when unset), `RUST_LOG` (log filter, default `info`),
//! `LOG_FORMAT=json` for structured logs, `METRICS_ADDR` (where `/metrics`, `/healthz` and
//! `/readyz` are served, default `0.0.0.0:8080`), `ALLOWED_SSH_TARGETS` (the login nodes
//! BatchClusters may connect to, comma-separated `HOST[:PORTS]`, see
//! [`SshTargets`](batchbridge_operator::cluster::targets::SshTargets); any when unset or
//! blank), and for leader election `LEASE_NAMESPACE`
//! (turns it on: the namespace of the Lease, the operator's own), `LEASE_NAME` (default
//! `batchbridge-operator`) and `POD_NAME` (this replica's identity).
//!
//! `batchbridge-operator fetch-output` is the log pods' mode: it prints one job's output,
//! reading the cluster and job from the environment and the credential from
//! `/var/run/batchbridge/credentials`.

use std::process::ExitCode;

use batchbridge_operator::cluster::targets::SshTargets;
use batchbridge_operator::leader::LeaderElection;
use batchbridge_operator::{Operator, output};
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> ExitCode {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if std::env::var("LOG_FORMAT").as_deref() == Ok("json") {
        logs.json().init();
    } else {
        logs.init();
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        None | Some("run") => run().await,
        Some("fetch-output") => fetch_output().await,
        Some(other) => {
            tracing::error!("unknown command {other:?}: use run (the default) or fetch-output");
            ExitCode::from(2)
        }
    }
}

async fn run() -> ExitCode {
    let client = match kube::Client::try_default().await {
        Ok(client) => client,
        Err(err) => {
            tracing::error!(error = %err, "cannot reach the Kubernetes API");
            return ExitCode::FAILURE;
        }
    };
    let mut operator = Operator::new(client);
    if let Ok(namespace) = std::env::var("WATCH_NAMESPACE")
        && !namespace.is_empty()
    {
        operator = operator.namespace(namespace);
    }
    if let Ok(image) = std::env::var("OPERATOR_IMAGE") {
        operator = operator.image(image);
    }
    match std::env::var("ENABLE_LOCAL_SCHEDULER").as_deref() {
        Err(_) | Ok("" | "false") => {}
        Ok("true") => {
            let dir = std::env::var_os("LOCAL_STATE_DIR").map_or_else(
                || std::env::temp_dir().join("batchbridge-operator"),
                std::path::PathBuf::from,
            );
            tracing::warn!(
                state_dir = %dir.display(),
                "the local scheduler is enabled: local jobs run with the operator's rights"
            );
            operator = operator.local_scheduler(dir);
        }
        Ok(other) => {
            tracing::error!("ENABLE_LOCAL_SCHEDULER={other:?}: use true or false");
            return ExitCode::from(2);
        }
    }
    match std::env::var("ALLOWED_SSH_TARGETS")
        .unwrap_or_default()
        .parse::<SshTargets>()
    {
        Ok(targets) if targets.allows_any() => tracing::warn!(
            "ALLOWED_SSH_TARGETS is unset: BatchClusters may make the operator connect to any \
             host and port (SECURITY.md recommends naming the sites' login nodes)"
        ),
        Ok(targets) => {
            tracing::info!(%targets, "BatchClusters may connect only to the allowed SSH targets");
            operator = operator.ssh_targets(targets);
        }
        Err(err) => {
            tracing::error!("ALLOWED_SSH_TARGETS: {err}");
            return ExitCode::from(2);
        }
    }
    let address = std::env::var("METRICS_ADDR").unwrap_or_else(|_| "0.0.0.0:8080".into());
    match tokio::net::TcpListener::bind(&address).await {
        Ok(listener) => operator = operator.endpoints(listener),
        Err(err) => {
            tracing::error!(%address, error = %err, "cannot serve the metrics and health endpoints");
            return ExitCode::FAILURE;
        }
    }
    if let Ok(namespace) = std::env::var("LEASE_NAMESPACE")
        && !namespace.is_empty()
    {
        let identity = std::env::var("POD_NAME").unwrap_or_else(|_| hostname());
        let mut election = LeaderElection::new(namespace, identity);
        if let Ok(name) = std::env::var("LEASE_NAME") {
            election = election.lease_name(name);
        }
        operator = operator.leader_election(election);
    }
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        "batchbridge-operator starting"
    );
    operator.run(batchbridge_operator::shutdown_signal()).await;
    tracing::info!("batchbridge-operator stopped");
    ExitCode::SUCCESS
}

async fn fetch_output() -> ExitCode {
    let credentials = std::path::Path::new("/var/run/batchbridge/credentials");
    let vars = |name: &str| std::env::var(name).ok();
    match output::fetch_output_to(&vars, credentials, &mut std::io::stdout().lock()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            tracing::error!(error = %err, "fetch-output failed");
            ExitCode::FAILURE
        }
    }
}

/// The kernel's host name (a pod's name), for a replica's identity without `POD_NAME`.
fn hostname() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|name| name.into_string().ok())
        .unwrap_or_else(|| format!("batchbridge-operator-{}", std::process::id()))
}
