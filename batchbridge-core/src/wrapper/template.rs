//! [`job_wrapper`]: the job wrapper a batch scheduler runs, filled in for one spec.

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
}
