//! Submit limits hold jobs, never fail them (issue 30): 200 jobs given to one [`Tracker`] in
//! one batch (`submit_many`, issue 34) and waited for as one set, on the partition `capped`, whose partition QOS lets the user have 10 jobs in the scheduler
//! (tests/testbed/slurm.sh and slurm2.sh): none fails, all 200 succeed, and squeue, sampled
//! every half second throughout, never shows more than 10 of them. And a tracker's own
//! `max_queued` on an uncapped partition keeps to its number the same way.

// Test helpers panic on purpose: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

#[macro_use]
mod common;

use std::sync::Arc;
use std::time::Duration;

use batchbridge_core::shell::{Command, Shell};
use batchbridge_core::{JobSpec, Tracker};
use batchbridge_testbed::{SlurmCluster, Submit, drain};

on_both_clusters!(
    two_hundred_jobs_drain_through_a_submit_limit_of_ten,
    max_queued_keeps_a_tracker_under_its_own_limit,
);

/// How often the tracker polls: a capped drain's pace is one refill per end it sees.
const INTERVAL: Duration = Duration::from_secs(2);

/// `n` jobs running `true` in `partition`, all with the job name `name`.
fn specs(name: &str, partition: &str, n: usize) -> Vec<JobSpec> {
    (0..n)
        .map(|i| {
            let mut spec = common::spec(&format!("{name}-{i}"), "true\n");
            spec.name = name.to_owned();
            spec.queue = Some(partition.to_owned());
            spec
        })
        .collect()
}

/// The user's jobs in `partition` as squeue lists them (pending, running, completing),
/// those named `name` only when given one.
fn squeue(partition: &str, name: Option<&str>) -> Command {
    Command::sh(
        "squeue -h -u \"$(id -un)\" -p \"$1\" ${2:+-n \"$2\"} -o %i",
        [partition, name.unwrap_or_default()],
    )
}

async fn two_hundred_jobs_drain_through_a_submit_limit_of_ten(cluster: SlurmCluster) {
    let cap = cluster.submit_cap();
    assert_eq!(cap.limit, 10);
    let slurm = Arc::new(common::backend(cluster));
    let tracker = Tracker::new(slurm, INTERVAL).unwrap();
    let shell: Arc<dyn Shell> = Arc::new(cluster.shell());
    // Every job of the user in the partition counts against the limit, so all are counted.
    let jobs = specs("capped", &cap.queue, 200);
    let report = drain(
        &tracker,
        Submit::Batch,
        jobs,
        shell,
        squeue(&cap.queue, None),
        Duration::from_secs(1800),
    )
    .await;
    report.assert_drained_under(cap.limit);
    assert!(tracker.held().is_empty());
}

async fn max_queued_keeps_a_tracker_under_its_own_limit(cluster: SlurmCluster) {
    const LIMIT: usize = 4;
    // The one-job-at-a-time partition keeps jobs queued, so the tracker's own limit is the
    // only thing between 30 jobs and squeue.
    let slurm = Arc::new(common::backend(cluster));
    let tracker = Tracker::builder(slurm, INTERVAL)
        .max_queued(LIMIT)
        .build()
        .unwrap();
    let shell: Arc<dyn Shell> = Arc::new(cluster.shell());
    // Other tests use `single` too: only this run's jobs are counted.
    let name = batchbridge_core::conformance::unique_key("max-queued").to_string();
    // One submit at a time here, so the single-job path is drained too.
    let report = drain(
        &tracker,
        Submit::OneByOne,
        specs(&name, "single", 30),
        shell,
        squeue("single", Some(&name)),
        Duration::from_secs(900),
    )
    .await;
    report.assert_drained_under(LIMIT);
}
