//! `SshShell` with Kerberos against the test bed's realm (`tests/testbed/kdc.sh`: a KDC whose
//! tickets live 1 minute, and an sshd on localhost:2234 that accepts only GSSAPI).

// Test helpers panic on purpose: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use batchbridge_core::ErrorKind;
use batchbridge_core::shell::{Command, Keytab, Shell, SshAuth, SshShell};
use batchbridge_testbed::{kdc_facts, whoami};

/// The credential caches MIT Kerberos makes by default (`/tmp/krb5cc_UID…`).
fn default_caches() -> BTreeSet<PathBuf> {
    std::fs::read_dir("/tmp")
        .unwrap()
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| {
            path.file_name()
                .is_some_and(|name| name.to_string_lossy().starts_with("krb5cc"))
        })
        .collect()
}

/// The one private directory a shell made in `runtime`.
fn private_dir(runtime: &Path) -> PathBuf {
    let mut dirs = std::fs::read_dir(runtime).unwrap();
    let dir = dirs.next().unwrap().unwrap().path();
    assert!(dirs.next().is_none());
    dir
}

#[tokio::test]
async fn a_keytab_file_logs_in_and_runs_the_schedulers_commands() {
    let facts = kdc_facts();
    let shell =
        SshShell::new(facts.config(facts.keytab_auth(Keytab::File(facts.user_keytab.clone()))))
            .unwrap();
    assert_eq!(whoami(&shell).await.unwrap(), "batch");
    // The login node of the SLURM cluster: its commands work through this login too.
    let out = shell
        .run(&Command::new("sinfo").arg("--version"))
        .await
        .unwrap();
    assert_eq!(out.exit_code, Some(0), "{out:?}");
}

#[tokio::test]
async fn keytab_bytes_leave_no_keytab_or_ticket_behind_and_nothing_reaches_jobs() {
    let facts = kdc_facts();
    let before = default_caches();
    let runtime = tempfile::tempdir().unwrap();
    let mut config = facts
        .config(facts.keytab_auth(Keytab::Contents(std::fs::read(&facts.user_keytab).unwrap())));
    config.runtime_dir = Some(runtime.path().to_owned());
    let shell = SshShell::new(config).unwrap();
    let env = shell
        .run(&Command::new("env"))
        .await
        .unwrap()
        .check("env")
        .unwrap()
        .stdout_text();
    // Nothing delegated: the session on the login node has no credential cache of ours.
    let private = private_dir(runtime.path());
    for line in env.lines().filter(|line| line.starts_with("KRB5CCNAME=")) {
        assert!(
            !line.contains(&*private.to_string_lossy()),
            "a job sees our cache: {line}"
        );
    }
    assert!(
        !env.contains("KRB5CCNAME="),
        "a ticket was delegated: {env}"
    );
    for name in ["keytab", "krb5cc"] {
        assert!(!private.join(name).exists(), "{name} left behind");
    }
    let created: Vec<_> = default_caches().difference(&before).cloned().collect();
    assert!(
        created.is_empty(),
        "ticket files outside the shell's directory: {created:?}"
    );
}

#[tokio::test]
async fn a_new_login_after_the_tickets_lifetime_gets_a_new_ticket() {
    let facts = kdc_facts();
    let shell =
        SshShell::new(facts.config(facts.keytab_auth(Keytab::File(facts.user_keytab.clone()))))
            .unwrap();
    assert_eq!(whoami(&shell).await.unwrap(), "batch");
    // Commands through the one connection for a while, then a new connection once every
    // ticket of the first login has expired.
    let deadline = tokio::time::Instant::now() + facts.max_life + Duration::from_secs(5);
    while tokio::time::Instant::now() < deadline {
        assert_eq!(whoami(&shell).await.unwrap(), "batch");
        tokio::time::sleep(Duration::from_secs(20)).await;
    }
    assert_eq!(shell.connections_opened(), 1);
    shell.disconnect().await;
    assert_eq!(whoami(&shell).await.unwrap(), "batch");
    assert_eq!(shell.connections_opened(), 2);
}

#[tokio::test]
async fn a_keytab_the_kdc_refuses_is_a_refused_credential_naming_the_principal() {
    let facts = kdc_facts();
    let shell =
        SshShell::new(facts.config(facts.keytab_auth(Keytab::Contents(b"not a keytab".to_vec()))))
            .unwrap();
    let err = whoami(&shell).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::AuthenticationFailed, "{err}");
    assert!(err.message().contains(&facts.user_principal), "{err}");
}

#[tokio::test]
async fn an_unreadable_keytab_file_is_named_at_once() {
    let facts = kdc_facts();
    let err = SshShell::new(
        facts.config(facts.keytab_auth(Keytab::File("/nonexistent/batch.keytab".into()))),
    )
    .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
    assert!(err.message().contains("/nonexistent/batch.keytab"), "{err}");
}

#[tokio::test]
async fn without_a_ticket_of_the_user_the_error_says_to_run_kinit() {
    let facts = kdc_facts();
    // This process has no ticket (the test bed never makes one in a default cache).
    let shell = SshShell::new(facts.config(SshAuth::KerberosTicket)).unwrap();
    let err = whoami(&shell).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::LoginRequired, "{err}");
    assert!(err.message().contains("kinit"), "{err}");
    assert_eq!(shell.connections_opened(), 0);
}
