//! Job events on both of the test bed's SLURM clusters (22.05 and 24.11), reached as a
//! regular user over SSH: the batch script records each task's start and end, one
//! follower per work directory carries them back over the backend's own connection.

// Test helpers panic on purpose: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

#[macro_use]
mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use batchbridge_core::shell::{Command, Shell};
use batchbridge_core::{BatchBackend, JobState, Tracker};
use batchbridge_slurm::{SlurmBackend, SlurmConfig};
use batchbridge_testbed::SlurmCluster;
use batchbridge_testbed::events;

on_both_clusters!(
    a_job_pushes_its_start_and_its_exit_code,
    an_array_pushes_each_tasks_start_and_end_under_the_array_id,
    a_cancelled_running_job_pushes_signal_15,
    a_killed_follower_ends_the_stream,
    the_follower_runs_no_scheduler_command,
    a_killed_connection_loses_no_end_for_good,
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
    config.work.work_dir = work.clone();
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

/// The SSH connection killed under the events: the tracker's event run ends with it, opens
/// again on the next connection (the follower replays what is recorded), and the job's end
/// reaches the tracker with no poll: its polls are an hour apart.
async fn a_killed_connection_loses_no_end_for_good(cluster: SlurmCluster) {
    let shell = Arc::new(cluster.shell());
    let backend = Arc::new(SlurmBackend::new(shell.clone(), SlurmConfig::default()).unwrap());
    let tracker = Tracker::new(backend.clone(), Duration::from_secs(3600)).unwrap();
    let home = shell
        .run(&Command::new("printenv").arg("HOME"))
        .await
        .unwrap()
        .stdout_text();
    let spec = common::spec("events-killed-connection", "true\n");
    let gate = format!("{}/batchbridge-gate-{}", home.trim(), spec.key);
    // At most 2 minutes, so that a failed run leaves no job holding a CPU.
    let script =
        format!("i=0\nwhile [ ! -e {gate} ] && [ $i -lt 600 ]; do sleep 0.2; i=$((i + 1)); done\n");
    let mut spec = spec;
    spec.script = script;
    let id = backend.submit(&spec).await.unwrap();
    tracker.follow(id.clone());
    let deadline = Instant::now() + Duration::from_secs(120);
    while tracker.status(&id).map(|status| status.state) != Some(JobState::Running) {
        assert!(
            Instant::now() < deadline,
            "never running: {:?}",
            tracker.status(&id)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let polls = tracker.polls();
    // The server side of the connection, killed as a network drop would.
    let _ = shell
        .run(&Command::sh(
            "kill -9 $(ps -o ppid= -p $PPID) $PPID 2>/dev/null; sleep 5",
            Vec::<String>::new(),
        ))
        .await;
    shell.run(&Command::new("touch").arg(&gate)).await.unwrap();
    let ended = tracker.wait(&id, Duration::from_secs(120)).await.unwrap();
    assert_eq!(ended.state, JobState::Succeeded, "{ended:?}");
    assert_eq!(
        tracker.polls(),
        polls,
        "the end came from a poll, not an event"
    );
    assert!(
        shell.connections_opened() >= 2,
        "the connection was not killed"
    );
    let _ = shell.run(&Command::new("rm").args(["-f", &gate])).await;
}
