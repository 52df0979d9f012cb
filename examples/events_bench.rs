//! Measures the job-event follower (core's `WrapperEvents`) on the test bed's SLURM 22.05
//! login node (`tests/testbed/up.sh` first), for 0, 1000 and 10,000 event files in its
//! directory:
//!
//! - how long the replay of the files already there takes to arrive;
//! - the follower's processes on the login node and the CPU seconds they use per minute
//!   (from `/proc/PID/stat`, children included), once the replay is over;
//! - the delay from an event file's creation (a `touch` through the same connection) to
//!   its event arriving: p50 and p99 of 40.
//!
//! ```text
//! cargo run --release --example events_bench              # 0, 1000, 10000 files, 60 s each
//! cargo run --release --example events_bench -- 1000 30   # 1000 files, 30 s
//! ```

#![allow(clippy::print_stdout)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use batchbridge_core::conformance::unique_key;
use batchbridge_core::events::{EventSource, EventStream};
use batchbridge_core::remote::WrapperEvents;
use batchbridge_core::shell::{Command, Shell};
use batchbridge_core::{Error, Result};
use batchbridge_testbed::{SlurmCluster, stdout_of};

#[tokio::main]
async fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let number = |text: &String| {
        text.parse::<u64>()
            .map_err(|err| Error::invalid_input(format!("{text:?}: {err}")))
    };
    let sizes = match args.first() {
        Some(files) => vec![number(files)?],
        None => vec![0, 1000, 10_000],
    };
    let minutes_of = args.get(1).map(number).transpose()?.unwrap_or(60);
    let shell: Arc<dyn Shell> = Arc::new(SlurmCluster::Slurm2205.shell());
    println!("files  replay      processes          CPU s/min   event delay p50 / p99");
    for files in sizes {
        measure(&shell, files, Duration::from_secs(minutes_of)).await?;
    }
    Ok(())
}

async fn measure(shell: &Arc<dyn Shell>, files: u64, span: Duration) -> Result<()> {
    let home = stdout_of(shell.as_ref(), Command::new("pwd")).await;
    let work = format!(
        "{}/.batchbridge/{}",
        home.trim(),
        unique_key("events-bench")
    );
    let dir = format!("{work}/events");
    let make = Command::sh(
        "mkdir -p \"$1\" && cd \"$1\" && i=0; while [ $i -lt \"$2\" ]; do : >\"$((i + 1000000)).0.exit.0\"; i=$((i + 1)); done",
        [dir.clone(), files.to_string()],
    );
    stdout_of(shell.as_ref(), make).await;

    let source = WrapperEvents::in_dir(shell.clone(), dir.clone());
    let start = Instant::now();
    let mut stream = source.open().await?;
    for _ in 0..files {
        next(&mut stream).await?;
    }
    let replay = start.elapsed();

    // Steady state: CPU used between two samples `span` apart, nothing arriving.
    let (processes, before) = follower_cpu(shell.as_ref(), &dir).await?;
    let idle = tokio::time::sleep(span);
    tokio::pin!(idle);
    loop {
        tokio::select! {
            () = &mut idle => break,
            event = stream.recv() => if event.is_none() {
                return Err(Error::new(batchbridge_core::ErrorKind::ConnectionLost, "the follower ended"));
            },
        }
    }
    let (_, after) = follower_cpu(shell.as_ref(), &dir).await?;
    let per_minute = (after - before) * 60.0 / span.as_secs_f64();

    let mut delays = Vec::new();
    for n in 0..40 {
        let touch = Command::new("touch").arg(format!("{dir}/{}.0.started", 2_000_000 + n));
        shell.run(&touch).await?.check("touch")?;
        let created = Instant::now();
        next(&mut stream).await?;
        delays.push(created.elapsed());
        // Spread the creations over the follower's tick: each waits a different part of
        // it after the previous event arrived (right after a listing).
        tokio::time::sleep(Duration::from_millis(n * 211 % 500)).await;
    }
    delays.sort();
    let at = |q: f64| delays[((delays.len() - 1) as f64 * q).round() as usize];
    drop(stream);
    stdout_of(
        shell.as_ref(),
        Command::new("rm").args(["-rf", "--", &work]),
    )
    .await;
    let names: Vec<String> = processes
        .iter()
        .map(|(name, n)| format!("{n} {name}"))
        .collect();
    println!(
        "{files:>5}  {:>7.2} s   {:<17}  {per_minute:>6.3}      {:.0} ms / {:.0} ms",
        replay.as_secs_f64(),
        names.join(", "),
        at(0.5).as_secs_f64() * 1000.0,
        at(0.99).as_secs_f64() * 1000.0,
    );
    Ok(())
}

async fn next(stream: &mut EventStream) -> Result<()> {
    match tokio::time::timeout(Duration::from_secs(120), stream.recv()).await {
        Ok(Some(_)) => Ok(()),
        _ => Err(Error::new(
            batchbridge_core::ErrorKind::Timeout,
            "no event from the follower within 2 minutes",
        )),
    }
}

/// The follower's long-lived processes by name (its shell, the listing loop, awk: found
/// by the events directory on the shell's command line, and their children), and the CPU
/// seconds they and their reaped children (each tick's `sleep`) used so far.
async fn follower_cpu(shell: &dyn Shell, dir: &str) -> Result<(BTreeMap<String, u32>, f64)> {
    let script = r#"main=$(pgrep -o -f -- " sh $1 [0-9]") || exit 1
tick=$(getconf CLK_TCK)
for p in $main $(pgrep -P "$main"); do
    # comm is (sh) or (awk): no spaces, so the fields after it are in place.
    set -- $(cat "/proc/$p/stat")
    printf '%s %s\n' "$2" "$(( ${14} + ${15} + ${16} + ${17} ))"
done
echo "tick $tick""#;
    let text = stdout_of(shell, Command::sh(script, [dir])).await;
    let mut processes = BTreeMap::new();
    let mut ticks = 0u64;
    let mut per_second = 100.0;
    for line in text.lines() {
        let (name, value) = line.split_once(' ').unwrap_or_default();
        let value: u64 = value.trim().parse().unwrap_or(0);
        if name == "tick" {
            per_second = value as f64;
        } else {
            *processes
                .entry(name.trim_matches(['(', ')']).to_owned())
                .or_default() += 1;
            ticks += value;
        }
    }
    Ok((processes, ticks as f64 / per_second))
}
