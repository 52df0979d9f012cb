//! The shared conformance suite against the test bed's real SLURM cluster
//! (tests/testbed/slurm.sh), reached as a regular user over SSH.

// Test helpers panic on purpose: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use batchbridge_core::Resources;
use batchbridge_core::conformance::Config;
use batchbridge_slurm::{SlurmBackend, SlurmConfig};
use batchbridge_testbed::ssh_facts;

async fn backend() -> SlurmBackend {
    SlurmBackend::new(Arc::new(ssh_facts().key_shell()), SlurmConfig::default()).unwrap()
}

fn config() -> Config {
    let mut config = Config::default();
    // The node has 16 CPUs: SLURM accepts 64 per task and leaves the job pending.
    config.unsatisfiable = Some(Resources::default().with_cpus(64));
    config.customize = |spec| spec.queue = Some("debug".into());
    config
}

batchbridge_core::conformance_tests!(backend(), config());
