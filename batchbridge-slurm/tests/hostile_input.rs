//! The hostile-input table (`batchbridge-core/tests/hostile/`, shared with the local and
//! HTCondor backends) through the SLURM backend on each of the test bed's two clusters
//! (22.05 and 24.11), over SSH as the regular user `batch`: every case refused with a clear
//! error or run with its values intact, no canary file on the cluster or here, and bounded
//! memory while reading 100 MB of output. On 22.05 the table's specs go in one
//! `submit_many`, on 24.11 one `submit` each. Run alone:
//! `cargo test -p batchbridge-slurm --test hostile_input -- --nocapture`.

// Test helpers panic on purpose: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

#[path = "../../batchbridge-core/tests/hostile/mod.rs"]
mod hostile;
#[macro_use]
mod common;

use std::sync::Arc;

use batchbridge_core::shell::Shell;
use batchbridge_core::{BatchBackend, ErrorKind};
use batchbridge_slurm::{SlurmBackend, SlurmConfig};
use batchbridge_testbed::SlurmCluster;
use hostile::{Backend, Bed};

on_both_clusters!(hostile_inputs_through_the_slurm_backend);

/// Each run measures this process's memory while it reads 100 MB of output, so the two
/// clusters' runs take turns.
static ONE_RUN_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn hostile_inputs_through_the_slurm_backend(cluster: SlurmCluster) {
    let _turn = ONE_RUN_AT_A_TIME.lock().await;
    let shell: Arc<dyn Shell> = Arc::new(cluster.shell());
    let dirs = hostile::RemoteDirs::make(shell.as_ref()).await;

    let with_account = {
        let shell = Arc::clone(&shell);
        move |account: &str| -> batchbridge_core::Result<Arc<dyn BatchBackend>> {
            let config = SlurmConfig::default().with_account(account);
            Ok(Arc::new(SlurmBackend::new(Arc::clone(&shell), config)?))
        }
    };
    let bed = Bed {
        which: Backend::Slurm,
        backend: Arc::new(SlurmBackend::new(Arc::clone(&shell), SlurmConfig::default()).unwrap()),
        cluster: Arc::clone(&shell),
        canary_dir: dirs.home.clone(),
        search_dirs: vec![dirs.home.clone(), "/tmp".to_owned()],
        hostile_dir: dirs.hostile_dir.clone(),
        with_account: Some(Box::new(with_account)),
        version_except: match cluster {
            SlurmCluster::Slurm2205 => &[],
            // 24.11 refuses what no node of the partition could hold; 22.05 queues it.
            SlurmCluster::Slurm2411 => &[(
                "cpus 32 768 (the maximum)",
                hostile::Expect::Refused(
                    ErrorKind::Rejected,
                    "Requested node configuration is not available",
                ),
            )],
        },
        // 22.05 takes the table's specs in one batched submit, 24.11 one submit each.
        batched: cluster == SlurmCluster::Slurm2205,
    };
    let report = hostile::run(bed).await;
    hostile::print(&report, Backend::Slurm);
    // The hostile directory and the 100 MB of output have served their purpose.
    dirs.remove(shell.as_ref(), "slurm").await;
    report.assert_clean();
}
