//! The shared conformance suite against a real atd, reached over SSH as a regular user.
//!
//! Built from plain values only (host, port, user, private key, known_hosts), so that a copy
//! of this file works outside the project: they come from a JSON file of those five fields,
//! `$AT_SSH_LOGIN`, by default the test bed's own (`tests/testbed/at.sh` and `sshd.sh`
//! write it, in this very shape, as `$BATCHBRIDGE_TESTBED_DIR/ssh/facts.json`).

// Test helpers panic on purpose: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::sync::Arc;

use batchbridge_at::{AtBackend, AtConfig};
use batchbridge_core::conformance::Config;
use batchbridge_core::shell::{HostKeys, SshAuth, SshConfig, SshShell};

/// Where to log in: a user atd runs jobs for, on a host whose sshd `known_hosts` vouches for.
#[derive(serde::Deserialize)]
struct Login {
    host: String,
    port: u16,
    user: String,
    private_key: PathBuf,
    known_hosts: PathBuf,
}

fn login() -> Login {
    let path = std::env::var_os("AT_SSH_LOGIN").map_or_else(
        || {
            let testbed = std::env::var_os("BATCHBRIDGE_TESTBED_DIR")
                .unwrap_or_else(|| "/var/lib/batchbridge-testbed".into());
            PathBuf::from(testbed).join("ssh/facts.json")
        },
        PathBuf::from,
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|err| {
        panic!(
            "{}: {err}; set AT_SSH_LOGIN to a JSON file with host, port, user, private_key \
             and known_hosts, or start the test bed (tests/testbed/up.sh)",
            path.display()
        )
    });
    serde_json::from_str(&text).unwrap()
}

async fn backend() -> AtBackend {
    let login = login();
    let config = SshConfig::new(
        login.host,
        login.user,
        SshAuth::KeyFile(login.private_key),
        HostKeys::File(login.known_hosts),
    )
    .port(login.port);
    let shell = SshShell::new(config).unwrap();
    AtBackend::new(Arc::new(shell), AtConfig::default()).unwrap()
}

fn config() -> Config {
    let mut config = Config::default();
    // at keeps no account of resources: nothing holds a job back, and a resource request
    // is refused.
    config.unsatisfiable = None;
    config
}

batchbridge_core::conformance_tests!(backend(), config());
