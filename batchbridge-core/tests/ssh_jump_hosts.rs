//! `SshShell` through the test bed's jump chain (`tests/testbed/bastion.sh`): two bastions,
//! each with its own key and host key, in front of the SLURM login on 127.0.0.1:2222.

// Test helpers panic on purpose: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::path::Path;

use batchbridge_core::ErrorKind;
use batchbridge_core::shell::{
    Command, HostKeys, JumpHost, Password, Shell, SshAuth, SshConfig, SshShell,
};
use batchbridge_testbed::{BastionHop, bastion_hops, ca_facts, ssh_facts};

/// The SLURM login's config (its key, its host key) in `runtime_dir`, without hops.
fn login_config(runtime_dir: &Path) -> SshConfig {
    let login = ssh_facts();
    let mut config = login.config(
        SshAuth::KeyFile(login.private_key.clone()),
        HostKeys::File(login.known_hosts.clone()),
    );
    config.runtime_dir = Some(runtime_dir.into());
    config
}

/// A shell on the SLURM login through hop 1 as the test bed has it, then `second`, with its
/// OpenSSH files in `runtime_dir`.
fn through_hop_1_and(runtime_dir: &Path, hops: &[BastionHop], second: JumpHost) -> SshShell {
    let config = login_config(runtime_dir)
        .jump_host(hops[0].jump_host())
        .jump_host(second);
    SshShell::new(config).unwrap()
}

/// What the error of a login that hop 2 refused says.
fn hop_2_refused(hops: &[BastionHop]) -> String {
    format!(
        "jump host 2 (127.0.0.1:{}) on the way: the hop refused",
        hops[1].port
    )
}

#[tokio::test]
async fn a_command_runs_on_the_slurm_login_through_two_hops() {
    let runtime = tempfile::tempdir().unwrap();
    let hops = bastion_hops();
    // Hop 2's key and host keys as text, as a Secret gives them.
    let mut second = hops[1].jump_host();
    second.auth = SshAuth::Key(Password::new(
        std::fs::read_to_string(&hops[1].key).unwrap(),
    ));
    second.host_keys = HostKeys::Entries(std::fs::read_to_string(&hops[1].known_hosts).unwrap());
    let shell = through_hop_1_and(runtime.path(), &hops, second);

    let out = shell
        .run(
            &Command::new("sh")
                .arg("-c")
                .arg("id -un; command -v sbatch"),
        )
        .await
        .unwrap()
        .check("id")
        .unwrap();
    assert_eq!(out.stdout_text(), "batch\n/usr/bin/sbatch\n");
    assert_eq!(shell.connections_opened(), 1);

    // Hop 2's key text was on disk only while the master logged in.
    let keys: Vec<_> = walk(runtime.path())
        .into_iter()
        .filter(|path| path.extension().is_some_and(|ext| ext == "id"))
        .collect();
    assert!(keys.is_empty(), "key files left behind: {keys:?}");
}

/// Every file under `dir`.
fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .flat_map(|entry| {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path)
            } else {
                vec![path]
            }
        })
        .collect()
}

#[tokio::test]
async fn a_wrong_or_unknown_host_key_on_hop_2_names_hop_2_and_its_keyscan_line() {
    let hops = bastion_hops();
    let wrong = HostKeys::File(hops[1].wrong_known_hosts.clone());
    let unknown = HostKeys::Entries(String::new());
    for host_keys in [wrong, unknown] {
        let runtime = tempfile::tempdir().unwrap();
        let mut second = hops[1].jump_host();
        second.host_keys = host_keys.clone();
        let shell = through_hop_1_and(runtime.path(), &hops, second);
        let err = shell.connect().await.unwrap_err();
        assert_eq!(
            err.kind(),
            ErrorKind::HostKeyMismatch,
            "{host_keys:?}: {err}"
        );
        assert!(!err.is_temporary(), "{err}");
        let message = err.message();
        assert!(message.starts_with("batch@127.0.0.1:2222: "), "{message}");
        assert!(
            message.contains(&format!("jump host 2 (127.0.0.1:{})", hops[1].port)),
            "{message}"
        );
        assert!(
            message.contains(&format!("`ssh-keyscan -p {} 127.0.0.1`", hops[1].port)),
            "{message}"
        );
    }
}

#[tokio::test]
async fn a_hop_logs_in_with_its_own_password() {
    let runtime = tempfile::tempdir().unwrap();
    let hops = bastion_hops();
    let password = hops[1].password.clone().expect("hop 2 takes a password");
    let mut second = hops[1].jump_host();
    second.auth = SshAuth::Password(Password::new(password.clone()));
    let shell = through_hop_1_and(runtime.path(), &hops, second.clone());
    let out = shell.run(&Command::new("id").arg("-un")).await.unwrap();
    assert_eq!(out.stdout_text(), "batch\n");
    let left: Vec<_> = walk(runtime.path())
        .into_iter()
        .filter(|path| std::fs::read(path).is_ok_and(|bytes| bytes == password.as_bytes()))
        .collect();
    assert!(left.is_empty(), "the password stayed on disk: {left:?}");

    // A wrong one is refused as any refused login.
    let runtime = tempfile::tempdir().unwrap();
    second.auth = SshAuth::Password(Password::new("not-the-password"));
    let shell = through_hop_1_and(runtime.path(), &hops, second);
    let err = shell.connect().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::AuthenticationFailed, "{err}");
    assert!(err.message().contains(&hop_2_refused(&hops)), "{err}");
}

/// The test bed's certificate login (`ca.sh`), which forwards TCP, as a jump host: a hop
/// may log in with a key and its certificate, as a file beside the key or as texts.
#[tokio::test]
async fn a_hop_logs_in_with_a_certificate() {
    let ca = ca_facts();
    let key = std::fs::read_to_string(&ca.user_key).unwrap();
    for auth in [
        SshAuth::certified_key_file(&ca.user_key),
        SshAuth::CertifiedKey {
            key: Password::new(key),
            certificate: ca.issue("+5m"),
        },
    ] {
        let runtime = tempfile::tempdir().unwrap();
        let hop = JumpHost::new(
            &ca.host,
            &ca.user,
            auth.clone(),
            HostKeys::File(ca.known_hosts.clone()),
        )
        .port(ca.port);
        let shell = SshShell::new(login_config(runtime.path()).jump_host(hop)).unwrap();
        let out = shell.run(&Command::new("id").arg("-un")).await;
        assert_eq!(out.unwrap().stdout_text(), "batch\n", "{auth:?}");
    }
}

#[tokio::test]
async fn the_login_hosts_own_wrong_key_names_no_hop() {
    let runtime = tempfile::tempdir().unwrap();
    let hops = bastion_hops();
    let mut config = login_config(runtime.path())
        .jump_host(hops[0].jump_host())
        .jump_host(hops[1].jump_host());
    config.host_keys = HostKeys::File(ssh_facts().wrong_known_hosts);
    let err = SshShell::new(config).unwrap().connect().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::HostKeyMismatch, "{err}");
    assert!(!err.message().contains("jump host"), "{err}");
    assert!(err.message().starts_with("batch@127.0.0.1:2222: "), "{err}");
}

#[tokio::test]
async fn each_hop_takes_its_own_key_only() {
    let runtime = tempfile::tempdir().unwrap();
    let hops = bastion_hops();
    let mut second = hops[1].jump_host();
    second.auth = SshAuth::KeyFile(hops[0].key.clone());
    let shell = through_hop_1_and(runtime.path(), &hops, second);
    let err = shell.connect().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::AuthenticationFailed, "{err}");
    assert!(err.message().contains(&hop_2_refused(&hops)), "{err}");
}
