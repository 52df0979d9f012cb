//! From the custom resources to the batchbridge-core domain and back.

use batchbridge_core::spec::MAX_NAME_LEN;
use batchbridge_core::{Error, JobKey, JobSpec, JobState, Result};

use bytesize::ByteSize;

use super::job::{
    ArraySpec, BatchJob, BatchJobSpec, ContainerRuntime, ContainerSpec, Phase, TaskCounts,
};
use super::quantity::parse_bytes;

impl BatchJobSpec {
    /// The batchbridge-core spec this resource asks for, submitted under `key` and shown by
    /// the scheduler as `name` (cut to the 128 characters a job name may have). Every
    /// problem is reported at once, as an `InvalidInput` error naming the fields: the units
    /// the API server cannot check (a memory quantity beyond 64 bits, say) and every rule of
    /// [`JobSpec::validate`].
    ///
    /// ```
    /// use batchbridge_core::JobKey;
    /// use batchbridge_operator::crd::BatchJobSpec;
    ///
    /// let spec: BatchJobSpec = serde_json::from_value(serde_json::json!({
    ///     "clusterRef": {"name": "hpc"},
    ///     "script": "echo hi",
    ///     "resources": {"memory": "1536Mi", "wallTime": "1h30m"},
    /// })).unwrap();
    /// let core = spec.to_job_spec(JobKey::new("uid-1")?, "hello")?;
    /// assert_eq!(core.resources.memory, Some(bytesize::ByteSize::mib(1536)));
    /// assert_eq!(core.resources.wall_time, Some(std::time::Duration::from_secs(5400)));
    ///
    /// let empty: BatchJobSpec = serde_json::from_value(serde_json::json!({
    ///     "clusterRef": {"name": "hpc"}, "script": " ", "environment": {"1X": "y"},
    /// })).unwrap();
    /// let err = empty.to_job_spec(JobKey::new("uid-2")?, "hello").unwrap_err();
    /// assert!(err.message().contains("script: must not be empty"), "{err}");
    /// assert!(err.message().contains("environment \"1X\""), "{err}");
    /// # Ok::<(), batchbridge_core::Error>(())
    /// ```
    pub fn to_job_spec(&self, key: JobKey, name: &str) -> Result<JobSpec> {
        let mut problems = Vec::new();
        let mut bytes = |field: &str, text: &Option<String>| {
            text.as_deref().and_then(|text| match parse_bytes(text) {
                Ok(bytes) => Some(ByteSize::b(bytes)),
                Err(problem) => {
                    problems.push(format!("resources.{field}: {problem}"));
                    None
                }
            })
        };
        let r = &self.resources;
        let memory = bytes("memory", &r.memory);
        let disk = bytes("disk", &r.disk);
        let wall_time = r.wall_time.and_then(|duration| {
            if duration.is_negative() {
                problems.push(format!("resources.wallTime: {duration} is negative"));
                None
            } else {
                Some(duration.into())
            }
        });
        if !problems.is_empty() {
            return Err(Error::invalid_input(format!(
                "job spec {key}: {}",
                problems.join("; ")
            )));
        }

        let mut spec = JobSpec::new(key, truncate(name, MAX_NAME_LEN), self.script.clone());
        spec.resources.cpus = r.cpus;
        spec.resources.memory = memory;
        spec.resources.disk = disk;
        spec.resources.wall_time = wall_time;
        spec.resources.nodes = r.nodes;
        spec.resources.gpus = r.gpus;
        spec.queue.clone_from(&self.queue);
        spec.environment.clone_from(&self.environment);
        spec.working_dir.clone_from(&self.working_dir);
        spec.array = self.array.map(ArraySpec::to_core);
        spec.container = self.container.as_ref().map(ContainerSpec::to_core);
        spec.passthrough.clone_from(&self.passthrough);
        spec.validate()?;
        Ok(spec)
    }
}

/// The idempotency key of `attempt` of the resource with UID `uid`.
///
/// ```
/// use batchbridge_operator::crd::attempt_key;
///
/// assert_eq!(attempt_key("3f2a9c1e-7b4d", 1), "3f2a9c1e-7b4d");
/// assert_eq!(attempt_key("3f2a9c1e-7b4d", 3), "3f2a9c1e-7b4d.3");
/// ```
pub fn attempt_key(uid: &str, attempt: u32) -> String {
    if attempt <= 1 {
        uid.to_owned()
    } else {
        format!("{uid}.{attempt}")
    }
}

impl BatchJob {
    /// The batchbridge-core spec of `attempt` of this job, keyed by the resource's UID and
    /// the attempt ([`attempt_key`]: a re-created resource is a new job, and a restarted
    /// operator finds the job it submitted) and named after the resource. A resource
    /// without a UID (one not read from the API server) is refused, and so is the cache's
    /// lean copy, which has no script ([`BatchJob::make_lean`]).
    pub fn job_spec(&self, attempt: u32) -> Result<JobSpec> {
        let uid = self.metadata.uid.as_deref().ok_or_else(|| {
            Error::invalid_input("BatchJob has no metadata.uid: read it from the API server")
        })?;
        if self.is_lean() {
            // Submitting it would run an empty script.
            return Err(Error::invalid_input(
                "this copy of the BatchJob has no script (the cache's lean copy): read it from the API server",
            ));
        }
        let name = self.metadata.name.as_deref().unwrap_or_default();
        self.spec
            .to_job_spec(JobKey::new(attempt_key(uid, attempt))?, name)
    }
}

/// `text` cut to at most `max` bytes, on a character boundary.
fn truncate(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

impl ArraySpec {
    fn to_core(self) -> batchbridge_core::ArraySpec {
        let array = batchbridge_core::ArraySpec::new(self.count);
        match self.max_parallel {
            Some(max) => array.with_max_parallel(max),
            None => array,
        }
    }
}

impl ContainerSpec {
    fn to_core(&self) -> batchbridge_core::Container {
        batchbridge_core::Container::new(self.image.clone()).with_runtime(self.runtime.into())
    }
}

impl From<ContainerRuntime> for batchbridge_core::ContainerRuntime {
    fn from(runtime: ContainerRuntime) -> Self {
        match runtime {
            ContainerRuntime::Apptainer => Self::Apptainer,
            ContainerRuntime::Singularity => Self::Singularity,
            ContainerRuntime::Docker => Self::Docker,
            ContainerRuntime::Podman => Self::Podman,
        }
    }
}

/// The phase of a job the scheduler reports in `state`.
///
/// ```
/// use batchbridge_core::JobState;
/// use batchbridge_operator::crd::Phase;
///
/// assert_eq!(Phase::from(JobState::Running), Phase::Running);
/// assert!(Phase::from(JobState::Cancelled).is_terminal());
/// ```
impl From<JobState> for Phase {
    fn from(state: JobState) -> Self {
        match state {
            JobState::Queued => Self::Queued,
            JobState::Held => Self::Held,
            JobState::Running => Self::Running,
            JobState::Suspended => Self::Suspended,
            JobState::Succeeded => Self::Succeeded,
            JobState::Failed => Self::Failed,
            JobState::Cancelled => Self::Cancelled,
            // Unknown, and any state a later batchbridge-core adds: the operator does not
            // know what it means yet.
            _ => Self::Unknown,
        }
    }
}

impl Phase {
    /// Whether the job is over for good (Succeeded, Failed or Cancelled).
    pub const fn is_terminal(self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed | Self::Cancelled)
    }

    /// Whether no attempt of the job may run on the cluster, so that its spec may change:
    /// not submitted yet, waiting for a retry, or over. The CRD's immutability rule lists
    /// the same phases.
    ///
    /// ```
    /// use batchbridge_operator::crd::Phase;
    ///
    /// assert!(Phase::RetryPending.spec_editable() && !Phase::RetryPending.is_terminal());
    /// assert!(!Phase::Submitted.spec_editable());
    /// ```
    pub const fn spec_editable(self) -> bool {
        matches!(self, Self::Pending | Self::RetryPending) || self.is_terminal()
    }
}

impl From<batchbridge_core::TaskCounts> for TaskCounts {
    fn from(counts: batchbridge_core::TaskCounts) -> Self {
        Self {
            total: counts.total,
            pending: counts.pending,
            running: counts.running,
            succeeded: counts.succeeded,
            failed: counts.failed,
            cancelled: counts.cancelled,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use batchbridge_core::{ALL_STATES, ErrorKind};
    use serde_json::{Value, json};

    use super::*;
    use crate::crd::BatchJobStatus;

    fn key() -> JobKey {
        JobKey::new("3f2a9c1e-7b4d-4e8a-9f00-1c2d3e4f5a6b").unwrap()
    }

    fn spec(value: Value) -> BatchJobSpec {
        let mut object = json!({"clusterRef": {"name": "hpc"}, "script": "echo hi"});
        for (field, value) in value.as_object().unwrap() {
            object[field] = value.clone();
        }
        serde_json::from_value(object).unwrap()
    }

    #[test]
    fn every_field_maps() {
        let spec = spec(json!({
            "resources": {"cpus": 4, "memory": "1.5Gi", "disk": "20G", "wallTime": "1h30m",
                          "nodes": 2, "gpus": 1},
            "queue": "gpu",
            "environment": {"A": "1 'two'", "_B": "$(x)"},
            "workingDir": "/scratch/x",
            "array": {"count": 10, "maxParallel": 3},
            "container": {"image": "docker://python:3.12", "runtime": "podman"},
            "passthrough": {"slurm": ["--qos=high"], "htcondor": ["request_disk = 1G"]},
            "retryPolicy": {"maxRetries": 3, "retryOn": ["NodeFailure"]},
            "outputPolicy": {"tailBytes": 100, "configMap": true, "logPod": true},
        }));
        let core = spec.to_job_spec(key(), "my-job").unwrap();

        let mut expected = JobSpec::new(key(), "my-job", "echo hi");
        expected.resources = batchbridge_core::Resources::default()
            .with_cpus(4)
            .with_memory(ByteSize::mib(1536))
            .with_disk(ByteSize::b(20_000_000_000))
            .with_wall_time(Duration::from_secs(5400))
            .with_nodes(2)
            .with_gpus(1);
        expected.queue = Some("gpu".into());
        expected.environment =
            BTreeMap::from([("A".into(), "1 'two'".into()), ("_B".into(), "$(x)".into())]);
        expected.working_dir = Some("/scratch/x".into());
        expected.array = Some(batchbridge_core::ArraySpec::new(10).with_max_parallel(3));
        expected.container = Some(
            batchbridge_core::Container::new("docker://python:3.12")
                .with_runtime(batchbridge_core::ContainerRuntime::Podman),
        );
        expected.passthrough = BTreeMap::from([
            ("slurm".into(), vec!["--qos=high".into()]),
            ("htcondor".into(), vec!["request_disk = 1G".into()]),
        ]);
        assert_eq!(core, expected);
    }

    #[test]
    fn minimal_spec_takes_defaults() {
        let spec = spec(json!({}));
        assert_eq!(spec.output_policy.tail_bytes, 4096);
        assert!(!spec.output_policy.config_map && !spec.output_policy.log_pod);
        assert_eq!(spec.retry_policy, None);
        let core = spec.to_job_spec(key(), "j").unwrap();
        assert_eq!(core, JobSpec::new(key(), "j", "echo hi"));
    }

    #[test]
    fn conversion_errors_name_the_field() {
        let cases: &[(&str, Value, &[&str])] = &[
            (
                "blank script",
                json!({"script": " \n"}),
                &["script: must not be empty"],
            ),
            ("NUL in script", json!({"script": "a\u{0}b"}), &["NUL"]),
            (
                "memory not a quantity",
                json!({"resources": {"memory": "4GB"}}),
                &["resources.memory: \"4GB\" is not a quantity"],
            ),
            (
                "disk beyond 64 bits",
                json!({"resources": {"disk": "16Ei"}}),
                &["resources.disk: \"16Ei\" is more bytes than fit in 64 bits"],
            ),
            (
                "zero memory",
                json!({"resources": {"memory": "0"}}),
                &["resources.memory: must be more than 0 bytes"],
            ),
            (
                "negative wall time",
                json!({"resources": {"wallTime": "-1h"}}),
                &["resources.wallTime: -3600s is negative"],
            ),
            (
                "sub-second wall time",
                json!({"resources": {"wallTime": "500ms"}}),
                &["resources.wallTime: must be at least 1 second"],
            ),
            (
                "unit problems reported together",
                json!({"resources": {"memory": "x", "disk": "-1", "wallTime": "-1s"}}),
                &["resources.memory", "resources.disk", "resources.wallTime"],
            ),
            (
                "zero cpus",
                json!({"resources": {"cpus": 0}}),
                &["resources.cpus"],
            ),
            ("bad queue", json!({"queue": "a b"}), &["queue \"a b\""]),
            (
                "bad env name",
                json!({"environment": {"A-B": "1"}}),
                &["environment \"A-B\""],
            ),
            (
                "empty working dir",
                json!({"workingDir": ""}),
                &["workingDir"],
            ),
            (
                "zero array",
                json!({"array": {"count": 0}}),
                &["array.count"],
            ),
            (
                "zero max parallel",
                json!({"array": {"count": 2, "maxParallel": 0}}),
                &["array.maxParallel"],
            ),
            (
                "blank image",
                json!({"container": {"image": " "}}),
                &["container.image"],
            ),
            (
                "newline in passthrough",
                json!({"passthrough": {"slurm": ["--a\n--b"]}}),
                &["passthrough.slurm"],
            ),
            (
                "core problems reported together",
                json!({"script": "", "resources": {"nodes": 0}, "queue": ""}),
                &["script", "resources.nodes", "queue"],
            ),
        ];
        for (what, value, needles) in cases {
            let err = spec(value.clone()).to_job_spec(key(), "j").unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidInput, "{what}");
            for needle in *needles {
                assert!(err.message().contains(needle), "{what}: {err}");
            }
        }
    }

    #[test]
    fn names_are_cut_to_what_a_scheduler_takes() {
        let long = "a".repeat(253);
        let core = spec(json!({})).to_job_spec(key(), &long).unwrap();
        assert_eq!(core.name, "a".repeat(MAX_NAME_LEN));
        assert_eq!(truncate("ab\u{e9}", 3), "ab");
    }

    #[test]
    fn job_spec_is_keyed_by_uid() {
        let mut job = BatchJob::new("hello", spec(json!({})));
        let err = job.job_spec(1).unwrap_err();
        assert!(err.message().contains("metadata.uid"), "{err}");

        job.metadata.uid = Some(key().to_string());
        let core = job.job_spec(1).unwrap();
        assert_eq!((core.key, core.name.as_str()), (key(), "hello"));
        let retry = job.job_spec(2).unwrap();
        assert_eq!(retry.key.as_str(), format!("{}.2", key()));
    }

    #[test]
    fn phase_of_every_state() {
        let expected = [
            Phase::Queued,
            Phase::Held,
            Phase::Running,
            Phase::Suspended,
            Phase::Succeeded,
            Phase::Failed,
            Phase::Cancelled,
            Phase::Unknown,
        ];
        for (state, phase) in ALL_STATES.into_iter().zip(expected) {
            assert_eq!(Phase::from(state), phase, "{state}");
            assert_eq!(phase.is_terminal(), state.is_terminal(), "{state}");
            // The phase's name is the state's, which the CEL rule's phase list relies on.
            assert_eq!(format!("{phase:?}"), state.to_string());
        }
        assert!(!Phase::Pending.is_terminal() && !Phase::Submitted.is_terminal());
    }

    #[test]
    fn task_counts_map() {
        use batchbridge_core::JobState::*;
        let counts = batchbridge_core::TaskCounts::from_states([Succeeded, Running, Held]);
        let status = BatchJobStatus {
            tasks: Some(counts.into()),
            ..Default::default()
        };
        assert_eq!(
            serde_json::to_value(&status).unwrap(),
            json!({"attempts": 0, "retries": 0, "tasks": {"total": 3, "pending": 1, "running": 1,
                    "succeeded": 1, "failed": 0, "cancelled": 0}})
        );
    }
}
