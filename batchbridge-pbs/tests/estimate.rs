//! Start estimates on the test bed's real PBS server: room now, the node filled by a
//! blocker, and a chunk no node could hold. Its own test binary, because it fills the node,
//! and cargo runs test binaries one after another.

// Test helpers panic on purpose: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use batchbridge_core::estimate::EstimatedStart;
use batchbridge_core::{BatchBackend, ErrorKind, JobState};
use batchbridge_testbed::estimate_once;
use common::{as_user, backend, spec, wait_for};

/// The CPUs of the server's (one) node.
async fn node_cpus() -> u32 {
    let nodes: serde_json::Value =
        serde_json::from_str(&as_user("pbsnodes", &["-a", "-F", "json"]).await).unwrap();
    let node = nodes["nodes"].as_object().unwrap().values().next().unwrap();
    u32::try_from(node["resources_available"]["ncpus"].as_u64().unwrap()).unwrap()
}

#[tokio::test]
async fn estimates_follow_the_node_s_free_resources() {
    let pbs = backend();
    let cpus = node_cpus().await;

    let mut too_big = spec("estimate-too-big", "true\n");
    too_big.resources.cpus = Some(cpus + 1);
    let err = pbs.estimate_start(&too_big).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
    assert!(err.message().contains("could ever hold a chunk"), "{err}");

    let one_cpu = spec("estimate", "true\n");
    let idle = estimate_once(&backend(), &one_cpu, EstimatedStart::Now).await;
    assert_eq!(idle.queue.as_deref(), Some("workq"), "{idle:?}");
    assert_eq!(
        pbs.find(&one_cpu.key).await.unwrap(),
        None,
        "nothing submitted"
    );

    let mut blocker = spec("estimate-blocker", "sleep 300\n");
    blocker.resources.cpus = Some(cpus);
    let blocker = pbs.submit(&blocker).await.unwrap();
    wait_for(&pbs, &blocker, "the node full", |s| {
        s.state == JobState::Running
    })
    .await;
    let full = pbs.estimate_start(&one_cpu).await.unwrap();
    assert_eq!(full.start, EstimatedStart::Later, "{full:?}");
    assert!(
        full.detail.as_deref().unwrap().starts_with("0 of 1 nodes"),
        "{full:?}"
    );
    pbs.cancel(&blocker).await.unwrap();
}
