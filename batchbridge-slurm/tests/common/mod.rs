//! What the real-cluster tests share: a backend on one of the test bed's two SLURM clusters,
//! unique keys, waiting, and `on_both_clusters!`, which runs each test on both.

// Each test binary compiles this module and uses part of it.
#![allow(dead_code, unreachable_pub, unused_macros)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use batchbridge_core::conformance::{self, Config};
use batchbridge_core::shell::{Command, Shell, SshShell};
use batchbridge_core::{JobId, JobSpec, JobStatus};
use batchbridge_slurm::{SlurmBackend, SlurmConfig};
use batchbridge_testbed::SlurmCluster;

/// Generates, for each `async fn NAME(cluster: SlurmCluster)` named, a `#[tokio::test]`
/// running it on SLURM 22.05 (`slurm_22_05::NAME`) and one on SLURM 24.11
/// (`slurm_24_11::NAME`).
macro_rules! on_both_clusters {
    ($($test:ident),* $(,)?) => {
        mod slurm_22_05 {
            $(
                #[tokio::test]
                async fn $test() {
                    super::$test(batchbridge_testbed::SlurmCluster::Slurm2205).await;
                }
            )*
        }
        mod slurm_24_11 {
            $(
                #[tokio::test]
                async fn $test() {
                    super::$test(batchbridge_testbed::SlurmCluster::Slurm2411).await;
                }
            )*
        }
    };
}

/// A backend for the cluster over its own SSH connection.
pub fn backend(cluster: SlurmCluster) -> SlurmBackend {
    SlurmBackend::new(Arc::new(cluster.shell()), SlurmConfig::default()).unwrap()
}

/// A spec on the `debug` partition with a key no other run used.
pub fn spec(name: &str, script: &str) -> JobSpec {
    let mut spec = JobSpec::new(conformance::unique_key(name), name, script);
    spec.queue = Some("debug".into());
    spec
}

fn config() -> Config {
    {
        let mut config = Config::default();
        config.timeout = Duration::from_secs(240);
        config.poll_interval = Duration::from_millis(500);
        config
    }
}

/// Polls the backend until `done` holds for the job; fails after 4 minutes.
pub async fn wait_for(
    backend: &SlurmBackend,
    id: &JobId,
    what: &str,
    done: impl Fn(&JobStatus) -> bool,
) -> JobStatus {
    conformance::wait_for(backend, id, &config(), what, done)
        .await
        .unwrap()
}

/// Waits until squeue no longer knows the job (MinJobAge is 30 s; slurmctld purges about
/// once a minute).
pub async fn wait_purged(shell: &SshShell, id: &JobId) {
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        let output = shell
            .run(&Command::new("squeue").args(["-h", "-t", "all", "-j", id.as_str()]))
            .await
            .unwrap();
        if output.stderr_text().contains("Invalid job id") {
            return;
        }
        assert!(Instant::now() < deadline, "job {id} never left squeue");
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}
