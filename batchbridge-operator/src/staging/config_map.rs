//! Outputs into ConfigMaps: small results the operator fetches over the cluster connection
//! (the library's stage-out: streamed, size and SHA-256 checked) and writes into ConfigMaps
//! of the job's namespace that the job owns.

use std::collections::BTreeMap;

use batchbridge_core::bytesize::ByteSize;
use batchbridge_core::staging::{StageLimits, StageOut, StageWhen, Transfer};
use batchbridge_core::{BatchBackend, JobId};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{Api, ResourceExt as _};

use crate::crd::{BatchJob, JobOutput};
use crate::output::{Writer, owned_meta, write_config_map};

/// The most bytes all of a job's ConfigMap outputs may add up to (a ConfigMap holds 1 MiB
/// with its metadata); a file or a total beyond it is refused before it is fetched.
pub const MAX_CONFIG_MAP_OUTPUTS: u64 = 512 * 1024;

/// The job's ConfigMap outputs its `when` applies to (by whether the script `succeeded`),
/// fetched from the cluster and written: for each, what came of it.
pub async fn to_config_maps(
    writer: &Writer,
    job: &BatchJob,
    backend: &dyn BatchBackend,
    id: &JobId,
    succeeded: bool,
) -> Vec<(JobOutput, Result<(), String>)> {
    let outputs: Vec<&JobOutput> = job
        .spec
        .outputs
        .iter()
        .filter(|output| output.config_map.is_some() && output.when.applies(succeeded))
        .collect();
    if outputs.is_empty() {
        return Vec::new();
    }
    let failed = |message: String| {
        outputs
            .iter()
            .map(|output| ((*output).clone(), Err(message.clone())))
            .collect()
    };
    let dir = match tempfile::tempdir() {
        Ok(dir) => dir,
        Err(err) => return failed(format!("no local directory to fetch into: {err}")),
    };
    // The script's end was already matched against each `when` above.
    let wanted: Vec<StageOut> = outputs
        .iter()
        .map(|output| StageOut::new(output.path.clone(), dir.path()).when(StageWhen::Always))
        .collect();
    let limits = StageLimits::default()
        .with_max_file_size(ByteSize::b(MAX_CONFIG_MAP_OUTPUTS))
        .with_max_total_size(ByteSize::b(MAX_CONFIG_MAP_OUTPUTS));
    if let Err(err) = backend
        .stage_out(id, &wanted, &limits, &Transfer::default())
        .await
    {
        return failed(format!("not fetched from the cluster: {}", err.message()));
    }
    let mut maps: BTreeMap<&str, ConfigMap> = BTreeMap::new();
    let mut results = Vec::new();
    for output in &outputs {
        let Some(reference) = &output.config_map else {
            continue;
        };
        let bytes = match std::fs::read(dir.path().join(&output.path)) {
            Ok(bytes) => bytes,
            Err(err) => {
                results.push(((*output).clone(), Err(format!("not fetched: {err}"))));
                continue;
            }
        };
        let map = maps
            .entry(reference.name.as_str())
            .or_insert_with(|| ConfigMap {
                metadata: owned_meta(job, reference.name.clone()),
                ..ConfigMap::default()
            });
        match String::from_utf8(bytes) {
            Ok(text) => {
                map.data
                    .get_or_insert_default()
                    .insert(reference.key.clone(), text);
            }
            Err(binary) => {
                map.binary_data
                    .get_or_insert_default()
                    .insert(reference.key.clone(), ByteString(binary.into_bytes()));
            }
        }
    }
    let api: Api<ConfigMap> =
        Api::namespaced(writer.client.clone(), &job.namespace().unwrap_or_default());
    let mut written = BTreeMap::new();
    for (name, map) in &maps {
        let outcome = match write_config_map(&api, &writer.field_manager, job, map).await {
            Ok(true) => Ok(()),
            Ok(false) => Err(format!(
                "ConfigMap {name:?} belongs to another object: not written"
            )),
            Err(err) => Err(format!("ConfigMap {name:?} not written: {err}")),
        };
        written.insert(*name, outcome);
    }
    for output in outputs {
        if results.iter().any(|(done, _)| done == output) {
            continue;
        }
        let name = output
            .config_map
            .as_ref()
            .map(|r| r.name.as_str())
            .unwrap_or_default();
        let outcome = written
            .get(name)
            .cloned()
            .unwrap_or_else(|| Err("not written".to_owned()));
        results.push((output.clone(), outcome));
    }
    results
}
