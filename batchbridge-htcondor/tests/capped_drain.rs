//! Submit limits hold jobs, never fail them (issue 30): 200 jobs through one [`Tracker`] on
//! the test bed's capped schedd, which takes 10 jobs per owner (MAX_JOBS_PER_OWNER, reached
//! as the user `capped`, tests/testbed/htcondor.sh): every refusal is read as the submit
//! limit and held, none fails, all 200 succeed, and condor_q, sampled every half second
//! throughout, never lists more than 10.

// Test helpers panic on purpose: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use batchbridge_core::Tracker;
use batchbridge_core::shell::{Command, Shell};
use batchbridge_htcondor::{HtcondorBackend, HtcondorConfig};
use batchbridge_testbed::{Submit, drain, htcondor_capped_login};

#[tokio::test]
async fn two_hundred_jobs_drain_through_max_jobs_per_owner_of_ten() {
    let (login, limit) = htcondor_capped_login();
    assert_eq!(limit, 10);
    let shell: Arc<dyn Shell> = Arc::new(login.shell());
    // A work directory of this run's own, removed after: the capped schedd's job numbering
    // starts again whenever the test bed makes its spool anew, and a job id recorded by an
    // earlier run in a shared work directory would be a repeated id (refused, rightly).
    let work_dir = format!(".batchbridge/capped-drain-{}", std::process::id());
    let config = HtcondorConfig::default().with_work_dir(work_dir.clone());
    let condor = HtcondorBackend::new(Arc::clone(&shell), config).unwrap();
    let tracker = Tracker::new(Arc::new(condor), Duration::from_secs(2)).unwrap();
    let specs = (0..200)
        .map(|i| common::spec(&format!("capped-{i}"), "true\n"))
        .collect();
    // Every job of the user in the capped schedd's queue: what MAX_JOBS_PER_OWNER counts.
    let count = Command::new("condor_q").args(["-af", "ClusterId"]);
    let report = drain(
        &tracker,
        Submit::Batch,
        specs,
        Arc::clone(&shell),
        count,
        Duration::from_secs(1800),
    )
    .await;
    let removed = shell
        .run(&Command::sh("rm -rf -- \"$1\"", [work_dir.as_str()]))
        .await;
    report.assert_drained_under(limit);
    assert!(removed.unwrap().success(), "the work directory stayed");
}
