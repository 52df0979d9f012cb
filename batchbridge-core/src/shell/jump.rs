//! Jump hosts: the SSH servers a connection passes through on its way to the login host
//! ([`SshConfig::jump_hosts`](super::SshConfig::jump_hosts)).
//!
//! Each hop is a `Host` block of an ssh_config file the shell writes into its private
//! directory, with that hop's own address, user, credential and known hosts, strict host
//! key checking and no forwarding of any kind. Hop N reaches hop N+1 through a
//! `ProxyCommand` that runs `ssh -W` to hop N, and the master connection reaches the login
//! host the same way through the last hop. `ProxyCommand` rather than `ProxyJump`, which
//! is the same `ssh -W` written for us: the `ssh` that `ProxyJump` starts cannot be told
//! where to log, so a hop's host-key or login failure would vanish with its stderr; ours
//! log (`-E`) to a file per hop, where [`JumpChain::name_failing_hop`] finds them.

use std::path::{Path, PathBuf};

use super::connect_failure::classify_connect_failure;
use super::credential::{HostKeys, SshAuth, key_file_text};
use super::private_file::write_private;
use crate::error::{Error, ErrorKind, Result};

/// One SSH server on the way to the login host, with its own credential and host keys.
///
/// Every hop's host key is checked strictly (an unknown or changed key is refused), and
/// nothing is forwarded to it: no agent, no X11, no ports.
///
/// ```
/// use batchbridge_core::shell::{HostKeys, JumpHost, SshAuth};
///
/// let bastion = JumpHost::new(
///     "bastion.example.org",
///     "alice",
///     SshAuth::KeyFile("/home/alice/.ssh/bastion_ed25519".into()),
///     HostKeys::Entries("[bastion.example.org]:2201 ssh-ed25519 AAAA…".into()),
/// )
/// .port(2201);
/// assert_eq!(bastion.address(), "bastion.example.org:2201");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct JumpHost {
    /// Host name or address, as the previous hop (or this machine, for the first) reaches it.
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// The user on this hop.
    pub user: String,
    /// This hop's credential: a key file or a key's text (either with its certificate), an
    /// agent or a password (each hop's through an askpass helper of its own). Key texts,
    /// certificates given as text and passwords are on disk, like the login's, only while
    /// the connection logs in.
    pub auth: SshAuth,
    /// This hop's host keys; a hop whose key is not among them is refused.
    pub host_keys: HostKeys,
}

impl JumpHost {
    /// A hop on port 22.
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
        }
    }

    /// Sets the port.
    pub fn port(mut self, port: u16) -> Self {
        self.port = port;
        self
    }

    /// `host:port`, as messages name the hop.
    pub fn address(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }
}

/// The files of a shell's jump hosts, in its private directory.
#[derive(Debug)]
pub(super) struct JumpChain {
    /// `-o ProxyCommand=…` for the master connection: through the last hop.
    proxy_option: String,
    /// Where each hop's key text or password goes while the master authenticates, with it.
    secrets: Vec<(PathBuf, String)>,
    /// Each hop's log: what the `ssh` that logs in to it says.
    logs: Vec<PathBuf>,
    /// How messages name each hop: `jump host N (host:port)`.
    names: Vec<String>,
    /// The `ssh-keyscan` command that shows each hop's host key.
    keyscans: Vec<String>,
}

/// The alias of hop `index` (0-based) in the written ssh_config; no real host name looks
/// like it, so no block meant for a hop matches the login host.
fn alias(index: usize) -> String {
    format!("batchbridge-jump-{}", index + 1)
}

impl JumpChain {
    /// Checks the hops and writes their ssh_config and known hosts into `dir`; `None`
    /// without hops. `ssh_program` runs each hop.
    pub(super) fn prepare(
        hops: &[JumpHost],
        dir: &Path,
        ssh_program: &Path,
        connect_timeout_secs: u64,
        ciphers: Option<&str>,
    ) -> Result<Option<Self>> {
        if hops.is_empty() {
            return Ok(None);
        }
        let config = dir.join("jump_config");
        // The shell `ssh` starts a ProxyCommand with gets the paths quoted, and `%` in them
        // doubled: ssh would read it as one of its tokens, as in `[%h]:%p`.
        let quoted = |path: &Path| -> Result<String> {
            let text = path_text(path)?.replace('%', "%%");
            shlex::try_quote(&text)
                .map(|quoted| quoted.into_owned())
                .map_err(|err| Error::invalid_input(format!("path {text:?}: {err}")))
        };
        let logs: Vec<PathBuf> = (0..hops.len())
            .map(|index| dir.join(format!("{}.log", alias(index))))
            .collect();
        let ssh = quoted(ssh_program)?;
        let config_file = quoted(&config)?;
        let quoted_logs = logs
            .iter()
            .map(|log| quoted(log))
            .collect::<Result<Vec<_>>>()?;
        // The `ssh` that logs in to hop `through`, logging to that hop's log, with its own
        // askpass helper when it logs in with a password.
        let proxy_command = |through: usize, askpass: Option<&str>| {
            let ssh_w = format!(
                "{ssh} -E {} -F {config_file} -W '[%h]:%p' {}",
                quoted_logs[through],
                alias(through)
            );
            match askpass {
                Some(helper) => format!(
                    "env SSH_ASKPASS={helper} SSH_ASKPASS_REQUIRE=force DISPLAY=none {ssh_w}"
                ),
                None => ssh_w,
            }
        };
        let mut askpass: Vec<Option<String>> = Vec::new();
        let mut text = String::from(
            "# Written by batchbridge: the jump hosts on the way to the login host, nearest first.\n",
        );
        let mut secrets = Vec::new();
        for (index, hop) in hops.iter().enumerate() {
            let what = format!("jump host {} ({})", index + 1, hop.address());
            plain_word(&hop.host, &what, "host")?;
            plain_word(&hop.user, &what, "user")?;
            // Each hop's own known hosts, never what an ssh_config would find.
            let known_hosts = if let HostKeys::File(path) = &hop.host_keys {
                path.clone()
            } else if let HostKeys::Entries(entries) = &hop.host_keys {
                let path = dir.join(format!("{}.known_hosts", alias(index)));
                write_private(&path, entries.as_bytes(), 0o600)?;
                path
            } else {
                return Err(Error::invalid_input(format!(
                    "{what}: a jump host needs its own known hosts (a file or its lines)"
                )));
            };
            text.push_str(&format!(
                "\nHost {}\n    HostName {}\n    Port {}\n    User {}\n",
                alias(index),
                hop.host,
                hop.port,
                hop.user
            ));
            let key_only = "    BatchMode yes\n    PasswordAuthentication no\n    \
                            KbdInteractiveAuthentication no\n";
            let mut helper = None;
            let auth_options = match &hop.auth {
                SshAuth::KeyFile(path) | SshAuth::CertifiedKeyFile { key: path, .. } => {
                    std::fs::File::open(path).map_err(|err| {
                        Error::invalid_input(format!(
                            "{what}: cannot read the private key {}: {err}",
                            path.display()
                        ))
                    })?;
                    text.push_str(&identity_lines(path)?);
                    if let SshAuth::CertifiedKeyFile { certificate, .. } = &hop.auth {
                        text.push_str(&certificate_line(certificate)?);
                    }
                    key_only
                }
                SshAuth::Key(key) | SshAuth::CertifiedKey { key, .. } => {
                    let path = dir.join(format!("{}.id", alias(index)));
                    text.push_str(&identity_lines(&path)?);
                    secrets.push((path, key_file_text(key)));
                    if let SshAuth::CertifiedKey { certificate, .. } = &hop.auth {
                        let file = dir.join(format!("{}.id-cert.pub", alias(index)));
                        text.push_str(&certificate_line(&file)?);
                        secrets.push((file, format!("{}\n", certificate.trim())));
                    }
                    key_only
                }
                SshAuth::Agent(socket) => {
                    text.push_str(&format!("    IdentityAgent {}\n", config_path(socket)?));
                    key_only
                }
                // Each hop's password has a helper of its own, which the `ssh` logging in
                // to that hop alone is given: one helper would answer every hop alike.
                SshAuth::Password(password) => {
                    let name = alias(index);
                    let script = dir.join(format!("{name}.askpass"));
                    let helper_text =
                        format!("#!/bin/sh\nexec cat \"$(dirname \"$0\")/{name}.password\"\n");
                    write_private(&script, helper_text.as_bytes(), 0o700)?;
                    helper = Some(quoted(&script)?);
                    secrets.push((
                        dir.join(format!("{name}.password")),
                        password.text().to_owned(),
                    ));
                    "    BatchMode no\n    PubkeyAuthentication no\n    \
                     PreferredAuthentications password,keyboard-interactive\n    \
                     NumberOfPasswordPrompts 1\n"
                }
                _ => {
                    return Err(Error::invalid_input(format!(
                        "{what}: a jump host logs in with a key file or a key's text (either \
                         with its certificate), an ssh-agent or a password"
                    )));
                }
            };
            text.push_str(&format!(
                "    UserKnownHostsFile {}\n    GlobalKnownHostsFile /dev/null\n    \
                 StrictHostKeyChecking yes\n    CheckHostIP no\n{auth_options}    \
                 ForwardAgent no\n    ForwardX11 no\n    ConnectTimeout {connect_timeout_secs}\n    \
                 ServerAliveInterval 15\n    ServerAliveCountMax 3\n",
                config_path(&known_hosts)?
            ));
            if let Some(ciphers) = ciphers {
                text.push_str(&format!("    Ciphers {ciphers}\n"));
            }
            if index > 0 {
                let previous = askpass[index - 1].as_deref();
                text.push_str(&format!(
                    "    ProxyCommand {}\n",
                    proxy_command(index - 1, previous)
                ));
            }
            askpass.push(helper);
        }
        write_private(&config, text.as_bytes(), 0o600)?;
        let last = hops.len() - 1;
        Ok(Some(Self {
            proxy_option: format!(
                "ProxyCommand={}",
                proxy_command(last, askpass[last].as_deref())
            ),
            secrets,
            logs,
            names: hops
                .iter()
                .enumerate()
                .map(|(index, hop)| format!("jump host {} ({})", index + 1, hop.address()))
                .collect(),
            keyscans: hops
                .iter()
                .map(|hop| format!("ssh-keyscan -p {} {}", hop.port, hop.host))
                .collect(),
        }))
    }

    /// The option that sends the master connection through the hops.
    pub(super) fn proxy_option(&self) -> &str {
        &self.proxy_option
    }

    /// Before a master logs in: empties the hops' logs, so that they hold this login's
    /// messages only, and writes the hops' key texts and passwords (0600) for it to
    /// authenticate with; those are removed when the returned guard drops.
    pub(super) fn start_login(&self) -> Result<SecretFiles> {
        for log in &self.logs {
            std::fs::write(log, b"")?;
        }
        let mut written = SecretFiles(Vec::new());
        for (path, text) in &self.secrets {
            write_private(path, text.as_bytes(), 0o600)?;
            written.0.push(path.clone());
        }
        Ok(written)
    }

    /// `error`, the failure of a master to log in, put down to the hop that failed, if one
    /// did.
    pub(super) fn name_failing_hop(&self, error: Error, target: &str) -> Error {
        for (index, log) in self.logs.iter().enumerate() {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            if !text.trim().is_empty() {
                return hop_failure(target, &self.names[index], &self.keyscans[index], &text);
            }
        }
        error
    }
}

/// Key texts and passwords on disk while a master authenticates; removed on drop.
#[derive(Debug)]
pub(super) struct SecretFiles(Vec<PathBuf>);

impl Drop for SecretFiles {
    fn drop(&mut self) {
        for path in &self.0 {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Whether `value` is one ssh_config word: not empty, and nothing that could end the word
/// or the line (a space, a line break, a quote, a backslash, `=`) or start a comment (`#`).
pub(super) fn is_config_word(value: &str) -> bool {
    !value.is_empty()
        && !value
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || "\"'#\\=".contains(c))
}

/// A host or user name as one ssh_config word ([`is_config_word`]) that cannot be read as
/// an option (a leading `-`) or hold an ssh token (`%`, which ssh expands in these).
fn plain_word(value: &str, what: &str, field: &str) -> Result<()> {
    let bad = value.starts_with('-') || value.contains('%') || !is_config_word(value);
    if bad {
        return Err(Error::invalid_input(format!(
            "{what}: {field} {value:?} is not a plain name"
        )));
    }
    Ok(())
}

/// `path` as a path argument of ssh_config: quoted, `%` escaped (ssh expands tokens in it).
fn config_path(path: &Path) -> Result<String> {
    let text = path_text(path)?;
    if text.contains('"') {
        return Err(Error::invalid_input(format!(
            "path {text:?}: ssh_config cannot quote a path with a double quote"
        )));
    }
    Ok(format!("\"{}\"", text.replace('%', "%%")))
}

fn identity_lines(path: &Path) -> Result<String> {
    Ok(format!(
        "    IdentityFile {}\n    IdentitiesOnly yes\n    IdentityAgent none\n",
        config_path(path)?
    ))
}

fn certificate_line(path: &Path) -> Result<String> {
    Ok(format!("    CertificateFile {}\n", config_path(path)?))
}

fn path_text(path: &Path) -> Result<&str> {
    path.to_str()
        .filter(|text| !text.chars().any(char::is_control))
        .ok_or_else(|| {
            Error::invalid_input(format!(
                "path {}: not usable in an ssh_config",
                path.display()
            ))
        })
}

/// The first hop whose `ssh` said something while a master failed to log in, as the error
/// of the connection to `target`: which hop, what went wrong there and, for a host key,
/// the `ssh-keyscan` line that shows the hop's key. A hop's `ssh` says nothing while all
/// goes well, so a failure of the login host itself names no hop.
fn hop_failure(target: &str, name: &str, keyscan: &str, log: &str) -> Error {
    let kind = classify_connect_failure(target, log, None).kind();
    let lines = || log.lines().map(str::trim).filter(|line| !line.is_empty());
    let line_with =
        |needles: &[&str]| lines().find(|line| needles.iter().any(|n| line.contains(n)));
    let (what, detail, hint) = match kind {
        ErrorKind::HostKeyMismatch => (
            "its host key is not among the hop's trusted host keys",
            line_with(&["Host key for", "host key is known for"]),
            format!(
                "; see its key with `{keyscan}`, check the fingerprint with the hop's \
                 administrators, and add the line to that hop's known hosts"
            ),
        ),
        ErrorKind::AuthenticationFailed => (
            "the hop refused its credentials",
            line_with(&["Permission denied", "Too many authentication failures"]),
            String::new(),
        ),
        _ => ("cannot go on from or to it", None, String::new()),
    };
    let detail = detail.or_else(|| lines().next_back()).unwrap_or_default();
    Error::new(
        kind,
        format!("{target}: {name} on the way: {what} ({detail}){hint}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shell::Password;

    fn hop(host: &str, port: u16, auth: SshAuth) -> JumpHost {
        JumpHost::new(
            host,
            "batch",
            auth,
            HostKeys::Entries(format!("[{host}]:{port} ssh-ed25519 AAAA")),
        )
        .port(port)
    }

    fn config_text(dir: &Path) -> String {
        std::fs::read_to_string(dir.join("jump_config")).unwrap()
    }

    fn prepare(hops: &[JumpHost], dir: &Path) -> Result<Option<JumpChain>> {
        JumpChain::prepare(
            hops,
            dir,
            Path::new("/usr/bin/ssh"),
            15,
            Some("aes128-gcm@openssh.com"),
        )
    }

    #[test]
    fn each_hop_is_a_block_with_its_own_credential_and_known_hosts_reached_through_the_one_before()
    {
        let dir = tempfile::tempdir().unwrap();
        let key_file = dir.path().join("hop1_key");
        std::fs::write(&key_file, "key").unwrap();
        let hops = [
            hop("bastion1", 2230, SshAuth::KeyFile(key_file.clone())),
            hop("bastion2", 2231, SshAuth::Key(Password::new("KEY TEXT"))),
        ];
        let chain = prepare(&hops, dir.path()).unwrap().unwrap();
        let d = dir.path().display();
        let ssh_w = |hop: usize| {
            format!(
                "/usr/bin/ssh -E {d}/batchbridge-jump-{hop}.log -F {d}/jump_config -W '[%h]:%p' \
                 batchbridge-jump-{hop}"
            )
        };
        assert_eq!(
            config_text(dir.path()),
            format!(
                "# Written by batchbridge: the jump hosts on the way to the login host, nearest first.\n\
                 \n\
                 Host batchbridge-jump-1\n    HostName bastion1\n    Port 2230\n    User batch\n    \
                 IdentityFile \"{d}/hop1_key\"\n    IdentitiesOnly yes\n    IdentityAgent none\n    \
                 UserKnownHostsFile \"{d}/batchbridge-jump-1.known_hosts\"\n    \
                 GlobalKnownHostsFile /dev/null\n    StrictHostKeyChecking yes\n    CheckHostIP no\n    \
                 BatchMode yes\n    PasswordAuthentication no\n    KbdInteractiveAuthentication no\n    \
                 ForwardAgent no\n    ForwardX11 no\n    ConnectTimeout 15\n    \
                 ServerAliveInterval 15\n    ServerAliveCountMax 3\n    \
                 Ciphers aes128-gcm@openssh.com\n\
                 \n\
                 Host batchbridge-jump-2\n    HostName bastion2\n    Port 2231\n    User batch\n    \
                 IdentityFile \"{d}/batchbridge-jump-2.id\"\n    IdentitiesOnly yes\n    IdentityAgent none\n    \
                 UserKnownHostsFile \"{d}/batchbridge-jump-2.known_hosts\"\n    \
                 GlobalKnownHostsFile /dev/null\n    StrictHostKeyChecking yes\n    CheckHostIP no\n    \
                 BatchMode yes\n    PasswordAuthentication no\n    KbdInteractiveAuthentication no\n    \
                 ForwardAgent no\n    ForwardX11 no\n    ConnectTimeout 15\n    \
                 ServerAliveInterval 15\n    ServerAliveCountMax 3\n    \
                 Ciphers aes128-gcm@openssh.com\n    ProxyCommand {}\n",
                ssh_w(1)
            )
        );
        assert_eq!(chain.proxy_option(), format!("ProxyCommand={}", ssh_w(2)));
        let known = std::fs::read_to_string(dir.path().join("batchbridge-jump-2.known_hosts"));
        assert_eq!(known.unwrap(), "[bastion2]:2231 ssh-ed25519 AAAA");

        // The key text is on disk only while the guard lives.
        let key = dir.path().join("batchbridge-jump-2.id");
        let guard = chain.start_login().unwrap();
        assert_eq!(std::fs::read_to_string(&key).unwrap(), "KEY TEXT\n");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&key).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        drop(guard);
        assert!(!key.exists());
    }

    #[test]
    fn a_password_hop_gets_an_askpass_helper_of_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let hops = [
            hop(
                "bastion1",
                2230,
                SshAuth::Password(Password::new("first secret")),
            ),
            hop("bastion2", 2231, SshAuth::Agent("/agent.sock".into())),
        ];
        let chain = prepare(&hops, dir.path()).unwrap().unwrap();
        let d = dir.path().display();
        let config = config_text(dir.path());
        assert!(
            config.contains(
                "    CheckHostIP no\n    BatchMode no\n    PubkeyAuthentication no\n    \
                 PreferredAuthentications password,keyboard-interactive\n    \
                 NumberOfPasswordPrompts 1\n    ForwardAgent no\n"
            ),
            "{config}"
        );
        // Hop 2 is reached by the `ssh` that logs in to hop 1: it alone gets hop 1's helper.
        assert!(
            config.contains(&format!(
                "    ProxyCommand env SSH_ASKPASS={d}/batchbridge-jump-1.askpass \
                 SSH_ASKPASS_REQUIRE=force DISPLAY=none /usr/bin/ssh -E {d}/batchbridge-jump-1.log"
            )),
            "{config}"
        );
        assert!(
            !chain.proxy_option().contains("SSH_ASKPASS"),
            "the master reaches the login through hop 2, which takes a key: {}",
            chain.proxy_option()
        );
        use std::os::unix::fs::PermissionsExt;
        let mode = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
        let helper = dir.path().join("batchbridge-jump-1.askpass");
        assert_eq!(mode(&helper), 0o700);
        let password = dir.path().join("batchbridge-jump-1.password");
        assert!(!password.exists(), "only while logging in");
        let guard = chain.start_login().unwrap();
        assert_eq!(mode(&password), 0o600);
        let said = std::process::Command::new(&helper).output().unwrap();
        assert_eq!(said.stdout, b"first secret");
        drop(guard);
        assert!(!password.exists());
        assert!(!config.contains("first secret"));
    }

    #[test]
    fn a_certified_key_hop_names_its_certificate() {
        let dir = tempfile::tempdir().unwrap();
        let key_file = dir.path().join("bastion_ed25519");
        std::fs::write(&key_file, "key").unwrap();
        let hops = [
            hop("bastion1", 22, SshAuth::certified_key_file(&key_file)),
            hop(
                "bastion2",
                22,
                SshAuth::CertifiedKey {
                    key: Password::new("KEY"),
                    certificate: "ssh-ed25519-cert-v01@openssh.com AAAA\n\n".into(),
                },
            ),
        ];
        let chain = prepare(&hops, dir.path()).unwrap().unwrap();
        let d = dir.path().display();
        let config = config_text(dir.path());
        assert!(
            config.contains(&format!(
                "IdentityFile \"{d}/bastion_ed25519\"\n    IdentitiesOnly yes\n    \
                 IdentityAgent none\n    CertificateFile \"{d}/bastion_ed25519-cert.pub\"\n"
            )),
            "{config}"
        );
        assert!(
            config.contains(&format!(
                "    CertificateFile \"{d}/batchbridge-jump-2.id-cert.pub\"\n"
            )),
            "{config}"
        );
        let certificate = dir.path().join("batchbridge-jump-2.id-cert.pub");
        let guard = chain.start_login().unwrap();
        assert_eq!(
            std::fs::read_to_string(&certificate).unwrap(),
            "ssh-ed25519-cert-v01@openssh.com AAAA\n"
        );
        drop(guard);
        assert!(!certificate.exists());
    }

    #[test]
    fn no_hops_write_nothing() {
        let dir = tempfile::tempdir().unwrap();
        assert!(prepare(&[], dir.path()).unwrap().is_none());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn a_percent_in_a_path_is_not_an_ssh_token() {
        let dir = tempfile::tempdir().unwrap();
        let odd = dir.path().join("50%");
        std::fs::create_dir(&odd).unwrap();
        let chain = prepare(&[hop("b", 22, SshAuth::Agent("/a%h".into()))], &odd)
            .unwrap()
            .unwrap();
        assert!(config_text(&odd).contains("IdentityAgent \"/a%%h\"\n"));
        assert!(
            chain
                .proxy_option()
                .ends_with("50%%/jump_config' -W '[%h]:%p' batchbridge-jump-1"),
            "{}",
            chain.proxy_option()
        );
    }

    #[test]
    fn hops_that_cannot_be_written_safely_are_refused_naming_the_hop() {
        let cases = [
            (
                hop("evil\n    ProxyCommand x", 22, SshAuth::Agent("/s".into())),
                "host",
            ),
            (
                hop("-oProxyCommand=x", 22, SshAuth::Agent("/s".into())),
                "host",
            ),
            (hop("%d", 22, SshAuth::Agent("/s".into())), "host"),
            (hop("", 22, SshAuth::Agent("/s".into())), "host"),
            (
                hop("b", 22, SshAuth::FromSshConfig),
                "a jump host logs in with",
            ),
            (
                hop("b", 22, SshAuth::KeyFile("/nonexistent/key".into())),
                "cannot read the private key /nonexistent/key",
            ),
            (hop("b", 22, SshAuth::Agent("/a\"b".into())), "double quote"),
        ];
        for (bad, says) in cases {
            let dir = tempfile::tempdir().unwrap();
            let fine = hop("first", 2230, SshAuth::Agent("/s".into()));
            let err = prepare(&[fine, bad.clone()], dir.path()).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
            assert!(err.message().contains(says), "{err}");
            if !bad.host.is_empty() && !bad.host.contains('\n') {
                assert!(
                    err.message().contains("jump host 2 ") || says == "double quote",
                    "{err}"
                );
            }
        }
        let mut bad_user = hop("b", 22, SshAuth::Agent("/s".into()));
        bad_user.user = "a b".into();
        let dir = tempfile::tempdir().unwrap();
        let err = prepare(&[bad_user], dir.path()).unwrap_err();
        assert!(
            err.message().starts_with("jump host 1 (b:22): user "),
            "{err}"
        );
    }

    /// How the shell reports a master that failed on its way through `hops`, with
    /// `hop_logs` in the hops' logs (nearest first) and the master's own messages of such a
    /// failure in its log.
    fn failed_through(hops: &[JumpHost], hop_logs: &[&str], master_log: &str) -> Error {
        let dir = tempfile::tempdir().unwrap();
        let chain = prepare(hops, dir.path()).unwrap().unwrap();
        let _secrets = chain.start_login().unwrap();
        for (index, log) in hop_logs.iter().enumerate() {
            std::fs::write(dir.path().join(format!("{}.log", alias(index))), log).unwrap();
        }
        let target = "batch@127.0.0.1:2222";
        chain.name_failing_hop(
            classify_connect_failure(target, master_log, Some(255)),
            target,
        )
    }

    /// Real messages of `ssh` 9.2 through the test bed's jump chain (tests/testbed/bastion.sh):
    /// what the `ssh` logging in to a hop says, and what the master says then.
    #[test]
    fn the_hop_that_failed_is_named_with_what_to_do() {
        let hops = [
            hop("127.0.0.1", 2230, SshAuth::Agent("/s".into())),
            hop("127.0.0.1", 2231, SshAuth::Agent("/s".into())),
        ];
        let master = "kex_exchange_identification: Connection closed by remote host\n\
            Connection closed by UNKNOWN port 65535\n";
        let changed = "@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@\n\
            @    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @\n\
            @@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@\n\
            IT IS POSSIBLE THAT SOMEONE IS DOING SOMETHING NASTY!\n\
            Offending ED25519 key in /var/lib/batchbridge-testbed/bastion/hop2/wrong_known_hosts:1\n  \
            remove with:\n  \
            ssh-keygen -f \"/var/lib/batchbridge-testbed/bastion/hop2/wrong_known_hosts\" -R \"[127.0.0.1]:2231\"\n\
            Host key for [127.0.0.1]:2231 has changed and you have requested strict checking.\n\
            Host key verification failed.\n";
        let unknown = "No ED25519 host key is known for [127.0.0.1]:2231 and you have requested strict checking.\n\
            Host key verification failed.\n";
        for log in [changed, unknown] {
            let err = failed_through(&hops, &["", log], master);
            assert_eq!(err.kind(), ErrorKind::HostKeyMismatch, "{err}");
            assert!(!err.is_temporary(), "{err}");
            let message = err.message();
            assert!(
                message
                    .starts_with("batch@127.0.0.1:2222: jump host 2 (127.0.0.1:2231) on the way: "),
                "{err}"
            );
            assert!(message.contains("`ssh-keyscan -p 2231 127.0.0.1`"), "{err}");
            assert!(
                message.contains(" for [127.0.0.1]:2231 "),
                "ssh's own line: {err}"
            );
        }

        let refused = failed_through(
            &hops,
            &["", "batch@127.0.0.1: Permission denied (publickey).\n"],
            master,
        );
        assert_eq!(refused.kind(), ErrorKind::AuthenticationFailed, "{refused}");
        assert_eq!(
            refused.message(),
            "batch@127.0.0.1:2222: jump host 2 (127.0.0.1:2231) on the way: the hop refused its \
             credentials (batch@127.0.0.1: Permission denied (publickey).)"
        );

        let not_forwarded = failed_through(
            &hops,
            &[
                "channel 0: open failed: administratively prohibited: open failed\nstdio forwarding failed\n",
            ],
            master,
        );
        assert_eq!(
            not_forwarded.kind(),
            ErrorKind::Unreachable,
            "{not_forwarded}"
        );
        assert!(not_forwarded.is_temporary());
        assert!(
            not_forwarded
                .message()
                .starts_with("batch@127.0.0.1:2222: jump host 1 (127.0.0.1:2230) on the way: "),
            "{not_forwarded}"
        );

        // The login host's own failure names no hop: the hops' `ssh` said nothing.
        let login = "No ED25519 host key is known for [127.0.0.1]:2222 and you have requested strict checking.\n\
            Host key verification failed.\n";
        let err = failed_through(&hops, &["", ""], login);
        assert_eq!(
            err.message(),
            classify_connect_failure("batch@127.0.0.1:2222", login, Some(255)).message()
        );

        // On port 22 ssh names the host without brackets or port.
        let hop22 = [hop("Bastion.Example.org", 22, SshAuth::Agent("/s".into()))];
        let log = "Host key for bastion.example.org has changed and you have requested strict checking.\n\
            Host key verification failed.\n";
        let err = failed_through(&hop22, &[log], master);
        assert!(
            err.message()
                .contains("`ssh-keyscan -p 22 Bastion.Example.org`"),
            "{err}"
        );
    }
}
