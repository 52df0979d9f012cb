//! `JobSpec::after` on the test bed's real SLURM clusters (22.05 and 24.11): SLURM itself
//! holds the dependents (`scontrol show job`'s `Dependency=`), ends those whose dependency
//! can no longer be met, and the backend reports them as `DependencyFailed` naming it.

// Test helpers panic on purpose: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

#[macro_use]
mod common;

use std::sync::Arc;
use std::time::Duration;

use batchbridge_core::after::Released;
use batchbridge_core::shell::{Command, SshShell};
use batchbridge_core::{
    BatchBackend, Dependency, FailureCause, JobId, JobSpec, JobState, JobStatus, Tracker,
};
use batchbridge_slurm::SlurmBackend;
use batchbridge_testbed::{SlurmCluster, stdout_of};

on_both_clusters!(
    a_chain_of_three_waits_in_slurm_link_by_link,
    a_failed_dependency_ends_its_dependents_naming_it,
);

/// The `Dependency=` word of `scontrol show job ID`.
async fn dependency_field(shell: &SshShell, id: &JobId) -> String {
    let text = stdout_of(
        shell,
        Command::new("scontrol").args(["show", "job", id.as_str()]),
    )
    .await;
    text.split_whitespace()
        .find_map(|word| word.strip_prefix("Dependency="))
        .unwrap_or_else(|| panic!("no Dependency= in {text}"))
        .to_owned()
}

fn tracker(slurm: &Arc<SlurmBackend>) -> Tracker {
    Tracker::new(slurm.clone(), Duration::from_millis(500)).unwrap()
}

async fn submitted(tracker: &Tracker, spec: &JobSpec) -> JobId {
    match tracker.submit_after(spec).await.unwrap() {
        Released::Submitted(id) => id,
        other => panic!("{} not submitted: {other:?}", spec.key),
    }
}

async fn ended(slurm: &SlurmBackend, id: &JobId) -> JobStatus {
    common::wait_for(slurm, id, "the job ends", |s| s.state.is_terminal()).await
}

/// Three jobs, each after the one before succeeded, submitted at once: SLURM shows each
/// dependency (`afterok:ID(unfulfilled)`), and each starts only after the one before it ended.
async fn a_chain_of_three_waits_in_slurm_link_by_link(cluster: SlurmCluster) {
    let slurm = Arc::new(common::backend(cluster));
    assert!(slurm.capabilities().dependencies);
    let tracker = tracker(&slurm);
    let shell = cluster.shell();
    let first = slurm
        .submit(&common::spec("chain-1", "sleep 4\n"))
        .await
        .unwrap();
    let second = submitted(
        &tracker,
        &common::spec("chain-2", "sleep 1\n").with_after(Dependency::after_ok(first.clone())),
    )
    .await;
    let third = submitted(
        &tracker,
        &common::spec("chain-3", "true\n").with_after(Dependency::after_ok(second.clone())),
    )
    .await;
    assert_eq!(
        dependency_field(&shell, &second).await,
        format!("afterok:{first}(unfulfilled)")
    );
    assert_eq!(
        dependency_field(&shell, &third).await,
        format!("afterok:{second}(unfulfilled)")
    );
    let statuses = [
        ended(&slurm, &first).await,
        ended(&slurm, &second).await,
        ended(&slurm, &third).await,
    ];
    for (status, next) in statuses.iter().zip(&statuses[1..]) {
        assert_eq!(status.state, JobState::Succeeded, "{status:?}");
        assert!(
            next.started_at.unwrap() >= status.ended_at.unwrap(),
            "started before the job it runs after ended: {next:?} after {status:?}"
        );
    }
    assert_eq!(statuses[2].state, JobState::Succeeded, "{:?}", statuses[2]);
}

/// A job that fails ends, through SLURM, the job after it (afterok), and that one the job
/// after it, each `DependencyFailed` naming its own dependency; a job waiting for the
/// failure (afternotok) runs. A dependent submitted once the failure is known is never
/// submitted at all.
async fn a_failed_dependency_ends_its_dependents_naming_it(cluster: SlurmCluster) {
    let slurm = Arc::new(common::backend(cluster));
    let tracker = tracker(&slurm);
    let failing = slurm
        .submit(&common::spec("fails", "sleep 3; exit 3\n"))
        .await
        .unwrap();
    let second = submitted(
        &tracker,
        &common::spec("after-fail", "true\n").with_after(Dependency::after_ok(failing.clone())),
    )
    .await;
    let third = submitted(
        &tracker,
        &common::spec("after-after", "true\n").with_after(Dependency::after_ok(second.clone())),
    )
    .await;
    let rescue = submitted(
        &tracker,
        &common::spec("rescue", "true\n").with_after(Dependency::after_not_ok(failing.clone())),
    )
    .await;

    assert_eq!(
        ended(&slurm, &failing).await.cause,
        Some(FailureCause::ExitCode(3))
    );
    for (dependent, dependency) in [(&second, &failing), (&third, &second)] {
        let status = ended(&slurm, dependent).await;
        assert_eq!(status.state, JobState::Failed, "{status:?}");
        assert_eq!(
            status.cause,
            Some(FailureCause::DependencyFailed(dependency.to_string())),
            "{status:?}"
        );
        assert!(status.started_at.is_none(), "it never ran: {status:?}");
    }
    assert_eq!(ended(&slurm, &rescue).await.state, JobState::Succeeded);

    let late = common::spec("too-late", "true\n").with_after(Dependency::after_ok(failing.clone()));
    let released = tracker.submit_after(&late).await.unwrap();
    assert_eq!(
        released.cause(),
        Some(FailureCause::DependencyFailed(failing.to_string())),
        "{released:?}"
    );
    assert_eq!(
        slurm.find(&late.key).await.unwrap(),
        None,
        "nothing submitted"
    );
}
