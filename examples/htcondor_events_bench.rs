//! Measures what HTCondor's event source costs on the submit node of the test bed's pool
//! (`tests/testbed/up.sh` first): one follower (`tail` of the user job event log and its
//! heartbeat loop) in a work directory of its own, idle for a minute, then while one
//! cluster of N procs (`true`) runs and ends:
//!
//! - the follower's processes, their resident sets, and their CPU seconds (`/proc/PID/stat`, with reaped
//!   children), idle and under the cluster;
//! - every process the follower started, by name, sampled from `ps` every 0.2 s (the
//!   scheduler queries among them: `condor_q`, `condor_history`);
//! - the events pushed (starts, exits), against the N procs;
//! - whether anything of the follower is left once the stream is dropped.
//!
//! ```text
//! cargo run --release --example htcondor_events_bench            # N = 1000
//! cargo run --release --example htcondor_events_bench -- 100     # another size
//! ```

#![allow(clippy::print_stdout)]

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use batchbridge_core::conformance::unique_key;
use batchbridge_core::events::EventKind;
use batchbridge_core::shell::{Command, Shell};
use batchbridge_core::{ArraySpec, BatchBackend, Error, JobSpec, Result};
use batchbridge_htcondor::events::EVENT_LOG;
use batchbridge_htcondor::{HtcondorBackend, HtcondorConfig};
use batchbridge_testbed::{htcondor_shell, login};

const IDLE: Duration = Duration::from_secs(60);
const SAMPLE_EVERY: Duration = Duration::from_millis(200);

#[tokio::main]
async fn main() -> Result<()> {
    let procs: u32 = match std::env::args().nth(1) {
        Some(n) => n
            .parse()
            .map_err(|_| Error::invalid_input(format!("{n:?} is not a number of procs")))?,
        None => 1000,
    };
    let key = unique_key("events-bench");
    let work = format!(".batchbridge/htcondor-events-bench/{key}");
    let shell: Arc<dyn Shell> = Arc::new(htcondor_shell());
    let condor = HtcondorBackend::new(
        Arc::clone(&shell),
        HtcondorConfig::default().with_work_dir(work.clone()),
    )?;
    let mut events = condor
        .events()
        .ok_or_else(|| Error::invalid_input("the HTCondor backend has no event source"))?
        .open()
        .await?;

    let tail_args = format!("tail -F -n 0 -- {work}/{EVENT_LOG}");
    let follower = loop {
        let table = processes(shell.as_ref()).await?;
        if let Some(tail) = table.iter().find(|p| p.args == tail_args) {
            let loops: Vec<&Process> = table.iter().filter(|p| p.ppid == tail.pid).collect();
            if let [heartbeat] = loops.as_slice() {
                println!(
                    "follower: tail (pid {}, {} KiB resident) and its heartbeat loop (pid {}, \
                     {} KiB resident), one SSH session",
                    tail.pid, tail.rss_kib, heartbeat.pid, heartbeat.rss_kib
                );
                break [tail.pid.clone(), heartbeat.pid.clone()];
            }
        }
        tokio::time::sleep(SAMPLE_EVERY).await;
    };

    // Every process whose parent is one of the follower's, by name, until told to stop.
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = tokio::spawn({
        let (shell, stop, follower) = (Arc::clone(&shell), Arc::clone(&stop), follower.clone());
        async move {
            let mut seen: HashSet<(String, String)> = HashSet::new();
            while !stop.load(Ordering::Relaxed) {
                if let Ok(table) = processes(shell.as_ref()).await {
                    seen.extend(
                        table
                            .into_iter()
                            .filter(|p| follower.contains(&p.ppid) && !follower.contains(&p.pid))
                            .map(|p| (p.pid, p.comm)),
                    );
                }
                tokio::time::sleep(SAMPLE_EVERY).await;
            }
            seen
        }
    });

    let start_cpu = cpu_seconds(shell.as_ref(), &follower).await?;
    tokio::time::sleep(IDLE).await;
    let idle_cpu = cpu_seconds(shell.as_ref(), &follower).await?;
    println!(
        "idle {} s: {:.2} CPU seconds",
        IDLE.as_secs(),
        idle_cpu - start_cpu
    );

    let mut spec = JobSpec::new(key, "events-bench", "true\n");
    spec.array = Some(ArraySpec::new(procs));
    let submitted = Instant::now();
    let id = condor.submit(&spec).await?;
    let (mut started, mut exited) = (HashSet::new(), HashSet::new());
    while exited.len() < procs as usize {
        let event = events
            .recv()
            .await
            .ok_or_else(|| Error::invalid_input("the event stream ended"))?;
        if event.id != id {
            continue;
        }
        match event.kind {
            EventKind::Started => {
                started.insert(event.task);
            }
            EventKind::Exited(_) => {
                exited.insert(event.task);
            }
            _ => {}
        }
    }
    let busy_cpu = cpu_seconds(shell.as_ref(), &follower).await?;
    println!(
        "{procs} procs of cluster {id} ran and ended in {:.0} s: {} Started and {} Exited \
         events; {:.2} CPU seconds",
        submitted.elapsed().as_secs_f64(),
        started.len(),
        exited.len(),
        busy_cpu - idle_cpu
    );
    let log = Command::sh("wc -lc <\"$1/$2\"", [work.as_str(), EVENT_LOG]);
    println!(
        "event log (lines, bytes): {}",
        shell.run(&log).await?.stdout_text().trim()
    );

    stop.store(true, Ordering::Relaxed);
    let seen = sampler
        .await
        .map_err(|err| Error::invalid_input(format!("the sampler failed: {err}")))?;
    let mut by_name: BTreeMap<String, usize> = BTreeMap::new();
    for (_, comm) in seen {
        *by_name.entry(comm).or_default() += 1;
    }
    println!("processes the follower started, by name: {by_name:?}");
    for query in ["condor_q", "condor_history"] {
        println!(
            "{query} run by the follower: {}",
            by_name.get(query).copied().unwrap_or(0)
        );
    }

    drop(events);
    let gone = Instant::now();
    while processes(shell.as_ref())
        .await?
        .iter()
        .any(|p| follower.contains(&p.pid))
    {
        tokio::time::sleep(SAMPLE_EVERY).await;
    }
    println!(
        "stream dropped: the follower's processes were gone {:.1} s later",
        gone.elapsed().as_secs_f64()
    );
    Ok(())
}

/// One line of `ps`.
#[derive(Debug)]
struct Process {
    pid: String,
    ppid: String,
    rss_kib: String,
    comm: String,
    args: String,
}

/// The test bed user's processes.
async fn processes(shell: &dyn Shell) -> Result<Vec<Process>> {
    let user = login("htcondor").user;
    let ps = Command::new("ps").args(["-u", user.as_str(), "-o", "pid=,ppid=,rss=,comm=,args="]);
    let output = shell.run(&ps).await?.check("ps")?;
    Ok(output
        .stdout_text()
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let (pid, ppid, rss) = (words.next()?, words.next()?, words.next()?);
            let comm = words.next()?;
            Some(Process {
                pid: pid.to_owned(),
                ppid: ppid.to_owned(),
                rss_kib: rss.to_owned(),
                comm: comm.to_owned(),
                args: words.collect::<Vec<_>>().join(" "),
            })
        })
        .collect())
}

/// The CPU seconds `pids` used, with their reaped children's: `utime + stime + cutime +
/// cstime` from `/proc/PID/stat`, in clock ticks of `getconf CLK_TCK`.
async fn cpu_seconds(shell: &dyn Shell, pids: &[String]) -> Result<f64> {
    let command = Command::sh(
        "getconf CLK_TCK; for pid; do cat \"/proc/$pid/stat\"; done",
        pids.iter().map(String::as_str),
    );
    let output = shell.run(&command).await?.check("reading /proc")?;
    let text = output.stdout_text();
    let mut lines = text.lines();
    let ticks: f64 = lines
        .next()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(100.0);
    let total: u64 = lines
        .filter_map(|stat| {
            // Fields after the command name in parentheses: state is field 3, utime 14.
            let (_, rest) = stat.rsplit_once(") ")?;
            let fields: Vec<&str> = rest.split_whitespace().collect();
            Some(
                fields
                    .get(11..15)?
                    .iter()
                    .filter_map(|f| f.parse::<u64>().ok())
                    .sum::<u64>(),
            )
        })
        .sum();
    Ok(total as f64 / ticks)
}
