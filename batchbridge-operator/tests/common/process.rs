//! The operator binary as a process of its own, for tests that kill it like a crashed pod.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::process::{Child, Command};

use super::Cluster;
use super::operator::{http_get, metric};

/// Writes `dir/kubeconfig`: the operator's ServiceAccount token for `bed`
/// ([`Cluster::operator_kubeconfig`]).
pub(crate) async fn write_operator_kubeconfig(bed: &Cluster, dir: &Path) {
    let kubeconfig = serde_saphyr::to_string(&bed.operator_kubeconfig().await).unwrap();
    std::fs::write(dir.join("kubeconfig"), kubeconfig).unwrap();
}

/// The `batchbridge-operator` binary running for a test namespace, as a process of its own
/// (so it can be killed like a crashed pod), with its endpoints on a free port.
///
/// It leads a process group of its own, which the OpenSSH masters it starts join: what is
/// left in the group after the operator was SIGKILLed is an orphan ([`Self::left_behind`]).
/// Its temporary files (the masters' private directories) go under the test's directory.
pub(crate) struct OperatorProcess {
    pub(crate) name: &'static str,
    pub(crate) address: SocketAddr,
    pub(crate) child: Child,
    pub(crate) log: PathBuf,
    /// Its process group, which is its pid.
    group: String,
}

impl OperatorProcess {
    /// Starts replica `name`, authenticating with `dir/kubeconfig` (see
    /// [`write_operator_kubeconfig`]), electing a leader on Lease `lease` when given; its log
    /// goes to `dir/NAME.log`.
    pub(crate) fn start(
        name: &'static str,
        bed: &Cluster,
        dir: &Path,
        lease: Option<&str>,
    ) -> Self {
        Self::start_with(name, bed, dir, lease, &[])
    }

    /// [`Self::start`] with the settings `env` first (a Deployment's, say); the test's own
    /// (API server, namespace, port, directories) override them.
    pub(crate) fn start_with(
        name: &'static str,
        bed: &Cluster,
        dir: &Path,
        lease: Option<&str>,
        env: &[(String, String)],
    ) -> Self {
        // A free port: bound, then released for the operator to bind.
        let address = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let log = dir.join(format!("{name}.log"));
        let tmp = dir.join(format!("{name}.tmp"));
        std::fs::create_dir_all(&tmp).unwrap();
        let mut command = Command::new(env!("CARGO_BIN_EXE_batchbridge-operator"));
        command.envs(env.iter().map(|(k, v)| (k, v)));
        if let Some(lease) = lease {
            command
                .env("LEASE_NAMESPACE", &bed.namespace)
                .env("LEASE_NAME", lease);
        }
        let child = command
            .arg("run")
            .env("KUBECONFIG", dir.join("kubeconfig"))
            .env("WATCH_NAMESPACE", &bed.namespace)
            .env("POD_NAME", name)
            .env("METRICS_ADDR", address.to_string())
            .env("LOCAL_STATE_DIR", dir.join(name))
            .env("RUST_LOG", "info")
            .env("TMPDIR", &tmp)
            .env("XDG_RUNTIME_DIR", &tmp)
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let group = format!("-{}", child.id().unwrap());
        Self {
            name,
            address,
            child,
            log,
            group,
        }
    }

    /// What `/metrics` shows; empty when the process does not answer.
    pub(crate) async fn metrics(&self) -> String {
        http_get(self.address, "/metrics")
            .await
            .map(|(_, body)| body)
            .unwrap_or_default()
    }

    /// Whether it reports holding the leader Lease.
    pub(crate) async fn leads(&self) -> bool {
        metric(&self.metrics().await, "batchbridge_leader") == Some(1.0)
    }

    /// `batchbridge_submits_total` for the BatchCluster `slurm` of `namespace`.
    pub(crate) async fn submits(&self, namespace: &str) -> f64 {
        let series =
            format!(r#"batchbridge_submits_total{{namespace="{namespace}",cluster="slurm"}}"#);
        metric(&self.metrics().await, &series).unwrap_or(0.0)
    }

    /// Waits until `check` holds for this replica; fails with its log otherwise.
    pub(crate) async fn wait_until(
        &self,
        what: &str,
        patience: Duration,
        check: impl AsyncFn(&Self) -> bool,
    ) {
        let deadline = Instant::now() + patience;
        while !check(self).await {
            assert!(
                Instant::now() < deadline,
                "replica {}: timed out waiting until {what}; its log:\n{}",
                self.name,
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Sends `signal` (`-TERM`…) to the operator process alone, as Kubernetes stops a pod.
    pub(crate) fn signal(&self, signal: &str) {
        let pid = self.child.id().unwrap().to_string();
        let status = std::process::Command::new("kill")
            .args([signal, &pid])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// SIGKILLs the operator process alone, as `kill -9` or the OOM killer does outside a
    /// container: the OpenSSH masters it started must die with it by themselves.
    pub(crate) fn crash(&self) {
        self.signal("-KILL");
    }

    /// The processes left in its process group (pids and command lines): once the operator
    /// has exited, every one of them is an orphan it left behind.
    pub(crate) fn left_behind(&self) -> Vec<(u32, String)> {
        let group: u32 = self.group[1..].parse().unwrap();
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
            .filter_map(|pid| {
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
                // `PID (COMM) STATE PPID PGRP ...`; COMM may hold spaces and parentheses.
                let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
                // A zombie has ended already; it only waits to be reaped.
                if *fields.first()? == "Z" {
                    return None;
                }
                let pgrp: u32 = fields.get(2)?.parse().ok()?;
                let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
                (pgrp == group).then(|| (pid, String::from_utf8_lossy(&cmdline).replace('\0', " ")))
            })
            .collect()
    }

    /// Waits for the process to end.
    pub(crate) async fn exited(mut self) -> std::process::ExitStatus {
        tokio::time::timeout(Duration::from_secs(20), self.child.wait())
            .await
            .expect("the replica exits")
            .unwrap()
    }
}

impl Drop for OperatorProcess {
    /// No operator or OpenSSH master outlives its test, even one that failed. (A group's id
    /// comes back only once all its processes are gone and the pids have come round.)
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill")
            .args(["-KILL", "--", &self.group])
            .stderr(Stdio::null())
            .status();
    }
}
