//! `JobSpec::after` on the test bed's real SLURM clusters (22.05 and 24.11): SLURM itself
//! holds the dependents (`scontrol show job`'s `Dependency=`), ends those whose dependency
//! can no longer be met, and the backend reports them as `DependencyFailed` naming it.

// Test helpers panic on purpose: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

#[macro_use]
mod common;

use std::sync::Arc;

use batchbridge_core::shell::{Command, SshShell};
use batchbridge_core::{BatchBackend, JobId, JobStatus};
use batchbridge_slurm::SlurmBackend;
use batchbridge_testbed::dependencies::{self, assert_ran_link_by_link, submit_chain, tracker};
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

async fn ended(slurm: &SlurmBackend, id: &JobId) -> JobStatus {
    common::wait_for(slurm, id, "the job ends", |s| s.state.is_terminal()).await
}

/// Three jobs, each after the one before succeeded, submitted at once: SLURM shows each
/// dependency (`afterok:ID(unfulfilled)`), and each starts only after the one before it ended.
async fn a_chain_of_three_waits_in_slurm_link_by_link(cluster: SlurmCluster) {
    let slurm = Arc::new(common::backend(cluster));
    assert!(slurm.capabilities().dependencies);
    let tracker = tracker(slurm.clone());
    let shell = cluster.shell();
    let chain = submit_chain(&*slurm, &tracker, common::spec).await;
    let [first, second, third] = &chain;
    assert_eq!(
        dependency_field(&shell, second).await,
        format!("afterok:{first}(unfulfilled)")
    );
    assert_eq!(
        dependency_field(&shell, third).await,
        format!("afterok:{second}(unfulfilled)")
    );
    assert_ran_link_by_link(&chain, async |id| ended(&slurm, id).await).await;
}

/// A job that fails ends, through SLURM, the job after it (afterok), and that one the job
/// after it, each `DependencyFailed` naming its own dependency; a job waiting for the
/// failure (afternotok) runs. A dependent submitted once the failure is known is never
/// submitted at all.
async fn a_failed_dependency_ends_its_dependents_naming_it(cluster: SlurmCluster) {
    let slurm = Arc::new(common::backend(cluster));
    dependencies::a_failed_dependency_ends_its_dependents_naming_it(
        slurm.clone(),
        common::spec,
        async |id| ended(&slurm, id).await,
    )
    .await;
}
