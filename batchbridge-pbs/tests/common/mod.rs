//! What the real-server tests share: a backend on the test bed's PBS server, unique keys,
//! waiting, and commands run beside the backend as the same user.

// Each test binary compiles this module and uses part of it.
#![allow(dead_code, unreachable_pub)]

use std::sync::Arc;
use std::time::Duration;

use batchbridge_core::shell::Command;
use batchbridge_core::{JobId, JobStatus};
use batchbridge_pbs::{PbsBackend, PbsConfig};
use batchbridge_testbed::{pbs_shell, stdout_of, wait_until};

pub use batchbridge_testbed::unique_spec as spec;

/// A backend for the test bed's PBS server over its own SSH connection.
pub fn backend() -> PbsBackend {
    PbsBackend::new(Arc::new(pbs_shell()), PbsConfig::default()).unwrap()
}

/// Polls the backend until `done` holds for the job; fails after 2 minutes.
pub async fn wait_for(
    backend: &PbsBackend,
    id: &JobId,
    what: &str,
    done: impl Fn(&JobStatus) -> bool,
) -> JobStatus {
    wait_until(backend, id, Duration::from_secs(120), what, done).await
}

/// Runs a PBS command as the test bed's user, outside the backend (`qdel`, `qrls`...),
/// panicking unless it exits 0; its stdout.
pub async fn as_user(program: &str, args: &[&str]) -> String {
    let shell = pbs_shell();
    stdout_of(&shell, Command::new(program).args(args.iter().copied())).await
}
