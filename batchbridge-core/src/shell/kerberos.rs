//! Kerberos logins (GSSAPI): a principal's keytab ([`KerberosKeytab`]), or the user's own
//! ticket.
//!
//! A keytab's ticket is obtained with MIT's `kinit -k -t` into a credential cache in the
//! shell's private directory (`KRB5CCNAME=FILE:…`, given to `kinit` and `ssh` alone, never
//! the process's default cache), afresh for every login: GSSAPI needs the ticket only while
//! the master connection authenticates (nothing is delegated to the server), so the cache
//! is removed as soon as it has, and a ticket never runs out while in use however short the
//! realm's ticket lifetime. A keytab given as bytes is on disk (mode 0600, in the same
//! directory) only while `kinit` reads it.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Output;

use super::private_file::write_private;
use crate::error::{Error, ErrorKind, Result};

/// The `ssh` options of a GSSAPI login: Kerberos only, nothing delegated, no prompt.
pub(super) const GSSAPI_OPTIONS: [&str; 9] = [
    "BatchMode=yes",
    "GSSAPIAuthentication=yes",
    "GSSAPIDelegateCredentials=no",
    "PreferredAuthentications=gssapi-with-mic",
    "PubkeyAuthentication=no",
    "PasswordAuthentication=no",
    "KbdInteractiveAuthentication=no",
    "IdentitiesOnly=yes",
    "IdentityAgent=none",
];

/// A keytab: the long-term keys of a principal, as `ktutil` or `kadmin ktadd` write them.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Keytab {
    /// A keytab file, read by `kinit` at every login (one replaced in place is used by the
    /// next).
    File(PathBuf),
    /// A keytab's bytes, e.g. the `keytab` of a Secret. Never shown in `Debug` output.
    Contents(Vec<u8>),
}

impl fmt::Debug for Keytab {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::File(path) => f.debug_tuple("File").field(path).finish(),
            Self::Contents(bytes) => write!(f, "Contents({} bytes)", bytes.len()),
        }
    }
}

/// A principal and its keytab, the credential of [`SshAuth::Keytab`](super::SshAuth::Keytab).
///
/// ```
/// use batchbridge_core::shell::{KerberosKeytab, Keytab, SshAuth};
///
/// let auth = SshAuth::Keytab(KerberosKeytab::new(
///     "alice@HPC.EXAMPLE",
///     Keytab::File("/etc/batchbridge/alice.keytab".into()),
/// ));
/// # drop(auth);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct KerberosKeytab {
    /// The principal the keytab holds keys of, e.g. `alice@HPC.EXAMPLE`.
    pub principal: String,
    /// Its keys.
    pub keytab: Keytab,
    /// The Kerberos configuration (realms, KDCs) for `kinit` and `ssh` (`KRB5_CONFIG`);
    /// when absent, this process's (`$KRB5_CONFIG`, else `/etc/krb5.conf`).
    pub krb5_config: Option<PathBuf>,
}

impl KerberosKeytab {
    /// A principal's keytab, with this process's Kerberos configuration.
    pub fn new(principal: impl Into<String>, keytab: Keytab) -> Self {
        Self {
            principal: principal.into(),
            keytab,
            krb5_config: None,
        }
    }

    /// Uses the Kerberos configuration file `path` instead of this process's.
    pub fn krb5_config(mut self, path: impl Into<PathBuf>) -> Self {
        self.krb5_config = Some(path.into());
        self
    }

    /// Fails at once, naming the file, when a keytab file cannot be read: `kinit` would
    /// say less.
    pub(super) fn check_readable(&self) -> Result<()> {
        if let Keytab::File(path) = &self.keytab {
            std::fs::File::open(path).map_err(|err| {
                Error::new(
                    ErrorKind::InvalidInput,
                    format!("cannot read the keytab {}: {err}", path.display()),
                )
            })?;
        }
        Ok(())
    }

    /// A new ticket for the principal in `dir`'s credential cache, for `target`'s login.
    pub(super) async fn obtain_ticket(&self, dir: &Path, target: &str) -> Result<Ticket> {
        let ticket = Ticket {
            cache: dir.join("krb5cc"),
            krb5_config: self.krb5_config.clone(),
        };
        let written = dir.join("keytab");
        let keytab = match &self.keytab {
            Keytab::File(path) => path.as_path(),
            Keytab::Contents(bytes) => {
                write_private(&written, bytes, 0o600)?;
                written.as_path()
            }
        };
        let mut kinit = tokio::process::Command::new("kinit");
        kinit
            .arg("-c")
            .arg(ticket.cache_name())
            .arg("-k")
            .arg("-t")
            .arg(keytab)
            .arg("--")
            .arg(&self.principal);
        ticket.apply(&mut kinit);
        let output = run("kinit", kinit).await;
        let _ = std::fs::remove_file(&written);
        let output = output?;
        if output.status.success() {
            return Ok(ticket);
        }
        Err(kinit_failure(
            target,
            &self.principal,
            String::from_utf8_lossy(&output.stderr).trim(),
        ))
    }
}

/// A ticket in a shell's private credential cache; the cache is removed when this is
/// dropped, once the login that needed it is over.
#[derive(Debug)]
pub(super) struct Ticket {
    cache: PathBuf,
    krb5_config: Option<PathBuf>,
}

impl Ticket {
    fn cache_name(&self) -> String {
        format!("FILE:{}", self.cache.display())
    }

    /// Points `command` (`kinit`, `ssh`) at this cache and the Kerberos configuration.
    pub(super) fn apply(&self, command: &mut tokio::process::Command) {
        command.env("KRB5CCNAME", self.cache_name());
        if let Some(config) = &self.krb5_config {
            command.env("KRB5_CONFIG", config);
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.cache);
    }
}

/// Checks that the user has a valid ticket in their default credential cache
/// (`$KRB5CCNAME` or the system's default) before `target`'s login, which would otherwise
/// fail as a bare "Permission denied".
pub(super) async fn check_user_ticket(target: &str) -> Result<()> {
    let mut valid = tokio::process::Command::new("klist");
    valid.arg("-s");
    if run("klist", valid).await?.status.success() {
        return Ok(());
    }
    // An expired ticket still names its principal: the kinit to run.
    let listing = run("klist", tokio::process::Command::new("klist")).await?;
    let principal = String::from_utf8_lossy(&listing.stdout)
        .lines()
        .find_map(|line| line.strip_prefix("Default principal:"))
        .map(|principal| principal.trim().to_owned());
    let action = match principal {
        Some(principal) => format!("run `kinit {principal}`"),
        None => "run `kinit` with your principal, e.g. `kinit alice@HPC.EXAMPLE`".to_owned(),
    };
    Err(Error::new(
        ErrorKind::LoginRequired,
        format!("{target}: no valid Kerberos ticket (none, or expired): {action}, then try again"),
    ))
}

/// Runs a Kerberos client program, output captured and no stdin (it must never prompt).
async fn run(program: &str, mut command: tokio::process::Command) -> Result<Output> {
    command
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|err| {
            Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "cannot run {program}: {err} (Kerberos logins need MIT Kerberos's \
                     clients, e.g. Debian's krb5-user)"
                ),
            )
            .with_source(err)
            .permanent()
        })
}

/// `kinit`'s refusal as an error: an unreachable KDC is worth another try, a refused
/// principal or keytab is a refused credential, and a realm no krb5.conf names a KDC for
/// ("Cannot find KDC") is a missing configuration that no retry mends.
fn kinit_failure(target: &str, principal: &str, message: &str) -> Error {
    if message.contains("Cannot find KDC") {
        return Error::new(
            ErrorKind::InvalidInput,
            format!(
                "{target}: kinit -k for {principal} failed: {message}; no krb5.conf read here \
                 names a KDC for that realm: give the realm's krb5.conf (KRB5_CONFIG, \
                 KerberosKeytab's krb5_config, or the operator chart's \
                 kerberos.krb5ConfConfigMap)"
            ),
        )
        .permanent();
    }
    let unreachable = ["Cannot contact any KDC", "Connection refused"];
    let kind = if unreachable.iter().any(|text| message.contains(text)) {
        ErrorKind::Unreachable
    } else {
        ErrorKind::AuthenticationFailed
    };
    Error::new(
        kind,
        format!("{target}: kinit -k for {principal} failed: {message}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keytab_bytes_never_show_in_debug_output() {
        let keytab = Keytab::Contents(b"\x05\x02secret".to_vec());
        assert_eq!(format!("{keytab:?}"), "Contents(8 bytes)");
    }

    #[test]
    fn an_unreachable_kdc_is_temporary_and_a_refused_keytab_is_not() {
        let unreachable = kinit_failure(
            "batch@hpc:22",
            "batch@HPC",
            "kinit: Cannot contact any KDC for realm 'HPC' while getting initial credentials",
        );
        assert_eq!(unreachable.kind(), ErrorKind::Unreachable);
        assert!(unreachable.is_temporary());
        let refused = kinit_failure(
            "batch@hpc:22",
            "batch@HPC",
            "kinit: Password incorrect while getting initial credentials",
        );
        assert_eq!(refused.kind(), ErrorKind::AuthenticationFailed);
        assert!(refused.message().contains("batch@HPC"), "{refused}");
    }

    #[test]
    fn a_realm_without_a_known_kdc_is_a_missing_krb5_conf_not_an_outage() {
        // What MIT kinit 1.20 prints when no krb5.conf read names the realm's KDC.
        let unconfigured = kinit_failure(
            "batch@localhost:2234",
            "batch@BATCHBRIDGE.TEST",
            "kinit: Cannot find KDC for realm \"BATCHBRIDGE.TEST\" while getting initial credentials",
        );
        assert_eq!(unconfigured.kind(), ErrorKind::InvalidInput);
        assert!(!unconfigured.is_temporary());
        assert!(
            unconfigured.message().contains("KRB5_CONFIG"),
            "{unconfigured}"
        );
    }
}
