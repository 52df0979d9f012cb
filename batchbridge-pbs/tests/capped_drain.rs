//! Submit limits hold jobs, never fail them (issue 30): 200 jobs through one [`Tracker`] to
//! the queue `capped` (each `sleep 2`), where a user may have 10 jobs (`max_queued = [u:PBS_GENERIC=10]`,
//! tests/testbed/pbs.sh): none fails, all 200 succeed, and qselect, sampled every half
//! second throughout, never lists more than 10 of the user's jobs there that are not
//! exiting.

// Test helpers panic on purpose: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use batchbridge_core::Tracker;
use batchbridge_core::shell::{Command, Shell};
use batchbridge_testbed::{Submit, drain, pbs_shell, pbs_submit_cap};

#[tokio::test]
async fn two_hundred_jobs_drain_through_max_queued_of_ten() {
    let cap = pbs_submit_cap();
    assert_eq!(cap.limit, 10);
    let tracker = Tracker::new(Arc::new(common::backend()), Duration::from_secs(2)).unwrap();
    let specs = (0..200)
        .map(|i| {
            // Long enough that ten are in the queue at once: `true` ends before the next
            // qsub, and the limit would never be met.
            let mut spec = common::spec(&format!("capped-{i}"), "sleep 2\n");
            spec.queue = Some(cap.queue.clone());
            spec
        })
        .collect();
    let shell: Arc<dyn Shell> = Arc::new(pbs_shell());
    // The user's jobs in the queue, but for those exiting. PBS counts an exiting job against
    // max_queued (with 10 in the queue, 9 of them exiting, qsub was refused), but sampled
    // with the exiting ones, CI saw qselect list 11 and 12 (4419aea, 7c8de3c) while PBS,
    // which checks max_queued at every qsub, had accepted each one under the limit: most
    // likely an exiting job PBS had just stopped counting. A job submitted beyond the limit
    // would be queued, not exiting, and counted here.
    let count = Command::sh(
        "qselect -u \"$(id -un)\" -q \"$1\" -s QRHWTSU",
        [cap.queue.as_str()],
    );
    // One by one, as PBS's own submit loop would go.
    let report = drain(
        &tracker,
        Submit::OneByOne,
        specs,
        shell,
        count,
        Duration::from_secs(1800),
    )
    .await;
    report.assert_drained_under(cap.limit);
}
