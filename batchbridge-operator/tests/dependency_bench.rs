//! The dependency benchmark (issue 30, point 3): BatchJobs in chains (each one's spec.after
//! naming the one before it) against the test bed's real kube-apiserver, run by an
//! operator in this process with the `local` scheduler, so that what is measured is the
//! operator's reaction rather than a shared scheduler's queue. A benchmark, not a timed
//! test: ignored by default (CI only compiles it); it reports what it measured. Run it with
//!
//! ```text
//! cargo test --release -p batchbridge-operator --test dependency_bench -- --ignored --nocapture
//! ```
//!
//! Settings (environment): `BATCHBRIDGE_BENCH_CHAINS` (100), `BATCHBRIDGE_BENCH_LENGTH`
//! (jobs per chain, 10), `BATCHBRIDGE_BENCH_SETTLE` (1: the chains' heads are created only
//! once every other job is seen waiting, so that the links measure the steady state; 0:
//! all at once, the heads last, so that the first links also wait behind the burst of new
//! jobs), `BATCHBRIDGE_BENCH_TIMEOUT` (seconds to wait for every job to succeed, 1800).
//!
//! What it measures: a watch on the BatchJobs records when each is first seen Succeeded
//! and when each is first seen past Pending (its attempt Submitted). For every link of a
//! chain, latency = the dependent seen submitted − its dependency seen Succeeded: from the
//! dependency's end as the operator wrote it to the dependent's submit, both through the
//! same watch. Also the time from the first create until every job succeeded.

#![allow(clippy::unwrap_used, clippy::print_stdout)]

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use batchbridge_operator::Operator;
use batchbridge_operator::crd::{BatchJob, Phase};
use batchbridge_operator::reason::Reason;
use common::Cluster;
use common::operator::{batch_job, create_cluster_with};
use futures::StreamExt;
use kube::api::PostParams;
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;

/// BatchJob creates the benchmark keeps in flight.
const CREATES_IN_FLIGHT: usize = 16;

fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

/// When each job was first seen submitted and first seen Succeeded.
#[derive(Debug, Default, Clone, Copy)]
struct Seen {
    waiting: Option<Instant>,
    submitted: Option<Instant>,
    succeeded: Option<Instant>,
}

fn name(chain: u64, link: u64) -> String {
    format!("c{chain}-j{link}")
}

/// Creates `jobs`, a few at a time.
async fn create(bed: &Cluster, jobs: impl Iterator<Item = BatchJob>) {
    let api = bed.jobs();
    futures::stream::iter(jobs)
        .for_each_concurrent(CREATES_IN_FLIGHT, |job| {
            let api = api.clone();
            async move {
                api.create(&PostParams::default(), &job).await.unwrap();
            }
        })
        .await;
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    #[allow(
        clippy::cast_precision_loss,
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss
    )]
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: run with --ignored, see docs/PERFORMANCE.md"]
async fn chains() {
    let chains = setting("BATCHBRIDGE_BENCH_CHAINS", 100);
    let length = setting("BATCHBRIDGE_BENCH_LENGTH", 10);
    let timeout = Duration::from_secs(setting("BATCHBRIDGE_BENCH_TIMEOUT", 1800));
    let bed = Cluster::new("deps-bench").await;
    let state = tempfile::tempdir().unwrap();
    create_cluster_with(
        &bed,
        "local",
        json!({"scheduler": "local", "pollInterval": "1s"}),
    )
    .await;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let operator = Operator::new(bed.operator_client().await)
        .namespace(bed.namespace.clone())
        .local_scheduler(state.path());
    let running = tokio::spawn(operator.run(async move {
        let _ = stopped.await;
    }));

    let book: Arc<Mutex<HashMap<String, Seen>>> = Arc::default();
    let watching = {
        let book = Arc::clone(&book);
        let jobs = bed.jobs();
        tokio::spawn(async move {
            let mut events = watcher(jobs, watcher::Config::default())
                .applied_objects()
                .boxed();
            while let Some(Ok(job)) = events.next().await {
                let at = Instant::now();
                let phase = job.status.as_ref().and_then(|s| s.phase);
                let mut book = book.lock().unwrap();
                let seen = book
                    .entry(job.metadata.name.unwrap_or_default())
                    .or_default();
                if job.status.as_ref().and_then(|s| s.reason)
                    == Some(Reason::WaitingForDependencies)
                {
                    seen.waiting.get_or_insert(at);
                }
                if phase.is_some_and(|p| p != Phase::Pending) {
                    seen.submitted.get_or_insert(at);
                }
                if phase == Some(Phase::Succeeded) {
                    seen.succeeded.get_or_insert(at);
                }
            }
        })
    };

    let settle = setting("BATCHBRIDGE_BENCH_SETTLE", 1) == 1;
    let started = Instant::now();
    // The last link of every chain first, so that each job but the heads waits.
    let job = |(chain, link): (u64, u64)| {
        let after = if link == 0 {
            json!([])
        } else {
            json!([{"name": name(chain, link - 1)}])
        };
        batch_job(
            &name(chain, link),
            json!({"clusterRef": {"name": "local"}, "script": "true\n", "after": after}),
        )
    };
    let links = (1..length)
        .rev()
        .flat_map(|link| (0..chains).map(move |chain| (chain, link)));
    create(&bed, links.map(job)).await;
    #[allow(clippy::cast_possible_truncation)]
    let total = (chains * length) as usize;
    let deadline = Instant::now() + timeout;
    if settle {
        let waiting = || {
            book.lock()
                .unwrap()
                .values()
                .filter(|s| s.waiting.is_some())
                .count()
        };
        while waiting() < total - chains as usize && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let settled = started.elapsed();
    create(&bed, (0..chains).map(|chain| job((chain, 0)))).await;
    let created = started.elapsed();

    loop {
        let done = book
            .lock()
            .unwrap()
            .values()
            .filter(|s| s.succeeded.is_some())
            .count();
        if done == total || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let drained = started.elapsed();
    let book = book.lock().unwrap().clone();
    let succeeded = book.values().filter(|s| s.succeeded.is_some()).count();
    let latency = |chain: u64, link: u64| {
        let dependency = book.get(&name(chain, link - 1))?.succeeded?;
        let dependent = book.get(&name(chain, link))?.submitted?;
        Some(
            dependent
                .saturating_duration_since(dependency)
                .as_secs_f64()
                * 1000.0,
        )
    };
    let mut latencies: Vec<f64> = (0..chains)
        .flat_map(|chain| (1..length).map(move |link| (chain, link)))
        .filter_map(|(chain, link)| latency(chain, link))
        .collect();
    latencies.sort_by(f64::total_cmp);
    println!(
        "dependency benchmark: {chains} chains of {length} ({total} BatchJobs), local scheduler, \
         heads created {}",
        if settle {
            "once the rest waited"
        } else {
            "last, with the rest"
        }
    );
    println!(
        "  links created and seen waiting in {:.1} s, heads created at {:.1} s",
        settled.as_secs_f64(),
        created.as_secs_f64()
    );
    for link in 1..length {
        let mut at: Vec<f64> = (0..chains)
            .filter_map(|chain| latency(chain, link))
            .collect();
        at.sort_by(f64::total_cmp);
        if !at.is_empty() {
            println!(
                "  link {link}: p50 {:.0} ms, p99 {:.0} ms",
                quantile(&at, 0.5),
                quantile(&at, 0.99)
            );
        }
    }
    println!(
        "  {succeeded}/{total} Succeeded after {:.1} s from the first create",
        drained.as_secs_f64()
    );
    if !latencies.is_empty() {
        println!(
            "  dependency Succeeded -> dependent submitted, {} links: p50 {:.0} ms, p90 {:.0} ms, \
             p99 {:.0} ms, max {:.0} ms",
            latencies.len(),
            quantile(&latencies, 0.5),
            quantile(&latencies, 0.9),
            quantile(&latencies, 0.99),
            latencies[latencies.len() - 1]
        );
    }
    watching.abort();
    let _ = stop.send(());
    let _ = tokio::time::timeout(Duration::from_secs(30), running).await;
    assert_eq!(succeeded, total, "every job succeeded");
    bed.clean_up().await;
}
