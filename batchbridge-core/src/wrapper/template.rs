//! [`job_wrapper`]: the job wrapper a batch scheduler runs, filled in for one spec, and
//! [`BatchJobWrapper`], the one such wrapper SLURM and PBS share.

use super::render_script;
use crate::error::{Error, ErrorKind, Result};
use crate::spec::{ContainerRuntime, JobSpec};

/// `template`, a job wrapper written with placeholders, ready for `spec` whose job directory
/// is `dir`: the shared placeholders of [`render_script`] filled in, then, in one pass,
/// `@KEY@` (the key), `@DIR@` (`dir`) and `@WORKDIR@` (the spec's working directory, else
/// `dir`), both shell-quoted, `@RUNNER@`, the program that runs the script (`bash`, or
/// `apptainer` or `singularity` for a spec with a container), and `@RUNNER_ARGS@`, what
/// goes between that program and the script's path: nothing, or `exec --bind "$4" IMAGE
/// bash `, the wrapper keeping the job directory in `$4`. The wrapper finds `@RUNNER@` in
/// its own `PATH` before it applies the job's environment, whose `PATH` need not hold it,
/// and runs it by that path. One pass: a value is never searched for placeholders, so a
/// working directory or work directory that names one (a tenant's `/scratch/@RUNNER@`)
/// stays verbatim instead of pulling generated shell text into its quotes.
///
/// A container runtime other than Apptainer or Singularity is Unsupported; `backend` names
/// the backend in that error.
///
/// ```
/// use batchbridge_core::wrapper::job_wrapper;
/// use batchbridge_core::{Container, ContainerRuntime, JobKey, JobSpec};
///
/// let template = "# job @KEY@\ndir=@DIR@\nworkdir=@WORKDIR@\n\
///                 runner=$(command -v @RUNNER@)\nexec \"$runner\" @RUNNER_ARGS@\"$1\"\n";
/// let mut spec = JobSpec::new(JobKey::new("k")?, "in-a-box", "python -V");
/// spec.working_dir = Some("/scratch/it's here".into());
/// spec.container = Some(Container::new("docker://python:3.12").with_runtime(ContainerRuntime::Apptainer));
/// let wrapper = job_wrapper(template, &spec, "/home/me/jobs/k", "slurm")?;
/// assert_eq!(
///     wrapper,
///     "# job k\ndir=/home/me/jobs/k\nworkdir=\"/scratch/it's here\"\n\
///      runner=$(command -v apptainer)\n\
///      exec \"$runner\" exec --bind \"$4\" docker://python:3.12 bash \"$1\"\n"
/// );
/// # Ok::<(), batchbridge_core::Error>(())
/// ```
pub fn job_wrapper(template: &str, spec: &JobSpec, dir: &str, backend: &str) -> Result<String> {
    let (runner, runner_args) = match &spec.container {
        None => ("bash", String::new()),
        Some(container) => {
            let program = match container.runtime {
                ContainerRuntime::Apptainer => "apptainer",
                ContainerRuntime::Singularity => "singularity",
                // Docker, Podman and any runtime added later.
                runtime => {
                    return Err(Error::new(
                        ErrorKind::Unsupported,
                        format!(
                            "the {backend} backend runs containers with apptainer or \
                             singularity, not {runtime} (job {})",
                            spec.key
                        ),
                    ));
                }
            };
            (
                program,
                format!(
                    "exec --bind \"$4\" {} bash ",
                    quote(&container.image, "container.image")?
                ),
            )
        }
    };
    let working_dir = spec.working_dir.as_deref().unwrap_or(dir);
    Ok(fill(
        &render_script(template),
        &[
            ("@KEY@", spec.key.as_str()),
            ("@DIR@", &quote(dir, "the job directory")?),
            ("@WORKDIR@", &quote(working_dir, "workingDir")?),
            ("@RUNNER@", runner),
            ("@RUNNER_ARGS@", &runner_args),
        ],
    ))
}

/// The batch-job wrapper: what a batch scheduler (SLURM, PBS) runs for each task of a job,
/// one template for every scheduler whose jobs get SIGTERM on a cancel. It keeps the whole
/// wrapper protocol (the module docs): it enters the working directory, finds the runner
/// before the job's environment applies, runs the script with its output beside it, passes
/// a SIGTERM on to the script and waits for it, and records each task's start and end
/// (`task-N.exit` and the job events), and exits with the script's exit code (70,
/// [`NOT_STARTED_EXIT_CODE`](super::NOT_STARTED_EXIT_CODE), when the script never ran), so
/// that the scheduler's own record of the exit agrees with `task-N.exit` even once the job
/// directory is gone (after a cancel it ends as `end_cancelled` says). A backend supplies
/// only what is its scheduler's:
/// the shell that runs it, the lines that read the task index and job id from the
/// scheduler's variables, and how the wrapper ends once it recorded a cancel.
///
/// ```
/// use batchbridge_core::wrapper::BatchJobWrapper;
/// use batchbridge_core::{JobKey, JobSpec};
///
/// const WRAPPER: BatchJobWrapper = BatchJobWrapper::new(
///     "/bin/sh",
///     "task=${MY_TASK_INDEX:-0}\njob=$MY_JOB_ID",
///     "exit 143",
/// );
/// let spec = JobSpec::new(JobKey::new("k")?, "n", "echo hi");
/// let script = WRAPPER.render(&spec, "/home/me/jobs/k", "mine")?;
/// assert!(script.starts_with("#!/bin/sh\n# Generated by batchbridge for job k."));
/// assert!(script.contains("\ntask=${MY_TASK_INDEX:-0}\njob=$MY_JOB_ID\n"));
/// assert!(script.contains("wait; exit 143' TERM\n"));
/// # Ok::<(), batchbridge_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchJobWrapper {
    shell: &'static str,
    task_and_job: &'static str,
    end_cancelled: &'static str,
}

impl BatchJobWrapper {
    /// The wrapper run by `shell` (its `#!` line: `/bin/sh`, or `/bin/bash`, which stamps
    /// job events without starting a process), whose `task_and_job` lines set `task` (the
    /// task's index, 0 without an array) and `job` (the id the submit printed, the array's
    /// own for every task of an array) from the scheduler's variables, and which ends with
    /// `end_cancelled` (shell code run last in the SIGTERM trap: `exit 143`, or
    /// `trap - TERM; kill -TERM $$` for a scheduler that reads a death by the signal).
    ///
    /// The `task_and_job` lines run first, with `dir` (the job directory, absolute) and
    /// `workdir` already set and nothing of the job started, so they may read the job
    /// directory: a scheduler without a variable for the id waits for `$dir/job_id`, which
    /// the submit writes once the scheduler printed it, and one that may start a job a
    /// cancel just reached exits there when `$dir/cancel-requested` exists (the wrapper
    /// protocol, in the module docs).
    pub const fn new(
        shell: &'static str,
        task_and_job: &'static str,
        end_cancelled: &'static str,
    ) -> Self {
        Self {
            shell,
            task_and_job,
            end_cancelled,
        }
    }

    /// The wrapper for `spec`, whose job directory is `dir`, ready to write: the
    /// scheduler's parts, then [`job_wrapper`]'s placeholders (`backend` names the backend
    /// in its error for a container runtime it cannot run).
    pub fn render(&self, spec: &JobSpec, dir: &str, backend: &str) -> Result<String> {
        let template = fill(
            BATCH_JOB,
            &[
                ("@SHELL@", self.shell),
                ("@TASK_AND_JOB@", self.task_and_job.trim_end()),
                ("@END_CANCELLED@", self.end_cancelled),
            ],
        );
        job_wrapper(&template, spec, dir, backend)
    }
}

/// The batch-job wrapper's template ([`BatchJobWrapper`]).
const BATCH_JOB: &str = include_str!("batch_job.sh");

/// `template` with each placeholder replaced by its value in one pass: a value is never
/// searched for placeholders.
fn fill(template: &str, values: &[(&str, &str)]) -> String {
    let mut filled = String::with_capacity(template.len());
    let mut rest = template;
    while let Some((at, placeholder, value)) = values
        .iter()
        .filter_map(|(placeholder, value)| {
            rest.find(placeholder).map(|at| (at, *placeholder, *value))
        })
        .min_by_key(|(at, ..)| *at)
    {
        filled.push_str(&rest[..at]);
        filled.push_str(value);
        rest = &rest[at + placeholder.len()..];
    }
    filled.push_str(rest);
    filled
}

/// `value` as one shell word; `what` names it in the error for a value no quoting can
/// carry (a NUL byte).
fn quote(value: &str, what: &str) -> Result<String> {
    shlex::try_quote(value)
        .map(|quoted| quoted.into_owned())
        .map_err(|err| Error::invalid_input(format!("{what}: {err}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{Container, JobKey};

    const TEMPLATE: &str = "dir=@DIR@\nworkdir=@WORKDIR@\n\
                            enter_working_dir \"$workdir\" r || exit @NOT_STARTED@\n\
                            runner=$(command -v @RUNNER@)\n\
                            exec \"$runner\" @RUNNER_ARGS@\"$1\"\n";

    fn spec() -> JobSpec {
        JobSpec::new(JobKey::new("key-1").unwrap(), "name", "echo hi")
    }

    #[test]
    fn fill_replaces_each_placeholder_once_in_one_pass() {
        type Values<'a> = &'a [(&'a str, &'a str)];
        let cases: &[(&str, Values<'_>, &str)] = &[
            ("a @X@ b @Y@", &[("@X@", "1"), ("@Y@", "2")], "a 1 b 2"),
            ("@Y@@X@@Y@", &[("@X@", "1"), ("@Y@", "2")], "212"),
            ("@X@", &[("@X@", "@Y@"), ("@Y@", "no")], "@Y@"),
            ("none here", &[("@X@", "1")], "none here"),
            ("@Z@ stays", &[("@X@", "1")], "@Z@ stays"),
        ];
        for (template, values, filled) in cases {
            assert_eq!(fill(template, values), *filled, "{template}");
        }
    }

    /// A tenant's path naming a placeholder must not pull the container command (with the
    /// image's quotes) into the path's quotes, where the image would run as shell.
    #[test]
    fn a_value_naming_a_placeholder_stays_verbatim() {
        let mut spec = spec();
        spec.working_dir = Some("/scratch/@RUNNER@ @KEY@".into());
        spec.container =
            Some(Container::new("$(touch /tmp/canary)").with_runtime(ContainerRuntime::Apptainer));
        let dir = "/home/batch/@WORKDIR@";
        let wrapper = job_wrapper(TEMPLATE, &spec, dir, "slurm").unwrap();
        let line = |prefix: &str| {
            let line = wrapper.lines().find(|l| l.starts_with(prefix)).unwrap();
            shlex::split(line).unwrap()
        };
        assert_eq!(line("workdir="), ["workdir=/scratch/@RUNNER@ @KEY@"]);
        assert_eq!(line("dir="), [format!("dir={dir}")]);
        assert!(
            wrapper.contains("exec \"$runner\" exec --bind \"$4\" '$(touch /tmp/canary)' bash"),
            "{wrapper}"
        );
        assert!(wrapper.contains("|| exit 70\n"), "{wrapper}");
    }

    /// The job's environment may set a PATH without the shell: the wrapper looks it up
    /// by name before that applies and runs it by the path found.
    #[test]
    fn without_a_container_bash_runs_the_script_by_the_path_found() {
        let wrapper = job_wrapper(TEMPLATE, &spec(), "/w", "slurm").unwrap();
        assert!(
            wrapper.ends_with("runner=$(command -v bash)\nexec \"$runner\" \"$1\"\n"),
            "{wrapper}"
        );
    }

    #[test]
    fn containers_run_through_apptainer_or_singularity() {
        let mut spec = spec();
        for (runtime, program) in [
            (ContainerRuntime::Apptainer, "apptainer"),
            (ContainerRuntime::Singularity, "singularity"),
        ] {
            spec.container = Some(Container::new("/images/my tool.sif").with_runtime(runtime));
            let wrapper = job_wrapper(TEMPLATE, &spec, "/w", "pbs").unwrap();
            assert!(
                wrapper.contains(&format!(
                    "runner=$(command -v {program})\n\
                     exec \"$runner\" exec --bind \"$4\" '/images/my tool.sif' bash \"$1\""
                )),
                "{wrapper}"
            );
        }
        spec.container = Some(Container::new("python:3.12").with_runtime(ContainerRuntime::Docker));
        let err = job_wrapper(TEMPLATE, &spec, "/w", "pbs").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
        assert!(
            err.message().starts_with("the pbs backend runs containers"),
            "{err}"
        );
    }

    /// The batch-job wrapper runs under a POSIX sh: the task's output beside it, its end in
    /// `task-N.exit` and as job events, its exit code the script's.
    #[test]
    fn the_batch_job_wrapper_runs_a_task_and_records_its_end() {
        const WRAPPER: BatchJobWrapper =
            BatchJobWrapper::new("/bin/sh", "task=${T:-0}\njob=$J", "exit 143");
        let work = tempfile::tempdir().unwrap();
        let dir = work.path().join("jobs/key-1");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::create_dir(work.path().join("events")).unwrap();
        std::fs::write(
            dir.join("script.sh"),
            "echo \"$BATCHBRIDGE_TASK_INDEX $BATCHBRIDGE_JOB_ID $GREETING\"\nexit 3\n",
        )
        .unwrap();
        std::fs::write(dir.join("env.sh"), "export GREETING=hi\n").unwrap();
        let script = WRAPPER
            .render(&spec(), dir.to_str().unwrap(), "test")
            .unwrap();
        let run = std::process::Command::new("sh")
            .args(["-c", script.as_str()])
            .env("T", "2")
            .env("J", "42")
            .output()
            .unwrap();
        assert_eq!(run.status.code(), Some(3), "{run:?}");
        let read = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap();
        assert_eq!(read("task-2.stdout"), "2 42 hi\n");
        assert_eq!(read("task-2.exit"), "exit 3\n");
        let mut events: Vec<String> = std::fs::read_dir(work.path().join("events"))
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .map(|name| name.split(".t").next().unwrap().to_owned())
            .collect();
        events.sort();
        assert_eq!(events, ["42.2.exit.3", "42.2.started"]);
    }
}
