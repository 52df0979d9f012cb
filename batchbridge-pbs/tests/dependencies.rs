//! `JobSpec::after` on the test bed's real PBS server: the server holds the dependents
//! (`qstat -f`'s `depend`), deletes those whose dependency can no longer be met, and the
//! backend reports them as `DependencyFailed` naming it.

// Test helpers panic on purpose: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use batchbridge_core::after::Released;
use batchbridge_core::{
    BatchBackend, Dependency, FailureCause, JobId, JobSpec, JobState, JobStatus, Tracker,
};
use batchbridge_pbs::PbsBackend;
use common::{as_user, backend, spec, wait_for};

fn tracker(pbs: &Arc<PbsBackend>) -> Tracker {
    Tracker::new(pbs.clone(), Duration::from_millis(500)).unwrap()
}

async fn submitted(tracker: &Tracker, spec: &JobSpec) -> JobId {
    match tracker.submit_after(spec).await.unwrap() {
        Released::Submitted(id) => id,
        other => panic!("{} not submitted: {other:?}", spec.key),
    }
}

async fn ended(pbs: &PbsBackend, id: &JobId) -> JobStatus {
    wait_for(pbs, id, "the job ends", |s| s.state.is_terminal()).await
}

/// The `depend = ...` line of `qstat -f ID`.
async fn depend(id: &JobId) -> String {
    let record = as_user("qstat", &["-x", "-f", id.as_str()]).await;
    record
        .lines()
        .find_map(|line| line.trim().strip_prefix("depend = "))
        .unwrap_or_else(|| panic!("no depend in {record}"))
        .to_owned()
}

/// Three jobs, each after the one before succeeded, submitted at once: PBS holds each
/// (`depend = afterok:ID.server@server`), and each starts only after the one before it ended.
#[tokio::test]
async fn a_chain_of_three_waits_in_pbs_link_by_link() {
    let pbs = Arc::new(backend());
    assert!(pbs.capabilities().dependencies);
    let tracker = tracker(&pbs);
    let first = pbs.submit(&spec("chain-1", "sleep 4\n")).await.unwrap();
    let second = submitted(
        &tracker,
        &spec("chain-2", "sleep 1\n").with_after(Dependency::after_ok(first.clone())),
    )
    .await;
    let third = submitted(
        &tracker,
        &spec("chain-3", "true\n").with_after(Dependency::after_ok(second.clone())),
    )
    .await;
    for (dependent, dependency) in [(&second, &first), (&third, &second)] {
        let depend = depend(dependent).await;
        assert!(
            depend.starts_with(&format!("afterok:{dependency}.")),
            "{dependent}: {depend}"
        );
    }
    let statuses = [
        ended(&pbs, &first).await,
        ended(&pbs, &second).await,
        ended(&pbs, &third).await,
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

/// A job that fails makes PBS delete the job after it (afterok), and that one the job after
/// it, each `DependencyFailed` naming its own dependency; a job waiting for the failure
/// (afternotok) runs. A dependent submitted once the failure is known is never submitted.
#[tokio::test]
async fn a_failed_dependency_ends_its_dependents_naming_it() {
    let pbs = Arc::new(backend());
    let tracker = tracker(&pbs);
    let failing = pbs
        .submit(&spec("fails", "sleep 3; exit 3\n"))
        .await
        .unwrap();
    let second = submitted(
        &tracker,
        &spec("after-fail", "true\n").with_after(Dependency::after_ok(failing.clone())),
    )
    .await;
    let third = submitted(
        &tracker,
        &spec("after-after", "true\n").with_after(Dependency::after_ok(second.clone())),
    )
    .await;
    let rescue = submitted(
        &tracker,
        &spec("rescue", "true\n").with_after(Dependency::after_not_ok(failing.clone())),
    )
    .await;

    assert_eq!(
        ended(&pbs, &failing).await.cause,
        Some(FailureCause::ExitCode(3))
    );
    for (dependent, dependency) in [(&second, &failing), (&third, &second)] {
        let status = ended(&pbs, dependent).await;
        assert_eq!(status.state, JobState::Failed, "{status:?}");
        assert_eq!(
            status.cause,
            Some(FailureCause::DependencyFailed(dependency.to_string())),
            "{status:?}"
        );
        assert!(status.started_at.is_none(), "it never ran: {status:?}");
    }
    assert_eq!(ended(&pbs, &rescue).await.state, JobState::Succeeded);

    let late = spec("too-late", "true\n").with_after(Dependency::after_ok(failing.clone()));
    let released = tracker.submit_after(&late).await.unwrap();
    assert_eq!(
        released.cause(),
        Some(FailureCause::DependencyFailed(failing.to_string())),
        "{released:?}"
    );
    assert_eq!(
        pbs.find(&late.key).await.unwrap(),
        None,
        "nothing submitted"
    );
}
