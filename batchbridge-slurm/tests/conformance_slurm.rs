//! The shared conformance suite against both of the test bed's real SLURM clusters (22.05,
//! tests/testbed/slurm.sh; 24.11, tests/testbed/slurm2.sh), reached as a regular user over
//! SSH.

// Test helpers panic on purpose: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use batchbridge_core::Resources;
use batchbridge_core::conformance::Config;
use batchbridge_slurm::{SlurmBackend, SlurmConfig};
use batchbridge_testbed::SlurmCluster;

async fn backend(cluster: SlurmCluster) -> SlurmBackend {
    SlurmBackend::new(Arc::new(cluster.shell()), SlurmConfig::default()).unwrap()
}

fn config() -> Config {
    let mut config = Config::default();
    // 64 CPUs, more than the running node's 16: 22.05 queues the job though no node has
    // them, 24.11 (which refuses that) because the one node that has them is down.
    config.unsatisfiable = Some(Resources::default().with_cpus(64));
    config.customize = |spec| spec.queue = Some("debug".into());
    config
}

mod slurm_22_05 {
    use batchbridge_testbed::SlurmCluster::Slurm2205;

    batchbridge_core::conformance_tests!(super::backend(Slurm2205), super::config());
}

mod slurm_24_11 {
    use batchbridge_testbed::SlurmCluster::Slurm2411;

    batchbridge_core::conformance_tests!(super::backend(Slurm2411), super::config());
}
