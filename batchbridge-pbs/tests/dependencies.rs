//! `JobSpec::after` on the test bed's real PBS server: the server holds the dependents
//! (`qstat -f`'s `depend`), deletes those whose dependency can no longer be met, and the
//! backend reports them as `DependencyFailed` naming it.

// Test helpers panic on purpose: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use batchbridge_core::{BatchBackend, JobId, JobStatus};
use batchbridge_pbs::PbsBackend;
use batchbridge_testbed::dependencies::{self, assert_ran_link_by_link, submit_chain, tracker};
use common::{as_user, backend, spec, wait_for};

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
    let tracker = tracker(pbs.clone());
    let chain = submit_chain(&*pbs, &tracker, spec).await;
    for (dependent, dependency) in [(&chain[1], &chain[0]), (&chain[2], &chain[1])] {
        let depend = depend(dependent).await;
        assert!(
            depend.starts_with(&format!("afterok:{dependency}.")),
            "{dependent}: {depend}"
        );
    }
    assert_ran_link_by_link(&chain, async |id| ended(&pbs, id).await).await;
}

/// A job that fails makes PBS delete the job after it (afterok), and that one the job after
/// it, each `DependencyFailed` naming its own dependency; a job waiting for the failure
/// (afternotok) runs. A dependent submitted once the failure is known is never submitted.
#[tokio::test]
async fn a_failed_dependency_ends_its_dependents_naming_it() {
    let pbs = Arc::new(backend());
    dependencies::a_failed_dependency_ends_its_dependents_naming_it(
        pbs.clone(),
        spec,
        async |id| ended(&pbs, id).await,
    )
    .await;
}
