//! The submit description `condor_submit` reads, built from a [`JobSpec`]. Values from the
//! spec enter the submit language only after a check that the language reads them as
//! plain text: keys and names are tokens, paths are refused when they hold anything the
//! language would expand or split, and passthrough commands are single lines.

use batchbridge_core::error::excerpt;
use batchbridge_core::{ContainerRuntime, Error, ErrorKind, JobSpec, Result};

/// The key under [`JobSpec::passthrough`] whose entries are submit commands
/// (`"name = value"`), added after batchbridge's own so that they win.
pub const PASSTHROUGH_KEY: &str = "htcondor";

/// The custom job attribute that holds the spec's key; `find` matches it with `=?=`.
pub const KEY_ATTRIBUTE: &str = "BatchBridgeKey";

/// The custom job attribute that holds the number of procs the cluster was submitted with,
/// so a status cycle knows an array's size before every proc has materialized.
pub const TASKS_ATTRIBUTE: &str = "BatchBridgeTasks";

/// Submit commands a passthrough entry may not set: batchbridge reads the output files, the
/// event log (in its text format) and the attributes, and `queue` is the array.
const RESERVED: [&str; 9] = [
    "queue",
    "output",
    "error",
    "log",
    "log_xml",
    "+userlog",
    "+userlogusexml",
    "+batchbridgekey",
    "+batchbridgetasks",
];

pub(crate) const KIB: u64 = 1024;
pub(crate) const MIB: u64 = 1024 * 1024;

/// The submit description for `spec`, whose job directory on the cluster is `dir` and
/// whose events HTCondor appends to the user job event log `event_log`.
///
/// ```
/// use batchbridge_core::{JobKey, JobSpec};
/// use batchbridge_htcondor::description::submit_description;
///
/// let mut spec = JobSpec::new(JobKey::new("key-1")?, "hello", "echo hi");
/// spec.resources.cpus = Some(2);
/// let work = "/home/alice/.batchbridge/htcondor";
/// let description =
///     submit_description(&spec, &format!("{work}/jobs/key-1"), &format!("{work}/job-events.log"))?;
/// assert!(description.contains("\nrequest_cpus = 2\n"));
/// assert!(description.contains("\nlog = /home/alice/.batchbridge/htcondor/job-events.log\n"));
/// assert!(description.contains("\n+BatchBridgeKey = \"key-1\"\n"));
/// assert!(description.ends_with("\nqueue 1\n"));
/// # Ok::<(), batchbridge_core::Error>(())
/// ```
pub fn submit_description(spec: &JobSpec, dir: &str, event_log: &str) -> Result<String> {
    plain_path(dir, "the job directory")?;
    plain_path(event_log, "the event log")?;
    if let Some(queue) = &spec.queue {
        return Err(Error::new(
            ErrorKind::Unsupported,
            format!(
                "queue {queue:?}: HTCondor has no queues or partitions; steer the job with \
                 passthrough submit commands such as \"requirements = ...\""
            ),
        ));
    }
    if spec.resources.nodes.is_some_and(|n| n > 1) {
        return Err(Error::new(
            ErrorKind::Unsupported,
            "resources.nodes: an HTCondor vanilla or container job runs on one machine",
        ));
    }
    let working_dir = match &spec.working_dir {
        Some(working_dir) => plain_path(working_dir, "working_dir")?,
        None => dir,
    };
    let mut lines = vec![format!("# batchbridge job {}", spec.key)];
    let mut set = |command: &str, value: &str| lines.push(format!("{command} = {value}"));
    match &spec.container {
        None => set("universe", "vanilla"),
        Some(container) => {
            set("universe", "container");
            set("container_image", &container_image(container)?);
        }
    }
    set("executable", &format!("{dir}/job.sh"));
    // The wrapper enters the working directory itself: HTCondor would refuse a missing
    // initialdir at submit, or hold a job whose initialdir vanished, instead of failing it.
    set(
        "arguments",
        &format!("$(Process) $(Cluster) {dir} {working_dir}"),
    );
    set("initialdir", dir);
    set("output", &format!("{dir}/task-$(Process).stdout"));
    set("error", &format!("{dir}/task-$(Process).stderr"));
    set("log", event_log);
    set("should_transfer_files", "IF_NEEDED");
    set("when_to_transfer_output", "ON_EXIT");
    set(
        "transfer_input_files",
        &format!("{dir}/script.sh,{dir}/env.sh"),
    );
    set("batch_name", &spec.name);
    set(&format!("+{KEY_ATTRIBUTE}"), &format!("\"{}\"", spec.key));
    set(
        &format!("+{TASKS_ATTRIBUTE}"),
        &spec.task_count().to_string(),
    );
    let resources = &spec.resources;
    if let Some(cpus) = resources.cpus {
        set("request_cpus", &cpus.to_string());
    }
    if let Some(memory) = resources.memory {
        // request_memory counts MiB; round up so the job gets at least what it asked.
        set("request_memory", &memory.as_u64().div_ceil(MIB).to_string());
    }
    if let Some(disk) = resources.disk {
        // request_disk counts KiB.
        set("request_disk", &disk.as_u64().div_ceil(KIB).to_string());
    }
    if let Some(gpus) = resources.gpus.filter(|g| *g > 0) {
        set("request_gpus", &gpus.to_string());
    }
    if let Some(wall_time) = resources.wall_time {
        // HTCondor has no wall-time limit of its own: the schedd removes a job that has run
        // longer, at its next periodic evaluation (PERIODIC_EXPR_INTERVAL, 60 s by default).
        // Whole seconds, rounded up so the job gets at least its time.
        let seconds = wall_time.as_secs() + u64::from(wall_time.subsec_nanos() > 0);
        set(
            "periodic_remove",
            &format!("JobStatus == 2 && time() - JobCurrentStartDate > {seconds}"),
        );
    }
    if let Some(max) = spec.array.and_then(|a| a.max_parallel) {
        // Late materialization: at most `max` procs exist (idle or running) at once.
        set("max_materialize", &max.to_string());
    }
    for command in passthrough(spec)? {
        lines.push(command.to_owned());
    }
    lines.push(format!("queue {}", spec.task_count()));
    lines.push(String::new());
    Ok(lines.join("\n"))
}

/// The passthrough entries, each checked to be one `name = value` command that leaves
/// batchbridge's own commands alone.
fn passthrough(spec: &JobSpec) -> Result<Vec<&str>> {
    let entries = spec
        .passthrough
        .get(PASSTHROUGH_KEY)
        .map(Vec::as_slice)
        .unwrap_or_default();
    entries
        .iter()
        .map(|entry| {
            let invalid = |why: &str| {
                Error::invalid_input(format!(
                    "passthrough.{PASSTHROUGH_KEY}: {:?} {why}",
                    excerpt(entry)
                ))
            };
            if entry.contains(['\n', '\r', '\0']) {
                return Err(invalid("must be one line"));
            }
            let Some((name, _)) = entry.split_once('=') else {
                return Err(invalid(
                    "is not a submit command of the form \"name = value\"",
                ));
            };
            let name = name.trim();
            let word = name.strip_prefix('+').unwrap_or(name);
            let is_name = word
                .bytes()
                .next()
                .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
                && word
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.'));
            if !is_name {
                return Err(invalid("does not start with a submit command name"));
            }
            let lower = name.to_ascii_lowercase();
            let lower = lower
                .strip_prefix("my.")
                .map_or(lower.clone(), |rest| format!("+{rest}"));
            if RESERVED.contains(&lower.as_str()) {
                return Err(invalid("sets a command batchbridge needs for itself"));
            }
            Ok(entry.as_str())
        })
        .collect()
}

/// The image for HTCondor's container universe, which runs it with whatever runtime the
/// execution point has (Apptainer or Docker).
fn container_image(container: &batchbridge_core::Container) -> Result<String> {
    let image = container.image.as_str();
    if image.is_empty() || image.contains(['\n', '\r', '\0', '$', ' ', '"']) {
        return Err(Error::invalid_input(format!(
            "container.image {:?}: must be one word without `$` or quotes",
            excerpt(image)
        )));
    }
    match container.runtime {
        ContainerRuntime::Apptainer | ContainerRuntime::Singularity => Ok(image.to_owned()),
        ContainerRuntime::Docker if image.contains("://") => Ok(image.to_owned()),
        ContainerRuntime::Docker => Ok(format!("docker://{image}")),
        // Podman and any runtime added later.
        runtime => Err(Error::new(
            ErrorKind::Unsupported,
            format!(
                "container.runtime {runtime}: HTCondor's container universe runs Apptainer or Docker"
            ),
        )),
    }
}

/// `path` if the submit language reads it as one plain path: absolute, made of letters,
/// digits and `/._+@-` only (no `$` macros, spaces, quotes or commas), and not under /tmp
/// or /var/tmp, which HTCondor replaces with a private directory inside every job.
fn plain_path<'a>(path: &'a str, what: &str) -> Result<&'a str> {
    let plain = path.starts_with('/')
        && path
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._+@-".contains(&b));
    if !plain {
        return Err(Error::invalid_input(format!(
            "{what} {:?}: HTCondor needs an absolute path of letters, digits and /._+@- \
             only",
            excerpt(path)
        )));
    }
    let private = ["/tmp", "/var/tmp"]
        .iter()
        .any(|tmp| path == *tmp || path.starts_with(&format!("{tmp}/")));
    if private {
        return Err(Error::invalid_input(format!(
            "{what} {:?}: HTCondor gives every job a private /tmp and /var/tmp, so the \
             job could not see it; use a directory under the home directory",
            excerpt(path)
        )));
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use batchbridge_core::spec::{MAX_CPUS, MAX_DISK, MAX_MEMORY, MAX_WALL_TIME};
    use batchbridge_core::{ArraySpec, Container, JobKey};
    use bytesize::ByteSize;

    use super::*;

    const DIR: &str = "/home/batch/.batchbridge/htcondor/jobs/key-1";
    const LOG: &str = "/home/batch/.batchbridge/htcondor/job-events.log";

    fn spec() -> JobSpec {
        JobSpec::new(JobKey::new("key-1").unwrap(), "name", "echo hi")
    }

    fn lines(spec: &JobSpec) -> Vec<String> {
        submit_description(spec, DIR, LOG)
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn a_plain_spec_runs_the_wrapper_with_its_output_in_the_job_directory() {
        assert_eq!(
            lines(&spec()),
            [
                "# batchbridge job key-1",
                "universe = vanilla",
                &format!("executable = {DIR}/job.sh"),
                &format!("arguments = $(Process) $(Cluster) {DIR} {DIR}"),
                &format!("initialdir = {DIR}"),
                &format!("output = {DIR}/task-$(Process).stdout"),
                &format!("error = {DIR}/task-$(Process).stderr"),
                &format!("log = {LOG}"),
                "should_transfer_files = IF_NEEDED",
                "when_to_transfer_output = ON_EXIT",
                &format!("transfer_input_files = {DIR}/script.sh,{DIR}/env.sh"),
                "batch_name = name",
                "+BatchBridgeKey = \"key-1\"",
                "+BatchBridgeTasks = 1",
                "queue 1",
            ]
        );
    }

    #[test]
    fn every_field_maps_to_its_submit_command() {
        type Edit = fn(&mut JobSpec);
        let cases: [(Edit, &[&str]); 17] = [
            (|s| s.resources.cpus = Some(4), &["request_cpus = 4"]),
            (
                |s| s.resources.cpus = Some(MAX_CPUS),
                &["request_cpus = 32768"],
            ),
            (
                |s| s.resources.memory = Some(MAX_MEMORY),
                &["request_memory = 1073741824"],
            ),
            (
                |s| s.resources.disk = Some(MAX_DISK),
                &["request_disk = 1099511627776"],
            ),
            (
                |s| s.resources.disk = Some(ByteSize::b(1025)),
                &["request_disk = 2"],
            ),
            (
                |s| s.resources.wall_time = Some(MAX_WALL_TIME),
                &["periodic_remove = JobStatus == 2 && time() - JobCurrentStartDate > 31536000"],
            ),
            (
                |s| s.resources.wall_time = Some(Duration::from_millis(1500)),
                &["periodic_remove = JobStatus == 2 && time() - JobCurrentStartDate > 2"],
            ),
            (
                |s| s.resources.memory = Some(ByteSize::mib(1500)),
                &["request_memory = 1500"],
            ),
            (
                |s| s.resources.memory = Some(ByteSize::b(1)),
                &["request_memory = 1"],
            ),
            (
                |s| s.resources.disk = Some(ByteSize::gib(2)),
                &["request_disk = 2097152"],
            ),
            (|s| s.resources.gpus = Some(2), &["request_gpus = 2"]),
            (|s| s.resources.nodes = Some(1), &[]),
            (
                |s| s.resources.wall_time = Some(Duration::from_secs(90)),
                &["periodic_remove = JobStatus == 2 && time() - JobCurrentStartDate > 90"],
            ),
            (
                |s| s.array = Some(ArraySpec::new(3).with_max_parallel(2)),
                &["+BatchBridgeTasks = 3", "max_materialize = 2", "queue 3"],
            ),
            (
                |s| s.working_dir = Some("/home/batch/project".into()),
                &[
                    "initialdir = /home/batch/.batchbridge/htcondor/jobs/key-1",
                    "arguments = $(Process) $(Cluster) /home/batch/.batchbridge/htcondor/jobs/key-1 /home/batch/project",
                ],
            ),
            (
                |s| {
                    s.container = Some(
                        Container::new("/images/python.sif")
                            .with_runtime(ContainerRuntime::Apptainer),
                    )
                },
                &[
                    "universe = container",
                    "container_image = /images/python.sif",
                ],
            ),
            (
                |s| {
                    s.container =
                        Some(Container::new("python:3.12").with_runtime(ContainerRuntime::Docker))
                },
                &[
                    "universe = container",
                    "container_image = docker://python:3.12",
                ],
            ),
        ];
        let plain = lines(&spec());
        for (edit, expected) in cases {
            let mut spec = spec();
            edit(&mut spec);
            let got = lines(&spec);
            for line in expected {
                assert!(got.contains(&(*line).to_owned()), "{line:?} in {got:#?}");
            }
            let added = got.iter().filter(|l| !plain.contains(l)).count();
            let replaced = plain.iter().filter(|l| !got.contains(l)).count();
            assert!(
                added <= expected.len() && replaced <= expected.len(),
                "only {expected:?} changed: {got:#?}"
            );
        }
    }

    #[test]
    fn passthrough_commands_come_last_before_queue() {
        let mut spec = spec();
        spec.passthrough.insert(
            PASSTHROUGH_KEY.into(),
            vec![
                "requirements = (OpSysAndVer == \"AlmaLinux9\")".into(),
                "+ProjectName = \"physics\"".into(),
                "executable = /usr/bin/env".into(),
            ],
        );
        let got = lines(&spec);
        assert_eq!(
            got[got.len() - 4..],
            [
                "requirements = (OpSysAndVer == \"AlmaLinux9\")",
                "+ProjectName = \"physics\"",
                "executable = /usr/bin/env",
                "queue 1",
            ]
        );
    }

    #[test]
    fn what_cannot_be_submitted_is_refused_with_the_reason() {
        type Edit = fn(&mut JobSpec);
        let cases: [(Edit, ErrorKind, &str); 15] = [
            (
                |s| s.queue = Some("debug".into()),
                ErrorKind::Unsupported,
                "no queues",
            ),
            (
                |s| s.resources.nodes = Some(2),
                ErrorKind::Unsupported,
                "one machine",
            ),
            (
                |s| s.working_dir = Some("relative/dir".into()),
                ErrorKind::InvalidInput,
                "absolute path",
            ),
            (
                |s| s.working_dir = Some("/home/$(whoami)".into()),
                ErrorKind::InvalidInput,
                "working_dir",
            ),
            (
                |s| s.working_dir = Some("/tmp/scratch".into()),
                ErrorKind::InvalidInput,
                "private /tmp",
            ),
            (
                |s| {
                    s.container = Some(Container::new("img").with_runtime(ContainerRuntime::Podman))
                },
                ErrorKind::Unsupported,
                "podman",
            ),
            (
                |s| {
                    s.container = Some(Container::new("a b").with_runtime(ContainerRuntime::Docker))
                },
                ErrorKind::InvalidInput,
                "one word",
            ),
            (
                |s| passthrough(s, "queue 10"),
                ErrorKind::InvalidInput,
                "name = value",
            ),
            (
                |s| passthrough(s, "output = /dev/null"),
                ErrorKind::InvalidInput,
                "needs for itself",
            ),
            (
                |s| passthrough(s, "MY.BatchBridgeKey = \"other\""),
                ErrorKind::InvalidInput,
                "needs for itself",
            ),
            (
                |s| passthrough(s, "log = /home/batch/mine.log"),
                ErrorKind::InvalidInput,
                "needs for itself",
            ),
            (
                |s| passthrough(s, "log_xml = true"),
                ErrorKind::InvalidInput,
                "needs for itself",
            ),
            (
                |s| passthrough(s, "My.UserLog = \"/home/batch/mine.log\""),
                ErrorKind::InvalidInput,
                "needs for itself",
            ),
            (
                |s| passthrough(s, "request_cpus = 1\nqueue 100"),
                ErrorKind::InvalidInput,
                "one line",
            ),
            (
                |s| passthrough(s, "$(x) = 1"),
                ErrorKind::InvalidInput,
                "command name",
            ),
        ];
        fn passthrough(spec: &mut JobSpec, entry: &str) {
            spec.passthrough
                .insert(PASSTHROUGH_KEY.into(), vec![entry.into()]);
        }
        for (edit, kind, words) in cases {
            let mut spec = spec();
            edit(&mut spec);
            let err = submit_description(&spec, DIR, LOG).unwrap_err();
            assert_eq!(err.kind(), kind, "{err}");
            assert!(err.message().contains(words), "{words:?} in {err}");
        }
    }

    #[test]
    fn huge_values_are_quoted_only_in_part() {
        let huge = "x".repeat(1 << 20);
        let limit = 2 * batchbridge_core::error::MAX_QUOTED;
        type Edit = fn(&mut JobSpec, &str);
        let edits: [Edit; 3] = [
            |s, huge| s.working_dir = Some(format!("/home/{huge} x")),
            |s, huge| {
                s.passthrough
                    .insert(PASSTHROUGH_KEY.into(), vec![format!("queue {huge}")]);
            },
            |s, huge| {
                s.container = Some(
                    Container::new(format!("{huge} $")).with_runtime(ContainerRuntime::Apptainer),
                )
            },
        ];
        for edit in edits {
            let mut spec = spec();
            edit(&mut spec, &huge);
            let err = submit_description(&spec, DIR, LOG).unwrap_err();
            assert_eq!(
                err.kind(),
                ErrorKind::InvalidInput,
                "{}",
                excerpt(err.message())
            );
            assert!(err.message().len() < limit, "{} bytes", err.message().len());
        }
    }

    #[test]
    fn a_job_directory_the_submit_language_would_misread_is_refused() {
        for dir in [
            "/home/o brien/jobs/k",
            "/home/x/$(Cluster)/k",
            "rel/k",
            "/tmp/k",
        ] {
            let err = submit_description(&spec(), dir, LOG).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidInput, "{dir}: {err}");
            let err =
                submit_description(&spec(), DIR, &format!("{dir}/job-events.log")).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidInput, "{dir}: {err}");
        }
    }
}
