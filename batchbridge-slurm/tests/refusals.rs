//! Refused submits by kind, on each real cluster: a submit limit and a drained partition
//! are temporary (the same submit passes once jobs end or the drain ends), an unknown
//! account is permanent. Each case uses what only it uses (tests/testbed/slurm.sh and
//! slurm2.sh make them: partition `drainable`, QOS `onejob` with MaxSubmitJobsPerUser=1,
//! account `onejob` with MaxSubmitJobs=1), so other tests running at the same time never
//! see the partition closed or the limit reached.

// Test helpers panic on purpose: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

#[macro_use]
mod common;

use batchbridge_core::{BatchBackend, ErrorKind, JobId, JobSpec, JobState, Refusal};
use batchbridge_slurm::{SlurmBackend, SlurmConfig};
use batchbridge_testbed::SlurmCluster;
use std::sync::Arc;

on_both_clusters!(
    a_drained_partition_refuses_for_now,
    a_qos_submit_limit_refuses_until_a_job_ends,
    an_association_submit_limit_refuses_until_a_job_ends,
    an_unknown_account_is_refused_for_good,
);

const DRAINABLE: &str = "drainable";
const LIMITED: &str = "onejob";

/// Sets the partition's state back to UP when dropped, whether the test passed or panicked.
struct Undrain(SlurmCluster);

impl Drop for Undrain {
    fn drop(&mut self) {
        set_partition_state(self.0, "UP");
    }
}

fn set_partition_state(cluster: SlurmCluster, state: &str) {
    let status = cluster
        .as_root("scontrol")
        .args([
            "update",
            &format!("PartitionName={DRAINABLE}"),
            &format!("State={state}"),
        ])
        .status()
        .unwrap();
    assert!(status.success(), "scontrol update State={state}: {status}");
}

/// Cancels the job when dropped, so that a failed test leaves no job holding the limit.
struct CancelOnDrop(SlurmCluster, JobId);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let _ = self.0.as_root("scancel").arg(self.1.as_str()).status();
    }
}

fn assert_refused(err: &batchbridge_core::Error, refusal: Refusal, temporary: bool) {
    assert_eq!(err.kind(), ErrorKind::Rejected, "{err}");
    assert_eq!(err.refusal(), Some(refusal), "{err}");
    assert_eq!(err.is_temporary(), temporary, "{err}");
}

async fn a_drained_partition_refuses_for_now(cluster: SlurmCluster) {
    let slurm = common::backend(cluster);
    let mut spec = common::spec("drained", "true\n");
    spec.queue = Some(DRAINABLE.into());
    let _undrain = Undrain(cluster);
    set_partition_state(cluster, "DRAIN");
    let err = slurm.submit(&spec).await.unwrap_err();
    assert_refused(&err, Refusal::QueueClosed, true);
    assert!(err.message().contains("partition \"drainable\""), "{err}");

    // The same submit, once the drain ends, is a job.
    set_partition_state(cluster, "UP");
    let id = slurm.submit(&spec).await.unwrap();
    let _cancel = CancelOnDrop(cluster, id.clone());
    let done = common::wait_for(&slurm, &id, "the end", |s| s.state.is_terminal()).await;
    assert_eq!(done.state, JobState::Succeeded, "{done:?}");
}

/// Holds the limit of one job with a held job, then: a second submit is refused as a
/// submit limit, temporarily; once the held job is cancelled, the same submit is a job.
async fn one_job_at_a_time(
    slurm: &SlurmBackend,
    cluster: SlurmCluster,
    spec: impl Fn(&str) -> JobSpec,
) {
    let holder = spec("holder").with_passthrough("slurm", "--hold");
    let holder = slurm.submit(&holder).await.unwrap();
    let cancel_holder = CancelOnDrop(cluster, holder.clone());
    let second = spec("second");
    let err = slurm.submit(&second).await.unwrap_err();
    assert_refused(&err, Refusal::SubmitLimit, true);

    drop(cancel_holder);
    common::wait_for(slurm, &holder, "the holder's end", |s| {
        s.state.is_terminal()
    })
    .await;
    let id = slurm.submit(&second).await.unwrap();
    let _cancel = CancelOnDrop(cluster, id.clone());
    let done = common::wait_for(slurm, &id, "the end", |s| s.state.is_terminal()).await;
    assert_eq!(done.state, JobState::Succeeded, "{done:?}");
}

async fn a_qos_submit_limit_refuses_until_a_job_ends(cluster: SlurmCluster) {
    let slurm = common::backend(cluster);
    one_job_at_a_time(&slurm, cluster, |name| {
        common::spec(name, "true\n").with_passthrough("slurm", format!("--qos={LIMITED}"))
    })
    .await;
}

async fn an_association_submit_limit_refuses_until_a_job_ends(cluster: SlurmCluster) {
    let config = SlurmConfig::default().with_account(LIMITED);
    let slurm = SlurmBackend::new(Arc::new(cluster.shell()), config).unwrap();
    one_job_at_a_time(&slurm, cluster, |name| common::spec(name, "true\n")).await;
}

async fn an_unknown_account_is_refused_for_good(cluster: SlurmCluster) {
    let config = SlurmConfig::default().with_account("no-such-account");
    let slurm = SlurmBackend::new(Arc::new(cluster.shell()), config).unwrap();
    let err = slurm
        .submit(&common::spec("unknown-account", "true\n"))
        .await
        .unwrap_err();
    assert_refused(&err, Refusal::InvalidRequest, false);
}
