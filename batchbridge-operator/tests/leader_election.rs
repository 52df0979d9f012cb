//! Two operator processes, the `batchbridge-operator` binary as deployed, electing a leader
//! on a Lease of the test bed's real kube-apiserver, with ServiceAccount tokens bound to
//! exactly the roles in `deploy/rbac/`, running jobs on the real SLURM.
//!
//! Checked: only the Lease holder submits; the holder's crash (SIGKILL, so the Lease is not
//! released) hands over to the other replica once the Lease expires; a graceful stop
//! (SIGTERM) releases the Lease, and the standby takes it when it next looks (at the latest
//! when the Lease would have expired); every job runs exactly once; both replicas never
//! report leading at the same moment; and the metrics, health and readiness endpoints answer,
//! the leader's /metrics with every metric the Grafana dashboard and the chart's alerts read,
//! labelled as documented (issue 33).

#![allow(clippy::unwrap_used)]

mod catalog;
mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use batchbridge_operator::crd::Phase;
use batchbridge_testbed::login;
use common::Cluster;
use common::operator::{
    create_cluster, create_job, create_secret, http_get, metric, slurm, status, wait_for_phase,
};
use common::process::{OperatorProcess, write_operator_kubeconfig};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use serde_json::json;

const LEASE: &str = "batchbridge-operator-test";
/// The binary's Lease duration: a crashed leader is replaced within it.
const LEASE_DURATION: Duration = Duration::from_secs(15);

async fn holder(bed: &Cluster) -> Option<String> {
    let lease = Api::<Lease>::namespaced(bed.client.clone(), &bed.namespace)
        .get_opt(LEASE)
        .await
        .unwrap()?;
    lease.spec?.holder_identity
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_lease_holder_acts_and_the_other_replica_takes_over() {
    let bed = Cluster::new("leader").await;
    let login = login("ssh");
    create_secret(&bed, "cluster-key", &login).await;
    create_cluster(&bed, "slurm", "slurm", &login, "cluster-key").await;
    let dir = tempfile::tempdir().unwrap();
    write_operator_kubeconfig(&bed, dir.path()).await;
    let ns = bed.namespace.clone();

    let a = OperatorProcess::start("a", &bed, dir.path(), Some(LEASE));
    a.wait_until("it leads", Duration::from_secs(30), async |r| {
        r.leads().await
    })
    .await;
    let b = OperatorProcess::start("b", &bed, dir.path(), Some(LEASE));
    b.wait_until("it is ready", Duration::from_secs(30), async |r| {
        http_get(r.address, "/readyz").await.map(|(code, _)| code) == Some(200)
    })
    .await;
    assert_eq!(http_get(b.address, "/healthz").await.unwrap().0, 200);
    assert!(!b.leads().await, "the second replica stands by");
    assert_eq!(holder(&bed).await.as_deref(), Some("a"));

    // Both replicas' view of who leads, sampled until the end of the test.
    let both_led = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (a, b, both_led) = (a.address, b.address, Arc::clone(&both_led));
        tokio::spawn(async move {
            loop {
                let leads = async |address| {
                    let text = http_get(address, "/metrics").await.unwrap_or_default().1;
                    metric(&text, "batchbridge_leader") == Some(1.0)
                };
                if leads(a).await && leads(b).await {
                    both_led.store(true, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };

    let script = json!({"clusterRef": {"name": "slurm"}, "script": "echo once\n"});
    create_job(&bed, "first", script.clone()).await;
    let first = wait_for_phase(&bed, "first", Phase::Succeeded).await;
    assert_eq!(status(&first).attempts, 1);
    assert_eq!(a.submits(&ns).await, 1.0, "the leader submitted");
    assert_eq!(b.submits(&ns).await, 0.0, "the standby did not");
    let a_metrics = a.metrics().await;
    for series in [
        format!(
            r#"batchbridge_jobs{{batchjob_namespace="{ns}",batchcluster="slurm",phase="Succeeded"}}"#
        ),
        format!(
            r#"batchbridge_ssh_connections_opened_total{{batchjob_namespace="{ns}",batchcluster="slurm"}}"#
        ),
    ] {
        assert_eq!(
            metric(&a_metrics, &series),
            Some(1.0),
            "{series} in:\n{a_metrics}"
        );
    }
    every_used_metric_is_scraped_as_documented(&a_metrics);
    for series in [
        format!(
            r#"batchbridge_poll_duration_seconds_count{{batchjob_namespace="{ns}",batchcluster="slurm"}}"#
        ),
        format!(
            r#"batchbridge_scheduler_commands_total{{batchjob_namespace="{ns}",batchcluster="slurm",command="squeue"}}"#
        ),
    ] {
        let value = metric(&a_metrics, &series).unwrap_or(0.0);
        assert!(value >= 1.0, "{series} in:\n{a_metrics}");
    }

    // A crash: the Lease is not released, so B waits for it to expire.
    a.crash();
    let crashed = Instant::now();
    a.exited().await;
    create_job(&bed, "second", script.clone()).await;
    b.wait_until("it leads", LEASE_DURATION * 2, async |r| r.leads().await)
        .await;
    let takeover = crashed.elapsed();
    let second = wait_for_phase(&bed, "second", Phase::Succeeded).await;
    assert_eq!(holder(&bed).await.as_deref(), Some("b"));
    assert_eq!(b.submits(&ns).await, 1.0);

    // A graceful stop releases the Lease: the new replica leads at once.
    let a = OperatorProcess::start("a2", &bed, dir.path(), Some(LEASE));
    a.wait_until("it is ready", Duration::from_secs(30), async |r| {
        http_get(r.address, "/readyz").await.map(|(code, _)| code) == Some(200)
    })
    .await;
    assert!(!a.leads().await);
    b.signal("-TERM");
    let stopped = Instant::now();
    assert!(b.exited().await.success(), "a graceful stop exits 0");
    assert_eq!(
        holder(&bed).await,
        None,
        "a graceful stop releases the Lease"
    );
    a.wait_until("it leads", LEASE_DURATION, async |r| r.leads().await)
        .await;
    let handover = stopped.elapsed();
    create_job(&bed, "third", script).await;
    let third = wait_for_phase(&bed, "third", Phase::Succeeded).await;
    assert_eq!(a.submits(&ns).await, 1.0);
    sampler.abort();
    assert!(
        !both_led.load(Ordering::Relaxed),
        "two replicas reported leading at the same time"
    );

    // Every job ran exactly once on SLURM: one accounting record per key (the UID). The
    // last record may reach slurmdbd a moment after the job's end.
    let uids = [&first, &second, &third].map(|job| job.metadata.uid.clone().unwrap());
    let deadline = Instant::now() + Duration::from_secs(30);
    let runs = loop {
        let comments = slurm("sacct -X -n -P -S now-1hour -o Comment").await;
        let runs = uids
            .clone()
            .map(|uid| comments.lines().filter(|c| *c == uid).count());
        if !runs.contains(&0) || Instant::now() > deadline {
            break runs;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert_eq!(runs, [1, 1, 1], "SLURM jobs with each job's key");
    assert!(
        takeover < LEASE_DURATION + Duration::from_secs(10),
        "a crashed leader was replaced in {takeover:?}"
    );
    assert!(
        handover < LEASE_DURATION + Duration::from_secs(10),
        "a released Lease was taken in {handover:?}"
    );
    eprintln!("takeover after a crash: {takeover:?}; after a graceful stop: {handover:?}");
    drop(a);
    bed.clean_up().await;
}

/// Metrics the dashboard or the alerts read that a run without faults does not make, and
/// why: none of its submits fails, none of its reconciles fails, and the test bed's
/// BatchCluster logs in with a key, not a certificate that expires.
const MADE_ONLY_BY_FAULTS: &[&str] = &[
    "batchbridge_submit_failures_total",
    "batchbridge_reconcile_errors_total",
    "batchbridge_credential_expiry_timestamp_seconds",
];

/// Every metric the Grafana dashboard and the chart's alerts read is in the leader's scrape
/// after a job ran, with exactly the labels metrics.rs documents (a histogram as its
/// `_bucket`, `_sum` and `_count`; a bucket's `le` aside), unless only a fault makes it.
fn every_used_metric_is_scraped_as_documented(scrape: &str) {
    let scraped = catalog::series_in(scrape);
    let documented = catalog::documented_metrics();
    for used in catalog::used_metrics() {
        let metric = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|suffix| used.strip_suffix(suffix))
            .filter(|family| documented.contains_key(*family))
            .unwrap_or(&used);
        let labels = documented
            .get(metric)
            .unwrap_or_else(|| panic!("{used} is read but not documented in metrics.rs"));
        match scraped.get(&used) {
            Some(got) => assert_eq!(got, labels, "the labels of {used} in:\n{scrape}"),
            None => assert!(
                MADE_ONLY_BY_FAULTS.contains(&metric),
                "{used} is not in the scrape:\n{scrape}"
            ),
        }
    }
}
