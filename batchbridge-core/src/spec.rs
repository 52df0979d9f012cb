//! What a caller asks to run: [`JobSpec`] and its parts.
//!
//! A spec is plain data (serde round-trips it); [`JobSpec::validate`] checks it against the
//! rules every backend shares, so that bad input is refused with a clear message before
//! anything reaches a cluster. Backends add their own checks on top.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use bytesize::ByteSize;
use serde::{Deserialize, Serialize};

use crate::dependency::{self, Dependency};
use crate::error::{Error, Result, truncate};
use crate::staging::{StageIn, StageLimits, StageOut, StageSource, check_stage_path};

/// Longest accepted [`JobKey`]; a Kubernetes UID (36 characters) fits with room to spare.
pub const MAX_KEY_LEN: usize = 64;
/// Longest accepted job name.
pub const MAX_NAME_LEN: usize = 128;
/// Longest accepted working directory or container image, in bytes: Linux's `PATH_MAX`.
pub const MAX_PATH_LEN: usize = 4096;
/// Largest accepted script, in bytes: 16 MiB. A backend holds a script whole in memory and
/// sends it over SSH, and every submit of it costs that much again; a larger one is a data
/// file in disguise, which belongs in the job's working directory. (Schedulers that read
/// the script themselves cap it lower: SLURM's `max_script_size` is 4 MiB by default; the
/// backends here hand them a small wrapper instead.)
pub const MAX_SCRIPT_LEN: usize = 16 << 20;
/// Longest accepted environment variable as the process environment holds it
/// (`NAME=VALUE`), in bytes: Linux refuses to start a program with a longer one
/// (`MAX_ARG_STRLEN`, 128 KiB with its terminating NUL).
pub const MAX_ENV_ENTRY_LEN: usize = 128 * 1024 - 1;

// The resource maxima below are the most every backend in this workspace can hand its
// scheduler exactly; each backend's README says how it rounds and where its own limit is
// lower. A value beyond one is refused, never wrapped or clamped: a scheduler that misreads
// a huge number does so silently (a wall time of 2^32 + 1 minutes became one minute).

/// Most CPU cores per task: more than any one machine has.
pub const MAX_CPUS: u32 = 32_768;
/// Most memory per task: 1 PiB.
pub const MAX_MEMORY: ByteSize = ByteSize::b(1 << 50);
/// Most local scratch disk per task: 1 PiB.
pub const MAX_DISK: ByteSize = ByteSize::b(1 << 50);
/// Longest wall-clock limit: 365 days. Leave [`Resources::wall_time`] out for the
/// cluster's default (which may be no limit at all).
pub const MAX_WALL_TIME: Duration = Duration::from_secs(365 * 24 * 3600);
/// Most nodes per task.
pub const MAX_NODES: u32 = 65_536;
/// Most GPUs per task.
pub const MAX_GPUS: u32 = 1024;
/// Most tasks in one array job, and the largest [`ArraySpec::max_parallel`]: a status call
/// reports on every task, so an array of billions could never be watched.
pub const MAX_ARRAY_TASKS: u32 = 10_000;

/// A caller-chosen unique id that makes `submit` idempotent.
///
/// The key travels with the job on the cluster, so [`BatchBackend::find`] can locate a job
/// whose submit reply was lost. It is 1 to 64 characters of ASCII letters, digits, `.`, `_`
/// and `-`, which every scheduler stores verbatim.
///
/// ```
/// use batchbridge_core::JobKey;
///
/// let key = JobKey::new("3f2a9c1e-7b4d-4e8a-9f00-1c2d3e4f5a6b").unwrap();
/// assert_eq!(key.as_str(), "3f2a9c1e-7b4d-4e8a-9f00-1c2d3e4f5a6b");
/// assert!(JobKey::new("bad key; rm -rf ~").is_err());
/// ```
///
/// [`BatchBackend::find`]: crate::BatchBackend::find
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct JobKey(String);

impl JobKey {
    /// Validates and wraps a key.
    pub fn new(key: impl Into<String>) -> Result<Self> {
        let key = key.into();
        if key.is_empty() || key.len() > MAX_KEY_LEN || !key.bytes().all(is_token_byte) {
            return Err(Error::invalid_input(format!(
                "job key {:?}: must be 1 to {MAX_KEY_LEN} characters of letters, digits, '.', '_' and '-'",
                truncate_for_message(&key)
            )));
        }
        // Backends name files and directories after keys; these two would name the
        // directory itself or its parent, which a cleanup would then remove.
        if key == "." || key == ".." {
            return Err(Error::invalid_input(format!(
                "job key {key:?}: must not be \".\" or \"..\", which name directories"
            )));
        }
        Ok(Self(key))
    }

    /// The key as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for JobKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for JobKey {
    type Error = Error;
    fn try_from(key: String) -> Result<Self> {
        Self::new(key)
    }
}

impl From<JobKey> for String {
    fn from(key: JobKey) -> Self {
        key.0
    }
}

fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-')
}

/// A batch job to run: a bash script plus what it needs.
///
/// ```
/// use batchbridge_core::{JobKey, JobSpec};
/// use std::time::Duration;
///
/// let mut spec = JobSpec::new(JobKey::new("demo-1")?, "demo", "echo hello from $HOSTNAME");
/// spec.resources.cpus = Some(2);
/// spec.resources.memory = Some(bytesize::ByteSize::gib(4));
/// spec.resources.wall_time = Some(Duration::from_secs(3600));
/// spec.environment.insert("GREETING".into(), "hi".into());
/// spec.validate()?;
///
/// let json = serde_json::to_string(&spec).unwrap();
/// assert_eq!(serde_json::from_str::<JobSpec>(&json).unwrap(), spec);
/// # Ok::<(), batchbridge_core::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[non_exhaustive]
pub struct JobSpec {
    /// The idempotency key: submitting the same key twice yields one job.
    pub key: JobKey,
    /// A short name shown by the scheduler: letters, digits, `.`, `_`, `-`, starting with a
    /// letter or digit.
    pub name: String,
    /// The job's script, run by bash, verbatim; at most [`MAX_SCRIPT_LEN`] bytes.
    pub script: String,
    /// What the job needs.
    #[serde(default)]
    pub resources: Resources,
    /// The queue or partition; the cluster's default when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// Environment variables set for the script.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub environment: BTreeMap<String, String>,
    /// Directory the script starts in, on the machine that runs it: an absolute path (a
    /// relative one would mean something different on every backend); the backend's job
    /// directory when absent. A directory the job cannot enter (missing, not a directory,
    /// not permitted) fails the job before the script runs, with the cause in the status's
    /// reason and the task's stderr: the script never runs somewhere else.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_dir: Option<String>,
    /// Run the script as an array of tasks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array: Option<ArraySpec>,
    /// Run the script inside a container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<Container>,
    /// Extra native options per backend name (`"slurm"`, `"htcondor"`, …), each passed to that
    /// backend's submit as one argument or line, never interpreted by a shell.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub passthrough: BTreeMap<String, Vec<String>>,
    /// Files sent to the job's working directory before the submit
    /// ([`crate::staging`]); the job is submitted only when all arrived whole.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stage_in: Vec<StageIn>,
    /// Files fetched from the job's working directory after it ended
    /// ([`BatchBackend::stage_out`](crate::BatchBackend::stage_out)).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stage_out: Vec<StageOut>,
    /// Caps on the size of what is staged, in either direction.
    #[serde(default, skip_serializing_if = "StageLimits::is_unlimited")]
    pub stage_limits: StageLimits,
    /// Jobs on the same backend this one runs after, each with the end of it that lets
    /// this one start; all must be met. A dependency that can no longer be met ends this
    /// job with [`FailureCause::DependencyFailed`](crate::FailureCause::DependencyFailed)
    /// naming it, and the job never runs. See [`dependency`] for how
    /// backends with and without native dependencies carry it out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<Dependency>,
}

/// What a job needs from the cluster. Absent fields take the cluster's defaults.
///
/// Each field has a maximum ([`MAX_CPUS`], [`MAX_MEMORY`], [`MAX_DISK`], [`MAX_WALL_TIME`],
/// [`MAX_NODES`], [`MAX_GPUS`]) that [`JobSpec::validate`] enforces. Schedulers count in
/// coarser units than these types hold; backends round up, so a job never gets less than
/// it asked for: memory and disk to whole MiB on SLURM and PBS (KiB for disk on HTCondor),
/// the wall time to whole minutes on SLURM and whole seconds on HTCondor and PBS.
///
/// `#[non_exhaustive]`: outside this crate, `Resources { cpus, ..Default::default() }` is
/// error E0639; build it from its default with the `with_*` setters, or set the fields of
/// a spec's `resources`:
///
/// ```
/// use batchbridge_core::{JobKey, JobSpec, Resources, bytesize::ByteSize};
///
/// let resources = Resources::default().with_cpus(2).with_memory(ByteSize::gib(4));
/// let spec = JobSpec::new(JobKey::new("k")?, "n", "true").with_resources(resources);
/// assert_eq!(spec.resources.memory, Some(ByteSize::gib(4)));
/// # Ok::<(), batchbridge_core::Error>(())
/// ```
///
/// ```
/// use batchbridge_core::{ErrorKind, JobKey, JobSpec};
/// use batchbridge_core::spec::MAX_WALL_TIME;
///
/// let mut spec = JobSpec::new(JobKey::new("k")?, "n", "true");
/// spec.resources.wall_time = Some(MAX_WALL_TIME * 2);
/// let err = spec.validate().unwrap_err();
/// assert_eq!(err.kind(), ErrorKind::InvalidInput);
/// assert!(err.message().contains("at most 365 days"), "{err}");
/// # Ok::<(), batchbridge_core::Error>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[non_exhaustive]
pub struct Resources {
    /// CPU cores per task: 1 to [`MAX_CPUS`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<u32>,
    /// Memory per task: 1 byte to [`MAX_MEMORY`]. Serialized as `"4 GiB"`; read as
    /// [`parse_size`] reads it, as sbatch would (`"4G"`, `"4GB"` and `"4096M"` are 4 GiB, a
    /// bare `"4000"` is 4000 MiB), or a JSON number of bytes. In code,
    /// use [`parse_size`] or [`ByteSize::gib`] rather than `"4G".parse::<ByteSize>()`,
    /// which reads `G` as 10⁹.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "exact_byte_size"
    )]
    pub memory: Option<ByteSize>,
    /// Local scratch disk per task: 1 byte to [`MAX_DISK`]. Serialized as `"20 GiB"`, read
    /// as [`Resources::memory`] is.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "exact_byte_size"
    )]
    pub disk: Option<ByteSize>,
    /// Wall-clock limit, e.g. `"1h 30m"` in serialized form: 1 second to [`MAX_WALL_TIME`].
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "humantime_serde"
    )]
    pub wall_time: Option<Duration>,
    /// Nodes per task: 1 to [`MAX_NODES`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<u32>,
    /// GPUs per task: 0 to [`MAX_GPUS`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus: Option<u32>,
}

/// Run the script once per task index `0..count`; the index is in `$BATCHBRIDGE_TASK_INDEX`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[non_exhaustive]
pub struct ArraySpec {
    /// How many tasks: 1 to [`MAX_ARRAY_TASKS`].
    pub count: u32,
    /// How many tasks may run at once: 1 to [`MAX_ARRAY_TASKS`]; unbounded when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_parallel: Option<u32>,
}

/// Run the script inside a container image.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[non_exhaustive]
pub struct Container {
    /// The image, e.g. `docker://python:3.12` or a path to a `.sif` file.
    pub image: String,
    /// The container runtime on the cluster.
    #[serde(default)]
    pub runtime: ContainerRuntime,
}

/// Container runtimes a backend may drive.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum ContainerRuntime {
    /// Apptainer (formerly Singularity), the usual runtime on HPC clusters.
    #[default]
    Apptainer,
    /// SingularityCE.
    Singularity,
    /// Docker.
    Docker,
    /// Podman.
    Podman,
}

impl fmt::Display for ContainerRuntime {
    /// The runtime's command name, as in the serialized form (`apptainer`, `docker`, …).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Apptainer => "apptainer",
            Self::Singularity => "singularity",
            Self::Docker => "docker",
            Self::Podman => "podman",
        })
    }
}

impl Resources {
    /// Sets [`Resources::cpus`].
    pub fn with_cpus(mut self, cpus: u32) -> Self {
        self.cpus = Some(cpus);
        self
    }

    /// Sets [`Resources::memory`].
    pub fn with_memory(mut self, memory: ByteSize) -> Self {
        self.memory = Some(memory);
        self
    }

    /// Sets [`Resources::disk`].
    pub fn with_disk(mut self, disk: ByteSize) -> Self {
        self.disk = Some(disk);
        self
    }

    /// Sets [`Resources::wall_time`].
    pub fn with_wall_time(mut self, wall_time: Duration) -> Self {
        self.wall_time = Some(wall_time);
        self
    }

    /// Sets [`Resources::nodes`].
    pub fn with_nodes(mut self, nodes: u32) -> Self {
        self.nodes = Some(nodes);
        self
    }

    /// Sets [`Resources::gpus`].
    pub fn with_gpus(mut self, gpus: u32) -> Self {
        self.gpus = Some(gpus);
        self
    }
}

impl ArraySpec {
    /// An array of `count` tasks, as many at once as the scheduler allows.
    pub fn new(count: u32) -> Self {
        Self {
            count,
            max_parallel: None,
        }
    }

    /// Sets [`ArraySpec::max_parallel`].
    pub fn with_max_parallel(mut self, max_parallel: u32) -> Self {
        self.max_parallel = Some(max_parallel);
        self
    }
}

impl Container {
    /// `image` run by the default runtime (Apptainer).
    pub fn new(image: impl Into<String>) -> Self {
        Self {
            image: image.into(),
            runtime: ContainerRuntime::default(),
        }
    }

    /// Sets [`Container::runtime`].
    pub fn with_runtime(mut self, runtime: ContainerRuntime) -> Self {
        self.runtime = runtime;
        self
    }
}

impl JobSpec {
    /// A spec with the given key, name and script and everything else at its default.
    pub fn new(key: JobKey, name: impl Into<String>, script: impl Into<String>) -> Self {
        Self {
            key,
            name: name.into(),
            script: script.into(),
            resources: Resources::default(),
            queue: None,
            environment: BTreeMap::new(),
            working_dir: None,
            array: None,
            container: None,
            passthrough: BTreeMap::new(),
            stage_in: Vec::new(),
            stage_out: Vec::new(),
            stage_limits: StageLimits::default(),
            after: Vec::new(),
        }
    }

    /// Sets [`JobSpec::resources`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use batchbridge_core::{ArraySpec, JobKey, JobSpec, Resources};
    ///
    /// let spec = JobSpec::new(JobKey::new("sweep-7")?, "sweep", "./sweep $BATCHBRIDGE_TASK_INDEX")
    ///     .with_resources(Resources::default().with_cpus(4).with_wall_time(Duration::from_secs(600)))
    ///     .with_queue("short")
    ///     .with_env("MODE", "fast")
    ///     .with_array(ArraySpec::new(10).with_max_parallel(2));
    /// assert_eq!(spec.resources.cpus, Some(4));
    /// spec.validate()?;
    /// # Ok::<(), batchbridge_core::Error>(())
    /// ```
    pub fn with_resources(mut self, resources: Resources) -> Self {
        self.resources = resources;
        self
    }

    /// Sets [`JobSpec::queue`].
    pub fn with_queue(mut self, queue: impl Into<String>) -> Self {
        self.queue = Some(queue.into());
        self
    }

    /// Adds one dependency to [`JobSpec::after`].
    ///
    /// ```
    /// use batchbridge_core::{Dependency, JobKey, JobSpec};
    ///
    /// let simulate = JobSpec::new(JobKey::new("simulate-1")?, "simulate", "./simulate")
    ///     .with_after(Dependency::after_ok("4242"));
    /// assert_eq!(simulate.after, [Dependency::after_ok("4242")]);
    /// # Ok::<(), batchbridge_core::Error>(())
    /// ```
    pub fn with_after(mut self, dependency: Dependency) -> Self {
        self.after.push(dependency);
        self
    }

    /// Adds one variable to [`JobSpec::environment`].
    pub fn with_env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.environment.insert(name.into(), value.into());
        self
    }

    /// Sets [`JobSpec::working_dir`].
    pub fn with_working_dir(mut self, dir: impl Into<String>) -> Self {
        self.working_dir = Some(dir.into());
        self
    }

    /// Sets [`JobSpec::array`].
    pub fn with_array(mut self, array: ArraySpec) -> Self {
        self.array = Some(array);
        self
    }

    /// Sets [`JobSpec::container`].
    pub fn with_container(mut self, container: Container) -> Self {
        self.container = Some(container);
        self
    }

    /// Adds one native option for the backend named `backend` to [`JobSpec::passthrough`].
    pub fn with_passthrough(
        mut self,
        backend: impl Into<String>,
        option: impl Into<String>,
    ) -> Self {
        self.passthrough
            .entry(backend.into())
            .or_default()
            .push(option.into());
        self
    }

    /// Adds one input to [`JobSpec::stage_in`].
    pub fn with_stage_in(mut self, input: StageIn) -> Self {
        self.stage_in.push(input);
        self
    }

    /// Adds one output to [`JobSpec::stage_out`].
    pub fn with_stage_out(mut self, output: StageOut) -> Self {
        self.stage_out.push(output);
        self
    }

    /// Whether the spec stages anything in or out.
    pub fn stages_files(&self) -> bool {
        !self.stage_in.is_empty() || !self.stage_out.is_empty()
    }

    /// Sets [`JobSpec::stage_limits`].
    pub fn with_stage_limits(mut self, limits: StageLimits) -> Self {
        self.stage_limits = limits;
        self
    }

    /// The environment as a POSIX shell script: one `export NAME=VALUE` line per variable,
    /// each value quoted so that sourcing the script sets it verbatim. Wrappers source it
    /// just before running the job's script, so the environment cannot clobber their own
    /// variables.
    ///
    /// ```
    /// use batchbridge_core::{JobKey, JobSpec};
    ///
    /// let mut spec = JobSpec::new(JobKey::new("k")?, "n", "true");
    /// spec.environment.insert("GREETING".into(), "it's $(here)".into());
    /// let script = spec.environment_script()?;
    /// assert!(script.ends_with("export GREETING=\"it's \"'$(here)'\n"));
    /// # Ok::<(), batchbridge_core::Error>(())
    /// ```
    pub fn environment_script(&self) -> Result<String> {
        let mut script = format!("# The environment of batchbridge job {}.\n", self.key);
        for (name, value) in &self.environment {
            let quoted = shlex::try_quote(value).map_err(|err| {
                Error::invalid_input(format!(
                    "environment {:?}: {err}",
                    truncate_for_message(name)
                ))
            })?;
            script.push_str(&format!("export {name}={quoted}\n"));
        }
        Ok(script)
    }

    /// The number of tasks this job runs: the array's count, or 1.
    pub fn task_count(&self) -> u32 {
        self.array.map_or(1, |a| a.count)
    }

    /// Checks the rules every backend shares, reporting every problem at once.
    ///
    /// ```
    /// use batchbridge_core::{JobKey, JobSpec, ErrorKind};
    ///
    /// let spec = JobSpec::new(JobKey::new("k")?, "my job!", "  ");
    /// let err = spec.validate().unwrap_err();
    /// assert_eq!(err.kind(), ErrorKind::InvalidInput);
    /// assert!(err.message().contains("name"));
    /// assert!(err.message().contains("script"));
    /// # Ok::<(), batchbridge_core::Error>(())
    /// ```
    pub fn validate(&self) -> Result<()> {
        let mut problems = Vec::new();
        let mut check = |ok: bool, problem: String| {
            if !ok {
                problems.push(problem);
            }
        };

        check(
            is_valid_name(&self.name),
            format!(
                "name {:?}: must be 1 to {MAX_NAME_LEN} characters of letters, digits, '.', '_' and '-', starting with a letter or digit",
                truncate_for_message(&self.name)
            ),
        );
        check(
            !self.script.trim().is_empty(),
            "script: must not be empty".into(),
        );
        check(
            !self.script.contains('\0'),
            "script: must not contain NUL bytes".into(),
        );
        check(
            self.script.len() <= MAX_SCRIPT_LEN,
            format!(
                "script: {} bytes, more than the {MAX_SCRIPT_LEN} a script may have (keep data in files beside it)",
                self.script.len()
            ),
        );
        let r = &self.resources;
        check_range(&mut check, "resources.cpus", r.cpus, 1, MAX_CPUS);
        check_range(&mut check, "resources.nodes", r.nodes, 1, MAX_NODES);
        check_range(&mut check, "resources.gpus", r.gpus, 0, MAX_GPUS);
        check_size(&mut check, "resources.memory", r.memory, MAX_MEMORY);
        check_size(&mut check, "resources.disk", r.disk, MAX_DISK);
        check(
            r.wall_time
                .is_none_or(|t| (Duration::from_secs(1)..=MAX_WALL_TIME).contains(&t)),
            format!(
                "resources.wallTime: must be at least 1 second and at most {} days",
                MAX_WALL_TIME.as_secs() / 86_400
            ),
        );
        if let Some(queue) = &self.queue {
            check(
                !queue.is_empty()
                    && queue.len() <= MAX_NAME_LEN
                    && queue.bytes().all(is_token_byte),
                format!(
                    "queue {:?}: must be 1 to {MAX_NAME_LEN} characters of letters, digits, '.', '_' and '-'",
                    truncate_for_message(queue)
                ),
            );
        }
        for (name, value) in &self.environment {
            check(
                is_valid_env_name(name),
                format!(
                    "environment {:?}: a variable name is a letter or '_' followed by letters, digits and '_'",
                    truncate_for_message(name)
                ),
            );
            check(
                !value.contains('\0'),
                format!(
                    "environment {:?}: the value must not contain NUL bytes",
                    truncate_for_message(name)
                ),
            );
            let entry = name.len() + 1 + value.len();
            check(
                entry <= MAX_ENV_ENTRY_LEN,
                format!(
                    "environment {:?}: NAME=VALUE is {entry} bytes, more than the \
                     {MAX_ENV_ENTRY_LEN} a process environment entry may hold; put large \
                     values in a file the script reads",
                    truncate_for_message(name)
                ),
            );
        }
        if let Some(dir) = &self.working_dir {
            check(
                dir.starts_with('/') && dir.len() <= MAX_PATH_LEN && !dir.contains(['\0', '\n']),
                format!(
                    "workingDir: must be an absolute path of at most {MAX_PATH_LEN} bytes \
                     without NUL bytes or newlines"
                ),
            );
        }
        if let Some(array) = self.array {
            check_range(
                &mut check,
                "array.count",
                Some(array.count),
                1,
                MAX_ARRAY_TASKS,
            );
            check_range(
                &mut check,
                "array.maxParallel",
                array.max_parallel,
                1,
                MAX_ARRAY_TASKS,
            );
        }
        if let Some(container) = &self.container {
            check(
                !container.image.trim().is_empty()
                    && container.image.len() <= MAX_PATH_LEN
                    && !container.image.contains(['\0', '\n']),
                format!(
                    "container.image: must be a non-empty image reference of at most \
                     {MAX_PATH_LEN} bytes without NUL bytes or newlines"
                ),
            );
        }
        for input in &self.stage_in {
            if let Err(why) = check_stage_path(&input.dest, false) {
                check(
                    false,
                    format!("stageIn {:?}: {why}", truncate_for_message(&input.dest)),
                );
            }
            if let (StageSource::Bytes(bytes), Some(cap)) =
                (&input.source, self.stage_limits.max_file_size)
            {
                check(
                    bytes.len() as u64 <= cap.as_u64(),
                    format!(
                        "stageIn {:?}: {} bytes, more than the per-file cap of {}",
                        truncate_for_message(&input.dest),
                        bytes.len(),
                        exact_byte_size::format_exact(cap.as_u64())
                    ),
                );
            }
        }
        for output in &self.stage_out {
            if let Err(why) = check_stage_path(&output.pattern, true) {
                check(
                    false,
                    format!(
                        "stageOut {:?}: {why}",
                        truncate_for_message(&output.pattern)
                    ),
                );
            }
        }
        for (backend, options) in &self.passthrough {
            for option in options {
                check(
                    !option.contains(['\0', '\n']),
                    format!(
                        "passthrough.{backend}: options must not contain NUL bytes or newlines"
                    ),
                );
            }
        }
        problems.extend(dependency::problems(&self.after));

        if problems.is_empty() {
            Ok(())
        } else {
            Err(Error::invalid_input(format!(
                "job spec {}: {}",
                self.key,
                problems.join("; ")
            )))
        }
    }
}

/// Checks that a count, when given, lies in `min..=max`.
fn check_range(
    check: &mut impl FnMut(bool, String),
    field: &str,
    value: Option<u32>,
    min: u32,
    max: u32,
) {
    check(
        value.is_none_or(|v| (min..=max).contains(&v)),
        format!("{field}: must be at least {min} and at most {max}"),
    );
}

/// Checks that a size, when given, is more than 0 bytes and at most `max`.
fn check_size(
    check: &mut impl FnMut(bool, String),
    field: &str,
    value: Option<ByteSize>,
    max: ByteSize,
) {
    check(
        value.is_none_or(|v| (1..=max.as_u64()).contains(&v.as_u64())),
        format!(
            "{field}: must be more than 0 bytes and at most {}",
            exact_byte_size::format_exact(max.as_u64())
        ),
    );
}

fn is_valid_name(name: &str) -> bool {
    name.len() <= MAX_NAME_LEN
        && name
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphanumeric())
        && name.bytes().all(is_token_byte)
}

fn is_valid_env_name(name: &str) -> bool {
    name.bytes()
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// Keeps a one-line message readable when the offending name or value is huge: its first
/// 40 bytes, cut on a character boundary, which is enough to recognise it. (Long output a
/// message quotes, such as a scheduler's refusal, goes through
/// [`excerpt`](crate::error::excerpt), which keeps more and says how much it left out.)
///
/// ```
/// use batchbridge_core::spec::truncate_for_message;
///
/// assert_eq!(truncate_for_message("short"), "short");
/// assert_eq!(truncate_for_message(&"ü".repeat(1000)), "ü".repeat(20));
/// ```
pub fn truncate_for_message(s: &str) -> &str {
    truncate(s, 40)
}

/// Reads a memory or disk size as `sbatch --mem` and `qsub -l mem=` read it, into bytes.
///
/// `ByteSize`'s own parser reads `4G` as 4 × 10⁹ bytes (3815 MiB) and a bare `4000` as
/// 4000 bytes, where sbatch reads 4096 MiB and 4000 MiB: a job asking for what it needs
/// would get less, and be killed on a cluster that enforces memory. Here, as sbatch (and,
/// for the units, qsub) reads it, seen on SLURM 22.05 and OpenPBS 23.06:
///
/// | Text | Means |
/// |------|-------|
/// | `4000`, `1.5` (no unit) | MiB: 4000 MiB, 1.5 MiB |
/// | `512K`, `100M`, `4G`, `1T` | binary: 512 KiB, 100 MiB, 4 GiB, 1 TiB |
/// | `4GB`, `4gb`, `100mb` | binary too, as sbatch and qsub read them: 4 GiB, 100 MiB |
/// | `4GiB`, `4 GiB`, `1500MiB` | binary, explicitly |
/// | `4096B` | bytes |
///
/// Units are read in either case. A bare number above 1 TiB as MiB is refused: qsub reads a
/// bare number as bytes, and `4000000000` is far likelier 3815 MiB than 3.7 PiB; the
/// message gives both meanings. A fraction of a byte is dropped; backends round up to
/// their scheduler's unit (whole MiB on SLURM and PBS).
///
/// ```
/// use batchbridge_core::{ByteSize, ErrorKind, spec::parse_size};
///
/// assert_eq!(parse_size("4000")?, ByteSize::mib(4000));
/// assert_eq!(parse_size("4G")?, ByteSize::gib(4));
/// assert_eq!(parse_size("4gb")?, ByteSize::gib(4));
/// let err = parse_size("4000000000").unwrap_err();
/// assert_eq!(err.kind(), ErrorKind::InvalidInput);
/// assert!(err.message().contains("3815 MiB"), "{err}");
/// # Ok::<(), batchbridge_core::Error>(())
/// ```
pub fn parse_size(text: &str) -> Result<ByteSize> {
    let shown = truncate_for_message(text);
    let trimmed = text.trim();
    let digits = trimmed
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(digits);
    let unit = unit.trim_start();
    let is = |names: [&str; 3]| names.iter().any(|name| unit.eq_ignore_ascii_case(name));
    // bytesize does the arithmetic (fractions, overflow); what is decided here is which of
    // its units a scheduler's letters stand for.
    let meant = if unit.is_empty() {
        "MiB"
    } else if is(["B", "B", "B"]) {
        "B"
    } else if is(["K", "KB", "KiB"]) {
        "KiB"
    } else if is(["M", "MB", "MiB"]) {
        "MiB"
    } else if is(["G", "GB", "GiB"]) {
        "GiB"
    } else if is(["T", "TB", "TiB"]) {
        "TiB"
    } else {
        return Err(Error::invalid_input(format!(
            "size {shown:?}: unknown unit {:?}; write a number of MiB, or one with K, M, G or \
             T (binary, as sbatch reads them), e.g. 4000, 4G, 4GiB",
            truncate_for_message(unit)
        )));
    };
    if number.is_empty() || number.matches('.').count() > 1 {
        return Err(Error::invalid_input(format!(
            "size {shown:?}: expected a number and a unit, e.g. 4000 (MiB), 4G, 4GiB"
        )));
    }
    let read = |unit: &str| {
        format!("{number} {unit}")
            .parse::<ByteSize>()
            .map_err(|err| Error::invalid_input(format!("size {shown:?}: {err}")))
    };
    let size = read(meant)?;
    if unit.is_empty() && size > ByteSize::tib(1) {
        return Err(Error::invalid_input(format!(
            "size {shown:?} is ambiguous: sbatch reads a bare number as MiB (over 1 TiB \
             here), qsub as bytes ({} MiB); write {number}M or {number}B",
            read("B")?.as_u64().div_ceil(1 << 20),
        )));
    }
    Ok(size)
}

/// Reads a wall-time limit as `sbatch --time` reads it, or in humantime's units.
///
/// | Text | Means |
/// |------|-------|
/// | `90` | minutes, as sbatch (qsub would read seconds) |
/// | `30:00`, `1:30:00` | MM:SS and HH:MM:SS |
/// | `2-12`, `2-12:30`, `2-12:30:00` | days-HH, days-HH:MM, days-HH:MM:SS |
/// | `2h`, `90m`, `1h 30m`, `45s` | humantime, as the JSON `wallTime` reads it |
///
/// `0`, which sbatch reads as no limit at all, is refused: leaving the limit out asks for
/// the cluster's default, which is what a job gets on most clusters anyway.
///
/// ```
/// use std::time::Duration;
/// use batchbridge_core::spec::parse_wall_time;
///
/// assert_eq!(parse_wall_time("90")?, Duration::from_secs(90 * 60));
/// assert_eq!(parse_wall_time("1:30:00")?, Duration::from_secs(5400));
/// assert_eq!(parse_wall_time("2-00:00:00")?, Duration::from_secs(2 * 86_400));
/// assert_eq!(parse_wall_time("2h")?, Duration::from_secs(7200));
/// assert!(parse_wall_time("1:2:3:4").is_err());
/// # Ok::<(), batchbridge_core::Error>(())
/// ```
pub fn parse_wall_time(text: &str) -> Result<Duration> {
    let shown = truncate_for_message(text);
    let trimmed = text.trim();
    let refused = || {
        Error::invalid_input(format!(
            "time {shown:?}: expected minutes (90), MM:SS, HH:MM:SS, D-HH, D-HH:MM, \
             D-HH:MM:SS (as sbatch) or 2h, 90m, 1h 30m"
        ))
    };
    let time = if trimmed.contains(|c: char| c.is_ascii_alphabetic()) {
        humantime::parse_duration(trimmed).map_err(|err| {
            Error::invalid_input(format!(
                "time {shown:?}: {err}; expected 2h, 90m, 1h 30m or sbatch's forms (90, \
                 1:30:00, 2-00:00:00)"
            ))
        })?
    } else {
        let (days, clock) = match trimmed.split_once('-') {
            Some((days, clock)) => (Some(days), clock),
            None => (None, trimmed),
        };
        let number = |field: &str| -> Result<u64> {
            if field.is_empty() || !field.bytes().all(|b| b.is_ascii_digit()) {
                return Err(refused());
            }
            field.parse().map_err(|_| refused())
        };
        let fields = clock.split(':').map(number).collect::<Result<Vec<u64>>>()?;
        // sbatch's fields by their count: with days the clock starts at hours, without it a
        // lone number is minutes and two are MM:SS.
        let [hours, minutes, seconds] = match (days, &fields[..]) {
            (None, &[m]) => [0, m, 0],
            (None, &[m, s]) => [0, m, s],
            (None | Some(_), &[h, m, s]) => [h, m, s],
            (Some(_), &[h]) => [h, 0, 0],
            (Some(_), &[h, m]) => [h, m, 0],
            _ => return Err(refused()),
        };
        let days = days.map(number).transpose()?.unwrap_or(0);
        let total = days
            .checked_mul(24)
            .and_then(|h| h.checked_add(hours))
            .and_then(|h| h.checked_mul(60))
            .and_then(|m| m.checked_add(minutes))
            .and_then(|m| m.checked_mul(60))
            .and_then(|s| s.checked_add(seconds))
            .ok_or_else(refused)?;
        Duration::from_secs(total)
    };
    if time.is_zero() {
        return Err(Error::invalid_input(format!(
            "time {shown:?}: sbatch reads 0 as no limit; leave the limit out for the \
             cluster's default"
        )));
    }
    Ok(time)
}

/// Reads an array of tasks as `sbatch --array` reads it, where that numbers the tasks as
/// [`ArraySpec`] does (0 to N-1, in `$BATCHBRIDGE_TASK_INDEX`): `0-LAST` and `0` (one
/// task), each with an optional `%M` (at most M at once).
///
/// Any other range, a step, a list or a lone other index would run tasks under other
/// numbers than sbatch's: refused, with the range from 0 of the same count and the
/// arithmetic that gives the script its numbers back.
///
/// ```
/// use batchbridge_core::spec::parse_array;
///
/// let array = parse_array("0-9%2")?;
/// assert_eq!((array.count, array.max_parallel), (10, Some(2)));
/// let err = parse_array("1-10").unwrap_err();
/// assert!(err.message().contains("0-9 and use $((BATCHBRIDGE_TASK_INDEX + 1))"), "{err}");
/// # Ok::<(), batchbridge_core::Error>(())
/// ```
pub fn parse_array(text: &str) -> Result<ArraySpec> {
    let shown = truncate_for_message(text);
    let refused = |why: String| Error::invalid_input(format!("array {shown:?}: {why}"));
    let expected = || {
        refused("expected 0-LAST, with an optional %M (at most M at once), e.g. 0-9, 0-9%2".into())
    };
    let number = |field: &str| -> Result<u32> {
        if field.is_empty() || !field.bytes().all(|b| b.is_ascii_digit()) {
            return Err(expected());
        }
        field.parse().map_err(|_| expected())
    };
    let (tasks, parallel) = match text.split_once('%') {
        Some((tasks, parallel)) => (tasks, Some(number(parallel)?)),
        None => (text, None),
    };
    if tasks.contains(',') {
        return Err(refused(
            "lists are not supported: tasks are numbered 0 to N-1 in \
             $BATCHBRIDGE_TASK_INDEX; compute yours from it, e.g. 0-4 with \
             $((BATCHBRIDGE_TASK_INDEX * 2)) for 0,2,4,6,8"
                .into(),
        ));
    }
    let (first, last, step) = match tasks.split_once('-') {
        // sbatch reads a lone number as the one task with that index.
        None => {
            let index = number(tasks)?;
            (index, index, 1)
        }
        Some((first, rest)) => {
            let (last, step) = match rest.split_once(':') {
                Some((last, step)) => (last, number(step)?.max(1)),
                None => (rest, 1),
            };
            (number(first)?, number(last)?, step)
        }
    };
    if last < first {
        return Err(expected());
    }
    let count = (last - first) / step + 1;
    if first != 0 || step != 1 {
        let mut index = "BATCHBRIDGE_TASK_INDEX".to_owned();
        if step != 1 {
            index = format!("{index} * {step}");
        }
        if first != 0 {
            index = format!("{index} + {first}");
        }
        return Err(refused(format!(
            "tasks are numbered 0 to N-1 in $BATCHBRIDGE_TASK_INDEX; ranges from 0 without \
             a step are supported; for these {count} tasks ask for 0-{}{} and use $(({index})) \
             in the script",
            count - 1,
            parallel.map(|p| format!("%{p}")).unwrap_or_default(),
        )));
    }
    let mut array = ArraySpec::new(count);
    if let Some(parallel) = parallel {
        array = array.with_max_parallel(parallel);
    }
    Ok(array)
}

/// Serializes a byte size in the largest binary unit that represents it exactly, because
/// `bytesize`'s own human-readable form rounds (1500 MiB would come back as 1.5 GiB).
mod exact_byte_size {
    use bytesize::ByteSize;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(
        size: &Option<ByteSize>,
        ser: S,
    ) -> Result<S::Ok, S::Error> {
        match size {
            Some(size) => ser.serialize_str(&format_exact(size.as_u64())),
            None => ser.serialize_none(),
        }
    }

    /// A string as [`super::parse_size`] reads it (`"4G"` is 4 GiB, `"4000"` 4000 MiB); a
    /// number, which has no unit, as bytes.
    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        de: D,
    ) -> Result<Option<ByteSize>, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Size {
            Bytes(u64),
            Text(String),
        }
        match Option::<Size>::deserialize(de)? {
            None => Ok(None),
            Some(Size::Bytes(bytes)) => Ok(Some(ByteSize::b(bytes))),
            Some(Size::Text(text)) => super::parse_size(&text)
                .map(Some)
                .map_err(|err| serde::de::Error::custom(err.message())),
        }
    }

    pub(super) fn format_exact(bytes: u64) -> String {
        const UNITS: [(u64, &str); 4] = [
            (1 << 40, "TiB"),
            (1 << 30, "GiB"),
            (1 << 20, "MiB"),
            (1 << 10, "KiB"),
        ];
        UNITS
            .iter()
            .find(|(unit, _)| bytes >= *unit && bytes.is_multiple_of(*unit))
            .map_or_else(
                || format!("{bytes} B"),
                |(unit, name)| format!("{} {name}", bytes / unit),
            )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// sbatch's `--array` forms, as sbatch numbers their tasks (`man sbatch`: a range
    /// `FIRST-LAST`, a `:STEP`, a `,` list, a lone index, `%M`).
    #[test]
    fn arrays_are_sbatchs_ranges_from_0() {
        let parsed = |text: &str| parse_array(text).ok().map(|a| (a.count, a.max_parallel));
        let accepted = [
            ("0", (1, None)),
            ("0-9", (10, None)),
            ("0-0", (1, None)),
            ("0-9%3", (10, Some(3))),
            ("0-9:1", (10, None)),
        ];
        for (text, expected) in accepted {
            assert_eq!(parsed(text), Some(expected), "{text:?}");
        }
        // (text, what the refusal says to write instead)
        let refused = [
            (
                "5",
                "for these 1 tasks ask for 0-0 and use $((BATCHBRIDGE_TASK_INDEX + 5))",
            ),
            (
                "1-10",
                "ask for 0-9 and use $((BATCHBRIDGE_TASK_INDEX + 1))",
            ),
            (
                "0-9:2",
                "ask for 0-4 and use $((BATCHBRIDGE_TASK_INDEX * 2))",
            ),
            (
                "3-11:4%2",
                "ask for 0-2%2 and use $((BATCHBRIDGE_TASK_INDEX * 4 + 3))",
            ),
            ("1,3,5", "lists are not supported"),
            ("", "expected 0-LAST"),
            ("%2", "expected 0-LAST"),
            ("0-9%", "expected 0-LAST"),
            ("5-1", "expected 0-LAST"),
            ("0-x", "expected 0-LAST"),
            ("-1", "expected 0-LAST"),
            ("0-99999999999", "expected 0-LAST"),
        ];
        for (text, said) in refused {
            let err = parse_array(text).unwrap_err();
            assert!(err.message().contains(said), "{text:?}: {err}");
        }
    }

    fn key() -> JobKey {
        JobKey::new("k-1").unwrap()
    }

    fn valid() -> JobSpec {
        JobSpec::new(key(), "job_1.a-b", "echo hi")
    }

    #[test]
    fn keys() {
        let cases: &[(&str, bool)] = &[
            ("a", true),
            ("3f2a9c1e-7b4d-4e8a-9f00-1c2d3e4f5a6b", true),
            ("A.b_c-9", true),
            (&"x".repeat(64), true),
            (&"x".repeat(65), false),
            ("", false),
            ("has space", false),
            ("semi;colon", false),
            ("$(id)", false),
            ("quote'", false),
            ("new\nline", false),
            ("nul\0", false),
            ("ünï", false),
            (".", false),
            ("..", false),
            ("...", true),
            (".hidden", true),
        ];
        for (input, ok) in cases {
            assert_eq!(JobKey::new(*input).is_ok(), *ok, "{input:?}");
        }
    }

    #[test]
    fn key_deserialization_validates() {
        assert!(serde_json::from_str::<JobKey>("\"fine-key\"").is_ok());
        let err = serde_json::from_str::<JobKey>("\"bad key\"").unwrap_err();
        assert!(err.to_string().contains("job key"), "{err}");
    }

    #[test]
    fn validation_table() {
        type Edit = fn(&mut JobSpec);
        let cases: &[(&str, Edit, Option<&str>)] = &[
            ("valid", |_| {}, None),
            ("empty name", |s| s.name.clear(), Some("name")),
            ("name with space", |s| s.name = "a b".into(), Some("name")),
            (
                "name starting with dash",
                |s| s.name = "-x".into(),
                Some("name"),
            ),
            (
                "name with shell",
                |s| s.name = "$(reboot)".into(),
                Some("name"),
            ),
            ("name too long", |s| s.name = "n".repeat(129), Some("name")),
            ("name at limit", |s| s.name = "n".repeat(128), None),
            (
                "empty script",
                |s| s.script.clear(),
                Some("script: must not be empty"),
            ),
            (
                "blank script",
                |s| s.script = " \n\t".into(),
                Some("script: must not be empty"),
            ),
            (
                "NUL in script",
                |s| s.script = "echo \0".into(),
                Some("NUL"),
            ),
            (
                "script at the limit",
                |s| s.script = "#".repeat(MAX_SCRIPT_LEN),
                None,
            ),
            (
                "script over the limit",
                |s| s.script = "#".repeat(MAX_SCRIPT_LEN + 1),
                Some("script: 16777217 bytes, more than the 16777216"),
            ),
            (
                "hostile script is fine",
                |s| s.script = "echo \"$(id)\" `x` ';' \n ünï".into(),
                None,
            ),
            (
                "zero cpus",
                |s| s.resources.cpus = Some(0),
                Some("resources.cpus"),
            ),
            (
                "zero nodes",
                |s| s.resources.nodes = Some(0),
                Some("resources.nodes"),
            ),
            (
                "zero memory",
                |s| s.resources.memory = Some(ByteSize::b(0)),
                Some("resources.memory"),
            ),
            (
                "zero disk",
                |s| s.resources.disk = Some(ByteSize::b(0)),
                Some("resources.disk"),
            ),
            (
                "sub-second wall time",
                |s| s.resources.wall_time = Some(Duration::from_millis(10)),
                Some("wallTime"),
            ),
            ("zero gpus is fine", |s| s.resources.gpus = Some(0), None),
            (
                "cpus at the limit",
                |s| s.resources.cpus = Some(MAX_CPUS),
                None,
            ),
            (
                "cpus beyond the limit",
                |s| s.resources.cpus = Some(u32::MAX),
                Some("resources.cpus: must be at least 1 and at most 32768"),
            ),
            (
                "nodes at the limit",
                |s| s.resources.nodes = Some(MAX_NODES),
                None,
            ),
            (
                "nodes beyond the limit",
                |s| s.resources.nodes = Some(MAX_NODES + 1),
                Some("resources.nodes: must be at least 1 and at most 65536"),
            ),
            (
                "gpus at the limit",
                |s| s.resources.gpus = Some(MAX_GPUS),
                None,
            ),
            (
                "gpus beyond the limit",
                |s| s.resources.gpus = Some(MAX_GPUS + 1),
                Some("resources.gpus: must be at least 0 and at most 1024"),
            ),
            (
                "memory at the limit",
                |s| s.resources.memory = Some(MAX_MEMORY),
                None,
            ),
            (
                "memory beyond the limit",
                |s| s.resources.memory = Some(ByteSize::b(MAX_MEMORY.as_u64() + 1)),
                Some("resources.memory: must be more than 0 bytes and at most 1024 TiB"),
            ),
            (
                "disk at the limit",
                |s| s.resources.disk = Some(MAX_DISK),
                None,
            ),
            (
                "disk beyond the limit",
                |s| s.resources.disk = Some(ByteSize::b(u64::MAX)),
                Some("resources.disk: must be more than 0 bytes and at most 1024 TiB"),
            ),
            (
                "wall time at the limit",
                |s| s.resources.wall_time = Some(MAX_WALL_TIME),
                None,
            ),
            (
                "wall time beyond the limit",
                |s| s.resources.wall_time = Some(MAX_WALL_TIME + Duration::from_nanos(1)),
                Some("resources.wallTime: must be at least 1 second and at most 365 days"),
            ),
            (
                "the longest wall time there is",
                |s| s.resources.wall_time = Some(Duration::MAX),
                Some("at most 365 days"),
            ),
            ("queue ok", |s| s.queue = Some("debug".into()), None),
            (
                "queue empty",
                |s| s.queue = Some(String::new()),
                Some("queue"),
            ),
            (
                "queue hostile",
                |s| s.queue = Some("a;b".into()),
                Some("queue"),
            ),
            (
                "env name bad",
                |s| {
                    s.environment.insert("1X".into(), "v".into());
                },
                Some("environment"),
            ),
            (
                "env name with =",
                |s| {
                    s.environment.insert("A=B".into(), "v".into());
                },
                Some("environment"),
            ),
            (
                "env value hostile is fine",
                |s| {
                    s.environment
                        .insert("X".into(), "$(touch /tmp/p) ' \" \n".into());
                },
                None,
            ),
            (
                "env value NUL",
                |s| {
                    s.environment.insert("X".into(), "a\0b".into());
                },
                Some("NUL"),
            ),
            (
                "working dir empty",
                |s| s.working_dir = Some(String::new()),
                Some("workingDir"),
            ),
            (
                "working dir relative",
                |s| s.working_dir = Some("data/run-1".into()),
                Some("workingDir: must be an absolute path"),
            ),
            (
                "working dir newline",
                |s| s.working_dir = Some("/a\nb".into()),
                Some("workingDir"),
            ),
            (
                "working dir at PATH_MAX",
                |s| s.working_dir = Some(format!("/{}", "d".repeat(MAX_PATH_LEN - 1))),
                None,
            ),
            (
                "working dir beyond PATH_MAX",
                |s| s.working_dir = Some(format!("/{}", "d".repeat(MAX_PATH_LEN))),
                Some("workingDir: must be an absolute path of at most 4096 bytes"),
            ),
            (
                "env entry at the limit",
                |s| {
                    s.environment
                        .insert("V".into(), "v".repeat(MAX_ENV_ENTRY_LEN - 2));
                },
                None,
            ),
            (
                "env entry beyond the limit",
                |s| {
                    s.environment
                        .insert("V".into(), "v".repeat(MAX_ENV_ENTRY_LEN - 1));
                },
                Some("environment \"V\": NAME=VALUE is 131072 bytes"),
            ),
            (
                "container image beyond PATH_MAX",
                |s| {
                    s.container = Some(Container {
                        image: "i".repeat(MAX_PATH_LEN + 1),
                        runtime: ContainerRuntime::Apptainer,
                    })
                },
                Some("container.image"),
            ),
            (
                "zero array",
                |s| s.array = Some(ArraySpec::new(0)),
                Some("array.count"),
            ),
            (
                "zero max parallel",
                |s| s.array = Some(ArraySpec::new(3).with_max_parallel(0)),
                Some("array.maxParallel"),
            ),
            (
                "array at the limit",
                |s| {
                    s.array =
                        Some(ArraySpec::new(MAX_ARRAY_TASKS).with_max_parallel(MAX_ARRAY_TASKS))
                },
                None,
            ),
            (
                "array beyond the limit",
                |s| s.array = Some(ArraySpec::new(u32::MAX)),
                Some("array.count: must be at least 1 and at most 10000"),
            ),
            (
                "max parallel beyond the limit",
                |s| s.array = Some(ArraySpec::new(2).with_max_parallel(MAX_ARRAY_TASKS + 1)),
                Some("array.maxParallel: must be at least 1 and at most 10000"),
            ),
            (
                "array ok",
                |s| s.array = Some(ArraySpec::new(3).with_max_parallel(1)),
                None,
            ),
            (
                "container empty",
                |s| {
                    s.container = Some(Container {
                        image: " ".into(),
                        runtime: ContainerRuntime::Apptainer,
                    })
                },
                Some("container.image"),
            ),
            (
                "passthrough newline",
                |s| {
                    s.passthrough
                        .insert("slurm".into(), vec!["--a\n--b".into()]);
                },
                Some("passthrough.slurm"),
            ),
            (
                "passthrough quotes fine",
                |s| {
                    s.passthrough
                        .insert("slurm".into(), vec!["--comment='x y'".into()]);
                },
                None,
            ),
        ];
        for (what, edit, expected) in cases {
            let mut spec = valid();
            edit(&mut spec);
            match (spec.validate(), expected) {
                (Ok(()), None) => {}
                (Err(err), Some(needle)) => {
                    assert_eq!(err.kind(), crate::ErrorKind::InvalidInput, "{what}");
                    assert!(err.message().contains(needle), "{what}: {err}");
                }
                (result, _) => panic!("{what}: expected {expected:?}, got {result:?}"),
            }
        }
    }

    #[test]
    fn validation_reports_every_problem_and_survives_huge_input() {
        let mut spec = valid();
        spec.name = "x ".repeat(1_000_000);
        spec.script.clear();
        spec.resources.cpus = Some(0);
        let err = spec.validate().unwrap_err();
        let message = err.message();
        assert!(message.contains("name") && message.contains("script") && message.contains("cpus"));
        assert!(
            message.len() < 1_000,
            "message stays short: {} bytes",
            message.len()
        );
    }

    #[test]
    fn messages_quote_at_most_the_start_of_huge_names_and_keys() {
        let huge = "A".repeat(1 << 20);
        let mut spec = valid();
        spec.environment.insert(huge.clone(), "nul\0".into());
        let err = spec.validate().unwrap_err();
        assert!(
            err.message()
                .contains("the value must not contain NUL bytes"),
            "{err}"
        );
        assert!(err.message().len() < 1_000, "{} bytes", err.message().len());

        let err = JobKey::new(format!("{huge};")).unwrap_err();
        assert!(err.message().starts_with("job key \"AAAA"), "{err}");
        assert!(err.message().len() < 1_000, "{} bytes", err.message().len());
    }

    #[test]
    fn serde_round_trips_a_full_spec() {
        let mut spec = valid();
        spec.resources = Resources {
            cpus: Some(4),
            memory: Some(ByteSize::mib(1500)),
            disk: Some(ByteSize::gib(20)),
            wall_time: Some(Duration::from_secs(5400)),
            nodes: Some(1),
            gpus: Some(2),
        };
        spec.queue = Some("gpu".into());
        spec.environment.insert("A".into(), "1 2 'three'".into());
        spec.working_dir = Some("/scratch/x".into());
        spec.array = Some(ArraySpec::new(10).with_max_parallel(2));
        spec.container = Some(Container {
            image: "docker://python:3.12".into(),
            runtime: ContainerRuntime::Apptainer,
        });
        spec.passthrough
            .insert("slurm".into(), vec!["--qos=high".into()]);

        let json = serde_json::to_value(&spec).unwrap();
        assert_eq!(json["resources"]["memory"], "1500 MiB");
        assert_eq!(json["resources"]["disk"], "20 GiB");
        assert_eq!(json["resources"]["wallTime"], "1h 30m");
        assert_eq!(serde_json::from_value::<JobSpec>(json).unwrap(), spec);
    }

    #[test]
    fn serde_accepts_human_units_and_rejects_unknown_fields() {
        let spec: JobSpec = serde_json::from_str(
            r#"{"key":"k","name":"n","script":"true","resources":{"memory":"2GiB","wallTime":"90s"}}"#,
        )
        .unwrap();
        assert_eq!(spec.resources.memory, Some(ByteSize::gib(2)));
        assert_eq!(spec.resources.wall_time, Some(Duration::from_secs(90)));

        let err =
            serde_json::from_str::<JobSpec>(r#"{"key":"k","name":"n","script":"true","cpu":2}"#)
                .unwrap_err();
        assert!(err.to_string().contains("unknown field `cpu`"), "{err}");
    }

    #[test]
    fn sizes_read_as_sbatch_reads_them() {
        const MIB: u64 = 1 << 20;
        let cases: &[(&str, Option<u64>)] = &[
            ("4000", Some(4000 * MIB)),
            ("1", Some(MIB)),
            ("1.5", Some(3 * MIB / 2)),
            ("512K", Some(512 << 10)),
            ("512k", Some(512 << 10)),
            ("100M", Some(100 * MIB)),
            ("4096M", Some(4096 * MIB)),
            ("4G", Some(4 << 30)),
            ("4g", Some(4 << 30)),
            ("1.5G", Some(1536 * MIB)),
            ("1T", Some(1 << 40)),
            ("4GiB", Some(4 << 30)),
            ("4gib", Some(4 << 30)),
            ("4 GiB", Some(4 << 30)),
            (" 4G ", Some(4 << 30)),
            ("1500 MiB", Some(1500 * MIB)),
            ("4GB", Some(4 << 30)),
            ("4gb", Some(4 << 30)),
            ("4Gb", Some(4 << 30)),
            ("100mb", Some(100 * MIB)),
            ("1536 B", Some(1536)),
            ("1048576", Some(1 << 40)),
            ("1048577", None),
            ("4000000000", None),
            ("4 gigabytes", None),
            ("4Gi", None),
            ("", None),
            ("G", None),
            ("4X", None),
            ("4 GiBs", None),
            ("1.2.3G", None),
            ("-4G", None),
            ("4e9", None),
        ];
        for (text, bytes) in cases {
            assert_eq!(
                parse_size(text).ok().map(|size| size.as_u64()),
                *bytes,
                "{text:?}"
            );
        }
        let err = parse_size("4000000000").unwrap_err().to_string();
        assert!(
            err.contains("MiB (over 1 TiB here)") && err.contains("bytes (3815 MiB)"),
            "{err}"
        );
    }

    #[test]
    fn wall_times_read_as_sbatch_or_humantime() {
        let cases: &[(&str, Option<u64>)] = &[
            ("90", Some(90 * 60)),
            ("1", Some(60)),
            ("30:00", Some(30 * 60)),
            ("1:30", Some(90)),
            ("1:30:00", Some(5400)),
            ("01:02:03", Some(3723)),
            ("2-12", Some(2 * 86_400 + 12 * 3600)),
            ("2-12:30", Some(2 * 86_400 + 12 * 3600 + 30 * 60)),
            ("2-00:00:00", Some(2 * 86_400)),
            ("0-0:0:1", Some(1)),
            ("2h", Some(7200)),
            ("90m", Some(5400)),
            ("1h 30m", Some(5400)),
            ("45s", Some(45)),
            (" 90 ", Some(5400)),
            ("0", None),
            ("0:00", None),
            ("", None),
            ("1:2:3:4", None),
            ("1-2:3:4:5", None),
            ("-5", None),
            ("1--2", None),
            ("1:", None),
            (":30", None),
            ("1.5", None),
            ("+5", None),
            ("90 minutes please", None),
            ("90 minutes", Some(5400)),
            ("99999999999999999999", None),
            ("999999999999999-0", None),
        ];
        for (text, seconds) in cases {
            assert_eq!(
                parse_wall_time(text).ok().map(|t| t.as_secs()),
                *seconds,
                "{text:?}"
            );
        }
        let err = parse_wall_time("0").unwrap_err().to_string();
        assert!(err.contains("no limit"), "{err}");
    }

    #[test]
    fn json_sizes_read_as_sbatch_reads_them() {
        // JSON text rather than serde_json::json!, which the lowest declared serde_json
        // (1.0.0, tests/library.sh) cannot expand from another crate.
        let memory = |value: &str| {
            let json = format!(
                r#"{{"key": "k", "name": "n", "script": "true", "resources": {{"memory": {value}}}}}"#
            );
            serde_json::from_str::<JobSpec>(&json)
                .map(|spec| spec.resources.memory.map(|m| m.as_u64()))
                .map_err(|err| err.to_string())
        };
        assert_eq!(memory(r#""4G""#), Ok(Some(4 << 30)));
        assert_eq!(memory(r#""4096M""#), Ok(Some(4 << 30)));
        assert_eq!(memory(r#""4000""#), Ok(Some(4000 << 20)));
        assert_eq!(memory("4096"), Ok(Some(4096)), "a number counts bytes");
        assert_eq!(memory(r#""4GB""#), Ok(Some(4 << 30)), "as sbatch and qsub");
        assert!(memory(r#""4000000000""#).unwrap_err().contains("ambiguous"));
    }

    #[test]
    fn sizes_serialize_exactly() {
        let cases: [(u64, &str); 7] = [
            (1, "1 B"),
            (1024, "1 KiB"),
            (1536, "1536 B"),
            (1 << 20, "1 MiB"),
            (1500 << 20, "1500 MiB"),
            (3 << 30, "3 GiB"),
            (2 << 40, "2 TiB"),
        ];
        for (bytes, text) in cases {
            assert_eq!(exact_byte_size::format_exact(bytes), text);
            assert_eq!(
                parse_size(text).unwrap().as_u64(),
                bytes,
                "{text} parses back"
            );
        }
    }
}
