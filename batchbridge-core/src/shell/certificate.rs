//! [`Certificate`]: what a login needs to know of an OpenSSH user certificate, its validity.
//!
//! The certificate's signature and principals are the server's to check (it alone knows
//! its `TrustedUserCAKeys`); we read the validity so that an expired certificate is refused
//! here with its expiry time, instead of as a bare "Permission denied" from the server, and
//! so that callers can warn before it expires.

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::error::{Error, ErrorKind, Result};

/// An OpenSSH certificate's identity and validity period.
///
/// ```no_run
/// use std::time::SystemTime;
/// use batchbridge_core::shell::Certificate;
///
/// let certificate = Certificate::read("/home/alice/.ssh/id_ed25519-cert.pub".as_ref())?;
/// println!("{} expires at {}", certificate.key_id(), certificate.expires_at_text());
/// certificate.check_not_expired(SystemTime::now())?;
/// # Ok::<(), batchbridge_core::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Certificate {
    key_id: String,
    valid_after: SystemTime,
    /// `None`: valid for ever (OpenSSH's `forever`).
    valid_before: Option<SystemTime>,
}

impl Certificate {
    /// Reads a certificate in OpenSSH's one-line format (a `-cert.pub` file's text).
    pub fn parse(text: &str) -> Result<Self> {
        let certificate = ssh_key::Certificate::from_openssh(text.trim()).map_err(|err| {
            Error::new(
                ErrorKind::InvalidInput,
                format!("not an OpenSSH certificate: {err}"),
            )
        })?;
        Ok(Self {
            key_id: certificate.key_id().to_owned(),
            valid_after: UNIX_EPOCH + Duration::from_secs(certificate.valid_after()),
            // u64::MAX is OpenSSH's "forever", and no SystemTime holds it.
            valid_before: match certificate.valid_before() {
                u64::MAX => None,
                seconds => UNIX_EPOCH.checked_add(Duration::from_secs(seconds)),
            },
        })
    }

    /// Reads the certificate file at `path`.
    pub fn read(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|err| {
            Error::new(
                ErrorKind::InvalidInput,
                format!("cannot read the certificate {}: {err}", path.display()),
            )
        })?;
        Self::parse(&text)
            .map_err(|err| Error::new(err.kind(), format!("{}: {}", path.display(), err.message())))
    }

    /// The key id the issuer gave it (`ssh-keygen -I`), which the server logs.
    pub fn key_id(&self) -> &str {
        &self.key_id
    }

    /// When it becomes valid.
    pub fn valid_after(&self) -> SystemTime {
        self.valid_after
    }

    /// When it stops being valid; `None` for a certificate valid for ever.
    pub fn valid_before(&self) -> Option<SystemTime> {
        self.valid_before
    }

    /// The expiry as an RFC 3339 time in UTC to the second, or `never`, for messages.
    pub fn expires_at_text(&self) -> String {
        self.valid_before.map_or_else(
            || "never".to_owned(),
            |at| humantime::format_rfc3339_seconds(at).to_string(),
        )
    }

    /// Refuses a certificate that has expired at `now`, with an
    /// [`ErrorKind::CredentialExpired`] error that gives its expiry time; the same
    /// certificate is refused for good, so the error is not temporary.
    pub fn check_not_expired(&self, now: SystemTime) -> Result<()> {
        match self.valid_before {
            Some(before) if now >= before => Err(Error::new(
                ErrorKind::CredentialExpired,
                format!(
                    "the SSH certificate {:?} expired at {}; issue a new one (and put it \
                     where this credential is read from)",
                    self.key_id,
                    self.expires_at_text()
                ),
            )),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `ssh-keygen -s ca -I alice -n alice -V 20200101:20200102`: expired.
    const EXPIRED: &str = "ssh-ed25519-cert-v01@openssh.com AAAAIHNzaC1lZDI1NTE5LWNlcnQtdjAxQG9wZW5zc2guY29tAAAAIEG59hZ5mO9WQMYPFPg5xnnToq9ry0dJrxiatCcN0lgCAAAAIBaN3ahUCD+/Bvo5jmPW81929gfjwbrykUJDb8ffHzzrAAAAAAAAAAAAAAABAAAABWFsaWNlAAAACQAAAAVhbGljZQAAAABeC+EAAAAAAF4NMoAAAAAAAAAAggAAABVwZXJtaXQtWDExLWZvcndhcmRpbmcAAAAAAAAAF3Blcm1pdC1hZ2VudC1mb3J3YXJkaW5nAAAAAAAAABZwZXJtaXQtcG9ydC1mb3J3YXJkaW5nAAAAAAAAAApwZXJtaXQtcHR5AAAAAAAAAA5wZXJtaXQtdXNlci1yYwAAAAAAAAAAAAAAMwAAAAtzc2gtZWQyNTUxOQAAACD1ewSrUTX6vDhrSn8iYZyTGAJ4fuZ2+0NZMqO+zxggrwAAAFMAAAALc3NoLWVkMjU1MTkAAABANrfy4AyiZ8ZLe/swexSc0x/jCiylo7Nk8IDlsgROpbC+V7lXY6Px8U5VMmCx3jozJx/5vDK8mf6WVLFsvuXXDA== alice@example";

    #[test]
    fn an_expired_certificate_is_refused_with_its_expiry_time_for_good() {
        let certificate = Certificate::parse(EXPIRED).unwrap();
        assert_eq!(
            certificate.valid_after(),
            UNIX_EPOCH + Duration::from_secs(1_577_836_800)
        );
        let before = certificate.valid_before().unwrap();
        assert!(
            certificate
                .check_not_expired(before - Duration::from_secs(1))
                .is_ok()
        );
        let err = certificate.check_not_expired(before).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::CredentialExpired);
        assert!(!err.is_temporary());
        assert!(
            err.message()
                .contains("\"alice\" expired at 2020-01-02T00:00:00Z"),
            "{err}"
        );
    }

    #[test]
    fn a_public_key_or_garbage_is_not_a_certificate() {
        for text in [
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIPV7BKtRNfq8OGtKfyJhnJMYAnh+5nb7Q1kyo77PGCCv ca",
            "",
            "not a certificate",
        ] {
            let err = Certificate::parse(text).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidInput, "{text}");
        }
    }
}
