//! Job events on both of the test bed's SLURM clusters (22.05 and 24.11), reached as a
//! regular user over SSH: the batch script records each task's start and end, one
//! follower per work directory carries them back over the backend's own connection.

// Test helpers panic on purpose: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

#[macro_use]
mod common;

use std::sync::Arc;

use batchbridge_core::BatchBackend;
use batchbridge_slurm::{SlurmBackend, SlurmConfig};
use batchbridge_testbed::SlurmCluster;
use batchbridge_testbed::events;

on_both_clusters!(
    a_job_pushes_its_start_and_its_exit_code,
    an_array_pushes_each_tasks_start_and_end_under_the_array_id,
    a_cancelled_running_job_pushes_signal_15,
    a_killed_follower_ends_the_stream,
    the_follower_runs_no_scheduler_command,
);

async fn a_job_pushes_its_start_and_its_exit_code(cluster: SlurmCluster) {
    events::start_and_end(&common::backend(cluster), common::spec).await;
}

async fn an_array_pushes_each_tasks_start_and_end_under_the_array_id(cluster: SlurmCluster) {
    events::array_tasks(&common::backend(cluster), common::spec).await;
}

async fn a_cancelled_running_job_pushes_signal_15(cluster: SlurmCluster) {
    events::cancel_running(&common::backend(cluster), common::spec).await;
}

async fn a_killed_follower_ends_the_stream(cluster: SlurmCluster) {
    let shell = cluster.shell();
    let (work, events_dir) = events::own_work_dir(&shell, "killed-follower").await;
    let mut config = SlurmConfig::default();
    config.work_dir = work.clone();
    let backend = SlurmBackend::new(Arc::new(cluster.shell()), config).unwrap();
    let source = backend.events().unwrap();
    events::killed_follower_ends_the_stream(&shell, source.as_ref(), &events_dir).await;
    events::remove(&shell, &work).await;
}

async fn the_follower_runs_no_scheduler_command(cluster: SlurmCluster) {
    let shell = cluster.shell();
    let (work, events_dir) = events::own_work_dir(&shell, "no-scheduler").await;
    let tools = [
        "squeue", "sacct", "scontrol", "sinfo", "sbatch", "scancel", "sdiag", "sprio", "sshare",
    ];
    events::follower_runs_no_scheduler_command(
        &shell,
        &events_dir,
        &format!("{work}/scratch"),
        &tools,
    )
    .await;
    events::remove(&shell, &work).await;
}
