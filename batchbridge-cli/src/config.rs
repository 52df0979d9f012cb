//! The clusters: the built-in `local` one and those of the config file.
//!
//! The file is TOML, at `$XDG_CONFIG_HOME/batchbridge/config.toml` (usually
//! `~/.config/batchbridge/config.toml`), or wherever `--config` or `BATCHBRIDGE_CONFIG`
//! point. Unknown fields are refused, so a typo never silently falls back to a default.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use batchbridge_core::shell::{HostKeys, SshAuth, SshConfig, SshShell};
use batchbridge_core::{BatchBackend, LocalBackend};
use batchbridge_htcondor::{HtcondorBackend, HtcondorConfig};
use batchbridge_pbs::{PbsBackend, PbsConfig};
use batchbridge_slurm::{SlurmBackend, SlurmConfig};
use serde::{Deserialize, Serialize};

use crate::exit::{CliError, CliResult};

/// The name of the cluster that needs no config: jobs as processes on this machine.
pub(crate) const LOCAL: &str = "local";

/// The config file as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    /// The cluster used when a command names none; `local` when absent.
    default_cluster: Option<String>,
    #[serde(default)]
    clusters: BTreeMap<String, ClusterConfig>,
}

/// Which scheduler a cluster runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Scheduler {
    Slurm,
    Htcondor,
    Pbs,
    Local,
}

impl Scheduler {
    /// The word the config file names it by.
    pub(crate) fn word(self) -> &'static str {
        match self {
            Self::Slurm => "slurm",
            Self::Htcondor => "htcondor",
            Self::Pbs => "pbs",
            Self::Local => "local",
        }
    }
}

/// One `[clusters.NAME]` table.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ClusterConfig {
    scheduler: Scheduler,
    host: Option<String>,
    port: Option<u16>,
    user: Option<String>,
    key_file: Option<PathBuf>,
    known_hosts: Option<PathBuf>,
    #[serde(default)]
    accept_new_host_keys: bool,
    connect_timeout_secs: Option<u64>,
    work_dir: Option<String>,
    partition: Option<String>,
    account: Option<String>,
}

/// Where a cluster is reached over SSH, for the hints of errors.
#[derive(Debug, Clone)]
pub(crate) struct SshTarget {
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) user: String,
    /// `the key FILE` or `the ssh-agent's keys`.
    pub(crate) credentials: String,
    pub(crate) known_hosts: PathBuf,
}

/// A cluster ready to use.
#[derive(Clone)]
pub(crate) struct Cluster {
    pub(crate) name: String,
    pub(crate) scheduler: Scheduler,
    pub(crate) backend: Arc<dyn BatchBackend>,
    pub(crate) ssh: Option<SshTarget>,
}

impl Cluster {
    /// A library error on this cluster, with what to do about it.
    pub(crate) fn explain(&self, err: batchbridge_core::Error) -> CliError {
        use batchbridge_core::ErrorKind;
        let kind = err.kind();
        let error = CliError::from(err);
        let error = CliError {
            message: format!("{}: {}", self.name, error.message),
            ..error
        };
        let Some(ssh) = &self.ssh else {
            return error;
        };
        let (host, port, user) = (&ssh.host, ssh.port, &ssh.user);
        match kind {
            ErrorKind::HostKeyMismatch => error.with_hint(format!(
                "{host}:{port}'s host key is not in {known}, or differs from the one there. \
                 Compare the key's fingerprint with the one your cluster's admins publish \
                 (ssh-keyscan -p {port} {host} | ssh-keygen -lf -), then add it:\n  \
                 ssh-keyscan -p {port} {host} >> {known}",
                known = ssh.known_hosts.display()
            )),
            ErrorKind::AuthenticationFailed => error.with_hint(format!(
                "{user}@{host}:{port} refused {credentials}: check `user` and `key_file` of \
                 [clusters.{name}], and that the key's public half is in ~/.ssh/authorized_keys \
                 on the cluster (try: ssh -p {port} {user}@{host} true)",
                credentials = ssh.credentials,
                name = self.name
            )),
            ErrorKind::Unreachable | ErrorKind::ConnectionLost => error.with_hint(format!(
                "check `host` and `port` of [clusters.{}] and your network \
                 (try: ssh -p {port} {user}@{host} true)",
                self.name
            )),
            ErrorKind::Timeout => error.with_hint(format!(
                "the scheduler on {host} did not answer in time; it may be overloaded or down"
            )),
            _ => error,
        }
    }

    /// `user@host:port` or `this machine`.
    pub(crate) fn target(&self) -> String {
        self.ssh.as_ref().map_or_else(
            || "this machine".to_owned(),
            |ssh| format!("{}@{}:{}", ssh.user, ssh.host, ssh.port),
        )
    }
}

/// Every cluster known: the config file's and `local`.
pub(crate) struct Clusters {
    default: String,
    configs: BTreeMap<String, ClusterConfig>,
    state_dir: PathBuf,
    home: Option<PathBuf>,
}

impl Clusters {
    /// Reads the config file at `path`; a missing file is an empty config (only `local`)
    /// unless it was named explicitly.
    pub(crate) fn load(path: &Path, explicit: bool, state_dir: &Path) -> CliResult<Self> {
        let file = match std::fs::read_to_string(path) {
            Ok(text) => toml::from_str::<ConfigFile>(&text).map_err(|err| {
                CliError::config(format!("{}: {err}", path.display()))
                    .with_hint("see the config example in `batchbridge --help`")
            })?,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound && !explicit => {
                ConfigFile::default()
            }
            Err(err) => return Err(CliError::config(format!("{}: {err}", path.display()))),
        };
        for name in file.clusters.keys() {
            check_name(name).map_err(|err| err_in(path, err))?;
        }
        let default = file.default_cluster.unwrap_or_else(|| LOCAL.to_owned());
        if default != LOCAL && !file.clusters.contains_key(&default) {
            return Err(err_in(
                path,
                format!("default_cluster {default:?} names no [clusters.{default}] table"),
            ));
        }
        Ok(Self {
            default,
            configs: file.clusters,
            state_dir: state_dir.to_path_buf(),
            home: directories::BaseDirs::new().map(|dirs| dirs.home_dir().to_path_buf()),
        })
    }

    /// The cluster commands use when none is named.
    pub(crate) fn default_name(&self) -> &str {
        &self.default
    }

    /// Every cluster's name, `local` included.
    pub(crate) fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.configs.keys().cloned().collect();
        if !self.configs.contains_key(LOCAL) {
            names.insert(0, LOCAL.to_owned());
        }
        names
    }

    /// Opens cluster `name`: nothing connects until its backend is first used.
    pub(crate) fn open(&self, name: &str) -> CliResult<Cluster> {
        let config = match self.configs.get(name) {
            Some(config) => config.clone(),
            None if name == LOCAL => ClusterConfig::local(),
            None => {
                return Err(CliError::usage(format!(
                    "no cluster named {name:?}; known: {}",
                    self.names().join(", ")
                ))
                .with_hint("add it as a [clusters.NAME] table to the config file"));
            }
        };
        let wrong = |message: String| CliError::config(format!("[clusters.{name}]: {message}"));
        if config.scheduler == Scheduler::Local {
            let backend =
                LocalBackend::new(self.state_dir.join("local")).map_err(CliError::from)?;
            return Ok(Cluster {
                name: name.to_owned(),
                scheduler: Scheduler::Local,
                backend: Arc::new(backend),
                ssh: None,
            });
        }
        let (shell, target) = self.ssh_shell(&config).map_err(wrong)?;
        let shell = Arc::new(shell);
        let backend: Arc<dyn BatchBackend> = match config.scheduler {
            Scheduler::Slurm => {
                let mut slurm = SlurmConfig::default();
                if let Some(dir) = config.work_dir {
                    slurm = slurm.with_work_dir(dir);
                }
                if let Some(partition) = config.partition {
                    slurm = slurm.with_partition(partition);
                }
                if let Some(account) = config.account {
                    slurm = slurm.with_account(account);
                }
                Arc::new(SlurmBackend::new(shell, slurm).map_err(|err| wrong(err.to_string()))?)
            }
            Scheduler::Htcondor => {
                if config.partition.is_some() || config.account.is_some() {
                    return Err(wrong(
                        "HTCondor has no partitions or accounts: remove `partition` and `account`"
                            .into(),
                    ));
                }
                let mut condor = HtcondorConfig::default();
                if let Some(dir) = config.work_dir {
                    condor = condor.with_work_dir(dir);
                }
                Arc::new(HtcondorBackend::new(shell, condor).map_err(|err| wrong(err.to_string()))?)
            }
            Scheduler::Pbs => {
                // PBS calls its partitions queues; the config and `--partition` say partition
                // for every scheduler.
                let mut pbs = PbsConfig::default();
                if let Some(dir) = config.work_dir {
                    pbs = pbs.with_work_dir(dir);
                }
                if let Some(queue) = config.partition {
                    pbs = pbs.with_queue(queue);
                }
                if let Some(account) = config.account {
                    pbs = pbs.with_account(account);
                }
                Arc::new(PbsBackend::new(shell, pbs).map_err(|err| wrong(err.to_string()))?)
            }
            Scheduler::Local => unreachable!("handled above"),
        };
        Ok(Cluster {
            name: name.to_owned(),
            scheduler: config.scheduler,
            backend,
            ssh: Some(target),
        })
    }

    fn ssh_shell(&self, config: &ClusterConfig) -> Result<(SshShell, SshTarget), String> {
        let host = config
            .host
            .clone()
            .ok_or("`host` is missing: the login node to reach over SSH")?;
        check_ssh_word("host", &host)?;
        let user = match &config.user {
            Some(user) => user.clone(),
            None => std::env::var("USER").map_err(|_| "`user` is missing and $USER is not set")?,
        };
        check_ssh_word("user", &user)?;
        let (auth, credentials) = match (&config.key_file, std::env::var_os("SSH_AUTH_SOCK")) {
            (Some(path), _) => {
                let path = self.expand(path);
                let credentials = format!("the key {}", path.display());
                (SshAuth::KeyFile(path), credentials)
            }
            (None, Some(socket)) if !socket.is_empty() => (
                SshAuth::Agent(socket.into()),
                "the ssh-agent's keys ($SSH_AUTH_SOCK)".to_owned(),
            ),
            (None, _) => {
                let path = self.default_key().ok_or(
                    "`key_file` is missing, no ssh-agent runs ($SSH_AUTH_SOCK), and none of \
                     ~/.ssh/id_ed25519, id_ecdsa, id_rsa exists",
                )?;
                let credentials = format!("the key {}", path.display());
                (SshAuth::KeyFile(path), credentials)
            }
        };
        let known_hosts = match &config.known_hosts {
            Some(path) => self.expand(path),
            None => self.expand(Path::new("~/.ssh/known_hosts")),
        };
        let port = config.port.unwrap_or(22);
        let mut ssh =
            SshConfig::new(&host, &user, auth, HostKeys::File(known_hosts.clone())).port(port);
        ssh.accept_new_host_keys = config.accept_new_host_keys;
        if let Some(secs) = config.connect_timeout_secs {
            ssh.connect_timeout = Duration::from_secs(secs);
        }
        // One attempt: a person at a terminal wants the error now, not after retries.
        ssh.connect_attempts = 1;
        let shell = SshShell::new(ssh).map_err(|err| err.to_string())?;
        let target = SshTarget {
            host,
            port,
            user,
            credentials,
            known_hosts,
        };
        Ok((shell, target))
    }

    fn default_key(&self) -> Option<PathBuf> {
        let ssh = self.home.as_ref()?.join(".ssh");
        ["id_ed25519", "id_ecdsa", "id_rsa"]
            .into_iter()
            .map(|name| ssh.join(name))
            .find(|path| path.exists())
    }

    /// `path` with a leading `~/` replaced by the home directory.
    fn expand(&self, path: &Path) -> PathBuf {
        match (path.strip_prefix("~"), &self.home) {
            (Ok(rest), Some(home)) => home.join(rest),
            _ => path.to_path_buf(),
        }
    }
}

impl ClusterConfig {
    fn local() -> Self {
        Self {
            scheduler: Scheduler::Local,
            host: None,
            port: None,
            user: None,
            key_file: None,
            known_hosts: None,
            accept_new_host_keys: false,
            connect_timeout_secs: None,
            work_dir: None,
            partition: None,
            account: None,
        }
    }
}

fn err_in(path: &Path, message: String) -> CliError {
    CliError::config(format!("{}: {message}", path.display()))
}

/// Cluster names go into job references (`NAME:ID`) and the record: letters, digits, `.`,
/// `_` and `-`.
fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "cluster name {:?}: must be 1 to 64 letters, digits, '.', '_' or '-'",
            batchbridge_core::spec::truncate_for_message(name)
        ))
    }
}

/// A host or user name goes to `ssh` as an argument: one that starts with `-` would be read
/// as an option, and whitespace or control characters belong in neither.
fn check_ssh_word(what: &str, value: &str) -> Result<(), String> {
    if value.is_empty()
        || value.len() > 255
        || value.starts_with('-')
        || value.contains(|c: char| c.is_whitespace() || c.is_control())
    {
        return Err(format!(
            "`{what}` {:?}: must be 1 to 255 characters, without whitespace or control \
             characters, not starting with '-'",
            batchbridge_core::spec::truncate_for_message(value)
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> CliResult<Clusters> {
        let dir = tempfile::tempdir().map_err(CliError::from)?;
        let path = dir.path().join("config.toml");
        std::fs::write(&path, text).map_err(CliError::from)?;
        Clusters::load(&path, true, dir.path())
    }

    #[test]
    fn a_config_is_checked_before_any_cluster_is_used() {
        let cases = [
            ("", None),
            (
                "[clusters.hpc]\nscheduler = \"slurm\"\nhost = \"h\"\n",
                None,
            ),
            (
                "[clusters.hpc]\nscheduler = \"lsf\"\n",
                Some("unknown variant"),
            ),
            (
                "[clusters.hpc]\nscheduler = \"slurm\"\nhots = \"h\"\n",
                Some("unknown field"),
            ),
            (
                "[clusters.\"a b\"]\nscheduler = \"local\"\n",
                Some("cluster name"),
            ),
            (
                "default_cluster = \"hpc\"\n",
                Some("names no [clusters.hpc]"),
            ),
        ];
        for (text, problem) in cases {
            match (load(text), problem) {
                (Ok(_), None) => {}
                (Err(err), Some(problem)) => {
                    assert!(err.message.contains(problem), "{text:?}: {}", err.message);
                    assert_eq!(err.exit, crate::exit::Exit::Config);
                }
                (Ok(_), Some(problem)) => panic!("{text:?} accepted, expected {problem}"),
                (Err(err), None) => panic!("{text:?} refused: {}", err.message),
            }
        }
    }

    #[test]
    fn ssh_words_that_ssh_would_misread_are_refused() {
        for bad in [
            "-oProxyCommand=touch x",
            "a b",
            "a\nb",
            "",
            &"h".repeat(300),
        ] {
            assert!(check_ssh_word("host", bad).is_err(), "{bad:?}");
        }
        assert!(check_ssh_word("host", "login-1.hpc.example").is_ok());
    }
}
