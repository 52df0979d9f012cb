//! [`SshShell`]: commands on a remote host over one multiplexed OpenSSH connection.
//!
//! We start the OpenSSH master ourselves (a `kill_on_drop` child of this process) rather
//! than through `openssh::SessionBuilder`, whose master always runs with `BatchMode=yes` and
//! so can never use a password through askpass. Commands then travel as channels of that
//! one connection through `openssh`'s native mux client: no new TCP connection, no new
//! authentication, no new `ssh` process per command.
//!
//! The master must not outlive this process, however it ends: `kill_on_drop` covers a
//! graceful end, and a parent-death signal (`PR_SET_PDEATHSIG`) a SIGKILL. Credentials
//! touch the disk only while a master authenticates, in a directory only this user can
//! enter (see [`SshConfig::runtime_dir`]).

use std::fmt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use async_trait::async_trait;
use backon::{BackoffBuilder, ExponentialBuilder, Retryable};
use openssh::Session;
use tokio::sync::{Mutex, Semaphore};

use super::capture::{exchange, exchange_streams};
use super::connect_failure::classify_connect_failure;
use super::credential::{HostKeys, SshAuth, write_key};
use super::jump::{JumpChain, JumpHost, is_config_word};
use super::kerberos::{GSSAPI_OPTIONS, check_user_ticket};
use super::lines::stream_lines;
use super::private_file::write_private;
use super::{Command, LineStream, MAX_COMMAND_LINE, Output, PipeInput, PipeOutput, Shell};
use crate::error::{Error, ErrorKind, Result};

/// Where and how to connect.
///
/// ```
/// use batchbridge_core::shell::{HostKeys, SshAuth, SshConfig};
///
/// let config = SshConfig::new(
///     "login1.cluster.example",
///     "alice",
///     SshAuth::KeyFile("/home/alice/.ssh/id_ed25519".into()),
///     HostKeys::File("/home/alice/.ssh/known_hosts".into()),
/// )
/// .port(2222);
/// assert_eq!(config.target(), "alice@login1.cluster.example:2222");
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SshConfig {
    /// Host name or address.
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// Remote user.
    pub user: String,
    /// Credentials.
    pub auth: SshAuth,
    /// The host keys to trust; a host whose key is not among them is refused.
    pub host_keys: HostKeys,
    /// Record an unknown host's key on first connect instead of refusing it
    /// (`StrictHostKeyChecking=accept-new`); a changed key is still refused.
    pub accept_new_host_keys: bool,
    /// Time limit for establishing the connection.
    pub connect_timeout: Duration,
    /// Most commands in flight at once on the connection (keep below the server's
    /// `MaxSessions`, 10 by default).
    pub max_sessions: usize,
    /// Attempts to (re-)establish the connection before a command gives up.
    pub connect_attempts: usize,
    /// How long the shell waits after the server refused its credentials before it tries
    /// to log in again; each further refusal in a row doubles the wait, up to
    /// [`refused_login_backoff_max`](Self::refused_login_backoff_max). Meanwhile every
    /// command fails at once with the refusal, saying when the next attempt may be made.
    /// Sites lock an account after a few refused logins, so a wrong password or key must
    /// not be tried again every few minutes; a new shell (a changed credential) starts
    /// afresh. 5 minutes by default.
    pub refused_login_backoff: Duration,
    /// The longest wait between refused logins; 6 hours by default.
    pub refused_login_backoff_max: Duration,
    /// The `ssh` client binary.
    pub ssh_program: PathBuf,
    /// An ssh_config file to read. When absent, none is read, so the behaviour does not
    /// depend on the user's or the system's configuration; unless `host` is an alias
    /// ([`host_is_alias`](Self::host_is_alias)): then OpenSSH's own are, as for `ssh`.
    pub ssh_config_file: Option<PathBuf>,
    /// `host` is an ssh_config `Host` alias: the ssh_config decides the host name, port,
    /// user, `ProxyJump` and other options as for `ssh ALIAS`, so `port` and `user` are not
    /// passed. Host-key checking (strict unless
    /// [`accept_new_host_keys`](Self::accept_new_host_keys)), agent and X11 forwarding (off)
    /// and port forwardings (none) stay as the shell sets them whatever the file says.
    pub host_is_alias: bool,
    /// The jump hosts on the way to `host`, nearest first, each with its own credential and
    /// host keys (see [`jump_host`](Self::jump_host)); empty for a direct connection.
    pub jump_hosts: Vec<JumpHost>,
    /// Where the shell makes its private directory (mode 0700: the control socket, the
    /// master's log, known_hosts entries, and a credential while the master authenticates).
    /// When absent: `$XDG_RUNTIME_DIR` (a per-user, memory-backed directory) if set, else the
    /// system's temporary directory.
    pub runtime_dir: Option<PathBuf>,
    /// The ciphers the master and each jump host's connection offer, in order of preference
    /// (`Ciphers`; one word, as ssh_config takes it, else refused). By default
    /// [`AES_GCM_FIRST`]: OpenSSH's own set with AES-GCM ahead of ChaCha20-Poly1305, which
    /// costs a quarter less CPU per byte on a CPU with AES instructions (every x86-64 and
    /// Armv8 server of the last decade), at both ends, for staged files and output alike;
    /// the server still picks among what it allows. For an alias, an ssh_config's own
    /// `Ciphers` wins; otherwise this does. `None` leaves the choice to OpenSSH and the
    /// ssh_config.
    pub ciphers: Option<String>,
}

/// OpenSSH's default ciphers with AES-GCM first: see [`SshConfig::ciphers`].
pub const AES_GCM_FIRST: &str = "aes128-gcm@openssh.com,aes256-gcm@openssh.com,\
                                 chacha20-poly1305@openssh.com,aes128-ctr,aes192-ctr,aes256-ctr";

impl SshConfig {
    /// A config with port 22 and defaults for everything optional.
    pub fn new(
        host: impl Into<String>,
        user: impl Into<String>,
        auth: SshAuth,
        host_keys: HostKeys,
    ) -> Self {
        Self {
            host: host.into(),
            port: 22,
            user: user.into(),
            auth,
            host_keys,
            accept_new_host_keys: false,
            connect_timeout: Duration::from_secs(15),
            max_sessions: 8,
            connect_attempts: 3,
            refused_login_backoff: Duration::from_secs(5 * 60),
            refused_login_backoff_max: Duration::from_secs(6 * 3600),
            ssh_program: PathBuf::from("ssh"),
            ssh_config_file: None,
            jump_hosts: Vec::new(),
            host_is_alias: false,
            runtime_dir: None,
            ciphers: Some(AES_GCM_FIRST.to_owned()),
        }
    }

    /// A config for an ssh_config `Host` alias ([`host_is_alias`](Self::host_is_alias)),
    /// with the ssh_config's credentials and known hosts.
    ///
    /// ```
    /// use batchbridge_core::shell::{SshAuth, SshConfig};
    ///
    /// // ~/.ssh/config: Host hpc / HostName login.hpc.example / ProxyJump bastion ...
    /// let config = SshConfig::alias("hpc");
    /// assert_eq!(config.auth, SshAuth::FromSshConfig);
    /// assert_eq!(config.target(), "hpc");
    /// ```
    pub fn alias(alias: impl Into<String>) -> Self {
        Self {
            host_is_alias: true,
            ..Self::new(alias, "", SshAuth::FromSshConfig, HostKeys::FromSshConfig)
        }
    }

    /// Sets the port.
    pub fn port(mut self, port: u16) -> Self {
        self.port = port;
        self
    }

    /// Adds a jump host after those already added: the connection goes through the first
    /// one added, from there to the next, and from the last to `host`.
    ///
    /// ```
    /// use batchbridge_core::shell::{HostKeys, JumpHost, SshAuth, SshConfig};
    ///
    /// let config = SshConfig::new(
    ///     "login1.cluster.internal",
    ///     "alice",
    ///     SshAuth::KeyFile("/home/alice/.ssh/cluster_ed25519".into()),
    ///     HostKeys::File("/home/alice/.ssh/known_hosts".into()),
    /// )
    /// .jump_host(JumpHost::new(
    ///     "bastion.example.org",
    ///     "alice",
    ///     SshAuth::KeyFile("/home/alice/.ssh/bastion_ed25519".into()),
    ///     HostKeys::Entries("bastion.example.org ssh-ed25519 AAAAC3Nza…".into()),
    /// ))
    /// .jump_host(
    ///     JumpHost::new(
    ///         "gateway.cluster.internal",
    ///         "alice",
    ///         SshAuth::KeyFile("/home/alice/.ssh/gateway_ed25519".into()),
    ///         HostKeys::File("/home/alice/.ssh/gateway_known_hosts".into()),
    ///     )
    ///     .port(2201),
    /// );
    /// assert_eq!(config.jump_hosts[1].address(), "gateway.cluster.internal:2201");
    /// ```
    pub fn jump_host(mut self, hop: JumpHost) -> Self {
        self.jump_hosts.push(hop);
        self
    }

    /// `user@host:port`, or the alias, for messages.
    pub fn target(&self) -> String {
        if self.host_is_alias {
            return self.host.clone();
        }
        format!("{}@{}:{}", self.user, self.host, self.port)
    }

    /// The `ssh` command that opens, on the terminal it inherits, a master connection at
    /// `control` that stays `persist` after its last command and goes to the background
    /// once logged in; shells reach it by [`SshAuth::ControlMaster`]. `ssh` prompts as it
    /// does for a person (password, one-time password), on the way through jump hosts too.
    /// Credentials: a key file (with its certificate), the agent, or the ssh_config's; a
    /// key's text or a password is no terminal login. For an alias, the ssh_config it is
    /// read through is written beside `control` (`CONTROL.ssh_config`, mode 0600).
    ///
    /// ```
    /// use std::time::Duration;
    /// use batchbridge_core::shell::SshConfig;
    ///
    /// let dir = tempfile::tempdir().unwrap();
    /// let control = dir.path().join("hpc");
    /// let login = SshConfig::alias("hpc")
    ///     .login_command(&control, Duration::from_secs(8 * 3600))
    ///     .unwrap();
    /// let args: Vec<_> = login.get_args().collect();
    /// assert!(args.contains(&"ControlPersist=28800s".as_ref()));
    /// assert_eq!(args.last(), Some(&"hpc".as_ref()));
    /// ```
    pub fn login_command(
        &self,
        control: &Path,
        persist: Duration,
    ) -> Result<std::process::Command> {
        let mut alias_config = control.as_os_str().to_owned();
        alias_config.push(".ssh_config");
        let alias_config = PathBuf::from(alias_config);
        self.check_ciphers()?;
        if self.host_is_alias {
            write_private(
                &alias_config,
                self.alias_ssh_config(false).as_bytes(),
                0o600,
            )?;
        }
        let mut ssh = std::process::Command::new(&self.ssh_program);
        ssh.args(["-f", "-N", "-M", "-S"])
            .arg(control)
            .args(self.destination_args(&alias_config));
        let mut options = self.host_key_options(Path::new("/dev/null"));
        options.extend(CONTAINED.map(str::to_owned));
        options.extend(self.cipher_options());
        options.extend([
            format!("ControlPersist={}s", persist.as_secs().max(1)),
            format!("ConnectTimeout={}", self.connect_timeout.as_secs().max(1)),
            "ServerAliveInterval=15".to_owned(),
            "ServerAliveCountMax=3".to_owned(),
        ]);
        match &self.auth {
            SshAuth::KeyFile(path) => {
                options.push("IdentitiesOnly=yes".to_owned());
                ssh.arg("-i").arg(path);
            }
            SshAuth::CertifiedKeyFile { key, certificate } => {
                options.extend([
                    "IdentitiesOnly=yes".to_owned(),
                    format!("CertificateFile={}", certificate.display()),
                ]);
                ssh.arg("-i").arg(key);
            }
            SshAuth::Agent(socket) => options.push(format!("IdentityAgent={}", socket.display())),
            SshAuth::FromSshConfig => {}
            _ => {
                return Err(Error::invalid_input(
                    "a terminal login uses a key file, the ssh-agent or the ssh_config's \
                     credentials",
                ));
            }
        }
        for option in options {
            ssh.arg("-o").arg(option);
        }
        ssh.arg("--").arg(&self.host);
        Ok(ssh)
    }

    /// `-F` with the ssh_config to read (for an alias, `alias_config`, written from
    /// [`alias_ssh_config`](Self::alias_ssh_config)) and, unless `host` is an alias, `-p` and
    /// `-l`.
    fn destination_args(&self, alias_config: &Path) -> Vec<std::ffi::OsString> {
        if self.host_is_alias {
            return vec!["-F".into(), alias_config.into()];
        }
        let file = self.ssh_config_file.as_deref().unwrap_or(Path::new("none"));
        vec![
            "-F".into(),
            file.into(),
            "-p".into(),
            self.port.to_string().into(),
            "-l".into(),
            self.user.clone().into(),
        ]
    }

    /// The ssh_config an alias is read through: host-key checking, no forwarding and,
    /// `unattended`, no prompt, ahead of the user's files (`ssh_config_file`, else OpenSSH's
    /// own), so that they hold for ProxyJump hops too. `ssh` gives a hop's `ssh` its `-F`
    /// file but none of its `-o` options, and in an ssh_config the first value wins.
    fn alias_ssh_config(&self, unattended: bool) -> String {
        let mut text = format!(
            "# Written by batchbridge: ahead of the files included, so for every host and hop.\n\
             StrictHostKeyChecking {}\nForwardAgent no\nForwardX11 no\n",
            self.strictness()
        );
        if unattended {
            text.push_str("BatchMode yes\n");
        }
        match &self.ssh_config_file {
            Some(file) => text.push_str(&format!("Include \"{}\"\n", file.display())),
            None => text.push_str("Include ~/.ssh/config /etc/ssh/ssh_config\n"),
        }
        // After the files, so that theirs wins (a file's last `Host` block ends with it).
        if let Some(ciphers) = &self.ciphers {
            text.push_str(&format!("Ciphers {ciphers}\n"));
        }
        text
    }

    /// Refuses a [`ciphers`](Self::ciphers) list that is not one word: it goes into an
    /// ssh_config, where a space or a line break would start other options.
    fn check_ciphers(&self) -> Result<()> {
        match &self.ciphers {
            Some(list) if !is_config_word(list) => Err(Error::invalid_input(format!(
                "ciphers {list:?}: not a comma-separated list of cipher names"
            ))),
            _ => Ok(()),
        }
    }

    /// `Ciphers` for the command line, unless the host is an alias (whose ssh_config is
    /// read first, see [`alias_ssh_config`](Self::alias_ssh_config)).
    fn cipher_options(&self) -> Vec<String> {
        match &self.ciphers {
            Some(ciphers) if !self.host_is_alias => vec![format!("Ciphers={ciphers}")],
            _ => Vec::new(),
        }
    }

    /// `StrictHostKeyChecking`: `yes`, or `accept-new` when asked.
    fn strictness(&self) -> &'static str {
        if self.accept_new_host_keys {
            "accept-new"
        } else {
            "yes"
        }
    }

    /// Host-key checking, strict (or accept-new when asked) whatever an ssh_config says;
    /// `entries_file` is where [`HostKeys::Entries`] were written.
    fn host_key_options(&self, entries_file: &Path) -> Vec<String> {
        let mut options = vec![format!("StrictHostKeyChecking={}", self.strictness())];
        let known_hosts = match &self.host_keys {
            HostKeys::File(path) => path,
            HostKeys::Entries(_) => entries_file,
            HostKeys::FromSshConfig => return options,
        };
        options.extend([
            format!("UserKnownHostsFile={}", known_hosts.display()),
            "GlobalKnownHostsFile=/dev/null".to_owned(),
        ]);
        options
    }
}

/// How many of its sessions an [`SshShell`] keeps from [`bulk`](Command::bulk) commands,
/// for the short ones (a status poll, an output read): with the default 8 sessions, a burst
/// of submit batches takes 6 at most.
const SESSIONS_KEPT_FROM_BULK: usize = 2;

/// Gives the pipe the master writes a [`bulk`](Command::bulk) command's stdout into 1 MiB
/// instead of 64 KiB, so that a fetched file moves in fewer, larger system calls at both
/// ends: a GiB came out 10 % faster on the test VM. Only bulk commands, which take at most
/// all of a shell's sessions but two: the pipes a user holds share an allowance
/// (`/proc/sys/fs/pipe-user-pages-soft`, 64 MiB by default), beyond which new pipes are
/// made small. (Linux only; where the allowance is spent the pipe stays as it is, which
/// only costs speed. Widening stdin's pipe as well made a GiB going in slower in half the
/// runs, so it is left as it is.)
fn widen_pipe(pipe: &impl std::os::fd::AsFd) {
    #[cfg(target_os = "linux")]
    {
        use nix::fcntl::{FcntlArg, fcntl};
        let _ = fcntl(pipe, FcntlArg::F_SETPIPE_SZ(1 << 20));
    }
    #[cfg(not(target_os = "linux"))]
    let _ = pipe;
}

/// What keeps a connection to itself whatever an ssh_config says: no agent or X11
/// forwarding, no port forwarding, no local command.
const CONTAINED: [&str; 4] = [
    "ForwardAgent=no",
    "ForwardX11=no",
    "ClearAllForwardings=yes",
    "PermitLocalCommand=no",
];

/// Runs commands on a remote host through one multiplexed OpenSSH connection, reopened with
/// backoff when it dies.
///
/// ```no_run
/// use batchbridge_core::shell::{Command, HostKeys, Shell, SshAuth, SshConfig, SshShell};
///
/// # async fn demo() -> batchbridge_core::Result<()> {
/// let shell = SshShell::new(SshConfig::new(
///     "login1.cluster.example",
///     "alice",
///     SshAuth::KeyFile("/home/alice/.ssh/id_ed25519".into()),
///     HostKeys::File("/home/alice/.ssh/known_hosts".into()),
/// ))?;
/// let out = shell.run(&Command::new("squeue").arg("--me")).await?.check("squeue")?;
/// println!("{}", out.stdout_text());
/// # Ok(()) }
/// ```
pub struct SshShell {
    config: SshConfig,
    target: String,
    /// Private (0700) directory holding the control socket, the master's log, known_hosts
    /// entries and, while a master authenticates, its credential; removed with the shell.
    dir: tempfile::TempDir,
    connection: Mutex<Option<Connection>>,
    /// The refusals of this shell's credentials in a row, while they last; only touched
    /// under the `connection` lock.
    refusal: std::sync::Mutex<Option<Refusal>>,
    /// Shared with the streams, which hold a session for as long as they run.
    sessions: Arc<Semaphore>,
    /// What a [`bulk`](Command::bulk) command takes before its session: all but
    /// [`SESSIONS_KEPT_FROM_BULK`] of them.
    bulk_sessions: Semaphore,
    connections_opened: AtomicU64,
    /// The jump hosts' ssh_config and known hosts in `dir`, when there are hops.
    jumps: Option<JumpChain>,
}

/// Refused credentials: no login is tried again before `until`.
struct Refusal {
    error: Error,
    count: u32,
    until: Instant,
    /// The waits after the next refusals.
    waits: backon::ExponentialBackoff,
}

impl Refusal {
    /// The refusal as every command sees it until `until`.
    fn error(&self, now: Instant) -> Error {
        // Whole seconds, rounded up: a wait is never shown shorter than it is.
        let left = self.until.saturating_duration_since(now);
        let wait = Duration::from_secs(left.as_secs() + u64::from(left.subsec_nanos() > 0));
        let times = match self.count {
            1 => "once".to_owned(),
            n => format!("{n} times in a row"),
        };
        Error::new(
            self.error.kind(),
            format!(
                "{}; refused {times}: no new login for {} (a changed credential is tried at once)",
                self.error.message(),
                humantime::format_duration(wait)
            ),
        )
    }
}

struct Connection {
    session: Arc<Session>,
    /// The OpenSSH master, killed when the connection is dropped; `None` for a master
    /// someone else keeps ([`SshAuth::ControlMaster`]), which outlives the shell.
    master: Option<tokio::process::Child>,
    generation: u64,
}

impl fmt::Debug for SshShell {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SshShell")
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}

/// A command that failed on the way: before it started (safe to retry), or after (it may
/// have run).
enum RunFailure {
    NotStarted(openssh::Error),
    Broken(openssh::Error),
}

impl SshShell {
    /// Prepares a shell; the connection opens on the first command.
    pub fn new(config: SshConfig) -> Result<Self> {
        let parent = config
            .runtime_dir
            .clone()
            .or_else(|| std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from))
            .unwrap_or_else(std::env::temp_dir);
        let dir = tempfile::Builder::new()
            .prefix("batchbridge-ssh-")
            .permissions(std::fs::Permissions::from_mode(0o700))
            .tempdir_in(&parent)
            .map_err(|err| {
                Error::new(
                    ErrorKind::Io,
                    format!(
                        "cannot make the SSH shell's private directory in {}: {err}",
                        parent.display()
                    ),
                )
            })?;
        if let SshAuth::KeyFile(path) | SshAuth::CertifiedKeyFile { key: path, .. } = &config.auth {
            // ssh reports a key it cannot read as refused credentials; say what is wrong.
            std::fs::File::open(path).map_err(|err| {
                Error::new(
                    ErrorKind::InvalidInput,
                    format!("cannot read the private key {}: {err}", path.display()),
                )
            })?;
        }
        if let SshAuth::Keytab(keytab) = &config.auth {
            keytab.check_readable()?;
        }
        if let HostKeys::Entries(entries) = &config.host_keys {
            write_private(&dir.path().join("known_hosts"), entries.as_bytes(), 0o600)?;
        }
        if let SshAuth::Password(_) = &config.auth {
            write_private(&dir.path().join("askpass"), ASKPASS.as_bytes(), 0o700)?;
        }
        config.check_ciphers()?;
        if config.host_is_alias {
            let text = config.alias_ssh_config(true);
            write_private(&dir.path().join("ssh_config"), text.as_bytes(), 0o600)?;
        }
        let jumps = JumpChain::prepare(
            &config.jump_hosts,
            dir.path(),
            &config.ssh_program,
            config.connect_timeout.as_secs().max(1),
            config.ciphers.as_deref(),
        )?;
        Ok(Self {
            jumps,
            target: config.target(),
            sessions: Arc::new(Semaphore::new(config.max_sessions.max(1))),
            bulk_sessions: Semaphore::new(
                config
                    .max_sessions
                    .saturating_sub(SESSIONS_KEPT_FROM_BULK)
                    .max(1),
            ),
            config,
            dir,
            connection: Mutex::new(None),
            refusal: std::sync::Mutex::new(None),
            connections_opened: AtomicU64::new(0),
        })
    }

    /// How many SSH connections this shell has opened (or reused, see
    /// [`SshAuth::ControlMaster`]) so far (1 while the first one lives).
    pub fn connections_opened(&self) -> u64 {
        self.connections_opened.load(Ordering::Relaxed)
    }

    /// Opens the connection now, instead of on the first command, to surface
    /// credential and host-key problems early.
    pub async fn connect(&self) -> Result<()> {
        self.live_connection().await.map(drop)
    }

    /// Closes the connection; the next command opens a new one.
    pub async fn disconnect(&self) {
        self.connection.lock().await.take();
    }

    async fn live_connection(&self) -> Result<(Arc<Session>, u64)> {
        let mut slot = self.connection.lock().await;
        if let Some(conn) = slot.as_mut() {
            let alive = conn
                .master
                .as_mut()
                .is_none_or(|master| matches!(master.try_wait(), Ok(None)));
            if alive {
                return Ok((conn.session.clone(), conn.generation));
            }
            tracing::warn!(target = %self.target, "SSH master connection ended; reconnecting");
            *slot = None;
        }
        if let Some(err) = self.refused() {
            return Err(err);
        }
        let backoff = ExponentialBuilder::default()
            .with_min_delay(Duration::from_millis(250))
            .with_max_delay(Duration::from_secs(5))
            .with_max_times(self.config.connect_attempts.saturating_sub(1));
        let opened = (|| self.open())
            .retry(backoff)
            .when(Error::is_temporary)
            .notify(|err, delay| tracing::warn!(target = %self.target, %err, ?delay, "SSH connect failed; retrying"))
            .await;
        let conn = match opened {
            Ok(conn) => {
                *lock(&self.refusal) = None;
                conn
            }
            Err(err) if err.kind() == ErrorKind::AuthenticationFailed => {
                return Err(self.record_refusal(err));
            }
            Err(err) => return Err(err),
        };
        let handle = (conn.session.clone(), conn.generation);
        *slot = Some(conn);
        Ok(handle)
    }

    /// The last refusal of the credentials, while no new login may be tried.
    fn refused(&self) -> Option<Error> {
        let now = Instant::now();
        let refusal = lock(&self.refusal);
        refusal
            .as_ref()
            .filter(|refusal| now < refusal.until)
            .map(|refusal| refusal.error(now))
    }

    /// Records a refusal of the credentials; returns it as the caller sees it.
    fn record_refusal(&self, error: Error) -> Error {
        let now = Instant::now();
        let mut refusal = lock(&self.refusal);
        let (count, mut waits) = match refusal.take() {
            Some(previous) => (previous.count + 1, previous.waits),
            None => (
                1,
                ExponentialBuilder::default()
                    .with_min_delay(self.config.refused_login_backoff)
                    .with_max_delay(self.config.refused_login_backoff_max)
                    .without_max_times()
                    .build(),
            ),
        };
        let wait = waits
            .next()
            .unwrap_or(self.config.refused_login_backoff_max);
        let next = Refusal {
            error,
            count,
            until: now + wait,
            waits,
        };
        let shown = next.error(now);
        tracing::warn!(target = %self.target, refusals = count, ?wait, "SSH credentials refused; not logging in again before the wait is over");
        *refusal = Some(next);
        shown
    }

    async fn invalidate(&self, generation: u64) {
        let mut slot = self.connection.lock().await;
        if slot
            .as_ref()
            .is_some_and(|conn| conn.generation == generation)
        {
            *slot = None;
        }
    }

    async fn open(&self) -> Result<Connection> {
        if let SshAuth::ControlMaster(control) = &self.config.auth {
            return self.resume(control).await;
        }
        // The server would refuse an expired certificate as any wrong key, and that refusal
        // would hold back the next login (`Refusal`): say what it is, without connecting.
        if let Some(certificate) = self.config.auth.certificate()? {
            certificate
                .check_not_expired(SystemTime::now())
                .map_err(|err| {
                    Error::new(err.kind(), format!("{}: {}", self.target, err.message()))
                })?;
        }
        let control = self.dir.path().join("master");
        let log = self.dir.path().join("master.log");
        // The credential, on disk only until the master has authenticated (or failed to).
        let credential_file = self.dir.path().join(match &self.config.auth {
            SshAuth::Password(_) => "password",
            _ => "id",
        });
        let certificate_file = self.dir.path().join("id-cert.pub");
        // A keytab's ticket, in the private directory until the master has authenticated.
        let ticket = match &self.config.auth {
            SshAuth::Keytab(keytab) => {
                Some(keytab.obtain_ticket(self.dir.path(), &self.target).await?)
            }
            _ => None,
        };
        // Leftovers of a dead master would be mistaken for a live one or its errors.
        let _ = std::fs::remove_file(&control);
        std::fs::write(&log, b"")?;

        let mut ssh = tokio::process::Command::new(&self.config.ssh_program);
        ssh.arg("-N")
            .arg("-M")
            .arg("-S")
            .arg(&control)
            .arg("-E")
            .arg(&log)
            .args(
                self.config
                    .destination_args(&self.dir.path().join("ssh_config")),
            );
        let mut options = self
            .config
            .host_key_options(&self.dir.path().join("known_hosts"));
        options.extend(CONTAINED.map(str::to_owned));
        options.extend(self.config.cipher_options());
        options.extend([
            format!(
                "ConnectTimeout={}",
                self.config.connect_timeout.as_secs().max(1)
            ),
            "ServerAliveInterval=15".to_owned(),
            "ServerAliveCountMax=3".to_owned(),
            "ControlPersist=no".to_owned(),
        ]);
        // The hops' key texts and passwords, on disk until the master has authenticated,
        // as its own.
        let _hop_secrets = self
            .jumps
            .as_ref()
            .map(JumpChain::start_login)
            .transpose()?;
        if let Some(jumps) = &self.jumps {
            options.push(jumps.proxy_option().to_owned());
        }
        let key_options = [
            "BatchMode=yes",
            "IdentitiesOnly=yes",
            "IdentityAgent=none",
            "PasswordAuthentication=no",
            "KbdInteractiveAuthentication=no",
        ];
        match &self.config.auth {
            SshAuth::KeyFile(path) => {
                options.extend(key_options.map(str::to_owned));
                ssh.arg("-i").arg(path);
            }
            SshAuth::Key(key) => {
                write_key(&credential_file, key)?;
                options.extend(key_options.map(str::to_owned));
                ssh.arg("-i").arg(&credential_file);
            }
            SshAuth::CertifiedKeyFile { key, certificate } => {
                options.extend(key_options.map(str::to_owned));
                options.push(format!("CertificateFile={}", certificate.display()));
                ssh.arg("-i").arg(key);
            }
            SshAuth::CertifiedKey { key, certificate } => {
                write_key(&credential_file, key)?;
                write_private(&certificate_file, certificate.trim().as_bytes(), 0o600)?;
                options.extend(key_options.map(str::to_owned));
                options.push(format!("CertificateFile={}", certificate_file.display()));
                ssh.arg("-i").arg(&credential_file);
            }
            SshAuth::Agent(socket) => {
                // Not IdentitiesOnly/IdentityAgent=none: the agent's keys are the point.
                options.extend(
                    [
                        "BatchMode=yes",
                        "PasswordAuthentication=no",
                        "KbdInteractiveAuthentication=no",
                    ]
                    .map(str::to_owned),
                );
                options.push(format!("IdentityAgent={}", socket.display()));
            }
            SshAuth::FromSshConfig => {
                // The ssh_config's keys, certificates and agent are the point; no prompt.
                options.push("BatchMode=yes".to_owned());
            }
            SshAuth::ControlMaster(_) => unreachable!("a shell that reuses a master opens none"),
            SshAuth::Keytab(_) => options.extend(GSSAPI_OPTIONS.map(str::to_owned)),
            SshAuth::KerberosTicket => {
                check_user_ticket(&self.target).await?;
                options.extend(GSSAPI_OPTIONS.map(str::to_owned));
            }
            SshAuth::Password(password) => {
                write_private(&credential_file, password.0.as_bytes(), 0o600)?;
                options.extend([
                    "BatchMode=no".to_owned(),
                    "PubkeyAuthentication=no".to_owned(),
                    "PreferredAuthentications=password,keyboard-interactive".to_owned(),
                    "NumberOfPasswordPrompts=1".to_owned(),
                ]);
                ssh.env("SSH_ASKPASS", self.dir.path().join("askpass"))
                    .env("SSH_ASKPASS_REQUIRE", "force")
                    .env("DISPLAY", "none");
            }
        }
        for option in options {
            ssh.arg("-o").arg(option);
        }
        if let Some(ticket) = &ticket {
            ticket.apply(&mut ssh);
        }
        // -E takes the master's own messages; a ProxyJump hop's ssh (of an alias's
        // ssh_config) writes its own, such as a hop's unknown host key, to the stderr it
        // inherits: into the log too, where the failure is classified.
        let hop_messages = std::fs::OpenOptions::new().append(true).open(&log)?;
        ssh.arg("--")
            .arg(&self.config.host)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(hop_messages)
            .kill_on_drop(true);
        die_with_parent(&mut ssh);

        tracing::debug!(target = %self.target, "opening SSH master connection");
        let master = ssh.spawn().map_err(|err| {
            Error::new(
                ErrorKind::Unreachable,
                format!("cannot start {}: {err}", self.config.ssh_program.display()),
            )
            .with_source(err)
            .permanent()
        })?;
        let result = self.await_master(master, &control, &log).await;
        let _ = std::fs::remove_file(&credential_file);
        let _ = std::fs::remove_file(&certificate_file);
        result
    }

    /// The master someone else keeps at `control` ([`SshAuth::ControlMaster`]).
    async fn resume(&self, control: &Path) -> Result<Connection> {
        let session = Session::resume_mux(control.into(), None);
        session.check().await.map_err(|err| {
            Error::new(
                ErrorKind::LoginRequired,
                format!(
                    "{}: no login open at {} (its master connection ended or was never opened)",
                    self.target,
                    control.display()
                ),
            )
            .with_source(err)
        })?;
        let generation = self.connections_opened.fetch_add(1, Ordering::Relaxed) + 1;
        tracing::info!(target = %self.target, generation, control = %control.display(), "SSH master connection reused");
        Ok(Connection {
            session: Arc::new(session),
            master: None,
            generation,
        })
    }

    async fn await_master(
        &self,
        mut master: tokio::process::Child,
        control: &Path,
        log: &Path,
    ) -> Result<Connection> {
        let deadline = Instant::now() + self.config.connect_timeout + Duration::from_secs(5);
        loop {
            if let Some(status) = master.try_wait()? {
                let log = std::fs::read_to_string(log).unwrap_or_default();
                let error = classify_connect_failure(&self.target, &log, status.code());
                return Err(match &self.jumps {
                    Some(jumps) => jumps.name_failing_hop(error, &self.target),
                    None => error,
                });
            }
            if control.exists() {
                let session = Session::resume_mux(control.into(), Some(log.into()));
                if session.check().await.is_ok() {
                    let generation = self.connections_opened.fetch_add(1, Ordering::Relaxed) + 1;
                    tracing::info!(target = %self.target, generation, "SSH master connection established");
                    return Ok(Connection {
                        session: Arc::new(session),
                        master: Some(master),
                        generation,
                    });
                }
            }
            if Instant::now() > deadline {
                return Err(Error::new(
                    ErrorKind::Unreachable,
                    format!(
                        "{}: no SSH connection within {:?}",
                        self.target, self.config.connect_timeout
                    ),
                ));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn run_on(
        &self,
        session: &Session,
        line: &str,
        command: &Command,
    ) -> Result<Output, RunFailure> {
        let mut child = session
            .raw_command(line)
            .stdin(if command.get_stdin().is_some() {
                openssh::Stdio::piped()
            } else {
                openssh::Stdio::null()
            })
            .stdout(openssh::Stdio::piped())
            .stderr(openssh::Stdio::piped())
            .spawn()
            .await
            .map_err(RunFailure::NotStarted)?;
        let (stdout, stderr) = exchange(
            child.stdin().take(),
            command.get_stdin(),
            child.stdout().take(),
            child.stderr().take(),
            command.get_output_limit(),
        )
        .await
        .map_err(|err| RunFailure::Broken(openssh::Error::ChildIo(err)))?;
        let (exit_code, signal) = match child.wait().await {
            Ok(status) => (status.code(), status.signal()),
            // The native mux client reports a remote exit 127 as an error; it is an exit code.
            Err(openssh::Error::Remote(err)) if err.kind() == std::io::ErrorKind::NotFound => {
                (Some(127), None)
            }
            // The remote process ended without an exit status: killed by a signal.
            Err(openssh::Error::RemoteProcessTerminated) => (None, None),
            Err(err) => return Err(RunFailure::Broken(err)),
        };
        Ok(Output {
            exit_code,
            signal,
            stdout: stdout.data,
            stderr: stderr.data,
            stdout_truncated: stdout.truncated,
            stderr_truncated: stderr.truncated,
        })
    }

    async fn run_once_more_if_not_started(&self, line: &str, command: &Command) -> Result<Output> {
        let (session, generation) = self.live_connection().await?;
        let failure = match self.run_on(&session, line, command).await {
            Ok(output) => return Ok(output),
            Err(failure) => failure,
        };
        self.invalidate(generation).await;
        match failure {
            RunFailure::NotStarted(err) => {
                // Nothing ran, so one retry on a fresh connection is safe for any command.
                tracing::warn!(target = %self.target, %err, "SSH channel refused; reconnecting");
                let (session, generation) = self.live_connection().await?;
                match self.run_on(&session, line, command).await {
                    Ok(output) => Ok(output),
                    Err(RunFailure::NotStarted(err)) => {
                        self.invalidate(generation).await;
                        Err(connection_lost(&self.target, command, err, false))
                    }
                    Err(RunFailure::Broken(err)) => {
                        self.invalidate(generation).await;
                        Err(connection_lost(&self.target, command, err, true))
                    }
                }
            }
            RunFailure::Broken(err) => Err(connection_lost(&self.target, command, err, true)),
        }
    }
}

#[async_trait]
impl Shell for SshShell {
    fn host(&self) -> &str {
        &self.target
    }

    async fn stream(&self, command: &Command) -> Result<LineStream> {
        let line = command.to_shell_line()?;
        check_line_length(&line, command)?;
        tracing::debug!(target = %self.target, command = %line, "streaming remotely");
        let permit = Arc::clone(&self.sessions)
            .acquire_owned()
            .await
            .map_err(|_| {
                Error::new(
                    ErrorKind::ConnectionLost,
                    format!("{}: shell closed", self.target),
                )
            })?;
        let (session, generation) = self.live_connection().await?;
        let spawned = session
            .arc_raw_command(&line)
            .stdin(openssh::Stdio::null())
            .stdout(openssh::Stdio::piped())
            .stderr(openssh::Stdio::null())
            .spawn()
            .await;
        let mut child = match spawned {
            Ok(child) => child,
            Err(err) => {
                self.invalidate(generation).await;
                return Err(connection_lost(&self.target, command, err, false));
            }
        };
        let stdout = child
            .stdout()
            .take()
            .expect("the command's stdout was asked to be piped");
        // The remote command sees its channel close when the child is dropped with the
        // stream, and ends at its next write (SIGPIPE).
        Ok(stream_lines(
            stdout,
            (child, permit),
            format!("{:?} on {}", command.get_program(), self.target),
        ))
    }

    async fn run(&self, command: &Command) -> Result<Output> {
        let line = command.to_shell_line()?;
        check_line_length(&line, command)?;
        // The line names programs and files; a job's script and environment, and any
        // password, travel on stdin or in files, never in it.
        tracing::debug!(target = %self.target, command = %line, "running remotely");
        self.in_session_within_time_limit(
            command,
            self.run_once_more_if_not_started(&line, command),
        )
        .await
    }

    async fn pipe(
        &self,
        command: &Command,
        input: Option<PipeInput>,
        output: Option<PipeOutput>,
    ) -> Result<Output> {
        let line = command.to_shell_line()?;
        check_line_length(&line, command)?;
        tracing::debug!(target = %self.target, command = %line, "streaming data remotely");
        self.in_session_within_time_limit(
            command,
            self.pipe_connected(&line, command, input, output),
        )
        .await
    }
}

impl SshShell {
    /// `work`, which runs `command`, once one of the shell's sessions is free, cut off at the
    /// command's time limit (the remote command may go on running).
    async fn in_session_within_time_limit(
        &self,
        command: &Command,
        work: impl Future<Output = Result<Output>>,
    ) -> Result<Output> {
        // Sessions are taken first come, first served: a bulk command waits for its share
        // first, so that at most that many stand ahead of a short command. The semaphore
        // is never closed.
        let _bulk = match command.is_bulk() {
            true => self.bulk_sessions.acquire().await.ok(),
            false => None,
        };
        let _permit = self.sessions.acquire().await.map_err(|_| {
            Error::new(
                ErrorKind::ConnectionLost,
                format!("{}: shell closed", self.target),
            )
        })?;
        tokio::time::timeout(command.get_timeout(), work)
            .await
            .unwrap_or_else(|_| {
                Err(Error::new(
                    ErrorKind::Timeout,
                    format!(
                        "{}: {:?} did not finish within {:?} (it may still be running there)",
                        self.target,
                        command.get_program(),
                        command.get_timeout()
                    ),
                ))
            })
    }

    /// [`Shell::pipe`] on a live connection: a channel refused before anything was sent is
    /// tried once more on a fresh connection, as [`Shell::run`] does; once the data flows,
    /// a broken connection is [`ConnectionLost`](ErrorKind::ConnectionLost) (temporary to
    /// the caller, who sends the whole stream again).
    async fn pipe_connected(
        &self,
        line: &str,
        command: &Command,
        input: Option<PipeInput>,
        output: Option<PipeOutput>,
    ) -> Result<Output> {
        let piped = |yes: bool| {
            if yes {
                openssh::Stdio::piped()
            } else {
                openssh::Stdio::null()
            }
        };
        let mut attempt = 0;
        let (mut child, generation) = loop {
            attempt += 1;
            let (session, generation) = self.live_connection().await?;
            let spawned = session
                .arc_raw_command(line)
                .stdin(piped(input.is_some()))
                .stdout(piped(output.is_some()))
                .stderr(openssh::Stdio::piped())
                .spawn()
                .await;
            match spawned {
                Ok(child) => break (child, generation),
                Err(err) => {
                    self.invalidate(generation).await;
                    if attempt > 1 {
                        return Err(connection_lost(&self.target, command, err, false));
                    }
                    tracing::warn!(target = %self.target, %err, "SSH channel refused; reconnecting");
                }
            }
        };
        let broken = |err: openssh::Error| connection_lost(&self.target, command, err, true);
        let stdout = child.stdout().take();
        if let Some(stdout) = stdout.as_ref().filter(|_| command.is_bulk()) {
            widen_pipe(stdout);
        }
        let exchanged = exchange_streams(
            child.stdin().take(),
            input,
            stdout,
            output,
            child.stderr().take(),
            command.get_output_limit(),
        )
        .await;
        let stderr = match exchanged {
            Ok(stderr) => stderr,
            Err(err) => {
                self.invalidate(generation).await;
                return Err(broken(openssh::Error::ChildIo(err)));
            }
        };
        let (exit_code, signal) = match child.wait().await {
            Ok(status) => (status.code(), status.signal()),
            Err(openssh::Error::Remote(err)) if err.kind() == std::io::ErrorKind::NotFound => {
                (Some(127), None)
            }
            Err(openssh::Error::RemoteProcessTerminated) => (None, None),
            Err(err) => {
                self.invalidate(generation).await;
                return Err(broken(err));
            }
        };
        Ok(Output {
            exit_code,
            signal,
            stderr: stderr.data,
            stderr_truncated: stderr.truncated,
            ..Output::default()
        })
    }
}

fn connection_lost(
    target: &str,
    command: &Command,
    err: openssh::Error,
    may_have_run: bool,
) -> Error {
    let outcome = if may_have_run {
        "it may or may not have run"
    } else {
        "it did not run"
    };
    Error::new(
        ErrorKind::ConnectionLost,
        format!(
            "{target}: connection lost during {:?}; {outcome}",
            command.get_program()
        ),
    )
    .with_source(err)
}

/// Refuses a command line no remote shell can run. Sent anyway, it fails in a way that
/// says nothing of the cause: the shell exits 1 with "Argument list too long", or, beyond
/// the multiplexer's packet size, the channel is refused and the command reads as a lost
/// connection, which callers would retry for ever.
fn check_line_length(line: &str, command: &Command) -> Result<()> {
    if line.len() > MAX_COMMAND_LINE {
        return Err(Error::invalid_input(format!(
            "command {:?}: {} bytes once quoted, more than the {MAX_COMMAND_LINE} a remote \
             shell accepts on one command line",
            command.get_program(),
            line.len()
        )));
    }
    Ok(())
}

/// Prints the password file that sits beside it; ssh runs it with no arguments we control.
const ASKPASS: &str = "#!/bin/sh\nexec cat \"$(dirname \"$0\")/password\"\n";

/// Arms a parent-death signal in `command`'s process: it gets SIGKILL when the thread that
/// spawned it ends. `SshShell` spawns its masters from the async task that needs the
/// connection, so on a runtime's worker thread, which lives as long as the runtime: a
/// SIGKILLed program leaves no master behind, where `kill_on_drop` cannot act. (A master
/// spawned from a thread that ends earlier dies with it, and the next command reconnects.)
#[allow(unsafe_code)]
fn die_with_parent(command: &mut tokio::process::Command) {
    let parent = nix::unistd::getpid();
    // SAFETY: the closure runs in the child between fork and exec. It calls only prctl(2)
    // and getppid(2), which are async-signal-safe, and allocates nothing (an `io::Error`
    // made from an errno holds no heap data).
    unsafe {
        command.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)?;
            // The parent may have ended before the signal was armed: nobody would send it.
            if nix::unistd::getppid() != parent {
                return Err(nix::errno::Errno::ESRCH.into());
            }
            Ok(())
        });
    }
}

/// Locks `mutex`; a panic elsewhere while it was held leaves nothing half-done here.
fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shell::Password;

    fn args(command: &std::process::Command) -> Vec<String> {
        command
            .get_args()
            .map(|arg| arg.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn an_alias_reads_the_ssh_config_but_host_keys_stay_strict() {
        let dir = tempfile::tempdir().unwrap();
        let control = dir.path().join("hpc");
        let written = dir.path().join("hpc.ssh_config");
        let eight_hours = Duration::from_secs(8 * 3600);
        let login = args(
            &SshConfig::alias("hpc")
                .login_command(&control, eight_hours)
                .unwrap(),
        );
        assert_eq!(
            login[..7],
            [
                "-f",
                "-N",
                "-M",
                "-S",
                &control.display().to_string(),
                "-F",
                &written.display().to_string()
            ]
        );
        for absent in ["-p", "-l", "-i"] {
            assert!(
                !login.iter().any(|arg| arg == absent),
                "{absent}: {login:?}"
            );
        }
        assert!(
            !login.iter().any(|arg| arg.contains("KnownHostsFile")),
            "{login:?}"
        );
        for option in [
            "StrictHostKeyChecking=yes",
            "ForwardAgent=no",
            "ClearAllForwardings=yes",
            "ControlPersist=28800s",
        ] {
            assert!(login.iter().any(|arg| arg == option), "{option}: {login:?}");
        }
        assert_eq!(login[login.len() - 2..], ["--", "hpc"]);
        // A ProxyJump hop's ssh reads the -F file and none of the -o options: the file
        // says it first, and a terminal login may prompt.
        let text = std::fs::read_to_string(&written).unwrap();
        assert!(
            text.contains("\nStrictHostKeyChecking yes\n") && !text.contains("BatchMode"),
            "{text}"
        );
        assert!(
            text.ends_with(&format!(
                "\nInclude ~/.ssh/config /etc/ssh/ssh_config\nCiphers {AES_GCM_FIRST}\n"
            )),
            "{text}"
        );
        let mode = std::fs::metadata(&written).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);

        let mut named = SshConfig::alias("hpc");
        named.ssh_config_file = Some("/home/alice/.ssh/config".into());
        named.accept_new_host_keys = true;
        let text = named.alias_ssh_config(true);
        assert!(
            text.contains("\nStrictHostKeyChecking accept-new\n"),
            "{text}"
        );
        assert!(text.contains("\nBatchMode yes\n"), "{text}");
        assert!(
            text.contains("\nInclude \"/home/alice/.ssh/config\"\nCiphers "),
            "{text}"
        );
    }

    /// What `ssh -G` (which reads the options as `ssh` does, and connects nowhere) says the
    /// master would offer, for `host` read through ssh_config `file` with options `options`.
    fn offered_ciphers(file: &Path, options: &[String], host: &str) -> String {
        let mut ssh = std::process::Command::new("ssh");
        ssh.arg("-G").arg("-F").arg(file);
        for option in options {
            ssh.arg("-o").arg(option);
        }
        let out = ssh.arg(host).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .find_map(|line| line.strip_prefix("ciphers "))
            .unwrap()
            .to_owned()
    }

    #[test]
    fn the_master_offers_aes_gcm_first_unless_an_ssh_config_or_the_caller_chose() {
        let dir = tempfile::tempdir().unwrap();
        let host = SshConfig::new(
            "login1",
            "alice",
            SshAuth::Agent("/run/agent".into()),
            HostKeys::FromSshConfig,
        );
        let options = host.cipher_options();
        assert_eq!(options, [format!("Ciphers={AES_GCM_FIRST}")]);
        assert_eq!(
            offered_ciphers(Path::new("none"), &options, "login1"),
            AES_GCM_FIRST
        );
        let mut plain = host.clone();
        plain.ciphers = None;
        assert!(plain.cipher_options().is_empty());
        for bad in [
            "",
            "aes128-ctr\nProxyCommand sh",
            "aes128-ctr aes256-ctr",
            "a#b",
        ] {
            let mut odd = host.clone();
            odd.ciphers = Some(bad.to_owned());
            let err = odd.check_ciphers().unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidInput, "{bad:?}");
        }
        for fine in [
            AES_GCM_FIRST,
            "-chacha20-poly1305@openssh.com",
            "^aes256-gcm@openssh.com",
        ] {
            let mut other = host.clone();
            other.ciphers = Some(fine.to_owned());
            other.check_ciphers().unwrap();
        }

        // An alias: the user's ssh_config says it for one host; the default for the rest.
        let users = dir.path().join("config");
        std::fs::write(
            &users,
            "Host hpc\n    Ciphers aes256-ctr\nHost other\n    Port 2\n",
        )
        .unwrap();
        let mut alias = SshConfig::alias("hpc");
        alias.ssh_config_file = Some(users);
        assert!(alias.cipher_options().is_empty());
        let written = dir.path().join("alias_config");
        std::fs::write(&written, alias.alias_ssh_config(true)).unwrap();
        assert_eq!(offered_ciphers(&written, &[], "hpc"), "aes256-ctr");
        // The file's last `Host` block ends with the file.
        for host in ["other", "third"] {
            assert_eq!(
                offered_ciphers(&written, &[], host),
                AES_GCM_FIRST,
                "{host}"
            );
        }
    }

    #[test]
    fn a_host_reads_no_ssh_config_and_only_its_known_hosts() {
        let config = SshConfig::new(
            "login1",
            "alice",
            SshAuth::KeyFile("/home/alice/.ssh/id_ed25519".into()),
            HostKeys::File("/home/alice/.ssh/known_hosts".into()),
        )
        .port(2222);
        assert_eq!(
            config.destination_args(Path::new("unused")),
            ["-F", "none", "-p", "2222", "-l", "alice"]
        );
        assert_eq!(
            config.host_key_options(Path::new("unused")),
            [
                "StrictHostKeyChecking=yes",
                "UserKnownHostsFile=/home/alice/.ssh/known_hosts",
                "GlobalKnownHostsFile=/dev/null",
            ]
        );
        let login = args(
            &config
                .login_command(Path::new("/tmp/c"), Duration::from_secs(60))
                .unwrap(),
        );
        assert!(
            login
                .windows(2)
                .any(|pair| pair == ["-i", "/home/alice/.ssh/id_ed25519"])
        );
        assert!(login.iter().any(|arg| arg == "IdentitiesOnly=yes"));

        let password = SshConfig::new(
            "login1",
            "alice",
            SshAuth::Password(Password::new("x")),
            HostKeys::File("/k".into()),
        );
        let err = password
            .login_command(Path::new("/tmp/c"), Duration::from_secs(60))
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
    }

    #[tokio::test]
    async fn no_master_at_the_control_socket_is_a_login_required_every_time() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = SshConfig::alias("hpc");
        config.auth = SshAuth::ControlMaster(dir.path().join("gone"));
        config.runtime_dir = Some(dir.path().into());
        let shell = SshShell::new(config).unwrap();
        for _ in 0..2 {
            let err = shell.run(&Command::new("true")).await.unwrap_err();
            assert_eq!(err.kind(), ErrorKind::LoginRequired, "{err}");
            assert!(!err.is_temporary(), "retrying cannot open a login");
            assert!(err.message().starts_with("hpc: no login open at "), "{err}");
        }
        assert_eq!(shell.connections_opened(), 0);
    }

    #[test]
    fn an_unreadable_key_file_is_named_not_blamed_on_the_server() {
        let config = SshConfig::new(
            "login",
            "alice",
            SshAuth::KeyFile("/nonexistent/id_ed25519".into()),
            HostKeys::Entries("login ssh-ed25519 AAAA".into()),
        );
        let err = SshShell::new(config).map(drop).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
        assert!(
            err.message()
                .starts_with("cannot read the private key /nonexistent/id_ed25519: "),
            "{err}"
        );
    }

    #[test]
    fn command_lines_longer_than_a_remote_shell_takes_are_invalid_input() {
        let fits = Command::new("echo").arg("x".repeat(MAX_COMMAND_LINE - "echo ".len()));
        let line = fits.to_shell_line().unwrap();
        assert_eq!(line.len(), MAX_COMMAND_LINE);
        assert!(check_line_length(&line, &fits).is_ok());

        // Quoting counts: 70 000 bytes of `'$` grow past the limit once quoted.
        let grows = Command::new("sh").arg("'$".repeat(35_000));
        let err = check_line_length(&grows.to_shell_line().unwrap(), &grows).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
        assert!(!err.is_temporary(), "retrying cannot help");
        assert!(err.message().starts_with("command \"sh\": "), "{err}");
        assert!(err.message().contains("bytes once quoted"), "{err}");
        assert!(err.message().len() < 200, "the line itself is not quoted");
    }

    #[test]
    fn a_host_key_failure_names_the_host_whose_key_failed() {
        // A ProxyJump hop's words (ssh 9.2), then the master's.
        let unknown = "No ED25519 host key is known for [127.0.0.1]:2230 and you have \
                       requested strict checking.\nHost key verification failed.\n\
                       Connection closed by UNKNOWN port 65535\n";
        let err = classify_connect_failure("hpc", unknown, Some(255));
        assert_eq!(err.kind(), ErrorKind::HostKeyMismatch);
        assert!(
            err.message()
                .contains("(No ED25519 host key is known for [127.0.0.1]:2230 ")
        );
        let changed = "@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @\n\
                       Host key for [127.0.0.1]:2231 has changed and you have requested \
                       strict checking.\nHost key verification failed.\n";
        let err = classify_connect_failure("hpc", changed, Some(255));
        assert!(
            err.message()
                .contains("(Host key for [127.0.0.1]:2231 has changed ")
        );
    }

    #[test]
    fn connect_failures_are_classified_from_real_ssh_messages() {
        let cases = [
            (
                "@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@\n@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @\nHost key verification failed.\n",
                ErrorKind::HostKeyMismatch,
                false,
            ),
            (
                "No ED25519 host key is known for [127.0.0.1]:2222 and you have requested strict checking.\nHost key verification failed.\n",
                ErrorKind::HostKeyMismatch,
                false,
            ),
            (
                "batch@127.0.0.1: Permission denied (publickey,password).\n",
                ErrorKind::AuthenticationFailed,
                false,
            ),
            (
                "ssh: connect to host 127.0.0.1 port 2299: Connection refused\n",
                ErrorKind::Unreachable,
                true,
            ),
            (
                "ssh: Could not resolve hostname nowhere.invalid: Name or service not known\n",
                ErrorKind::Unreachable,
                true,
            ),
            ("", ErrorKind::Unreachable, true),
        ];
        for (log, kind, temporary) in cases {
            let err = classify_connect_failure("batch@h:22", log, Some(255));
            assert_eq!(err.kind(), kind, "{log}");
            assert_eq!(err.is_temporary(), temporary, "{log}");
            assert!(err.message().starts_with("batch@h:22: "), "{err}");
            assert!(err.message().ends_with("ssh exit 255)"), "{err}");
        }
    }
}
