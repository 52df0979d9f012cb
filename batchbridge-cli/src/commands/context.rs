//! What every command shares: the clusters, opened once each, the record of jobs, and how
//! a job named on the command line is found.

use std::collections::BTreeMap;
use std::time::Duration;

use batchbridge_core::{ErrorKind, JobId, JobState, JobStatus, OutputRequest, Tracker};

use crate::cli::{Cli, Format};
use crate::config::{Cluster, Clusters, Scheduler};
use crate::exit::{CliError, CliResult, Exit};
use crate::record::{Entry, Record};

/// A job named on the command line: its cluster, id and how to print it.
pub(super) type Resolved = (Cluster, JobId, String);

/// The clusters, the record and the global flags of one invocation.
pub(super) struct Context {
    pub(super) clusters: Clusters,
    pub(super) record: Record,
    /// The cluster `-c` named.
    pub(super) chosen: Option<String>,
    pub(super) format: Format,
    opened: BTreeMap<String, Cluster>,
}

impl Context {
    pub(super) fn new(cli: &Cli) -> CliResult<Self> {
        let dirs = directories::ProjectDirs::from("", "", "batchbridge").ok_or_else(|| {
            CliError::config("no home directory: set HOME so the tool can find its config")
        })?;
        let state_dir = dirs
            .state_dir()
            .unwrap_or_else(|| dirs.data_local_dir())
            .to_path_buf();
        let (config, explicit) = match &cli.config {
            Some(path) => (path.clone(), true),
            None => (dirs.config_dir().join("config.toml"), false),
        };
        Ok(Self {
            clusters: Clusters::load(&config, explicit, &state_dir)?,
            record: Record::new(&state_dir),
            chosen: cli.cluster.clone(),
            format: cli.output,
            opened: BTreeMap::new(),
        })
    }

    /// The cluster `name`, opened on first use.
    pub(super) fn cluster(&mut self, name: &str) -> CliResult<Cluster> {
        if let Some(cluster) = self.opened.get(name) {
            return Ok(cluster.clone());
        }
        let cluster = self.clusters.open(name)?;
        self.opened.insert(name.to_owned(), cluster.clone());
        Ok(cluster)
    }

    /// The cluster `-c` named, else the config's default.
    pub(super) fn chosen_cluster(&self) -> String {
        self.chosen
            .clone()
            .unwrap_or_else(|| self.clusters.default_name().to_owned())
    }

    /// `CLUSTER:ID`, or a bare `ID`: the cluster of the record's one job with that id, else
    /// the chosen cluster.
    pub(super) fn resolve(&mut self, reference: &str, entries: &[Entry]) -> CliResult<Resolved> {
        let (cluster, id) = match reference.split_once(':') {
            Some((cluster, id)) => (cluster.to_owned(), id.to_owned()),
            None => {
                let matches: Vec<&Entry> = entries
                    .iter()
                    .filter(|e| e.id == reference)
                    .filter(|e| self.chosen.as_ref().is_none_or(|c| *c == e.cluster))
                    .collect();
                match &matches[..] {
                    [one] => (one.cluster.clone(), one.id.clone()),
                    [] => (self.chosen_cluster(), reference.to_owned()),
                    several => {
                        let names: Vec<String> = several.iter().map(|e| e.reference()).collect();
                        return Err(CliError::usage(format!(
                            "job {reference} is ambiguous: {}",
                            names.join(", ")
                        ))
                        .with_hint("name it as CLUSTER:ID"));
                    }
                }
            }
        };
        if id.is_empty()
            || id.len() > 64
            || id.contains(|c: char| c.is_whitespace() || c.is_control())
        {
            return Err(CliError::usage(format!(
                "job {:?}: an id is 1 to 64 characters without whitespace",
                batchbridge_core::spec::truncate_for_message(reference)
            )));
        }
        let cluster = self.cluster(&cluster)?;
        let reference = format!("{}:{id}", cluster.name);
        Ok((cluster, JobId::from(id), reference))
    }

    /// Every job of `references`, resolved.
    pub(super) fn resolve_all(&mut self, references: &[String]) -> CliResult<Vec<Resolved>> {
        let entries = self.record.entries()?;
        references
            .iter()
            .map(|reference| self.resolve(reference, &entries))
            .collect()
    }
}

/// The error for a job whose scheduler answered `status` Unknown and whose job directory
/// does not exist either; None for a job either knows. The scheduler alone cannot tell:
/// SLURM and PBS forget a finished job within minutes, while its directory still holds its
/// end.
pub(super) async fn unknown_job(
    cluster: &Cluster,
    id: &JobId,
    reference: &str,
    status: &JobStatus,
) -> Option<CliError> {
    if status.state != JobState::Unknown {
        return None;
    }
    match cluster
        .backend
        .fetch_output(id, &OutputRequest::tail(1))
        .await
    {
        Err(err) if matches!(err.kind(), ErrorKind::NotFound | ErrorKind::InvalidInput) => {
            // The scheduler's own words ("not submitted through this work directory") would
            // be wrong for a job whose files `forget` removed.
            let why = match err.kind() {
                ErrorKind::NotFound => format!(
                    "{} does not know it and no job directory holds it: a wrong id, or a \
                     job whose files were removed (batchbridge forget)",
                    match cluster.scheduler {
                        Scheduler::Slurm => "SLURM",
                        Scheduler::Htcondor => "HTCondor",
                        Scheduler::Pbs => "PBS",
                        Scheduler::Local => "this machine",
                    }
                ),
                _ => err.message().to_owned(),
            };
            Some(
                CliError::new(Exit::UnknownJob, format!("no such job {reference}: {why}"))
                    .with_hint("`batchbridge status` lists the jobs this tool submitted"),
            )
        }
        _ => None,
    }
}

/// How often a cluster is asked: the local one is cheap, a remote one costs a round trip.
pub(super) fn poll_interval(cluster: &Cluster) -> Duration {
    match cluster.scheduler {
        Scheduler::Local => Duration::from_millis(200),
        Scheduler::Slurm | Scheduler::Htcondor | Scheduler::Pbs => Duration::from_secs(2),
    }
}

/// A tracker of `cluster`'s jobs, polling at its interval.
pub(super) fn tracker(cluster: &Cluster) -> CliResult<Tracker> {
    Tracker::new(cluster.backend.clone(), poll_interval(cluster))
        .map_err(|err| cluster.explain(err))
}
