//! What the real-pool tests share: a backend on the test bed's pool, unique keys, waiting.

// Each test binary compiles this module and uses part of it.
#![allow(dead_code, unreachable_pub)]

use std::sync::Arc;
use std::time::Duration;

use batchbridge_core::conformance::{self, Config};
use batchbridge_core::{JobId, JobSpec, JobStatus};
use batchbridge_htcondor::{HtcondorBackend, HtcondorConfig};
use batchbridge_testbed::htcondor_shell;

/// A backend for the test bed's pool over its own SSH connection.
pub fn backend() -> HtcondorBackend {
    HtcondorBackend::new(Arc::new(htcondor_shell()), HtcondorConfig::default()).unwrap()
}

/// A spec with a key no other run used.
pub fn spec(name: &str, script: &str) -> JobSpec {
    JobSpec::new(conformance::unique_key(name), name, script)
}

/// Polls the backend until `done` holds for the job; fails after 2 minutes.
pub async fn wait_for(
    backend: &HtcondorBackend,
    id: &JobId,
    what: &str,
    done: impl Fn(&JobStatus) -> bool,
) -> JobStatus {
    let config = {
        let mut config = Config::default();
        config.timeout = Duration::from_secs(120);
        config.poll_interval = Duration::from_millis(500);
        config
    };
    conformance::wait_for(backend, id, &config, what, done)
        .await
        .unwrap()
}
