//! `SshShell` with OpenSSH certificates against the test bed's certificate login
//! (`tests/testbed/ca.sh`: an sshd on 127.0.0.1:2233 that accepts only certificates signed
//! by the test user CA).

// Test helpers panic on purpose: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, SystemTime};

use batchbridge_core::ErrorKind;
use batchbridge_core::shell::{Command, Password, Shell, SshAuth, SshShell};
use batchbridge_testbed::{ca_facts, whoami};

#[tokio::test]
async fn a_key_file_with_its_certificate_beside_it_logs_in() {
    let facts = ca_facts();
    let auth = SshAuth::certified_key_file(&facts.user_key);
    let validity = auth.certificate().unwrap().unwrap();
    let left = validity
        .valid_before()
        .unwrap()
        .duration_since(SystemTime::now())
        .unwrap();
    assert!(left > Duration::from_secs(11 * 3600), "{left:?}");
    let shell = SshShell::new(facts.config(auth)).unwrap();
    assert_eq!(whoami(&shell).await.unwrap(), "batch");
    // The login node of the SLURM cluster: its commands work through this login too.
    let out = shell
        .run(&Command::new("sinfo").arg("--version"))
        .await
        .unwrap();
    assert_eq!(out.exit_code, Some(0), "{out:?}");
}

#[tokio::test]
async fn key_and_certificate_given_as_text_log_in_and_leave_no_file() {
    let facts = ca_facts();
    let certificate = facts.issue("+2m");
    let auth = SshAuth::CertifiedKey {
        key: Password::new(std::fs::read_to_string(&facts.user_key).unwrap()),
        certificate: certificate.clone(),
    };
    let runtime = tempfile::tempdir().unwrap();
    let mut config = facts.config(auth);
    config.runtime_dir = Some(runtime.path().to_owned());
    let shell = SshShell::new(config).unwrap();
    assert_eq!(whoami(&shell).await.unwrap(), "batch");
    let private = std::fs::read_dir(runtime.path())
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    for name in ["id", "id-cert.pub"] {
        assert!(!private.join(name).exists(), "{name} left behind");
    }
}

#[tokio::test]
async fn an_expired_certificate_is_refused_before_connecting_with_its_expiry_time() {
    let facts = ca_facts();
    let shell = SshShell::new(facts.config(SshAuth::CertifiedKeyFile {
        key: facts.user_key.clone(),
        certificate: facts.expired_certificate.clone(),
    }))
    .unwrap();
    for _ in 0..2 {
        let err = whoami(&shell).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::CredentialExpired, "{err}");
        assert!(!err.is_temporary(), "{err}");
        assert!(
            err.message()
                .starts_with("batch@127.0.0.1:2233: the SSH certificate"),
            "{err}"
        );
        assert!(
            err.message().contains("expired at 2020-01-02T00:00:00Z"),
            "{err}"
        );
    }
    assert_eq!(shell.connections_opened(), 0, "no login was tried");
}

#[tokio::test]
async fn a_certificate_renewed_in_place_is_used_by_the_next_connection() {
    let facts = ca_facts();
    let dir = tempfile::tempdir().unwrap();
    let certificate = dir.path().join("id-cert.pub");
    std::fs::copy(&facts.expired_certificate, &certificate).unwrap();
    let shell = SshShell::new(facts.config(SshAuth::CertifiedKeyFile {
        key: facts.user_key.clone(),
        certificate: certificate.clone(),
    }))
    .unwrap();
    let err = whoami(&shell).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::CredentialExpired, "{err}");

    std::fs::write(&certificate, facts.issue("+1d")).unwrap();
    assert_eq!(whoami(&shell).await.unwrap(), "batch");
    assert_eq!(shell.connections_opened(), 1);
}
