//! The validity of a BatchCluster's SSH certificate as its status shows it: the
//! `credential` field and the CredentialValid condition, False with reason
//! CredentialExpiring from the operator's warning time before the expiry and
//! CredentialExpired after it, so that an administrator can alert before jobs wait.

use std::time::{Duration, SystemTime};

use batchbridge_core::shell::Certificate;

use crate::crd::{BatchClusterStatus, CredentialStatus};
use crate::reason::{ConditionType, Reason};
use crate::status::{set_condition, time};

/// What the operator warns of by default: a day before a certificate expires, the
/// validity of the 24-hour certificates that issuers such as NERSC's sshproxy give,
/// so a missed renewal is seen at once.
pub const DEFAULT_EXPIRY_WARNING: Duration = Duration::from_secs(24 * 3600);

/// Records `certificate` (the one the cluster's Secret holds, if any) in `status` as of
/// `now`, warning `warning` before it expires; returns how long until the condition
/// changes by itself (the reconciler looks again then), `None` when it will not.
pub fn record(
    status: &mut BatchClusterStatus,
    certificate: Option<&Certificate>,
    warning: Duration,
    now: SystemTime,
) -> Option<Duration> {
    let Some(certificate) = certificate else {
        status.credential = None;
        status
            .conditions
            .retain(|c| c.type_ != ConditionType::CredentialValid.as_str());
        return None;
    };
    status.credential = Some(CredentialStatus {
        key_id: Some(certificate.key_id().to_owned()),
        valid_after: Some(time(certificate.valid_after())),
        expires_at: certificate.valid_before().map(time),
    });
    let named = format!(
        "the Secret's SSH certificate {:?} expires at {}",
        certificate.key_id(),
        certificate.expires_at_text()
    );
    let left = certificate
        .valid_before()
        .map(|before| before.duration_since(now).unwrap_or(Duration::ZERO));
    let (holds, reason, message, next) = match left {
        None => (true, Reason::CredentialValid, named, None),
        Some(Duration::ZERO) => (
            false,
            Reason::CredentialExpired,
            format!(
                "the Secret's SSH certificate {:?} expired at {}: the operator does not log \
                 in with it; jobs wait, none is failed, until the Secret's ssh-certificate \
                 holds a renewed one",
                certificate.key_id(),
                certificate.expires_at_text()
            ),
            None,
        ),
        Some(left) if left <= warning => (
            false,
            Reason::CredentialExpiring,
            format!(
                "{named}, within the operator's warning time of {}: renew it (update the \
                 Secret's ssh-certificate) before then",
                humantime::format_duration(warning)
            ),
            Some(left),
        ),
        Some(left) => (true, Reason::CredentialValid, named, Some(left - warning)),
    };
    set_condition(
        &mut status.conditions,
        ConditionType::CredentialValid,
        holds,
        reason,
        &message,
        now,
    );
    next
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::status::condition;

    /// `ssh-keygen -s ca -I alice -n alice -V 20200101:20200102`.
    pub(crate) const CERTIFICATE: &str = "ssh-ed25519-cert-v01@openssh.com AAAAIHNzaC1lZDI1NTE5LWNlcnQtdjAxQG9wZW5zc2guY29tAAAAIEG59hZ5mO9WQMYPFPg5xnnToq9ry0dJrxiatCcN0lgCAAAAIBaN3ahUCD+/Bvo5jmPW81929gfjwbrykUJDb8ffHzzrAAAAAAAAAAAAAAABAAAABWFsaWNlAAAACQAAAAVhbGljZQAAAABeC+EAAAAAAF4NMoAAAAAAAAAAggAAABVwZXJtaXQtWDExLWZvcndhcmRpbmcAAAAAAAAAF3Blcm1pdC1hZ2VudC1mb3J3YXJkaW5nAAAAAAAAABZwZXJtaXQtcG9ydC1mb3J3YXJkaW5nAAAAAAAAAApwZXJtaXQtcHR5AAAAAAAAAA5wZXJtaXQtdXNlci1yYwAAAAAAAAAAAAAAMwAAAAtzc2gtZWQyNTUxOQAAACD1ewSrUTX6vDhrSn8iYZyTGAJ4fuZ2+0NZMqO+zxggrwAAAFMAAAALc3NoLWVkMjU1MTkAAABANrfy4AyiZ8ZLe/swexSc0x/jCiylo7Nk8IDlsgROpbC+V7lXY6Px8U5VMmCx3jozJx/5vDK8mf6WVLFsvuXXDA== alice@example";

    #[test]
    fn the_condition_follows_the_time_left_and_says_when_to_look_again() {
        let certificate = Certificate::parse(CERTIFICATE).unwrap();
        let expiry = certificate.valid_before().unwrap();
        let warning = Duration::from_secs(90);
        let cases = [
            (200, true, Reason::CredentialValid, Some(110)),
            (90, false, Reason::CredentialExpiring, Some(90)),
            (1, false, Reason::CredentialExpiring, Some(1)),
            (0, false, Reason::CredentialExpired, None),
        ];
        let mut status = BatchClusterStatus::default();
        for (left, holds, reason, next) in cases {
            let now = expiry - Duration::from_secs(left);
            let looked = record(&mut status, Some(&certificate), warning, now);
            assert_eq!(looked, next.map(Duration::from_secs), "{left} s left");
            let c = condition(&status.conditions, ConditionType::CredentialValid).unwrap();
            assert_eq!(
                c.status,
                if holds { "True" } else { "False" },
                "{left} s left"
            );
            assert_eq!(c.reason, reason.as_str(), "{left} s left");
            assert!(c.message.contains("2020-01-02T00:00:00Z"), "{}", c.message);
        }
        let credential = status.credential.clone().unwrap();
        assert_eq!(credential.key_id.as_deref(), Some("alice"));
        assert_eq!(credential.expires_at, Some(time(expiry)));

        // A Secret without a certificate: nothing to show.
        assert_eq!(record(&mut status, None, warning, expiry), None);
        assert_eq!(status.credential, None);
        assert!(condition(&status.conditions, ConditionType::CredentialValid).is_none());
    }
}
