//! `JobArgs` → `JobSpec`: the flags of `submit` and `run` and the script's directives as
//! the spec a backend submits, checked before anything is sent, with messages that name the
//! flags typed.

use std::io::Read;
use std::path::{Path, PathBuf};

use batchbridge_core::directives::DirectiveReport;
use batchbridge_core::staging::{StageIn, StageOut, StageWhen};
use batchbridge_core::{ArraySpec, BatchBackend, Dependency, JobKey, JobSpec};

use crate::cli::JobArgs;
use crate::exit::{CliError, CliResult};

/// The spec the flags describe, before its script's directives are applied: its name is
/// empty unless `--name` gave one, so that a directive's job name can be taken
/// ([`BatchBackend::apply_directives`]); [`with_directives`] finishes it.
pub(crate) struct Flagged {
    spec: JobSpec,
    /// `--after`'s values, read once the cluster is known ([`Flagged::after`]).
    after: Vec<String>,
    /// The name when neither `--name` nor a directive gives one: the script's file name.
    default_name: String,
}

/// The spec the flags describe, read from the command line and the script alone.
pub(crate) fn job_spec(job: JobArgs) -> CliResult<Flagged> {
    let (script, default_name) = if job.script == "-" {
        let mut script = String::new();
        std::io::stdin()
            .read_to_string(&mut script)
            .map_err(|err| {
                CliError::usage(format!("cannot read the script from standard input: {err}"))
            })?;
        (script, "stdin".to_owned())
    } else {
        let path = PathBuf::from(&job.script);
        let script = std::fs::read_to_string(&path).map_err(|err| {
            CliError::usage(format!("cannot read the script {}: {err}", path.display()))
        })?;
        (script, name_from(&path))
    };
    let key = match job.key {
        Some(key) => key,
        None => fresh_key(job.name.as_deref().unwrap_or(&default_name)),
    };
    let mut spec = JobSpec::new(JobKey::new(key)?, job.name.unwrap_or_default(), script);
    spec.resources.cpus = job.cpus;
    spec.resources.gpus = job.gpus;
    spec.resources.wall_time = job.time;
    if let Some(mem) = job.mem {
        spec.resources.memory = Some(
            batchbridge_core::spec::parse_size(&mem)
                .map_err(|err| CliError::usage(format!("--mem: {}", err.message())))?,
        );
    }
    if let Some(array) = job.array {
        spec.array = Some(parse_array(&array)?);
    }
    for pair in job.env {
        let (name, value) = pair.split_once('=').ok_or_else(|| {
            CliError::usage(format!(
                "--env {:?}: expected NAME=VALUE",
                batchbridge_core::spec::truncate_for_message(&pair)
            ))
        })?;
        spec.environment.insert(name.to_owned(), value.to_owned());
    }
    spec.queue = job.partition;
    for input in &job.inputs {
        spec.stage_in.push(stage_in(input)?);
    }
    for output in &job.outputs {
        spec.stage_out.push(stage_out(output));
    }
    Ok(Flagged {
        spec,
        after: job.after,
        default_name,
    })
}

impl Flagged {
    /// Reads `--after`'s values as dependencies on jobs of `cluster`, the one the job goes
    /// to ([`dependency`]).
    pub(crate) fn after(mut self, cluster: &str) -> CliResult<Self> {
        for text in std::mem::take(&mut self.after) {
            self.spec.after.push(dependency(&text, cluster)?);
        }
        Ok(self)
    }
}

/// One `--after`: `[ok:|notok:|any:]JOB` with JOB an ID or `CLUSTER:ID` (as `submit`
/// prints it), the job on `cluster`. A condition word comes first, so `ok:7` is "after job
/// 7 succeeded" even beside a cluster named `ok` (write `ok:ok:7` for that one's job 7).
fn dependency(text: &str, cluster: &str) -> CliResult<Dependency> {
    let (condition, job) = match text.split_once(':') {
        Some((word @ ("ok" | "notok" | "any"), job)) => (word, job),
        _ => ("ok", text),
    };
    let id = match job.split_once(':') {
        Some((named, id)) if named == cluster => id,
        Some((named, _)) => {
            return Err(CliError::usage(format!(
                "--after {text:?}: that job is on cluster {named:?} and this one goes to \
                 {cluster:?}; a job runs after jobs of its own cluster"
            )));
        }
        None => job,
    };
    format!("{condition}:{id}")
        .parse()
        .map_err(|err: batchbridge_core::Error| {
            CliError::usage(format!("--after {text:?}: {}", err.message()))
        })
}

/// `--in PATH[:DEST]`: DEST after the last `:` when there is one, else the file's or
/// directory's own name.
fn stage_in(text: &str) -> CliResult<StageIn> {
    let (path, dest) = match text.rsplit_once(':') {
        Some((path, dest)) if !path.is_empty() && !dest.is_empty() => (path, dest.to_owned()),
        _ => {
            let name = Path::new(text)
                .file_name()
                .and_then(|n| n.to_str())
                .ok_or_else(|| {
                    CliError::usage(format!(
                        "--in {text:?}: name a file or directory, or give :DEST"
                    ))
                })?;
            (text, name.to_owned())
        }
    };
    Ok(StageIn::path(path, dest))
}

/// `--out PATTERN[:LOCALDIR]`: fetched after any end, so that a failed job's partial
/// results come back too; LOCALDIR defaults to the current directory.
fn stage_out(text: &str) -> StageOut {
    let (pattern, dir) = match text.rsplit_once(':') {
        Some((pattern, dir)) if !pattern.is_empty() && !dir.is_empty() => (pattern, dir),
        _ => (text, "."),
    };
    StageOut::new(pattern, dir).when(StageWhen::Always)
}

/// The spec to submit: the flags' with the script's directives for `backend` applied
/// (flags win), checked before anything is sent; and what became of each directive line.
/// Refused lines are in the report, for the caller to show before it stops at
/// [`DirectiveReport::check`]. Runs no command.
pub(crate) fn with_directives(
    flagged: Flagged,
    backend: &dyn BatchBackend,
) -> CliResult<(JobSpec, DirectiveReport)> {
    let (mut spec, report) = backend.apply_directives(flagged.spec)?;
    if spec.name.is_empty() {
        spec.name = flagged.default_name;
    }
    spec.validate()
        .map_err(|err| CliError::usage(in_flags(err.message(), spec.key.as_str())))?;
    Ok((spec, report))
}

/// Core's validation names the spec's fields (`job spec KEY: array.count: …`); the person
/// at the terminal typed flags, and never saw the key the tool made up.
fn in_flags(message: &str, key: &str) -> String {
    const FLAGS: [(&str, &str); 11] = [
        ("resources.cpus", "--cpus"),
        ("resources.gpus", "--gpus"),
        ("resources.memory", "--mem"),
        ("resources.wallTime", "--time"),
        ("array.count", "--array (its task count)"),
        ("array.maxParallel", "--array (its %M)"),
        ("queue ", "--partition "),
        ("environment ", "--env "),
        ("name ", "--name "),
        ("stageIn ", "--in "),
        ("stageOut ", "--out "),
    ];
    let message = message
        .strip_prefix(&format!("job spec {key}: "))
        .unwrap_or(message);
    let problems: Vec<String> = message
        .split("; ")
        .map(|problem| {
            FLAGS
                .iter()
                .find_map(|(field, flag)| {
                    problem
                        .strip_prefix(field)
                        .map(|rest| format!("{flag}{rest}"))
                })
                .unwrap_or_else(|| problem.to_owned())
        })
        .collect();
    problems.join("; ")
}

/// `N` (N tasks), or sbatch's own `--array` as core reads it (`0-LAST`), each with an
/// optional `%M`; core refuses other ranges, steps and lists, saying how to get their
/// numbers from `$BATCHBRIDGE_TASK_INDEX`.
fn parse_array(text: &str) -> CliResult<ArraySpec> {
    let refused = |err: batchbridge_core::Error| {
        CliError::usage(format!(
            "--array {text:?}: {}",
            without_value(err.message())
        ))
    };
    let (tasks, parallel) = match text.split_once('%') {
        Some((tasks, parallel)) => (tasks, Some(parallel)),
        None => (text, None),
    };
    let count = match tasks.bytes().all(|b| b.is_ascii_digit()) {
        true => tasks.parse::<u32>().ok(),
        false => None,
    };
    let Some(count) = count else {
        return batchbridge_core::spec::parse_array(text).map_err(refused);
    };
    // N tasks is sbatch's 0-(N-1); a count of 0 is left to the spec's validation to refuse.
    let mut array = ArraySpec::new(count);
    if let Some(parallel) = parallel {
        let sbatch_form = format!("0-{}%{parallel}", count.max(1) - 1);
        let parsed = batchbridge_core::spec::parse_array(&sbatch_form).map_err(refused)?;
        array.max_parallel = parsed.max_parallel;
    }
    Ok(array)
}

/// Core's message without its leading `array "…": `, which restates what the flag shows.
fn without_value(message: &str) -> &str {
    message.split_once("\": ").map_or(message, |(_, rest)| rest)
}

/// A job name from a script's file name: its stem with every character a name cannot hold
/// made `-`.
fn name_from(path: &Path) -> String {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let name: String = stem
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '-'
            }
        })
        .take(batchbridge_core::MAX_NAME_LEN)
        .collect();
    let name = name.trim_start_matches(['.', '_', '-']).to_owned();
    if name.is_empty() {
        "job".to_owned()
    } else {
        name
    }
}

/// A key no other submission has: the name, the time in nanoseconds and this process.
fn fresh_key(name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_nanos());
    let prefix: String = name.chars().take(32).collect();
    format!("{prefix}-{nanos}-{}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn after_reads_a_condition_then_an_id_or_this_clusters_reference() {
        let table = [
            ("12", Some("ok:12")),
            ("hpc:12", Some("ok:12")),
            ("ok:12", Some("ok:12")),
            ("notok:hpc:12", Some("notok:12")),
            ("any:12.pbs", Some("any:12.pbs")),
            ("ok:ok:12", None),
            ("other:12", None),
            ("any:other:12", None),
            ("ok:", None),
            ("12,13", None),
        ];
        for (text, expected) in table {
            let read = dependency(text, "hpc").ok().map(|d| d.to_string());
            assert_eq!(read.as_deref(), expected, "{text}");
        }
    }

    #[test]
    fn arrays_are_n_or_a_range_from_0() {
        let parsed = |text: &str| parse_array(text).ok().map(|a| (a.count, a.max_parallel));
        assert_eq!(parsed("3"), Some((3, None)));
        assert_eq!(parsed("10%2"), Some((10, Some(2))));
        assert_eq!(parsed("0-9"), Some((10, None)));
        assert_eq!(parsed("0-0"), Some((1, None)));
        assert_eq!(parsed("0-9%3"), Some((10, Some(3))));
        assert_eq!(parsed("0-9:1"), Some((10, None)));
        for bad in [
            "",
            "%2",
            "3%",
            "x",
            "3%$(touch x)",
            "-1",
            "1-5",
            "0-9:2",
            "1,3,5",
            "5-1",
            "0-",
            "0-x",
            "0-9:",
            "1-5%2",
            "99999999999",
        ] {
            assert_eq!(parsed(bad), None, "{bad:?}");
        }
        let said = |text: &str| parse_array(text).unwrap_err().message;
        assert!(
            said("1-5").contains("0-4 and use $((BATCHBRIDGE_TASK_INDEX + 1))"),
            "{}",
            said("1-5")
        );
        assert!(
            said("0-9:2").contains("0-4 and use $((BATCHBRIDGE_TASK_INDEX * 2))"),
            "{}",
            said("0-9:2")
        );
        assert!(
            said("3-11:4%2").contains("0-2%2 and use $((BATCHBRIDGE_TASK_INDEX * 4 + 3))"),
            "{}",
            said("3-11:4%2")
        );
    }

    #[test]
    fn names_from_file_names_are_valid_names() {
        let cases = [
            ("hello.sh", "hello"),
            ("/a/b/my job $(x).sh", "my-job---x-"),
            (".hidden", "hidden"),
            ("--", "job"),
        ];
        for (path, name) in cases {
            assert_eq!(name_from(Path::new(path)), name, "{path}");
        }
    }
}
