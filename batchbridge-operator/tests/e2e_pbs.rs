//! The operator end to end on PBS: the test bed's real kube-apiserver and its OpenPBS
//! server (tests/testbed/pbs.sh), reached over SSH inside the PBS network namespace, with a
//! BatchCluster of `scheduler: pbs` polled every second.

// Helpers panic on purpose: anything unexpected is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use batchbridge_operator::crd::Phase;
use common::operator::*;
use serde_json::json;

/// A BatchJob on PBS: an array of 2 with one failing subjob, then a job that succeeds,
/// its output read back into the status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pbs_job_runs() {
    let (bed, operator) = set_up("e2e-pbs", "pbs", "pbs").await;
    create_job(&bed, "pair", json!({
        "clusterRef": {"name": "pbs"},
        "script": "echo \"subjob $BATCHBRIDGE_TASK_INDEX\"\n[ \"$BATCHBRIDGE_TASK_INDEX\" = 0 ]\n",
        "array": {"count": 2},
    }))
    .await;
    create_job(
        &bed,
        "hello",
        json!({
            "clusterRef": {"name": "pbs"},
            "script": "echo \"hello from $PBS_O_QUEUE\"\n",
        }),
    )
    .await;
    let pair = status(&wait_for_phase(&bed, "pair", Phase::Failed).await);
    let tasks = pair.tasks.unwrap();
    assert_eq!((tasks.total, tasks.succeeded, tasks.failed), (2, 1, 1));
    let hello = status(&wait_for_phase(&bed, "hello", Phase::Succeeded).await);
    assert_eq!((hello.exit_code, hello.attempts), (Some(0), 1));
    let hello = status(&wait_for(&bed, "hello", "the output", |s| s.output_tail.is_some()).await);
    assert_eq!(hello.output_tail.as_deref(), Some("hello from workq\n"));
    operator.stop().await;
    bed.clean_up().await;
}
