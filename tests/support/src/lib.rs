//! What tests need to reach the test bed that `tests/testbed/up.sh` starts: the facts each
//! component writes to `$BATCHBRIDGE_TESTBED_DIR/NAME/facts.json` (default
//! `/var/lib/batchbridge-testbed`): SSH logins (the two SLURM clusters, HTCondor, PBS), `at`,
//! the Kubernetes API server, the helm client.
//! A missing test bed fails the test with the command that starts it; it never skips.

// Test support panics on purpose: a test bed that is not there is a failed test.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::time::Duration;

use batchbridge_core::conformance;
use batchbridge_core::estimate::{EstimatedStart, StartEstimate};
use batchbridge_core::shell::{Command, HostKeys, Shell, SshAuth, SshConfig, SshShell};
use batchbridge_core::{BatchBackend, JobId, JobSpec, JobStatus};

mod bastion;
mod capped;
mod counting;
pub mod dependencies;
pub mod events;
mod kdc;
pub mod staging;

pub use bastion::{BastionHop, bastion_hops};
pub use batchbridge_core::conformance::scripted::{Programs, reply, scripted_shell};
pub use batchbridge_core::shell::MockShell;
pub use capped::{DrainReport, Submit, SubmitCap, drain, htcondor_capped_login, pbs_submit_cap};
pub use counting::CountingShell;
pub use kdc::{KdcFacts, kdc_facts};

/// The SSH facts of the test bed's sshd.
#[derive(Debug, Clone)]
pub struct SshFacts {
    /// Address of the sshd.
    pub host: String,
    /// Its port.
    pub port: u16,
    /// The regular user tests log in as.
    pub user: String,
    /// That user's private key.
    pub private_key: PathBuf,
    /// That user's password.
    pub password: String,
    /// known_hosts holding the sshd's real host key.
    pub known_hosts: PathBuf,
    /// known_hosts holding a different key for the same host.
    pub wrong_known_hosts: PathBuf,
}

/// The test bed's directory.
pub fn testbed_dir() -> PathBuf {
    std::env::var_os("BATCHBRIDGE_TESTBED_DIR").map_or_else(
        || PathBuf::from("/var/lib/batchbridge-testbed"),
        PathBuf::from,
    )
}

/// A component's facts file under the test bed directory, panicking with the command to run
/// when it is missing.
struct Facts(serde_json::Value);

impl Facts {
    fn read(relative: &str) -> Self {
        let path = testbed_dir().join(relative);
        let text = std::fs::read_to_string(&path).unwrap_or_else(|err| {
            panic!(
                "{}: {err}; start the test bed with tests/testbed/up.sh",
                path.display()
            )
        });
        Self(serde_json::from_str(&text).unwrap())
    }

    fn field(&self, name: &str) -> String {
        self.0[name]
            .as_str()
            .unwrap_or_else(|| panic!("facts.json lacks {name}"))
            .to_owned()
    }

    fn port(&self) -> u16 {
        u16::try_from(self.0["port"].as_u64().unwrap()).unwrap()
    }
}

/// Reads `ssh/facts.json`.
pub fn ssh_facts() -> SshFacts {
    let facts = Facts::read("ssh/facts.json");
    SshFacts {
        host: facts.field("host"),
        port: facts.port(),
        user: facts.field("user"),
        private_key: facts.field("private_key").into(),
        password: std::fs::read_to_string(facts.field("password_file")).unwrap(),
        known_hosts: facts.field("known_hosts").into(),
        wrong_known_hosts: facts.field("wrong_known_hosts").into(),
    }
}

/// A login to one of the test bed's sshd servers, as the operator's tests put it into a
/// BatchCluster and its Secret.
#[derive(Debug, Clone)]
pub struct Login {
    /// Host to connect to.
    pub host: String,
    /// Port of the sshd.
    pub port: u16,
    /// The regular user.
    pub user: String,
    /// The client's private key.
    pub private_key: PathBuf,
    /// known_hosts lines for the server.
    pub known_hosts: PathBuf,
}

impl Login {
    /// A shell logged in with the client key, trusting the real host key, failing fast.
    pub fn shell(&self) -> SshShell {
        let auth = SshAuth::KeyFile(self.private_key.clone());
        let host_keys = HostKeys::File(self.known_hosts.clone());
        SshShell::new(fail_fast(
            &self.host, self.port, &self.user, auth, host_keys,
        ))
        .unwrap()
    }
}

/// The login to the SLURM test bed (`ssh/facts.json`), the second SLURM cluster
/// (`slurm2/facts.json`), the HTCondor pool (`htcondor/facts.json`) or the PBS server
/// (`pbs/facts.json`).
pub fn login(component: &str) -> Login {
    let facts = Facts::read(&format!("{component}/facts.json"));
    Login {
        host: facts.field("host"),
        port: facts.port(),
        user: facts.field("user"),
        private_key: facts.field("private_key").into(),
        known_hosts: facts.field("known_hosts").into(),
    }
}

/// One of the test bed's two SLURM clusters. Tests of the SLURM backend run against both
/// (see `batchbridge-slurm/README.md`'s compatibility matrix).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlurmCluster {
    /// SLURM 22.05 from the host's packages (`tests/testbed/slurm.sh`), reached through the
    /// test bed's sshd (`ssh/facts.json`).
    Slurm2205,
    /// SLURM 24.11 from Debian trixie in its own root filesystem with its own sshd
    /// (`tests/testbed/slurm2.sh`, `slurm2/facts.json`).
    Slurm2411,
}

impl SlurmCluster {
    /// The test bed script that runs this cluster, for `testbed_script` and `RunOnDrop`.
    pub fn script(self) -> &'static str {
        match self {
            Self::Slurm2205 => "slurm.sh",
            Self::Slurm2411 => "slurm2.sh",
        }
    }

    /// The cluster's facts (`slurm/facts.json` or `slurm2/facts.json`).
    fn facts(self) -> Facts {
        match self {
            Self::Slurm2205 => Facts::read("slurm/facts.json"),
            Self::Slurm2411 => Facts::read("slurm2/facts.json"),
        }
    }

    /// The login to the cluster as the regular user `batch`.
    pub fn login(self) -> Login {
        match self {
            Self::Slurm2205 => login("ssh"),
            Self::Slurm2411 => login("slurm2"),
        }
    }

    /// A shell on the cluster's login node as `batch`, with the test bed's client key.
    pub fn shell(self) -> SshShell {
        self.login().shell()
    }

    /// The CPUs the cluster's one node declares.
    pub fn cpus(self) -> u32 {
        u32::try_from(self.facts().0["cpus"].as_u64().unwrap()).unwrap()
    }

    /// `PROGRAM` as root on the cluster (tests run as root, as the test bed needs): on the
    /// host for 22.05, inside the root filesystem for 24.11.
    pub fn as_root(self, program: &str) -> std::process::Command {
        match self {
            Self::Slurm2205 => std::process::Command::new(program),
            Self::Slurm2411 => {
                let mut command = std::process::Command::new("chroot");
                command.arg(self.facts().field("root")).arg(program);
                command
            }
        }
    }
}

/// The Kubernetes API server of the test bed (`tests/testbed/kube.sh`).
#[derive(Debug, Clone)]
pub struct KubeFacts {
    /// The API server's URL.
    pub server: String,
    /// A kubeconfig that authenticates as a cluster admin.
    pub kubeconfig: PathBuf,
    /// A kubectl of the API server's version.
    pub kubectl: PathBuf,
}

/// Reads `kube/facts.json`.
pub fn kube_facts() -> KubeFacts {
    let facts = Facts::read("kube/facts.json");
    KubeFacts {
        server: facts.field("server"),
        kubeconfig: facts.field("kubeconfig").into(),
        kubectl: facts.field("kubectl").into(),
    }
}

/// The S3-compatible object store of the test bed (`tests/testbed/seaweedfs.sh`): SeaweedFS
/// on loopback, path-style buckets, one key allowed everything.
#[derive(Debug, Clone)]
pub struct SeaweedFsFacts {
    /// The S3 endpoint, such as `http://127.0.0.1:18333`.
    pub endpoint: String,
    /// The region requests are signed for.
    pub region: String,
    /// The bucket tests share, each under a key prefix of its own.
    pub bucket: String,
    /// The test key's id.
    pub access_key: String,
    /// The test key's secret.
    pub secret_key: String,
}

/// Reads `seaweedfs/facts.json`.
pub fn seaweedfs_facts() -> SeaweedFsFacts {
    let facts = Facts::read("seaweedfs/facts.json");
    SeaweedFsFacts {
        endpoint: facts.field("endpoint"),
        region: facts.field("region"),
        bucket: facts.field("bucket"),
        access_key: facts.field("access_key"),
        secret_key: facts.field("secret_key"),
    }
}

/// Debian's `at` on this machine (`tests/testbed/at.sh`), used through the sshd's login.
#[derive(Debug, Clone)]
pub struct AtFacts {
    /// What `at -V` says, e.g. `3.2.5`.
    pub version: String,
    /// The user allowed to use at (the sshd's regular user).
    pub user: String,
}

/// Reads `at/facts.json`.
pub fn at_facts() -> AtFacts {
    let facts = Facts::read("at/facts.json");
    AtFacts {
        version: facts.field("version"),
        user: facts.field("user"),
    }
}

/// The helm client of the test bed (`tests/testbed/helm.sh`), for the tests of the
/// operator's chart.
#[derive(Debug, Clone)]
pub struct HelmFacts {
    /// The helm binary.
    pub helm: PathBuf,
    /// The version it reports, such as `v3.22.0`.
    pub version: String,
}

/// Reads `helm/facts.json`.
pub fn helm_facts() -> HelmFacts {
    let facts = Facts::read("helm/facts.json");
    HelmFacts {
        helm: facts.field("helm").into(),
        version: facts.field("version"),
    }
}

/// The certificate login of the test bed (`tests/testbed/ca.sh`): an sshd that accepts only
/// certificates signed by the test user CA.
#[derive(Debug, Clone)]
pub struct CaFacts {
    /// Address of that sshd.
    pub host: String,
    /// Its port.
    pub port: u16,
    /// The user the certificates name.
    pub user: String,
    /// The user CA's private key, to issue certificates with.
    pub ca_key: PathBuf,
    /// The user's private key (no certificate of its own makes it log in).
    pub user_key: PathBuf,
    /// Its certificate valid for a day, beside it (`USER_KEY-cert.pub`).
    pub certificate: PathBuf,
    /// Its certificate that expired in 2020.
    pub expired_certificate: PathBuf,
    /// known_hosts holding the sshd's host key.
    pub known_hosts: PathBuf,
}

/// Reads `ca/facts.json`.
pub fn ca_facts() -> CaFacts {
    let facts = Facts::read("ca/facts.json");
    CaFacts {
        host: facts.field("host"),
        port: facts.port(),
        user: facts.field("user"),
        ca_key: facts.field("ca_key").into(),
        user_key: facts.field("user_key").into(),
        certificate: facts.field("certificate").into(),
        expired_certificate: facts.field("expired_certificate").into(),
        known_hosts: facts.field("known_hosts").into(),
    }
}

impl CaFacts {
    /// A new certificate of the user key, valid from now for `validity` in `ssh-keygen -V`
    /// terms (`+2m`, `+1d`), as its one line of text.
    pub fn issue(&self, validity: &str) -> String {
        let dir = tempfile::tempdir().unwrap();
        let public = dir.path().join("key.pub");
        std::fs::copy(self.user_key.with_extension("pub"), &public).unwrap();
        let status = std::process::Command::new("ssh-keygen")
            .args(["-q", "-s"])
            .arg(&self.ca_key)
            .args([
                "-I",
                &format!("test-{validity}"),
                "-n",
                &self.user,
                "-V",
                validity,
            ])
            .arg(&public)
            .status()
            .unwrap();
        assert!(status.success(), "ssh-keygen -s: {status}");
        std::fs::read_to_string(dir.path().join("key-cert.pub")).unwrap()
    }

    /// A config for the certificate login with the given credentials, failing fast.
    pub fn config(&self, auth: SshAuth) -> SshConfig {
        let host_keys = HostKeys::File(self.known_hosts.clone());
        fail_fast(&self.host, self.port, &self.user, auth, host_keys)
    }
}

/// A config for `user@host:port` with `auth`, trusting `host_keys`, failing fast (one
/// connect attempt, 5 s), as tests want.
fn fail_fast(host: &str, port: u16, user: &str, auth: SshAuth, host_keys: HostKeys) -> SshConfig {
    let mut config = SshConfig::new(host, user, auth, host_keys).port(port);
    config.connect_attempts = 1;
    config.connect_timeout = Duration::from_secs(5);
    config
}

/// A shell on the HTCondor pool (`tests/testbed/htcondor.sh`, facts in
/// `htcondor/facts.json`), logged in with the test bed's client key.
pub fn htcondor_shell() -> SshShell {
    component_shell("htcondor")
}

/// A shell on the PBS server's host (`tests/testbed/pbs.sh`, facts in `pbs/facts.json`): the
/// sshd inside the network namespace that holds OpenPBS, logged in with the test bed's
/// client key.
pub fn pbs_shell() -> SshShell {
    component_shell("pbs")
}

/// A shell on the sshd of test bed component `component`, from its facts file.
fn component_shell(component: &str) -> SshShell {
    login(component).shell()
}

impl SshFacts {
    /// A config for the test bed's sshd with the given credentials and host keys, failing
    /// fast (one connect attempt, 5 s).
    pub fn config(&self, auth: SshAuth, host_keys: HostKeys) -> SshConfig {
        fail_fast(&self.host, self.port, &self.user, auth, host_keys)
    }

    /// A shell logged in with the user's key, trusting the real host key.
    pub fn key_shell(&self) -> SshShell {
        SshShell::new(self.config(
            SshAuth::KeyFile(self.private_key.clone()),
            HostKeys::File(self.known_hosts.clone()),
        ))
        .unwrap()
    }
}

/// The user `shell` runs commands as: what `id -un` prints there.
pub async fn whoami(shell: &impl Shell) -> batchbridge_core::Result<String> {
    let out = shell
        .run(&Command::new("id").arg("-un"))
        .await?
        .check("id")?;
    Ok(out.stdout_text().trim().to_owned())
}

/// Runs a test bed script (`tests/testbed/NAME`) with `args`, as CI does, panicking with its
/// output when it fails. Used by tests that stop and start parts of the test bed.
pub fn testbed_script(name: &str, args: &[&str]) {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../testbed")
        .join(name);
    let output = std::process::Command::new("bash")
        .arg(&script)
        .args(args)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{} {args:?} failed: {}{}",
        script.display(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Runs a test bed script when dropped: a test that takes part of the test bed away keeps
/// one of these, so the part comes back whether the test passes or panics.
///
/// ```no_run
/// use batchbridge_testbed::{RunOnDrop, testbed_script};
///
/// testbed_script("slurm.sh", &["stop-slurmdbd"]);
/// let _restart = RunOnDrop::script("slurm.sh", &["start-slurmdbd"]);
/// ```
#[derive(Debug)]
#[must_use = "the script runs when this is dropped"]
pub struct RunOnDrop {
    name: &'static str,
    args: &'static [&'static str],
}

impl RunOnDrop {
    /// Runs `tests/testbed/NAME ARGS...` when dropped.
    pub fn script(name: &'static str, args: &'static [&'static str]) -> Self {
        Self { name, args }
    }
}

impl Drop for RunOnDrop {
    fn drop(&mut self) {
        testbed_script(self.name, self.args);
    }
}

/// Runs `command` through `shell` and returns its stdout, panicking unless it exits 0: for
/// tests that act on a cluster outside the backend under test.
pub async fn stdout_of<S: Shell + ?Sized>(shell: &S, command: Command) -> String {
    let what = command.get_program().to_owned();
    let output = shell.run(&command).await.unwrap();
    output.check(&what).unwrap().stdout_text()
}

/// A spec named `name` running `script`, with a key no other run used
/// ([`unique_key`](batchbridge_core::conformance::unique_key)): for the backends' real
/// tests.
pub fn unique_spec(name: &str, script: &str) -> JobSpec {
    JobSpec::new(conformance::unique_key(name), name, script)
}

/// Polls `backend` every half second until `done` holds for job `id` and returns that
/// status; panics, saying it waited for `what`, after `timeout`.
pub async fn wait_until<B: BatchBackend + ?Sized>(
    backend: &B,
    id: &JobId,
    timeout: Duration,
    what: &str,
    done: impl Fn(&JobStatus) -> bool,
) -> JobStatus {
    let mut config = conformance::Config::default();
    config.timeout = timeout;
    config.poll_interval = Duration::from_millis(500);
    conformance::wait_for(backend, id, &config, what, done)
        .await
        .unwrap()
}

/// `backend`'s estimate for `spec` once it says `start`, asked every 2 s (other tests'
/// jobs on the shared test bed come and go, and a scheduler learns of a claimed slot within
/// its own update interval); fails after 5 minutes.
pub async fn estimate_once(
    backend: &dyn BatchBackend,
    spec: &JobSpec,
    start: EstimatedStart,
) -> StartEstimate {
    let deadline = std::time::Instant::now() + Duration::from_secs(300);
    loop {
        let estimate = backend.estimate_start(spec).await.unwrap();
        if estimate.start == start {
            return estimate;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never {start:?}; last {estimate:?}"
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}
