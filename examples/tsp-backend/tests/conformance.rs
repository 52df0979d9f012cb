//! The conformance suite against tsp on a machine reached over SSH, as its user.
//!
//! Where to log in comes from a JSON file, `$TSP_SSH_LOGIN`, by default the test bed's
//! (`tests/testbed/sshd.sh` writes it; `tsp.sh` installs task-spooler there): `host`, `port`,
//! `user`, `private_key` and `known_hosts`. Nothing else of this project's test bed is used.

// A failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use batchbridge_core::conformance::Config;
use batchbridge_core::shell::{HostKeys, SshAuth, SshConfig, SshShell};
use batchbridge_tsp::{TspBackend, TspConfig, restart_server};

/// The login's JSON file.
const DEFAULT_LOGIN: &str = "/var/lib/batchbridge-testbed/ssh/facts.json";

/// A backend over its own SSH connection, with jobs under the login directory.
fn backend() -> TspBackend {
    let path = std::env::var("TSP_SSH_LOGIN").unwrap_or_else(|_| DEFAULT_LOGIN.to_owned());
    let login: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let text = |field: &str| login[field].as_str().unwrap().to_owned();
    let ssh = SshConfig::new(
        text("host"),
        text("user"),
        SshAuth::KeyFile(text("private_key").into()),
        HostKeys::File(text("known_hosts").into()),
    )
    .port(login["port"].as_u64().unwrap().try_into().unwrap());
    let shell = Arc::new(SshShell::new(ssh).unwrap());
    TspBackend::new(shell, TspConfig::new("batchbridge-tsp-conformance")).unwrap()
}

/// tsp numbers from 0 again with each new server: end the one the suite's backends share.
fn restart(_backend: &str) -> Pin<Box<dyn Future<Output = batchbridge_core::Result<()>> + Send>> {
    Box::pin(async { restart_server(&backend()).await })
}

fn config() -> Config {
    let mut config = Config::default();
    // Nothing ignores tsp -k longer than the 5 s before its SIGKILL.
    config.kill_grace = std::time::Duration::from_secs(15);
    config.restart_numbering = Some(restart);
    config
}

batchbridge_core::conformance_tests!(async { backend() }, config());
