//! Status with slurmdbd stopped, once squeue has forgotten the jobs: only the exit-code files
//! are left to decide. Its own test binary, because it takes accounting away from the whole
//! cluster, and cargo runs test binaries one after another.

// Test helpers panic on purpose: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

#[macro_use]
mod common;

use batchbridge_core::{BatchBackend, JobState};
use batchbridge_testbed::{RunOnDrop, SlurmCluster, testbed_script};

on_both_clusters!(with_accounting_down_the_exit_code_files_decide);

async fn with_accounting_down_the_exit_code_files_decide(cluster: SlurmCluster) {
    testbed_script(cluster.script(), &["stop-slurmdbd"]);
    let _restart = RunOnDrop::script(cluster.script(), &["start-slurmdbd"]);
    let slurm = common::backend(cluster);
    // The version probe (`batchbridge clusters`, a BatchCluster's probe) says so at once.
    let version = slurm.version().await.unwrap();
    assert!(version.starts_with("slurm"), "{version}");
    assert!(
        !slurm.capabilities().accounting,
        "the probe's sacct failed, so accounting is known down"
    );
    let ok = slurm
        .submit(&common::spec("dbd-ok", "echo ok\n"))
        .await
        .unwrap();
    let failing = slurm
        .submit(&common::spec("dbd-fails", "exit 9\n"))
        .await
        .unwrap();
    let cancelled = slurm
        .submit(&common::spec("dbd-cancelled", "sleep 600\n"))
        .await
        .unwrap();
    common::wait_for(&slurm, &cancelled, "Running", |s| {
        s.state == JobState::Running
    })
    .await;
    slurm.cancel(&cancelled).await.unwrap();

    let ids = [ok.clone(), failing.clone(), cancelled.clone()];
    let shell = cluster.shell();
    for id in &ids {
        common::wait_for(&slurm, id, "the end", |s| s.state.is_terminal()).await;
        common::wait_purged(&shell, id).await;
    }

    let statuses = slurm.status(&ids).await.unwrap();
    assert!(
        !slurm.capabilities().accounting,
        "sacct failed, so accounting is known down"
    );
    let seen = |id| {
        let s = &statuses[id];
        (s.state, s.exit_code, s.signal)
    };
    assert_eq!(
        seen(&ok),
        (JobState::Succeeded, Some(0), None),
        "{statuses:?}"
    );
    assert_eq!(
        seen(&failing),
        (JobState::Failed, Some(9), None),
        "{statuses:?}"
    );
    assert_eq!(
        seen(&cancelled),
        (JobState::Cancelled, None, Some(15)),
        "{statuses:?}"
    );
    for status in statuses.values() {
        assert!(
            status
                .reason
                .as_deref()
                .is_some_and(|r| r.contains("exit-code file")),
            "{status:?}"
        );
    }
}
