//! The clusters: the built-in `local` one and those of the config file.
//!
//! The file is TOML, at `$XDG_CONFIG_HOME/batchbridge/config.toml` (usually
//! `~/.config/batchbridge/config.toml`), or wherever `--config` or `BATCHBRIDGE_CONFIG`
//! point. Unknown fields are refused, so a typo never silently falls back to a default.

use std::collections::BTreeMap;
use std::num::NonZeroUsize;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use batchbridge_core::shell::{HostKeys, SshAuth, SshConfig, SshShell};
use batchbridge_core::{BatchBackend, LocalBackend};
use batchbridge_htcondor::{HtcondorBackend, HtcondorConfig};
use batchbridge_pbs::{PbsBackend, PbsConfig};
use batchbridge_slurm::{SlurmBackend, SlurmConfig};
use serde::{Deserialize, Serialize};

use crate::exit::{CliError, CliResult, Exit};

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
    /// An ssh_config `Host` alias, instead of host, port, user, key_file and known_hosts.
    ssh_alias: Option<String>,
    /// The ssh_config file `ssh_alias` is in; default OpenSSH's own.
    ssh_config: Option<PathBuf>,
    #[serde(default)]
    login: LoginKind,
    #[serde(default)]
    auth: AuthKind,
    /// How long a `batchbridge login` stays open without a command, as humantime reads it.
    login_persist: Option<String>,
    work_dir: Option<String>,
    partition: Option<String>,
    account: Option<String>,
    /// The most of this user's recorded jobs `submit` and `run` keep in the scheduler at
    /// once; a further submit waits, held locally, until one ends.
    max_queued: Option<NonZeroUsize>,
}

/// How a cluster's commands log in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum LoginKind {
    /// By themselves, with a key, the agent or what the ssh_config gives, never a prompt;
    /// through a `batchbridge login` when one is open.
    #[default]
    Automatic,
    /// Only through a `batchbridge login` (a password or one-time password typed at a
    /// terminal): without one open, commands refuse.
    Interactive,
}

/// What a cluster's own logins authenticate with.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum AuthKind {
    /// A key (`key_file`, the ssh-agent, a default key) or what the ssh_config offers.
    #[default]
    Key,
    /// The user's Kerberos ticket (from `kinit`), by GSSAPI; nothing is delegated.
    Kerberos,
}

/// How long a `batchbridge login` stays open without a command when the config says not.
const DEFAULT_LOGIN_PERSIST: Duration = Duration::from_secs(8 * 3600);

/// A cluster's `batchbridge login`: an OpenSSH master connection others reuse through its
/// control socket.
#[derive(Debug, Clone)]
pub(crate) struct Login {
    /// The master's control socket, in the private [`login_dir`](Clusters::login_dir).
    pub(crate) socket: PathBuf,
    /// Commands refuse without a login open (`login = "interactive"`).
    pub(crate) required: bool,
    /// How long the master stays after its last command.
    pub(crate) persist: Duration,
}

impl Login {
    /// Whether a master answers at the socket: a connect to a socket whose master ended is
    /// refused, and one that never was finds no file.
    pub(crate) fn is_open(&self) -> bool {
        std::os::unix::net::UnixStream::connect(&self.socket).is_ok()
    }
}

/// Where a cluster is reached over SSH, for messages and the hints of errors.
#[derive(Debug, Clone)]
pub(crate) enum SshTarget {
    /// `host`, `port` and `user` of the config.
    Host {
        host: String,
        port: u16,
        user: String,
        /// `the key FILE` or `the ssh-agent's keys`.
        credentials: String,
        known_hosts: PathBuf,
    },
    /// `ssh_alias`: the ssh_config knows the rest.
    Alias {
        alias: String,
        /// `ssh hpc`, or `ssh -F FILE hpc`, to try by hand.
        command: String,
    },
}

/// A cluster ready to use.
#[derive(Clone)]
pub(crate) struct Cluster {
    pub(crate) name: String,
    pub(crate) scheduler: Scheduler,
    pub(crate) backend: Arc<dyn BatchBackend>,
    pub(crate) ssh: Option<SshTarget>,
    /// Whether the cluster's commands go through an open `batchbridge login`; `None` for
    /// this machine.
    pub(crate) logged_in: Option<bool>,
    /// Its commands go only through a `batchbridge login` (`login = "interactive"`).
    pub(crate) login_required: bool,
    /// `max_queued` of its config: how many of the recorded jobs on it may be in the
    /// scheduler at once.
    pub(crate) max_queued: Option<NonZeroUsize>,
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
        if kind == ErrorKind::LoginRequired {
            // A cluster that goes through a `batchbridge login` needs one open; any other
            // asks for a Kerberos ticket (auth = "kerberos"), its message names the kinit.
            let hint = if self.logged_in == Some(true) || self.login_required {
                login_hint(&self.name)
            } else {
                "get a ticket with kinit (klist shows the ones you have), then try again".to_owned()
            };
            return error.with_hint(hint);
        }
        match &self.ssh {
            None => error,
            Some(SshTarget::Alias { alias, command }) => {
                explain_alias(&self.name, alias, command, kind, error)
            }
            Some(SshTarget::Host {
                host,
                port,
                user,
                credentials,
                known_hosts,
            }) => explain_host(
                &self.name,
                (host, *port, user),
                credentials,
                known_hosts,
                kind,
                error,
            ),
        }
    }

    /// `user@host:port`, the ssh_config alias, or `this machine`.
    pub(crate) fn target(&self) -> String {
        match &self.ssh {
            None => "this machine".to_owned(),
            Some(SshTarget::Host {
                host, port, user, ..
            }) => format!("{user}@{host}:{port}"),
            Some(SshTarget::Alias { alias, .. }) => format!("{alias} (ssh_config)"),
        }
    }
}

/// What to do when a cluster needs a `batchbridge login` and none is open.
fn login_hint(name: &str) -> String {
    format!(
        "run `batchbridge login {name}` at a terminal: it asks what the cluster asks (password, \
         one-time password) once, and commands use that login until it is left unused for \
         `login_persist` (8h by default)"
    )
}

/// The hint for a problem reaching `host`, `port` and `user` of [clusters.NAME].
fn explain_host(
    name: &str,
    (host, port, user): (&str, u16, &str),
    credentials: &str,
    known_hosts: &Path,
    kind: batchbridge_core::ErrorKind,
    error: CliError,
) -> CliError {
    use batchbridge_core::ErrorKind;
    match kind {
        ErrorKind::HostKeyMismatch => error.with_hint(format!(
            "{host}:{port}'s host key is not in {known}, or differs from the one there. \
                 Compare the key's fingerprint with the one your cluster's admins publish \
                 (ssh-keyscan -p {port} {host} | ssh-keygen -lf -), then add it:\n  \
                 ssh-keyscan -p {port} {host} >> {known}",
            known = known_hosts.display()
        )),
        ErrorKind::AuthenticationFailed => error.with_hint(format!(
            "{user}@{host}:{port} refused {credentials}: check `user` and `key_file` of \
                 [clusters.{name}], and that the key's public half is in ~/.ssh/authorized_keys \
                 on the cluster (try: ssh -p {port} {user}@{host} true)"
        )),
        ErrorKind::Unreachable | ErrorKind::ConnectionLost => error.with_hint(format!(
            "check `host` and `port` of [clusters.{name}] and your network \
                 (try: ssh -p {port} {user}@{host} true)"
        )),
        ErrorKind::Timeout => error.with_hint(format!(
            "the scheduler on {host} did not answer in time; it may be overloaded or down"
        )),
        _ => error,
    }
}

/// The host and port whose key an OpenSSH host key failure names: `No ED25519 host key is
/// known for [127.0.0.1]:2230 and ...`, `Host key for login1 has changed ...` (port 22).
fn host_key_of(message: &str) -> Option<(String, String)> {
    let (_, rest) = message
        .split_once("host key is known for ")
        .or_else(|| message.split_once("Host key for "))?;
    let word = rest.split_whitespace().next()?;
    Some(
        match word.strip_prefix('[').and_then(|w| w.split_once("]:")) {
            Some((host, port)) => (host.to_owned(), port.to_owned()),
            None => (word.to_owned(), "22".to_owned()),
        },
    )
}

/// The hint for a problem reaching `ssh_alias` of [clusters.NAME]: the ssh_config holds
/// the host, port, user, credentials and known hosts, which `ssh -G ALIAS` shows.
fn explain_alias(
    name: &str,
    alias: &str,
    command: &str,
    kind: batchbridge_core::ErrorKind,
    error: CliError,
) -> CliError {
    use batchbridge_core::ErrorKind;
    match kind {
        ErrorKind::HostKeyMismatch => {
            // ssh names the host whose key failed: the login node's or a ProxyJump hop's.
            let (host, port) = host_key_of(&error.message)
                .unwrap_or_else(|| ("HOSTNAME".to_owned(), "PORT".to_owned()));
            let hint = format!(
                "the key of {host} (port {port}), on the way to {alias}, is not in the known \
                 hosts your ssh_config names for it, or differs from the one there; checking \
                 stays strict whatever the ssh_config says. Compare its fingerprint with the \
                 one your cluster's admins publish, then add it to that file (`ssh -G {alias}` \
                 shows userknownhostsfile; a hop's Host has its own):\n  \
                 ssh-keyscan -p {port} {host} | ssh-keygen -lf -"
            );
            error.with_hint(hint)
        }
        ErrorKind::AuthenticationFailed => error.with_hint(format!(
            "{alias} refused what your ssh_config offers (IdentityFile, CertificateFile, the \
             agent; no prompt: try `{command} true`). A cluster that asks for a password or \
             one-time password needs login = \"interactive\" in [clusters.{name}] and \
             `batchbridge login {name}`"
        )),
        ErrorKind::Unreachable | ErrorKind::ConnectionLost => error.with_hint(format!(
            "check `ssh_alias` of [clusters.{name}], its Host entry in your ssh_config and your \
             network (try: {command} true)"
        )),
        ErrorKind::Timeout => error.with_hint(format!(
            "the scheduler behind {alias} did not answer in time; it may be overloaded or down"
        )),
        _ => error,
    }
}

/// Every cluster known: the config file's and `local`.
pub(crate) struct Clusters {
    default: String,
    configs: BTreeMap<String, ClusterConfig>,
    state_dir: PathBuf,
    home: Option<PathBuf>,
    /// Where the control sockets of `batchbridge login` are: `$XDG_RUNTIME_DIR/batchbridge`,
    /// else `~/.cache/batchbridge/login`; `None` without either.
    login_dir: Option<PathBuf>,
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
        let base = directories::BaseDirs::new();
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
            home: base.as_ref().map(|dirs| dirs.home_dir().to_path_buf()),
            login_dir: base.as_ref().map(|dirs| match dirs.runtime_dir() {
                Some(runtime) => runtime.join("batchbridge"),
                None => dirs.cache_dir().join("batchbridge/login"),
            }),
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

    /// The config of cluster `name`.
    fn config(&self, name: &str) -> CliResult<ClusterConfig> {
        match self.configs.get(name) {
            Some(config) => Ok(config.clone()),
            None if name == LOCAL => Ok(ClusterConfig::local()),
            None => Err(CliError::usage(format!(
                "no cluster named {name:?}; known: {}",
                self.names().join(", ")
            ))
            .with_hint("add it as a [clusters.NAME] table to the config file")),
        }
    }

    /// Opens cluster `name`: nothing connects until its backend is first used. Commands go
    /// through the cluster's `batchbridge login` when one is open, and only through it on a
    /// cluster that needs one (`login = "interactive"`).
    pub(crate) fn open(&self, name: &str) -> CliResult<Cluster> {
        let config = self.config(name)?;
        let wrong = |message: String| CliError::config(format!("[clusters.{name}]: {message}"));
        if config.scheduler == Scheduler::Local {
            let backend =
                LocalBackend::new(self.state_dir.join("local")).map_err(CliError::from)?;
            return Ok(Cluster {
                name: name.to_owned(),
                scheduler: Scheduler::Local,
                backend: Arc::new(backend),
                ssh: None,
                logged_in: None,
                login_required: false,
                max_queued: config.max_queued,
            });
        }
        let (mut ssh, target) = self.ssh_settings(&config).map_err(wrong)?;
        let login = self.login(name, &config).map_err(wrong)?;
        let logged_in = login.is_open();
        if logged_in || login.required {
            // Without a login open, a cluster that needs one fails at its first command
            // (LoginRequired, which `explain` turns into the `batchbridge login` to run),
            // never prompting; the other clusters of the command go on.
            ssh.auth = SshAuth::ControlMaster(login.socket.clone());
        }
        let shell = Arc::new(SshShell::new(ssh).map_err(|err| wrong(err.to_string()))?);
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
            logged_in: Some(logged_in),
            login_required: login.required,
            max_queued: config.max_queued,
        })
    }

    /// What `batchbridge login` and `logout` need of cluster `name`: how to reach it, and
    /// where its login's control socket is.
    pub(crate) fn login_settings(&self, name: &str) -> CliResult<(SshConfig, Login)> {
        let config = self.config(name)?;
        if config.scheduler == Scheduler::Local {
            return Err(CliError::usage(format!(
                "{name} is this machine: there is nothing to log in to"
            )));
        }
        let wrong = |message: String| CliError::config(format!("[clusters.{name}]: {message}"));
        let (ssh, _) = self.ssh_settings(&config).map_err(&wrong)?;
        let login = self.login(name, &config).map_err(wrong)?;
        Ok((ssh, login))
    }

    /// The private directory of the login sockets, made (mode 0700) when missing; one that
    /// another user owns or others may enter is refused, as a socket there could be theirs.
    pub(crate) fn private_login_dir(&self) -> CliResult<PathBuf> {
        let dir = self.login_dir.clone().ok_or_else(no_login_dir)?;
        if let Some(parent) = dir.parent() {
            std::fs::create_dir_all(parent)?;
        }
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Err(err) if err.kind() != std::io::ErrorKind::AlreadyExists => return Err(err.into()),
            _ => {}
        }
        let meta = std::fs::symlink_metadata(&dir)?;
        let mode = meta.permissions().mode();
        if !meta.is_dir() || meta.uid() != nix::unistd::geteuid().as_raw() || mode & 0o077 != 0 {
            return Err(CliError::new(
                Exit::Failure,
                format!(
                    "{} is not a private directory of yours (mode {:o}): it would hold the \
                     control sockets of your logins",
                    dir.display(),
                    mode & 0o7777
                ),
            )
            .with_hint(format!("remove it, or: chmod 700 {}", dir.display())));
        }
        Ok(dir)
    }

    /// Cluster `name`'s login: its socket, whether it is needed and how long it stays.
    fn login(&self, name: &str, config: &ClusterConfig) -> Result<Login, String> {
        let persist = match &config.login_persist {
            Some(text) => humantime::parse_duration(text)
                .map_err(|err| format!("`login_persist` {text:?}: {err} (e.g. 8h, 30m)"))?,
            None => DEFAULT_LOGIN_PERSIST,
        };
        let dir = self
            .login_dir
            .as_ref()
            .ok_or_else(|| no_login_dir().message)?;
        Ok(Login {
            socket: dir.join(name),
            required: config.login == LoginKind::Interactive,
            persist,
        })
    }

    /// How cluster `config` is reached: a host, port and user of its own, or an ssh_config
    /// alias.
    fn ssh_settings(&self, config: &ClusterConfig) -> Result<(SshConfig, SshTarget), String> {
        let (mut ssh, target) = match &config.ssh_alias {
            Some(alias) => self.alias_settings(alias, config)?,
            None => self.host_settings(config)?,
        };
        if let Some(secs) = config.connect_timeout_secs {
            ssh.connect_timeout = Duration::from_secs(secs);
        }
        if config.auth == AuthKind::Kerberos {
            ssh.auth = SshAuth::KerberosTicket;
        }
        // One attempt: a person at a terminal wants the error now, not after retries.
        ssh.connect_attempts = 1;
        Ok((ssh, target))
    }

    /// `ssh_alias`: everything else is the ssh_config's, as for `ssh ALIAS`.
    fn alias_settings(
        &self,
        alias: &str,
        config: &ClusterConfig,
    ) -> Result<(SshConfig, SshTarget), String> {
        let own = [
            ("host", config.host.is_some()),
            ("port", config.port.is_some()),
            ("user", config.user.is_some()),
            ("key_file", config.key_file.is_some()),
            ("known_hosts", config.known_hosts.is_some()),
            ("accept_new_host_keys", config.accept_new_host_keys),
        ];
        let both: Vec<&str> = own
            .iter()
            .filter(|(_, set)| *set)
            .map(|(key, _)| *key)
            .collect();
        if !both.is_empty() {
            return Err(format!(
                "`ssh_alias` takes the host, port, user, credentials and known hosts from the \
                 ssh_config: remove {}",
                both.join(", ")
            ));
        }
        check_ssh_word("ssh_alias", alias)?;
        let mut ssh = SshConfig::alias(alias);
        ssh.ssh_config_file = config.ssh_config.as_deref().map(|path| self.expand(path));
        let command = match &ssh.ssh_config_file {
            Some(file) => {
                std::fs::File::open(file)
                    .map_err(|err| format!("`ssh_config` {}: {err}", file.display()))?;
                format!("ssh -F {} {alias}", file.display())
            }
            None => format!("ssh {alias}"),
        };
        let target = SshTarget::Alias {
            alias: alias.to_owned(),
            command,
        };
        Ok((ssh, target))
    }

    /// `host`, `port`, `user`, `key_file` and `known_hosts`, no ssh_config.
    fn host_settings(&self, config: &ClusterConfig) -> Result<(SshConfig, SshTarget), String> {
        if config.ssh_config.is_some() {
            return Err(
                "`ssh_config` is read for `ssh_alias` only: name the file's Host in `ssh_alias` \
                 instead of `host`"
                    .into(),
            );
        }
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
            (Some(_), _) if config.auth == AuthKind::Kerberos => {
                return Err("`key_file` is not read with auth = \"kerberos\"".into());
            }
            _ if config.auth == AuthKind::Kerberos => (
                SshAuth::KerberosTicket,
                "your Kerberos ticket (klist shows it)".to_owned(),
            ),
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
        let target = SshTarget::Host {
            host,
            port,
            user,
            credentials,
            known_hosts,
        };
        Ok((ssh, target))
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
            ssh_alias: None,
            ssh_config: None,
            login: LoginKind::Automatic,
            auth: AuthKind::Key,
            login_persist: None,
            work_dir: None,
            partition: None,
            account: None,
            max_queued: None,
        }
    }
}

fn no_login_dir() -> CliError {
    CliError::config("no directory for the logins' control sockets: set XDG_RUNTIME_DIR or HOME")
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
    fn an_ssh_alias_takes_everything_else_from_the_ssh_config() {
        let open = |table: &str| {
            load(&format!("[clusters.hpc]\nscheduler = \"slurm\"\n{table}"))
                .and_then(|clusters| clusters.open("hpc"))
                .map(|cluster| cluster.target())
        };
        let refused = [
            (
                "ssh_alias = \"hpc\"\nhost = \"h\"\nuser = \"u\"\n",
                "remove host, user",
            ),
            (
                "host = \"h\"\nssh_config = \"/etc/ssh/ssh_config\"\n",
                "for `ssh_alias` only",
            ),
            (
                "ssh_alias = \"-oProxyCommand=x\"\n",
                "`ssh_alias` \"-oProxyCommand=x\"",
            ),
            (
                "ssh_alias = \"hpc\"\nssh_config = \"/nonexistent\"\n",
                "`ssh_config` /nonexistent",
            ),
            (
                "ssh_alias = \"hpc\"\nlogin_persist = \"soon\"\n",
                "`login_persist` \"soon\"",
            ),
        ];
        for (table, problem) in refused {
            let err = open(table).unwrap_err();
            assert!(err.message.contains(problem), "{table:?}: {}", err.message);
            assert_eq!(err.exit, Exit::Config);
        }
        assert_eq!(
            open("ssh_alias = \"hpc\"\nlogin_persist = \"30m\"\n").unwrap(),
            "hpc (ssh_config)"
        );
        let clusters = load(
            "[clusters.hpc]\nscheduler = \"slurm\"\nssh_alias = \"hpc\"\nlogin = \"interactive\"\n",
        )
        .unwrap();
        let cluster = clusters.open("hpc").unwrap();
        assert_eq!(cluster.logged_in, Some(false));
        let refused = cluster.explain(batchbridge_core::Error::new(
            batchbridge_core::ErrorKind::LoginRequired,
            "hpc: no login open",
        ));
        assert_eq!(refused.exit, Exit::Refused);
        let hint = refused.hint.unwrap();
        assert!(hint.starts_with("run `batchbridge login hpc`"), "{hint}");
    }

    #[test]
    fn a_host_key_failure_names_the_host_to_scan() {
        let hop = "hpc: host key verification failed: hpc: the host's key is not among the \
                   trusted host keys (No ED25519 host key is known for [127.0.0.1]:2230 and \
                   you have requested strict checking., ssh exit 255)";
        assert_eq!(
            host_key_of(hop),
            Some(("127.0.0.1".to_owned(), "2230".to_owned()))
        );
        let login = "(Host key for login1.hpc.example has changed and you have requested";
        assert_eq!(
            host_key_of(login),
            Some(("login1.hpc.example".to_owned(), "22".to_owned()))
        );
        assert_eq!(host_key_of("cannot connect"), None);
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
