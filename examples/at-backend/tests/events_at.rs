//! Job events of the at backend against the test bed's real atd through its sshd: the
//! wrapper records the job's start and end under the number at gave it.

// Test helpers panic on purpose: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use batchbridge_at::{AtBackend, AtConfig};
use batchbridge_testbed::{events, ssh_facts, unique_spec};

fn backend() -> AtBackend {
    AtBackend::new(Arc::new(ssh_facts().key_shell()), AtConfig::default()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_pushes_its_start_and_its_exit_code() {
    events::start_and_end(&backend(), unique_spec).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_running_job_pushes_signal_15() {
    events::cancel_running(&backend(), unique_spec).await;
}
