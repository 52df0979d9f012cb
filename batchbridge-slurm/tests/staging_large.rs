//! Staging on a real SLURM cluster (24.11), alone in its test binary so that the peak
//! memory it measures is its own: a 200 MiB file in and out under 64 MiB resident, and a
//! stage-out cut off by a killed SSH master, and a directory of 1000 small files round trip
//! (issue 32).

use std::sync::Arc;
use std::time::Duration;

use batchbridge_core::conformance::Config;
use batchbridge_slurm::{SlurmBackend, SlurmConfig};
use batchbridge_testbed::SlurmCluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_file_in_bounded_memory_and_a_stage_out_cut_off_mid_file() {
    let shell = Arc::new(SlurmCluster::Slurm2411.shell());
    let backend = SlurmBackend::new(shell, SlurmConfig::default()).expect("backend");
    let mut config = Config::default();
    config.timeout = Duration::from_secs(300);
    config.customize = |spec| spec.queue = Some("debug".into());
    batchbridge_testbed::staging::large_file_and_killed_master(&backend, &config).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_small_files_round_trip_byte_for_byte() {
    let shell = Arc::new(SlurmCluster::Slurm2411.shell());
    let backend = SlurmBackend::new(shell, SlurmConfig::default()).expect("backend");
    let mut config = Config::default();
    config.timeout = Duration::from_secs(300);
    config.customize = |spec| spec.queue = Some("debug".into());
    batchbridge_core::conformance::many_small_files_round_trip(&backend, &config, 1000)
        .await
        .expect("1000 small files round trip");
}
