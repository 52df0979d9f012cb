//! The custom resources, API group `batchbridge.dev`, version `v1alpha1`, both namespaced:
//!
//! - [`BatchCluster`] ([`BatchClusterSpec`], [`BatchClusterStatus`]): a batch system and how
//!   to reach it: the scheduler, the SSH endpoint, a Secret with the credential, the host
//!   keys, the poll interval and defaults for jobs.
//! - [`BatchJob`] ([`BatchJobSpec`], [`BatchJobStatus`]): a script to run on a cluster, with
//!   its resources, array, container, passthrough options, retry and output policies; its
//!   status carries the [`Phase`], the scheduler's job id, times, exit code, task counts and
//!   the output's tail (one per task, [`TaskOutput`], for an array).
//!
//! The CRDs are generated from these types ([`crds`], [`crd_yaml`]): every field's doc
//! comment is its `description` (so `kubectl explain` works), and the API server enforces
//! the required fields, enums, bounds and CEL rules (`x-kubernetes-validations`).
//! [`BatchJobSpec::to_job_spec`] turns a job into the [`batchbridge_core::JobSpec`] that
//! backends submit.
//!
//! The resources as a user writes them (the doc comments of the types are the field
//! descriptions of the CRDs, so the examples live here):
//!
//! ```
//! use batchbridge_operator::crd::{BatchCluster, BatchJob, RetryReason, Scheduler};
//! use std::time::Duration;
//!
//! let cluster: BatchCluster = serde_saphyr::from_str(r#"
//! apiVersion: batchbridge.dev/v1alpha1
//! kind: BatchCluster
//! metadata: { name: hpc, namespace: research }
//! spec:
//!   scheduler: slurm
//!   ssh: { host: login.hpc.example.org, user: alice }
//!   secretRef: { name: hpc-ssh-key }
//!   knownHosts: "login.hpc.example.org ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIL..."
//!   defaults: { partition: debug }
//! "#).unwrap();
//! assert_eq!(cluster.spec.scheduler, Scheduler::Slurm);
//! assert_eq!(cluster.spec.ssh.as_ref().unwrap().port, 22);
//! assert_eq!(Duration::from(cluster.spec.poll_interval), Duration::from_secs(10));
//!
//! let job: BatchJob = serde_saphyr::from_str(r#"
//! apiVersion: batchbridge.dev/v1alpha1
//! kind: BatchJob
//! metadata: { name: hello, namespace: research }
//! spec:
//!   clusterRef: { name: hpc }
//!   script: |
//!     echo "hello from $(hostname)"
//!   resources: { cpus: 2, memory: 4Gi, wallTime: 1h30m }
//!   queue: debug
//!   retryPolicy: { maxRetries: 2, retryOn: [NodeFailure, Preempted] }
//! "#).unwrap();
//! assert_eq!(job.spec.resources.cpus, Some(2));
//! let retry = job.spec.retry_policy.as_ref().unwrap();
//! assert_eq!(retry.retry_on, [RetryReason::NodeFailure, RetryReason::Preempted]);
//! assert_eq!(job.spec.output_policy.tail_bytes, 4096);
//! ```
//!
//! A job that lets the operator choose among candidate clusters names them in
//! `placement` instead of `clusterRef` ([`Placement`]):
//!
//! ```
//! use batchbridge_operator::crd::{BatchJob, PlacementPolicy};
//! use std::time::Duration;
//!
//! let job: BatchJob = serde_saphyr::from_str(r#"
//! apiVersion: batchbridge.dev/v1alpha1
//! kind: BatchJob
//! metadata: { name: analysis }
//! spec:
//!   placement:
//!     clusters: [campus, national]
//!     policy: EarliestStart
//!     moveAfter: 30m
//!   script: |
//!     echo "running on $(hostname)"
//!   resources: { cpus: 4, wallTime: 2h }
//! "#).unwrap();
//! let placement = job.spec.placement.as_ref().unwrap();
//! assert_eq!(placement.clusters, ["campus", "national"]);
//! assert_eq!(placement.policy, PlacementPolicy::EarliestStart);
//! assert_eq!(placement.move_after.map(Duration::from), Some(Duration::from_secs(1800)));
//! assert_eq!((placement.max_moves, job.spec.fixed_cluster()), (1, None));
//! ```
//!
//! The status of an array job keeps the end of each task's output apart ([`TaskOutput`]),
//! here the seed's example `echo A` in an array of 3 tasks:
//!
//! ```
//! use batchbridge_operator::crd::BatchJobStatus;
//!
//! let status: BatchJobStatus = serde_json::from_value(serde_json::json!({
//!     "phase": "Succeeded",
//!     "taskOutputs": [
//!         {"index": 0, "tail": "A\n"},
//!         {"index": 1, "tail": "A\n"},
//!         {"index": 2, "tail": "A\n"},
//!     ],
//! }))?;
//! let task_2 = &status.task_outputs[2];
//! assert_eq!((task_2.index, task_2.tail.as_str()), (2, "A\n"));
//! assert_eq!((status.output_tail, status.task_outputs_omitted), (None, None));
//! # Ok::<(), serde_json::Error>(())
//! ```
//!
//! `scheduler` is one word, not an enum plus a custom name: `slurm`, `htcondor` and `local`
//! are the built-in backends ([`Scheduler`]'s variants) and any other DNS label names a
//! custom backend registered in the operator, so the schema checks the word's shape (a
//! pattern) rather than a closed list.

mod cluster;
mod convert;
mod job;
mod lean;
pub mod names;
mod placement;
mod quantity;
mod staging;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};
use kube::CustomResourceExt;

pub use cluster::{
    BatchCluster, BatchClusterSpec, BatchClusterStatus, ClusterDefaults, CredentialStatus,
    Scheduler, SecretReference, SshEndpoint, SshJumpHost, SubmitSettings,
};
pub use convert::attempt_key;
pub use job::{
    AfterCondition, ArraySpec, BatchJob, BatchJobSpec, BatchJobStatus, CleanupPolicy,
    ClusterReference, ContainerRuntime, ContainerSpec, Dependency, OutputPolicy, Phase, Resources,
    RetryPolicy, RetryReason, TaskCounts, TaskOutput,
};
pub use placement::{
    CandidateAnswer, ClusterSelector, Estimate, LabelOperator, LabelRequirement, LabelValue,
    MAX_CANDIDATES, Move, MoveOutcome, Placement, PlacementPolicy, PlacementStatus,
};
pub use staging::{
    JobInput, JobOutput, KeyReference, ObjectLocation, OutputFiles, SecretName, StageWhen,
};

/// A CEL rule for a duration field: a Go duration ("90s", "1h30m") of at least a second.
/// The regular expression comes first so that text that is no duration gets the rule's
/// message rather than CEL's conversion error.
const DURATION_OF_AT_LEAST_1S: &str = "self.matches('^(([0-9]+([.][0-9]*)?|[.][0-9]+)(ns|us|\\u00b5s|\\u03bcs|ms|s|m|h))+$') && duration(self) >= duration('1s')";

/// A CEL rule for a short delay: a Go duration (see [`DURATION_OF_AT_LEAST_1S`]) from 0s to
/// one second.
const DURATION_OF_AT_MOST_1S: &str = "self.matches('^(([0-9]+([.][0-9]*)?|[.][0-9]+)(ns|us|\\u00b5s|\\u03bcs|ms|s|m|h))+$') && duration(self) <= duration('1s')";

/// The API group of every batchbridge resource.
pub const GROUP: &str = "batchbridge.dev";

/// The CRDs of every batchbridge resource, in a fixed order: `BatchCluster`, `BatchJob`.
///
/// They are kube's [`CustomResourceExt::crd`] with each description reflowed into
/// one line per paragraph, as Kubernetes' own are, because `kubectl explain` wraps the text
/// itself and would keep the line breaks of the doc comments.
///
/// ```
/// let names: Vec<_> = batchbridge_operator::crd::crds()
///     .into_iter()
///     .map(|crd| crd.metadata.name.unwrap())
///     .collect();
/// assert_eq!(names, ["batchclusters.batchbridge.dev", "batchjobs.batchbridge.dev"]);
/// ```
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![reflowed(BatchCluster::crd()), reflowed(BatchJob::crd())]
}

fn reflowed(mut crd: CustomResourceDefinition) -> CustomResourceDefinition {
    for version in &mut crd.spec.versions {
        if let Some(schema) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
        {
            reflow_descriptions(schema);
        }
    }
    crd
}

/// Reflows the description of `schema` and of every schema inside it.
fn reflow_descriptions(schema: &mut JSONSchemaProps) {
    if let Some(description) = &mut schema.description {
        *description = reflow(description);
    }
    let nested = schema
        .properties
        .iter_mut()
        .flat_map(|properties| properties.values_mut());
    let items: Vec<&mut JSONSchemaProps> = match &mut schema.items {
        Some(JSONSchemaPropsOrArray::Schema(item)) => vec![item.as_mut()],
        Some(JSONSchemaPropsOrArray::Schemas(items)) => items.iter_mut().collect(),
        None => Vec::new(),
    };
    let additional = match &mut schema.additional_properties {
        Some(JSONSchemaPropsOrBool::Schema(additional)) => Some(additional.as_mut()),
        _ => None,
    };
    let alternatives = [&mut schema.all_of, &mut schema.any_of, &mut schema.one_of]
        .into_iter()
        .flatten()
        .flatten();
    nested
        .chain(items)
        .chain(additional)
        .chain(alternatives)
        .for_each(reflow_descriptions);
}

/// `text` with the lines of each paragraph joined by single spaces.
fn reflow(text: &str) -> String {
    text.split("\n\n")
        .map(|paragraph| paragraph.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// A CRD as the YAML document checked in under `deploy/crds/`, headed by a comment that
/// says how it was made.
///
/// ```
/// use batchbridge_operator::crd::{BatchJob, crd_yaml};
/// use kube::CustomResourceExt;
///
/// let yaml = crd_yaml(&BatchJob::crd()).unwrap();
/// assert!(yaml.contains("kind: CustomResourceDefinition"));
/// assert!(yaml.contains("x-kubernetes-validations"));
/// ```
pub fn crd_yaml(crd: &CustomResourceDefinition) -> Result<String, serde_saphyr::ser::Error> {
    Ok(format!(
        "# Generated from the Rust types by `cargo run -p batchbridge-operator --bin crdgen -- --write`.\n\
         # Do not edit: change batchbridge-operator/src/crd/ and run that instead.\n\
         ---\n{}",
        serde_saphyr::to_string(crd)?
    ))
}

/// The file under `deploy/crds/` that holds `crd`: `GROUP_PLURAL.yaml`, as controller-gen
/// names them.
pub fn crd_file_name(crd: &CustomResourceDefinition) -> String {
    format!("{}_{}.yaml", crd.spec.group, crd.spec.names.plural)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The same check as tests/run.sh's, so `cargo test` alone catches stale YAML too.
    #[test]
    fn checked_in_crds_are_current() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/crds");
        for crd in crds() {
            let path = dir.join(crd_file_name(&crd));
            let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
            assert!(
                checked_in == crd_yaml(&crd).unwrap(),
                "{} is stale: run `cargo run -p batchbridge-operator --bin crdgen -- --write`",
                path.display()
            );
        }
    }

    #[test]
    fn descriptions_are_reflowed() {
        assert_eq!(reflow("one\ntwo  three\n\nfour\n"), "one two three\n\nfour");
        let yaml = crd_yaml(&crds()[1]).unwrap();
        assert!(yaml.contains(
            "The desired state of a BatchJob: the script and what it needs. It cannot change"
        ));
    }

    #[test]
    fn every_property_has_a_description() {
        fn walk(path: &str, schema: &serde_json::Value, missing: &mut Vec<String>) {
            let Some(properties) = schema.get("properties").and_then(|p| p.as_object()) else {
                return;
            };
            for (name, property) in properties {
                let path = format!("{path}.{name}");
                if property.get("description").is_none() {
                    missing.push(path.clone());
                }
                walk(&path, property, missing);
                if let Some(items) = property.get("items") {
                    walk(&format!("{path}[]"), items, missing);
                }
            }
        }
        for crd in crds() {
            let schema = serde_json::to_value(&crd.spec.versions[0].schema).unwrap();
            let mut missing = Vec::new();
            walk(
                &crd.spec.names.kind,
                &schema["openAPIV3Schema"],
                &mut missing,
            );
            // apiVersion, kind and metadata are the API server's own.
            missing.retain(|path| path.split('.').count() > 2);
            assert!(missing.is_empty(), "no description: {missing:?}");
        }
    }
}
