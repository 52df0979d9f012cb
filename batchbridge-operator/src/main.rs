//! The operator binary.
//!
//! `batchbridge-operator [run]` runs the controllers; `batchbridge-operator --help` lists its
//! settings, each a flag and an environment variable of the same meaning (the chart and the
//! kustomize base set the environment variables). `XDG_RUNTIME_DIR` is read by the SSH
//! connections for their private directories (the system's temporary directory when unset).
//!
//! `batchbridge-operator fetch-output` is the log pods' mode: it prints one job's output,
//! reading the cluster and job from the environment and the credential from
//! `/var/run/batchbridge/credentials`. The admission policy in `deploy/rbac` allows log pods
//! whose arguments are exactly `fetch-output`, so that spelling is an interface.

use std::path::PathBuf;
use std::process::ExitCode;

use batchbridge_operator::cluster::targets::{SshTargets, TargetsError};
use batchbridge_operator::leader::LeaderElection;
use batchbridge_operator::staging::{AllowedStores, BadEndpoint};
use batchbridge_operator::{Operator, output};
use clap::{Parser, Subcommand, ValueEnum};
use tracing_subscriber::EnvFilter;

// jemalloc gives freed memory back where glibc's malloc kept it: a 10,000-job burst left
// the operator at 94 MiB instead of 138 (docs/PERFORMANCE.md).
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

// jemalloc's settings (its `malloc_conf`; `_RJEM_MALLOC_CONF` in the environment still
// overrides them): one arena instead of four per CPU, since the operator's memory is one
// shared cache and the tasks around it, not per-thread work; and freed pages go back to
// the system within a second, by a background thread, instead of after ten. At 10,000
// BatchJobs the peak RSS fell from 120.4 to 101.5-107.3 MiB (docs/PERFORMANCE.md).
// Unsafe only as any exported symbol is (another library could define it too); this one is
// jemalloc's documented way to be configured at build time, read once when it starts.
#[cfg(feature = "jemalloc")]
#[allow(unsafe_code)]
#[unsafe(export_name = "_rjem_malloc_conf")]
static MALLOC_CONF: &[u8] =
    b"narenas:1,background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0\0";

/// The batchbridge Kubernetes operator: runs BatchJobs on the batch clusters that
/// BatchClusters describe.
#[derive(Debug, Parser)]
#[command(
    version,
    after_help = "XDG_RUNTIME_DIR: where the SSH connections keep their private directories \
                  (the system's temporary directory when unset)."
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    settings: Settings,
}

/// What the binary does; `run` when none is named.
#[derive(Debug, PartialEq, Eq, Subcommand)]
enum Command {
    /// Run the controllers (the default).
    Run,
    /// Print one job's output (the log pods' mode; reads the job from the environment).
    FetchOutput,
}

/// The operator's settings. Blank environment variables count as unset, as they did before
/// the settings went through clap (the chart renders unset values as "").
#[derive(Debug, clap::Args)]
struct Settings {
    /// Watch only this namespace's BatchJobs and BatchClusters (every namespace when unset).
    #[arg(long, env = "WATCH_NAMESPACE", global = true)]
    watch_namespace: Option<String>,
    /// The image the log pods run (this operator's own image).
    #[arg(long, env = "OPERATOR_IMAGE", global = true)]
    operator_image: Option<String>,
    /// Enable the `local` scheduler, whose jobs run with the operator's rights (see SECURITY.md).
    #[arg(
        long,
        env = "ENABLE_LOCAL_SCHEDULER",
        global = true,
        value_name = "true|false",
        action = clap::ArgAction::Set,
        default_value = "false",
        value_parser = parse_switch
    )]
    enable_local_scheduler: bool,
    /// Where `local` clusters keep their jobs [default: <temporary directory>/batchbridge-operator].
    #[arg(long, env = "LOCAL_STATE_DIR", global = true)]
    local_state_dir: Option<PathBuf>,
    /// The login nodes BatchClusters may connect to, comma-separated HOST[:PORTS] (any when blank).
    #[arg(
        long,
        env = "ALLOWED_SSH_TARGETS",
        global = true,
        default_value = "",
        hide_default_value = true,
        value_parser = parse_targets
    )]
    allowed_ssh_targets: SshTargets,
    /// The object store endpoints BatchJobs' inputs and outputs may name, comma-separated
    /// http(s)://HOST[:PORT] (none when blank).
    #[arg(
        long,
        env = "ALLOWED_OBJECT_STORES",
        global = true,
        default_value = "",
        hide_default_value = true,
        value_parser = parse_stores
    )]
    allowed_object_stores: AllowedStores,
    /// Where /metrics, /healthz and /readyz are served.
    #[arg(
        long,
        env = "METRICS_ADDR",
        global = true,
        default_value = "0.0.0.0:8080"
    )]
    metrics_addr: String,
    /// The log filter (tracing's EnvFilter syntax, e.g. `batchbridge_operator=debug,info`).
    #[arg(long, env = "RUST_LOG", global = true, default_value = "info")]
    log_filter: String,
    /// How log lines are written.
    #[arg(long, env = "LOG_FORMAT", global = true, default_value = "text")]
    log_format: LogFormat,
    /// Turn on leader election on a Lease in this namespace (the operator's own).
    #[arg(long, env = "LEASE_NAMESPACE", global = true)]
    lease_namespace: Option<String>,
    /// The Lease's name.
    #[arg(
        long,
        env = "LEASE_NAME",
        global = true,
        default_value = "batchbridge-operator"
    )]
    lease_name: String,
    /// This replica's identity in the election [default: the host name].
    #[arg(long, env = "POD_NAME", global = true)]
    pod_name: Option<String>,
    /// How long before a BatchCluster's SSH certificate expires its CredentialValid
    /// condition turns False (CredentialExpiring), e.g. `24h`, `90s`.
    #[arg(
        long,
        env = "CREDENTIAL_EXPIRY_WARNING",
        global = true,
        default_value = "24h",
        value_parser = humantime::parse_duration
    )]
    credential_expiry_warning: std::time::Duration,
}

/// The log lines' format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}

/// `true` or `false`; blank is `false`, as an unset variable.
fn parse_switch(value: &str) -> Result<bool, String> {
    match value {
        "" | "false" => Ok(false),
        "true" => Ok(true),
        other => Err(format!("{other:?}: use true or false")),
    }
}

fn parse_targets(value: &str) -> Result<SshTargets, TargetsError> {
    value.parse()
}

fn parse_stores(value: &str) -> Result<AllowedStores, BadEndpoint> {
    value.parse()
}

/// A blank value is an unset one.
fn non_blank(value: Option<String>) -> Option<String> {
    value.filter(|value| !value.is_empty())
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let settings = cli.settings;
    let filter =
        EnvFilter::try_new(&settings.log_filter).unwrap_or_else(|_| EnvFilter::new("info"));
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match settings.log_format {
        LogFormat::Json => logs.json().init(),
        LogFormat::Text => logs.init(),
    }
    match cli.command.unwrap_or(Command::Run) {
        Command::Run => run(settings).await,
        Command::FetchOutput => fetch_output().await,
    }
}

async fn run(settings: Settings) -> ExitCode {
    let client = match kube::Client::try_default().await {
        Ok(client) => client,
        Err(err) => {
            tracing::error!(error = %err, "cannot reach the Kubernetes API");
            return ExitCode::FAILURE;
        }
    };
    let mut operator =
        Operator::new(client).credential_expiry_warning(settings.credential_expiry_warning);
    if let Some(namespace) = non_blank(settings.watch_namespace) {
        operator = operator.namespace(namespace);
    }
    if let Some(image) = settings.operator_image {
        operator = operator.image(image);
    }
    if settings.enable_local_scheduler {
        let dir = settings
            .local_state_dir
            .filter(|dir| !dir.as_os_str().is_empty())
            .unwrap_or_else(|| std::env::temp_dir().join("batchbridge-operator"));
        tracing::warn!(
            state_dir = %dir.display(),
            "the local scheduler is enabled: local jobs run with the operator's rights"
        );
        operator = operator.local_scheduler(dir);
    }
    let targets = settings.allowed_ssh_targets;
    if targets.allows_any() {
        tracing::warn!(
            "ALLOWED_SSH_TARGETS is unset: BatchClusters may make the operator connect to any \
             host and port (SECURITY.md recommends naming the sites' login nodes)"
        );
    } else {
        tracing::info!(%targets, "BatchClusters may connect only to the allowed SSH targets");
        operator = operator.ssh_targets(targets);
    }
    let stores = settings.allowed_object_stores;
    if stores.is_empty() {
        tracing::info!(
            "ALLOWED_OBJECT_STORES is unset: BatchJobs may name no object store for their \
             inputs and outputs"
        );
    } else {
        tracing::info!(%stores, "BatchJobs may name only the allowed object stores");
        operator = operator.object_stores(stores);
    }
    let address = settings.metrics_addr;
    match tokio::net::TcpListener::bind(&address).await {
        Ok(listener) => operator = operator.endpoints(listener),
        Err(err) => {
            tracing::error!(%address, error = %err, "cannot serve the metrics and health endpoints");
            return ExitCode::FAILURE;
        }
    }
    if let Some(namespace) = non_blank(settings.lease_namespace) {
        let identity = settings.pod_name.unwrap_or_else(hostname);
        let election = LeaderElection::new(namespace, identity).lease_name(settings.lease_name);
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

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    /// Each setting's flag, the environment variable the chart and kustomize set, a value,
    /// and what the parsed settings hold for it.
    #[test]
    fn every_setting_parses_from_its_flag_and_reads_its_variable() {
        type Check = fn(&Settings) -> bool;
        let table: [(&str, &str, &str, Check); 12] = [
            ("--watch-namespace", "WATCH_NAMESPACE", "team-a", |s| {
                s.watch_namespace.as_deref() == Some("team-a")
            }),
            ("--operator-image", "OPERATOR_IMAGE", "img:1", |s| {
                s.operator_image.as_deref() == Some("img:1")
            }),
            (
                "--enable-local-scheduler",
                "ENABLE_LOCAL_SCHEDULER",
                "true",
                |s| s.enable_local_scheduler,
            ),
            ("--local-state-dir", "LOCAL_STATE_DIR", "/state", |s| {
                s.local_state_dir.as_deref() == Some(std::path::Path::new("/state"))
            }),
            (
                "--allowed-ssh-targets",
                "ALLOWED_SSH_TARGETS",
                "login.example:22",
                |s| !s.allowed_ssh_targets.allows_any(),
            ),
            (
                "--allowed-object-stores",
                "ALLOWED_OBJECT_STORES",
                "http://10.0.0.5:9000",
                |s| !s.allowed_object_stores.is_empty(),
            ),
            ("--metrics-addr", "METRICS_ADDR", "127.0.0.1:9090", |s| {
                s.metrics_addr == "127.0.0.1:9090"
            }),
            ("--log-filter", "RUST_LOG", "debug", |s| {
                s.log_filter == "debug"
            }),
            ("--log-format", "LOG_FORMAT", "json", |s| {
                s.log_format == LogFormat::Json
            }),
            ("--lease-namespace", "LEASE_NAMESPACE", "ops", |s| {
                s.lease_namespace.as_deref() == Some("ops")
            }),
            ("--lease-name", "LEASE_NAME", "other", |s| {
                s.lease_name == "other"
            }),
            ("--pod-name", "POD_NAME", "replica-0", |s| {
                s.pod_name.as_deref() == Some("replica-0")
            }),
        ];
        let command = Cli::command();
        for (flag, variable, value, holds) in table {
            let id = flag.trim_start_matches("--").replace('-', "_");
            let arg = command
                .get_arguments()
                .find(|arg| arg.get_id() == id.as_str())
                .unwrap_or_else(|| panic!("{flag} is not a setting"));
            assert_eq!(
                arg.get_env(),
                Some(std::ffi::OsStr::new(variable)),
                "{flag}"
            );
            // Before and after the subcommand: the log pods' and the Deployment's spelling.
            for args in [
                vec!["batchbridge-operator", flag, value],
                vec!["batchbridge-operator", "run", flag, value],
            ] {
                let cli =
                    Cli::try_parse_from(&args).unwrap_or_else(|err| panic!("{args:?}: {err}"));
                assert!(holds(&cli.settings), "{args:?}");
            }
        }
    }

    #[test]
    fn settings_keep_their_defaults_and_refuse_bad_values() {
        let command = Cli::command();
        let default = |id: &str| {
            let arg = command.get_arguments().find(|arg| arg.get_id() == id);
            arg.map(|arg| arg.get_default_values().to_vec())
        };
        assert_eq!(default("metrics_addr"), Some(vec!["0.0.0.0:8080".into()]));
        assert_eq!(default("log_filter"), Some(vec!["info".into()]));
        assert_eq!(default("log_format"), Some(vec!["text".into()]));
        assert_eq!(
            default("lease_name"),
            Some(vec!["batchbridge-operator".into()])
        );
        assert_eq!(
            default("enable_local_scheduler"),
            Some(vec!["false".into()])
        );
        assert_eq!(parse_switch(""), Ok(false));
        assert!(parse_switch("yes").is_err());
        for bad in [
            ["--enable-local-scheduler", "yes"],
            ["--allowed-ssh-targets", "host:notaport"],
            ["--log-format", "xml"],
        ] {
            let args = ["batchbridge-operator", bad[0], bad[1]];
            assert!(Cli::try_parse_from(args).is_err(), "{args:?}");
        }
    }

    #[test]
    fn modes_keep_their_names() {
        let mode = |args: &[&str]| Cli::try_parse_from(args).map(|cli| cli.command).ok();
        assert_eq!(mode(&["batchbridge-operator"]), Some(None));
        assert_eq!(
            mode(&["batchbridge-operator", "run"]),
            Some(Some(Command::Run))
        );
        // deploy/rbac/log-pod-policy.yaml admits log pods whose args are exactly this.
        assert_eq!(
            mode(&["batchbridge-operator", "fetch-output"]),
            Some(Some(Command::FetchOutput))
        );
        assert_eq!(mode(&["batchbridge-operator", "unknown"]), None);
    }

    /// `--help` names every environment variable the chart and the kustomize base set.
    #[test]
    fn help_names_every_variable_the_deployments_set() {
        let help = Cli::command().render_long_help().to_string();
        for variable in [
            "WATCH_NAMESPACE",
            "OPERATOR_IMAGE",
            "ENABLE_LOCAL_SCHEDULER",
            "LOCAL_STATE_DIR",
            "ALLOWED_SSH_TARGETS",
            "ALLOWED_OBJECT_STORES",
            "METRICS_ADDR",
            "RUST_LOG",
            "LOG_FORMAT",
            "LEASE_NAMESPACE",
            "LEASE_NAME",
            "POD_NAME",
            "XDG_RUNTIME_DIR",
        ] {
            assert!(
                help.contains(variable),
                "--help does not name {variable}:\n{help}"
            );
        }
        Cli::command().debug_assert();
    }
}
