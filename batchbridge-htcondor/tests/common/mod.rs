//! What the real-pool tests share: a backend on the test bed's pool, unique keys, waiting.

// Each test binary compiles this module and uses part of it.
#![allow(dead_code, unreachable_pub)]

use std::sync::Arc;
use std::time::Duration;

use batchbridge_core::{JobId, JobStatus};
use batchbridge_htcondor::{HtcondorBackend, HtcondorConfig};
use batchbridge_testbed::{htcondor_shell, wait_until};

pub use batchbridge_testbed::unique_spec as spec;

/// A backend for the test bed's pool over its own SSH connection.
pub fn backend() -> HtcondorBackend {
    HtcondorBackend::new(Arc::new(htcondor_shell()), HtcondorConfig::default()).unwrap()
}

/// Polls the backend until `done` holds for the job; fails after 2 minutes.
pub async fn wait_for(
    backend: &HtcondorBackend,
    id: &JobId,
    what: &str,
    done: impl Fn(&JobStatus) -> bool,
) -> JobStatus {
    wait_until(backend, id, Duration::from_secs(120), what, done).await
}
