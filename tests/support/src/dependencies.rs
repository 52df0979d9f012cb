//! The `JobSpec::after` scenarios of a backend whose scheduler holds the dependents itself
//! (`Capabilities::dependencies`): each backend's real tests run them against its scheduler
//! and check, in the scheduler's own words, how it shows a held dependent.

use std::sync::Arc;
use std::time::Duration;

use batchbridge_core::after::Released;
use batchbridge_core::{
    BatchBackend, Dependency, FailureCause, JobId, JobSpec, JobState, JobStatus, Tracker,
};

/// A tracker over `backend` that polls every half second.
pub fn tracker(backend: Arc<dyn BatchBackend>) -> Tracker {
    Tracker::new(backend, Duration::from_millis(500)).unwrap()
}

/// The id `tracker` submitted `spec` under; panics if it held or refused it instead.
pub async fn submitted(tracker: &Tracker, spec: &JobSpec) -> JobId {
    match tracker.submit_after(spec).await.unwrap() {
        Released::Submitted(id) => id,
        other => panic!("{} not submitted: {other:?}", spec.key),
    }
}

/// Submits three jobs at once through `tracker`, each after the one before succeeded, with
/// the backend's `spec(name, script)`; returns their ids, first first.
pub async fn submit_chain(
    backend: &dyn BatchBackend,
    tracker: &Tracker,
    spec: impl Fn(&str, &str) -> JobSpec,
) -> [JobId; 3] {
    let first = backend.submit(&spec("chain-1", "sleep 4\n")).await.unwrap();
    let second = submitted(
        tracker,
        &spec("chain-2", "sleep 1\n").with_after(Dependency::after_ok(first.clone())),
    )
    .await;
    let third = submitted(
        tracker,
        &spec("chain-3", "true\n").with_after(Dependency::after_ok(second.clone())),
    )
    .await;
    [first, second, third]
}

/// Waits (with `ended`) for the jobs of [`submit_chain`] and checks that each succeeded and
/// started only after the one before it ended.
pub async fn assert_ran_link_by_link(chain: &[JobId; 3], ended: impl AsyncFn(&JobId) -> JobStatus) {
    let statuses = [
        ended(&chain[0]).await,
        ended(&chain[1]).await,
        ended(&chain[2]).await,
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

/// A job that fails makes the scheduler end the job after it (afterok), and that one the job
/// after it, each `DependencyFailed` naming its own dependency; a job waiting for the failure
/// (afternotok) runs. A dependent submitted once the failure is known is never submitted.
/// `spec(name, script)` is the backend's spec, `ended` waits for a job to end.
pub async fn a_failed_dependency_ends_its_dependents_naming_it(
    backend: Arc<dyn BatchBackend>,
    spec: impl Fn(&str, &str) -> JobSpec,
    ended: impl AsyncFn(&JobId) -> JobStatus,
) {
    let tracker = tracker(backend.clone());
    let failing = backend
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

    assert_eq!(ended(&failing).await.cause, Some(FailureCause::ExitCode(3)));
    for (dependent, dependency) in [(&second, &failing), (&third, &second)] {
        let status = ended(dependent).await;
        assert_eq!(status.state, JobState::Failed, "{status:?}");
        assert_eq!(
            status.cause,
            Some(FailureCause::DependencyFailed(dependency.to_string())),
            "{status:?}"
        );
        assert!(status.started_at.is_none(), "it never ran: {status:?}");
    }
    assert_eq!(ended(&rescue).await.state, JobState::Succeeded);

    let late = spec("too-late", "true\n").with_after(Dependency::after_ok(failing.clone()));
    let released = tracker.submit_after(&late).await.unwrap();
    assert_eq!(
        released.cause(),
        Some(FailureCause::DependencyFailed(failing.to_string())),
        "{released:?}"
    );
    assert_eq!(
        backend.find(&late.key).await.unwrap(),
        None,
        "nothing submitted"
    );
}
