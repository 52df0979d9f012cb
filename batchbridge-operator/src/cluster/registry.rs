//! The operator's backend registry: the one place that names the backend crates. The rest
//! of the operator knows a backend only as a [`BatchBackend`], built here from a
//! BatchCluster's scheduler (or by a [`BackendFactory`](super::BackendFactory) registered
//! for a custom one).

use std::sync::Arc;

use batchbridge_core::remote::{SubmitDefaults, WorkSettings};
use batchbridge_core::shell::Shell;
use batchbridge_core::{BatchBackend, Error, ErrorKind, Result};
use batchbridge_htcondor::{HtcondorBackend, HtcondorConfig};
use batchbridge_pbs::{PbsBackend, PbsConfig};
use batchbridge_slurm::{SlurmBackend, SlurmConfig};

use crate::crd::{ClusterDefaults, Scheduler};

/// The built-in backend of `scheduler` (slurm, htcondor or pbs) on the login node `shell`
/// reaches, with its job directories under `work_dir` (the backend's default when absent)
/// and, for SLURM and PBS, the cluster's `defaults` (the partition is the queue); any other
/// scheduler is Unsupported.
pub fn ssh_backend(
    scheduler: &Scheduler,
    shell: Arc<dyn Shell>,
    work_dir: Option<&str>,
    defaults: Option<&ClusterDefaults>,
) -> Result<Arc<dyn BatchBackend>> {
    let mut submit = SubmitDefaults::default();
    if let Some(defaults) = defaults {
        submit.queue.clone_from(&defaults.partition);
        submit.account.clone_from(&defaults.account);
    }
    // Each backend keeps its own default directory unless the cluster names one.
    let place = |work: &mut WorkSettings| {
        if let Some(dir) = work_dir {
            work.work_dir = dir.to_owned();
        }
    };
    match scheduler {
        Scheduler::Slurm => {
            let mut config = SlurmConfig::default();
            config.defaults = submit;
            place(&mut config.work);
            Ok(Arc::new(SlurmBackend::new(shell, config)?))
        }
        Scheduler::Htcondor => {
            let mut config = HtcondorConfig::default();
            place(&mut config.work);
            Ok(Arc::new(HtcondorBackend::new(shell, config)?))
        }
        Scheduler::Pbs => {
            let mut config = PbsConfig::default();
            config.defaults = submit;
            place(&mut config.work);
            Ok(Arc::new(PbsBackend::new(shell, config)?))
        }
        other => Err(Error::new(
            ErrorKind::Unsupported,
            format!("no built-in backend reaches a {other} scheduler over SSH"),
        )),
    }
}
