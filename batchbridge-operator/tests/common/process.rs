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
/// It leads a process group of its own ([`Self::group`]), which the OpenSSH masters it
/// starts join.
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
        let series = format!(
            r#"batchbridge_submits_total{{batchjob_namespace="{namespace}",batchcluster="slurm"}}"#
        );
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

    /// Its process group, which the OpenSSH masters it starts join: once the operator has
    /// exited, whatever is left in it ([`Proc::in_group`]) is an orphan it left behind.
    pub(crate) fn group(&self) -> u32 {
        self.group[1..].parse().unwrap()
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

/// A process, as `/proc` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Proc {
    pub(crate) pid: u32,
    pub(crate) parent: u32,
    pub(crate) group: u32,
    /// Ended, waiting to be reaped.
    pub(crate) zombie: bool,
    /// When it started (clock ticks after boot): with the pid, who it is.
    pub(crate) start: u64,
    pub(crate) args: Vec<String>,
}

impl Proc {
    pub(crate) fn read(pid: u32) -> Option<Self> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // `PID (COMM) STATE PPID PGRP ...`, starttime the 22nd field; COMM may hold spaces
        // and parentheses.
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let args = cmdline
            .split(|b| *b == 0)
            .filter(|arg| !arg.is_empty())
            .map(|arg| String::from_utf8_lossy(arg).into_owned())
            .collect();
        Some(Self {
            pid,
            zombie: *fields.first()? == "Z",
            parent: fields.get(1)?.parse().ok()?,
            group: fields.get(2)?.parse().ok()?,
            start: fields.get(19)?.parse().ok()?,
            args,
        })
    }

    /// Every process of this machine.
    pub(crate) fn all() -> Vec<Self> {
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
            .filter_map(Self::read)
            .collect()
    }

    /// The live processes of process group `group` (a zombie has ended already).
    pub(crate) fn in_group(group: u32) -> Vec<Self> {
        Self::all()
            .into_iter()
            .filter(|p| p.group == group && !p.zombie)
            .collect()
    }

    pub(crate) fn is_ssh_master(&self) -> bool {
        self.args
            .first()
            .is_some_and(|program| Path::new(program).file_name() == Some("ssh".as_ref()))
            && self.args.iter().any(|arg| arg == "-M")
    }

    /// Sends `signal` unless the pid now belongs to another process.
    pub(crate) fn kill(&self, signal: &str) {
        if Self::read(self.pid).is_some_and(|now| now.start == self.start) {
            let _ = std::process::Command::new("kill")
                .args([signal, &self.pid.to_string()])
                .status();
        }
    }
}
