//! Job events on the test bed's OpenPBS server, reached as a regular user over SSH: the
//! job wrapper records each subjob's start and end, one follower per work directory carries
//! them back over the backend's own connection.

// Test helpers panic on purpose: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use batchbridge_core::BatchBackend;
use batchbridge_pbs::{PbsBackend, PbsConfig};
use batchbridge_testbed::{events, pbs_shell};
use common::{backend, spec};

#[tokio::test]
async fn a_job_pushes_its_start_and_its_exit_code() {
    events::start_and_end(&backend(), spec).await;
}

#[tokio::test]
async fn an_array_pushes_each_subjobs_start_and_end_under_the_array_id() {
    events::array_tasks(&backend(), spec).await;
}

#[tokio::test]
async fn a_cancelled_running_job_pushes_signal_15() {
    events::cancel_running(&backend(), spec).await;
}

#[tokio::test]
async fn a_killed_follower_ends_the_stream() {
    let shell = pbs_shell();
    let (work, events_dir) = events::own_work_dir(&shell, "killed-follower").await;
    let mut config = PbsConfig::default();
    config.work.work_dir = work.clone();
    let backend = PbsBackend::new(Arc::new(pbs_shell()), config).unwrap();
    let source = backend.events().unwrap();
    events::killed_follower_ends_the_stream(&shell, source.as_ref(), &events_dir).await;
    events::remove(&shell, &work).await;
}

#[tokio::test]
async fn the_follower_runs_no_scheduler_command() {
    let shell = pbs_shell();
    let (work, events_dir) = events::own_work_dir(&shell, "no-scheduler").await;
    let tools = [
        "qstat", "qsub", "qdel", "qselect", "qmgr", "pbsnodes", "tracejob",
    ];
    let scratch = format!("{work}/scratch");
    events::follower_runs_no_scheduler_command(&shell, &events_dir, &scratch, &tools).await;
    events::remove(&shell, &work).await;
}
