//! What a shell logs in with ([`SshAuth`]) and whose host keys it trusts ([`HostKeys`]):
//! the values an [`SshConfig`](super::SshConfig) and each of its jump hosts carry.

use std::fmt;
use std::path::{Path, PathBuf};

use super::Certificate;
use super::kerberos::KerberosKeytab;
use super::private_file::write_private;
use crate::error::Result;

/// A password that never shows up in `Debug` output or logs.
///
/// ```
/// use batchbridge_core::shell::Password;
/// let password = Password::new("hunter2");
/// assert_eq!(format!("{password:?}"), "Password(***)");
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Password(pub(super) String);

impl Password {
    /// Wraps a password.
    pub fn new(password: impl Into<String>) -> Self {
        Self(password.into())
    }

    /// The secret itself, for the file `ssh` reads it from.
    pub(super) fn text(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Password {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Password(***)")
    }
}

/// How to log in.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SshAuth {
    /// A private key file (OpenSSH or PEM format, no passphrase).
    KeyFile(PathBuf),
    /// A private key's text, e.g. from a `kubernetes.io/ssh-auth` Secret. It is kept in
    /// memory, and written (mode 0600, in the shell's private directory) only while the
    /// master connection authenticates; the file is removed as soon as it has.
    Key(Password),
    /// A password, handed to `ssh` through an askpass helper, never on a command line; like
    /// [`SshAuth::Key`], it is on disk only while the master connection authenticates.
    Password(Password),
    /// The keys an ssh-agent holds, through its socket (usually `$SSH_AUTH_SOCK`): the
    /// private keys never reach this program.
    ///
    /// ```
    /// use batchbridge_core::shell::SshAuth;
    /// let auth = SshAuth::Agent("/run/user/1000/ssh-agent.socket".into());
    /// # drop(auth);
    /// ```
    Agent(PathBuf),
    /// What the ssh_config offers (`IdentityFile`, `CertificateFile`, the agent of
    /// `IdentityAgent` or `$SSH_AUTH_SOCK`), as `ssh` itself would use it, but never a
    /// prompt: the credential of a [`SshConfig::alias`](super::SshConfig::alias).
    FromSshConfig,
    /// A master connection someone else opened and keeps, e.g. with a password and a
    /// one-time password typed at a terminal ([`SshConfig::login_command`](super::SshConfig::login_command)), reached through
    /// its control socket. The shell never opens a connection of its own: while nothing
    /// lives at the socket, commands fail with
    /// [`ErrorKind::LoginRequired`](crate::ErrorKind::LoginRequired).
    ///
    /// ```
    /// use batchbridge_core::shell::SshAuth;
    /// let auth = SshAuth::ControlMaster("/run/user/1000/batchbridge/hpc".into());
    /// # drop(auth);
    /// ```
    ControlMaster(PathBuf),
    /// A private key file with its OpenSSH certificate, signed by a CA the server trusts
    /// (`TrustedUserCAKeys`); [`SshAuth::certified_key_file`] names the certificate as
    /// `ssh-keygen -s` does, beside the key. Both files are read at every login, so a
    /// certificate renewed in place is used by the next connection; an expired one is
    /// refused before connecting ([`ErrorKind::CredentialExpired`](crate::ErrorKind::CredentialExpired)).
    CertifiedKeyFile {
        /// The private key file.
        key: PathBuf,
        /// The certificate file (`…-cert.pub`).
        certificate: PathBuf,
    },
    /// A private key's text with its certificate's text (`ssh-privatekey` and
    /// `ssh-certificate` of a Secret): both written (mode 0600, in the shell's private
    /// directory) only while the master connection authenticates, like [`SshAuth::Key`].
    CertifiedKey {
        /// The private key's text.
        key: Password,
        /// The certificate's one line, as in a `-cert.pub` file.
        certificate: String,
    },
    /// A Kerberos principal's keytab: a ticket is obtained from it (`kinit -k`) into a
    /// credential cache in the shell's private directory for every login, never the
    /// process's default cache, and the login is GSSAPI's, nothing delegated (see
    /// [`KerberosKeytab`]).
    Keytab(KerberosKeytab),
    /// The user's own Kerberos ticket, in their default credential cache (`$KRB5CCNAME` or
    /// the system's default), obtained with `kinit`; logs in with GSSAPI, nothing
    /// delegated. Without a valid ticket, commands fail with
    /// [`ErrorKind::LoginRequired`](crate::ErrorKind::LoginRequired) naming the `kinit` to
    /// run.
    KerberosTicket,
}

impl SshAuth {
    /// A private key file with the certificate `ssh-keygen -s` writes beside it
    /// (`id_ed25519` → `id_ed25519-cert.pub`).
    ///
    /// ```
    /// use batchbridge_core::shell::SshAuth;
    /// let auth = SshAuth::certified_key_file("/home/alice/.ssh/id_ed25519");
    /// assert_eq!(
    ///     auth,
    ///     SshAuth::CertifiedKeyFile {
    ///         key: "/home/alice/.ssh/id_ed25519".into(),
    ///         certificate: "/home/alice/.ssh/id_ed25519-cert.pub".into(),
    ///     }
    /// );
    /// ```
    pub fn certified_key_file(key: impl Into<PathBuf>) -> Self {
        let key = key.into();
        let mut certificate = key.clone().into_os_string();
        certificate.push("-cert.pub");
        Self::CertifiedKeyFile {
            key,
            certificate: certificate.into(),
        }
    }

    /// The certificate of a certified key, read now (a file is read again at every login);
    /// `None` for a credential without one. Callers show its validity and warn before it
    /// ends.
    pub fn certificate(&self) -> Result<Option<Certificate>> {
        match self {
            Self::CertifiedKeyFile { certificate, .. } => Certificate::read(certificate).map(Some),
            Self::CertifiedKey { certificate, .. } => Certificate::parse(certificate).map(Some),
            _ => Ok(None),
        }
    }
}

/// The host keys to trust.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum HostKeys {
    /// A known_hosts file.
    File(PathBuf),
    /// known_hosts lines, e.g. `[login1]:22 ssh-ed25519 AAAA…`.
    Entries(String),
    /// The known-hosts files the ssh_config names (`UserKnownHostsFile`,
    /// `GlobalKnownHostsFile`), else OpenSSH's (`~/.ssh/known_hosts`,
    /// `/etc/ssh/ssh_known_hosts`). Checking stays strict whatever the ssh_config says.
    FromSshConfig,
}

/// Writes a private key's text where `ssh -i` reads it.
pub(super) fn write_key(path: &Path, key: &Password) -> Result<()> {
    write_private(path, key_file_text(key).as_bytes(), 0o600)
}

/// A private key's text as a key file holds it: OpenSSH refuses a key file without the
/// final newline.
pub(super) fn key_file_text(key: &Password) -> String {
    let mut text = key.0.clone();
    if !text.ends_with('\n') {
        text.push('\n');
    }
    text
}
