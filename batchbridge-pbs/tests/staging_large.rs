//! Staging on the test bed's real PBS server, alone in its test binary so that the peak
//! memory it measures is its own: a 200 MiB file in and out under 64 MiB resident, and a
//! stage-out cut off by a killed SSH master (issue 32).

use std::sync::Arc;
use std::time::Duration;

use batchbridge_core::conformance::Config;
use batchbridge_pbs::{PbsBackend, PbsConfig};
use batchbridge_testbed::pbs_shell;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_file_in_bounded_memory_and_a_stage_out_cut_off_mid_file() {
    let backend = PbsBackend::new(Arc::new(pbs_shell()), PbsConfig::default()).expect("backend");
    let mut config = Config::default();
    config.timeout = Duration::from_secs(300);
    batchbridge_testbed::staging::large_file_and_killed_master(&backend, &config).await;
}
