//! Measures placement against the test bed (`tests/testbed/up.sh` first): N = 10, 100 and
//! 1000 pending jobs of 1 or 3 resource shapes placed at once by one
//! [`Placer`](batchbridge_core::placement::Placer) over three candidates (SLURM 22.05,
//! SLURM 24.11, HTCondor), in two cycles: a cold one (no answer cached) and a warm one
//! right after (within the answers' 30 s). For each: the questions the Placer asked
//! (`Placer::questions`), the commands each candidate's shell ran, slurmctld's RPCs by our
//! user on each SLURM cluster (`sdiag`; other users of the test bed's `batch` account add
//! to them), and the wall time of the cycle and per placement.
//!
//! ```text
//! cargo run --release --example placement_bench            # N = 10, 100, 1000
//! cargo run --release --example placement_bench -- 10 50   # other sizes
//! ```

#![allow(clippy::print_stdout)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use batchbridge_core::placement::{Candidate, Placer, Policy};
use batchbridge_core::shell::{Shell, SshShell};
use batchbridge_core::{Error, ErrorKind, JobKey, JobSpec, Result};
use batchbridge_examples::bench::{rpcs_by_user, sizes_from_args};
use batchbridge_htcondor::{HtcondorBackend, HtcondorConfig};
use batchbridge_slurm::{SlurmBackend, SlurmConfig};
use batchbridge_testbed::{CountingShell, SlurmCluster, htcondor_shell};
use tokio::task::JoinSet;

/// CPUs of the shapes: job `i` of a run with `shapes` shapes asks for `CPUS[i % shapes]`.
const CPUS: [u32; 3] = [1, 2, 4];

/// A candidate's shell, counted, and where to ask sdiag (SLURM only).
struct Counted {
    shell: Arc<CountingShell<SshShell>>,
    sdiag: Option<SshShell>,
}

impl Counted {
    fn commands(&self) -> u64 {
        self.shell.take_counts().values().sum()
    }

    async fn rpcs(&self, user: &str) -> Result<Option<u64>> {
        match &self.sdiag {
            Some(shell) => Ok(Some(rpcs_by_user(shell, user).await?)),
            None => Ok(None),
        }
    }
}

fn specs(run: &str, n: usize, shapes: usize) -> Result<Vec<JobSpec>> {
    (0..n)
        .map(|i| {
            let mut spec =
                JobSpec::new(JobKey::new(format!("place-{run}-{i}"))?, "place", "true\n");
            spec.resources.cpus = Some(CPUS[i % shapes]);
            Ok(spec)
        })
        .collect()
}

/// Places every spec at once; the cycle's wall time.
async fn place_all(
    placer: &Arc<Placer>,
    candidates: &Arc<[Candidate]>,
    specs: Vec<JobSpec>,
) -> Result<Duration> {
    let started = Instant::now();
    let mut placements = JoinSet::new();
    for spec in specs {
        let (placer, candidates) = (Arc::clone(placer), Arc::clone(candidates));
        placements.spawn(async move {
            placer
                .place(Policy::EarliestStart, &candidates, &spec)
                .await
        });
    }
    while let Some(joined) = placements.join_next().await {
        let placement = joined.map_err(|e| Error::new(ErrorKind::Io, e.to_string()))?;
        if placement.chosen.is_none() {
            return Err(Error::new(
                ErrorKind::UnexpectedOutput,
                format!("no candidate chosen: {:?}", placement.seen),
            ));
        }
    }
    Ok(started.elapsed())
}

#[tokio::main]
async fn main() -> Result<()> {
    let sizes = sizes_from_args()?;
    let slurm = |cluster: SlurmCluster| Counted {
        shell: Arc::new(CountingShell::new(cluster.shell())),
        sdiag: Some(cluster.shell()),
    };
    let counted = [
        slurm(SlurmCluster::Slurm2205),
        slurm(SlurmCluster::Slurm2411),
        Counted {
            shell: Arc::new(CountingShell::new(htcondor_shell())),
            sdiag: None,
        },
    ];
    let shell = |i: usize| Arc::clone(&counted[i].shell) as Arc<dyn Shell>;
    let slurm_2205 = SlurmBackend::new(shell(0), SlurmConfig::default())?;
    let slurm_2411 = SlurmBackend::new(shell(1), SlurmConfig::default())?;
    let htcondor = HtcondorBackend::new(shell(2), HtcondorConfig::default())?;
    // The work directories, resolved once before anything is counted.
    for jobs in [slurm_2205.jobs(), slurm_2411.jobs(), htcondor.jobs()] {
        jobs.work().await?;
    }
    let candidates: Arc<[Candidate]> = Arc::new([
        Candidate::new("slurm-22.05", Arc::new(slurm_2205)),
        Candidate::new("slurm-24.11", Arc::new(slurm_2411)),
        Candidate::new("htcondor", Arc::new(htcondor)),
    ]);
    let user = SlurmCluster::Slurm2205.login().user;
    let run = format!("{:x}", std::process::id());

    println!(
        "| N | shapes | cycle | Placer questions | commands (22.05 / 24.11 / HTCondor) | \
         slurmctld RPCs (22.05 / 24.11) | wall per cycle | per placement |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for &n in &sizes {
        for shapes in [1, 3] {
            let placer = Arc::new(Placer::default());
            for cycle in ["cold", "warm"] {
                for candidate in &counted {
                    candidate.commands();
                }
                let mut before = Vec::new();
                for candidate in &counted[..2] {
                    before.push(candidate.rpcs(&user).await?);
                }
                let asked = placer.questions();
                let specs = specs(&format!("{run}-{n}-{shapes}"), n, shapes)?;
                let wall = place_all(&placer, &candidates, specs).await?;
                let questions = placer.questions() - asked;
                let commands: Vec<String> =
                    counted.iter().map(|c| c.commands().to_string()).collect();
                let mut rpcs = Vec::new();
                for (candidate, before) in counted[..2].iter().zip(before) {
                    let after = candidate.rpcs(&user).await?;
                    // The delta includes the first sdiag call itself.
                    let delta = after
                        .zip(before)
                        .map(|(a, b)| a.saturating_sub(b).saturating_sub(1));
                    rpcs.push(delta.map_or("-".to_owned(), |d| d.to_string()));
                }
                println!(
                    "| {n} | {shapes} | {cycle} | {questions} | {} | {} | {:.0} ms | {:.2} ms |",
                    commands.join(" / "),
                    rpcs.join(" / "),
                    wall.as_secs_f64() * 1000.0,
                    wall.as_secs_f64() * 1000.0 / n as f64
                );
            }
        }
    }
    Ok(())
}
