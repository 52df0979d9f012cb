//! 100 MB of garbage, cut events and huge lines appended to the user job event log while
//! the follower reads it, over SSH from the test bed's submit node: every whole event
//! still arrives, and this process's memory stays bounded (measured: peak resident set).
//! Its own test binary, so that no other test's allocations move the peak.
//! Run alone: `cargo test -p batchbridge-htcondor --test events_flood -- --nocapture`.

// Test helpers panic on purpose: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;
#[path = "../../batchbridge-core/tests/hostile/mod.rs"]
mod hostile;

use std::time::Instant;

use batchbridge_core::JobId;
use batchbridge_core::events::EventKind;
use batchbridge_core::shell::Command;
use batchbridge_htcondor::events::EVENT_LOG;
use common::{PATIENCE, events_backend, open_events};

/// Lines of about 100 bytes in the flood; every 1000th is a whole terminated event.
const LINES: u64 = 1_000_000;
const EVENT_EVERY: u64 = 1000;

/// Appends the flood to the log: lines of garbage, each 1000th a whole event of cluster
/// 1000, 2000, …, each 250,000th a 10 MB line without a break and an event cut short, and
/// at the end an event of cluster 0 that says the flood is over.
const FLOOD: &str = r#"log=$1/$2
awk -v lines="$3" -v every="$4" 'BEGIN {
    pad = sprintf("%90s", ""); gsub(/ /, "x", pad)
    for (i = 1; i <= lines; i++) {
        if (i % every == 0) printf "005 (%d.000.000) t\n\t(1) Normal termination (return value 7)\n...\n", i
        else printf "garbage %s\n", pad
        if (i % 250000 == 0) printf "012 (%d.000.000) cut short\n", i
    }
}' >>"$log" &&
head -c 10000000 /dev/zero | tr '\0' x >>"$log" && echo >>"$log" &&
printf '009 (0.000.000) t\n...\n' >>"$log" && wc -c <"$log""#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_in_the_log_costs_bounded_memory_and_loses_no_whole_event() {
    let (condor, shell, work) = events_backend("ev-flood");
    let mut events = open_events(&condor, shell.as_ref(), &work).await;
    hostile::reset_peak();
    let before = hostile::peak();
    let started = Instant::now();

    let flood = Command::sh(
        FLOOD,
        [
            work.clone(),
            EVENT_LOG.to_owned(),
            LINES.to_string(),
            EVENT_EVERY.to_string(),
        ],
    )
    .timeout(PATIENCE);
    let written = shell.run(&flood).await.unwrap().check("the flood").unwrap();
    let bytes: u64 = written.stdout_text().trim().parse().unwrap();
    assert!(bytes > 100_000_000, "{bytes} bytes in the log");

    let mut exited = Vec::new();
    let end = JobId::from("0");
    let received = tokio::time::timeout(PATIENCE, async {
        while let Some(event) = events.recv().await {
            if event.id == end && event.kind == EventKind::Removed {
                return;
            }
            assert_eq!(event.kind, EventKind::Exited(7), "{event:?}");
            exited.push(event.id.to_string());
        }
        panic!("the stream ended before the flood did");
    })
    .await;
    assert!(received.is_ok(), "the flood's end arrived");
    let seconds = started.elapsed().as_secs_f64();
    let growth = hostile::peak().saturating_sub(before);

    let expected: Vec<String> = (1..=LINES / EVENT_EVERY)
        .map(|i| (i * EVENT_EVERY).to_string())
        .collect();
    assert_eq!(exited, expected, "every whole event, in order");
    eprintln!(
        "{:.1} MB of log read in {seconds:.1} s; peak resident set grew {:.1} MiB (from \
         {:.1} MiB)",
        bytes as f64 / 1e6,
        growth as f64 / 1_048_576.0,
        before as f64 / 1_048_576.0
    );
    // The stream holds at most 256 lines of at most 64 KiB and 1024 events: far less than
    // the log.
    assert!(
        growth < 48 * 1024 * 1024,
        "peak resident set grew {growth} bytes reading {bytes} bytes"
    );
}
