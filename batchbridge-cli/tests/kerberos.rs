//! A cluster with `auth = "kerberos"` against the test bed's Kerberos realm
//! (`tests/testbed/kdc.sh`: a GSSAPI-only sshd on localhost:2234, on the SLURM login node):
//! the user's own ticket logs in, and without one the tool says to run kinit. The user's
//! environment points at the realm's krb5.conf and at a credential cache of this test, as a
//! user's shell would after `kinit`.

// Test helpers panic on purpose: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::{Command, Output, Stdio};

use batchbridge_testbed::{KdcFacts, kdc_facts};

/// `batchbridge ARGS` with `home` as the user's home and config, the realm's krb5.conf and
/// the credential cache `home/ccache`, and nothing else of the test's environment.
fn batchbridge(kdc: &KdcFacts, home: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_batchbridge"))
        .args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap())
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join("config"))
        .env("XDG_STATE_HOME", home.join("state"))
        .env("KRB5_CONFIG", &kdc.krb5_conf)
        .env(
            "KRB5CCNAME",
            format!("FILE:{}", home.join("ccache").display()),
        )
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn the_users_ticket_logs_in_and_without_one_the_tool_says_to_run_kinit() {
    let kdc = kdc_facts();
    let home = tempfile::tempdir().unwrap();
    let config = home.path().join("config/batchbridge");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(
        config.join("config.toml"),
        format!(
            "default_cluster = \"hpc\"\n\n[clusters.hpc]\nscheduler = \"slurm\"\nhost = \"{}\"\n\
             port = {}\nuser = \"{}\"\nknown_hosts = \"{}\"\nauth = \"kerberos\"\n\
             partition = \"debug\"\n",
            kdc.host,
            kdc.port,
            kdc.user,
            kdc.known_hosts.display()
        ),
    )
    .unwrap();
    let script = home.path().join("hello.sh");
    std::fs::write(&script, "echo \"hello from $(id -un)\"\n").unwrap();
    let script = script.to_str().unwrap();

    let refused = batchbridge(&kdc, home.path(), &["run", script]);
    assert_eq!(refused.status.code(), Some(77), "{}", text(&refused.stderr));
    let said = text(&refused.stderr);
    assert!(said.contains("no valid Kerberos ticket"), "{said}");
    assert!(said.contains("kinit"), "{said}");

    // kinit as the user would (with a password; the keytab stands in for typing it).
    let kinit = Command::new("kinit")
        .env("KRB5_CONFIG", &kdc.krb5_conf)
        .env(
            "KRB5CCNAME",
            format!("FILE:{}", home.path().join("ccache").display()),
        )
        .args(["-k", "-t"])
        .arg(&kdc.user_keytab)
        .arg(&kdc.user_principal)
        .status()
        .unwrap();
    assert!(kinit.success());
    let ran = batchbridge(&kdc, home.path(), &["run", script]);
    assert_eq!(ran.status.code(), Some(0), "{}", text(&ran.stderr));
    assert_eq!(text(&ran.stdout), "hello from batch\n");
}
