//! Measures the SLURM backend against the test bed's cluster (`tests/testbed/up.sh` first):
//!
//! - for N = 10, 100 and 1000 jobs, status cycles over all N until every job ended: the
//!   slurmctld RPCs each cycle cost (from `sdiag`, by our user), the scheduler commands each
//!   cycle ran, and the wall time of a cycle;
//! - submit throughput through the backend over one SSH connection, against a plain `sbatch`
//!   loop in one SSH session, in the same run;
//! - the SSH connections opened over the whole run.
//!
//! With `submit` first, it measures submit throughput alone instead: for each N, three
//! rounds, each a plain `sbatch` loop in one SSH session (a remote `for` loop over the same
//! SSH master) and `SlurmBackend::submit_many` of N jobs, which one goes first alternating,
//! cancelling each round's jobs (by their job name, unique to the run) before the next; the
//! backend's work directory is the run's own, removed at the end.
//!
//! ```text
//! cargo run --release --example slurm_bench                         # N = 10, 100, 1000
//! cargo run --release --example slurm_bench -- 10 50                # other sizes
//! cargo run --release --example slurm_bench -- submit 200 500 2000  # submit throughput
//! ```

#![allow(clippy::print_stdout)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use batchbridge_core::shell::{Command, Shell, SshShell};
use batchbridge_core::{BatchBackend, JobId, JobKey, JobSpec, Result};
use batchbridge_examples::bench::{
    mean_ms, print_throughput, range, rpcs_by_user, sizes_from_args, submit_all,
};
use batchbridge_slurm::{SlurmBackend, SlurmConfig};
use batchbridge_testbed::{CountingShell, ssh_facts};

fn specs(run: &str, n: usize) -> Result<Vec<JobSpec>> {
    named_specs(run, "bench", n)
}

fn named_specs(run: &str, name: &str, n: usize) -> Result<Vec<JobSpec>> {
    (0..n)
        .map(|i| {
            let mut spec = JobSpec::new(JobKey::new(format!("bench-{run}-{i}"))?, name, "true\n");
            spec.queue = Some("debug".into());
            Ok(spec)
        })
        .collect()
}

struct Cycles {
    count: usize,
    rpcs: Vec<u64>,
    commands: Vec<u64>,
    wall: Vec<Duration>,
}

/// Status cycles over `ids` until all ended, measuring each one.
async fn run_cycles(
    slurm: &SlurmBackend,
    counting: &CountingShell<SshShell>,
    sdiag_shell: &SshShell,
    user: &str,
    ids: &[JobId],
) -> Result<Cycles> {
    let mut cycles = Cycles {
        count: 0,
        rpcs: Vec::new(),
        commands: Vec::new(),
        wall: Vec::new(),
    };
    loop {
        counting.take_counts();
        let before = rpcs_by_user(sdiag_shell, user).await?;
        let started = Instant::now();
        let statuses = slurm.status(ids).await?;
        cycles.wall.push(started.elapsed());
        let after = rpcs_by_user(sdiag_shell, user).await?;
        // The delta includes the first sdiag call itself.
        cycles
            .rpcs
            .push(after.saturating_sub(before).saturating_sub(1));
        cycles
            .commands
            .push(counting.take_total(&["squeue", "sacct"]));
        cycles.count += 1;
        if statuses.values().all(|s| s.state.is_terminal()) {
            return Ok(cycles);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Seconds for a plain `sbatch` loop of `n` jobs in one SSH session.
async fn plain_sbatch_loop(shell: &SshShell, n: usize) -> Result<f64> {
    let started = Instant::now();
    let script = "for i in $(seq \"$1\"); do sbatch -Q -p debug -o /dev/null --wrap true >/dev/null || exit; done";
    shell
        .run(
            &Command::new("sh")
                .args(["-c", script, "sh", &n.to_string()])
                .timeout(Duration::from_secs(600)),
        )
        .await?
        .check("the sbatch loop")?;
    Ok(started.elapsed().as_secs_f64())
}

/// Seconds for a plain `sbatch` loop of `n` jobs named `name`, in one SSH session over
/// `shell`'s master.
async fn named_sbatch_loop(shell: &SshShell, name: &str, n: usize) -> Result<f64> {
    let started = Instant::now();
    let script = "for i in $(seq \"$1\"); do sbatch -Q -p debug -o /dev/null -J \"$2\" --wrap true >/dev/null || exit; done";
    shell
        .run(
            &Command::sh(script, [n.to_string(), name.to_owned()])
                .timeout(Duration::from_secs(1200)),
        )
        .await?
        .check("the sbatch loop")?;
    Ok(started.elapsed().as_secs_f64())
}

/// Cancels the jobs named `name` (one run's round), so that the shared queue stays empty.
async fn cancel_named(shell: &SshShell, name: &str) -> Result<()> {
    shell
        .run(&Command::sh("scancel -u \"$(id -un)\" -n \"$1\"", [name]))
        .await?
        .check("scancel")?;
    Ok(())
}

/// One round of `submit_many`: the seconds it took; prints how many failed and the first.
async fn submit_many_round(slurm: &SlurmBackend, specs: &[JobSpec]) -> f64 {
    let started = Instant::now();
    let answers = slurm.submit_many(specs).await;
    let seconds = started.elapsed().as_secs_f64();
    let failed = answers.iter().filter(|a| a.is_err()).count();
    if let Some(Err(err)) = answers.into_iter().find(Result::is_err) {
        println!(
            "{failed} of {} submits failed, the first: {err}",
            specs.len()
        );
    }
    seconds
}

/// The submit mode: rounds of the plain loop against `submit_many`, per size, the one that
/// goes first alternating from round to round (a queue that grows slows slurmctld a little
/// for whoever comes second). The backend works in a work directory of its own, removed at
/// the end; each round's jobs are cancelled by name before the next.
async fn submit_throughput(sizes: &[usize]) -> Result<()> {
    const ROUNDS: usize = 3;
    let facts = ssh_facts();
    let shell = facts.key_shell();
    let run = format!("{:x}", std::process::id());
    let work = format!(".batchbridge-submit-bench-{run}");
    let slurm = SlurmBackend::new(
        Arc::new(facts.key_shell()),
        SlurmConfig::default().with_work_dir(work.clone()),
    )?;
    println!(
        "| N | round | first | sbatch loop jobs/s | submit_many jobs/s | submit_many / loop |"
    );
    println!("|---|---|---|---|---|---|");
    for &n in sizes {
        for round in 0..ROUNDS {
            let name = format!("bbsub-{run}-{n}-{round}");
            let specs = named_specs(&format!("{run}-{n}-{round}"), &name, n)?;
            let loop_first = round % 2 == 0;
            let (plain, ours) = if loop_first {
                let plain = named_sbatch_loop(&shell, &name, n).await?;
                cancel_named(&shell, &name).await?;
                (plain, submit_many_round(&slurm, &specs).await)
            } else {
                let ours = submit_many_round(&slurm, &specs).await;
                cancel_named(&shell, &name).await?;
                (named_sbatch_loop(&shell, &name, n).await?, ours)
            };
            cancel_named(&shell, &name).await?;
            println!(
                "| {n} | {} | {} | {:.0} | {:.0} | {:.2} |",
                round + 1,
                if loop_first { "loop" } else { "submit_many" },
                n as f64 / plain,
                n as f64 / ours,
                plain / ours
            );
        }
    }
    let left = shell
        .run(&Command::sh(
            "squeue -u \"$(id -un)\" -h -o %j | grep -c \"^bbsub-$1-\"; rm -rf -- \"$HOME/$2\"",
            [run.as_str(), work.as_str()],
        ))
        .await?;
    println!(
        "jobs of this run left in the queue: {}",
        left.stdout_text().trim()
    );
    Ok(())
}

#[tokio::main]
async fn main() -> Result<()> {
    if std::env::args().nth(1).as_deref() == Some("submit") {
        let sizes = std::env::args()
            .skip(2)
            .map(|a| {
                a.parse()
                    .map_err(|_| batchbridge_core::Error::invalid_input(a))
            })
            .collect::<Result<Vec<usize>>>()?;
        return submit_throughput(&sizes).await;
    }
    let sizes = sizes_from_args()?;
    let facts = ssh_facts();
    let counting = Arc::new(CountingShell::new(facts.key_shell()));
    let slurm = Arc::new(SlurmBackend::new(
        Arc::clone(&counting) as Arc<dyn Shell>,
        SlurmConfig::default(),
    )?);
    let sdiag_shell = facts.key_shell();
    let run = format!("{:x}", std::process::id());

    println!(
        "| N | cycles | slurmctld RPCs per cycle | squeue+sacct per cycle | wall per cycle (mean) |"
    );
    println!("|---|---|---|---|---|");
    for &n in &sizes {
        let ids = submit_all(&slurm, specs(&format!("{run}-{n}"), n)?).await?;
        let cycles = run_cycles(&slurm, &counting, &sdiag_shell, &facts.user, &ids).await?;
        println!(
            "| {n} | {} | {} | {} | {:.0} ms |",
            cycles.count,
            range(&cycles.rpcs),
            range(&cycles.commands),
            mean_ms(&cycles.wall)
        );
    }

    let n = 200;
    let plain = plain_sbatch_loop(&sdiag_shell, n).await?;
    let started = Instant::now();
    let ids = submit_all(&slurm, specs(&format!("{run}-throughput"), n)?).await?;
    let ours = started.elapsed().as_secs_f64();
    run_cycles(&slurm, &counting, &sdiag_shell, &facts.user, &ids).await?;
    print_throughput(
        n,
        &[
            ("plain sbatch loop, one SSH session", plain),
            ("SlurmBackend::submit, one connection", ours),
        ],
    );
    println!(
        "SSH connections opened by the backend: {}",
        counting.inner().connections_opened()
    );
    Ok(())
}
