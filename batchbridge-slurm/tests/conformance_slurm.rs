//! The shared conformance suite against both of the test bed's real SLURM clusters (22.05,
//! tests/testbed/slurm.sh; 24.11, tests/testbed/slurm2.sh), reached as a regular user over
//! SSH.

// Test helpers panic on purpose: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use batchbridge_core::conformance::Config;
use batchbridge_core::shell::{Command, Shell};
use batchbridge_core::{JobId, Resources};
use batchbridge_slurm::{SlurmBackend, SlurmConfig};
use batchbridge_testbed::SlurmCluster;

async fn backend(cluster: SlurmCluster) -> SlurmBackend {
    SlurmBackend::new(Arc::new(cluster.shell()), SlurmConfig::default()).unwrap()
}

/// `scontrol requeue` of job `id`, as the job's own user. SLURM then holds the job back for
/// two minutes (reason BeginTime); a few seconds later, once the check has seen it wait, its
/// start time is set to now, as its user may, so the check does not wait those minutes out.
async fn requeue(cluster: SlurmCluster, id: JobId) -> batchbridge_core::Result<()> {
    scontrol(cluster, &["requeue", id.as_str()]).await?;
    tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_secs(5)).await;
        let job = format!("JobId={id}");
        scontrol(cluster, &["update", &job, "StartTime=now"])
            .await
            .unwrap();
    });
    Ok(())
}

async fn scontrol(cluster: SlurmCluster, args: &[&str]) -> batchbridge_core::Result<()> {
    let output = cluster
        .shell()
        .run(&Command::new("scontrol").args(args.iter().copied()))
        .await?;
    assert!(
        output.success(),
        "scontrol {}: {}",
        args.join(" "),
        output.stderr_text()
    );
    Ok(())
}

fn config(cluster: SlurmCluster) -> Config {
    let mut config = Config::default();
    // 64 CPUs, more than the running node's 16: 22.05 queues the job though no node has
    // them, 24.11 (which refuses that) because the one node that has them is down.
    config.unsatisfiable = Some(Resources::default().with_cpus(64));
    config.customize = |spec| spec.queue = Some("debug".into());
    config.requeue = Some(match cluster {
        SlurmCluster::Slurm2205 => |id| Box::pin(requeue(SlurmCluster::Slurm2205, id)),
        SlurmCluster::Slurm2411 => |id| Box::pin(requeue(SlurmCluster::Slurm2411, id)),
    });
    config
}

mod slurm_22_05 {
    use batchbridge_testbed::SlurmCluster::Slurm2205;

    batchbridge_core::conformance_tests!(super::backend(Slurm2205), super::config(Slurm2205));
}

mod slurm_24_11 {
    use batchbridge_testbed::SlurmCluster::Slurm2411;

    batchbridge_core::conformance_tests!(super::backend(Slurm2411), super::config(Slurm2411));
}
