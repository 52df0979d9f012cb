//! What a submit sends to the cluster, built from a [`JobSpec`]: qsub's options and the
//! generated job script (the environment file is
//! [`batchbridge_core::remote::environment_file`]). Every value from the spec reaches the
//! shell quoted by `shlex` or as one argument of its own, never as code.

use batchbridge_core::dependency::{Condition, term_list};
use batchbridge_core::error::excerpt;
use batchbridge_core::remote::SubmitDefaults;
use batchbridge_core::wrapper::BatchJobWrapper;
use batchbridge_core::{Error, ErrorKind, JobSpec, Result};

use crate::parse::KEY_VARIABLE;

/// The key under [`JobSpec::passthrough`] whose options go to `qsub`.
pub const PASSTHROUGH_KEY: &str = "pbs";

/// core's batch-job wrapper for PBS: `PBS_JOBID` is `SEQ.SERVER`, or `SEQ[INDEX].SERVER`
/// for a subjob, and the job's id is `SEQ`; a cancelled job dies of the same SIGTERM, so
/// PBS's `Exit_status` reads 256+15.
const JOB_SCRIPT: BatchJobWrapper = BatchJobWrapper::new(
    "/bin/sh",
    "task=${PBS_ARRAY_INDEX:-0}\njob=${PBS_JOBID%%.*}\njob=${job%%\\[*}",
    "trap - TERM; kill -TERM $$",
);
/// qsub's options a passthrough entry may not use, and why: each would leave batchbridge
/// without a job id or its own job, block until the job ends, or change what batchbridge
/// sets itself and relies on.
pub(crate) const NOT_PASSTHROUGH: [(char, &str); 14] = [
    ('I', "makes an interactive job"),
    ('X', "forwards X11 to an interactive job"),
    ('z', "keeps qsub from printing the job id"),
    ('J', "makes an array: that is the spec's `array`"),
    (
        'v',
        "sets job variables: environment belongs in the spec's `environment`",
    ),
    ('V', "exports qsub's whole environment into the job"),
    ('N', "names the job: that is the spec's `name`"),
    ('S', "changes the shell that runs batchbridge's job script"),
    ('o', "moves the job's output file, which batchbridge sets"),
    ('e', "moves the job's error file, which batchbridge sets"),
    ('j', "joins the output files, which batchbridge sets"),
    (
        'k',
        "keeps the output files elsewhere than batchbridge sets",
    ),
    ('f', "is qsub's own foreground mode, which batchbridge sets"),
    ('r', "changes rerunnability, which an array needs"),
];
/// qsub's short options that take a value (OpenPBS's `GETOPT_ARGS`).
pub(crate) const WITH_VALUE: &str = "aAcCeIjJkKlmMNopqrRSuvWP";
const MIB: u64 = 1024 * 1024;

/// `qsub`'s options for `spec`, whose files live in `dir`. Passthrough options come first;
/// those that would lose the job id or block (`-I`, `-X`, `-z`, `-W block`) and those
/// batchbridge sets itself (`-J`, `-v`, `-V`, `-N`, `-S`, `-o`, `-e`, `-j`, `-k`, `-f`,
/// `-r`) are refused among them, so nothing can override the key variable, the output
/// paths or the array.
///
/// The resources become one select statement, `-l select=N:ncpus=C:mem=Mmb:ngpus=G` (N
/// chunks for N nodes, placed one per node with `-l place=scatter`), and
/// `-l walltime=SECONDS`. An array is `-J 0-(N-1)`, with `%M` for its `max_parallel`
/// (OpenPBS's `max_run_subjobs`). PBS has no per-job disk resource: a disk request is
/// Unsupported.
///
/// ```
/// use batchbridge_core::{ArraySpec, JobKey, JobSpec};
/// use batchbridge_pbs::SubmitDefaults;
/// use batchbridge_pbs::script::qsub_options;
///
/// let mut spec = JobSpec::new(JobKey::new("run-7")?, "train", "python train.py");
/// spec.resources.cpus = Some(4);
/// spec.array = Some(ArraySpec::new(10).with_max_parallel(2));
/// let options = qsub_options(&spec, &SubmitDefaults::default(), "/home/me/jobs/run-7")?;
/// assert!(options.contains(&"select=1:ncpus=4".to_owned()));
/// assert!(options.contains(&"0-9%2".to_owned()));
/// assert!(options.contains(&"BATCHBRIDGE_JOB_KEY=run-7".to_owned()));
/// # Ok::<(), batchbridge_core::Error>(())
/// ```
pub fn qsub_options(spec: &JobSpec, defaults: &SubmitDefaults, dir: &str) -> Result<Vec<String>> {
    let mut options = Vec::new();
    for option in spec.passthrough.get(PASSTHROUGH_KEY).into_iter().flatten() {
        options.extend(check_passthrough(option)?);
    }
    let resources = &spec.resources;
    if resources.disk.is_some() {
        return Err(Error::new(
            ErrorKind::Unsupported,
            format!(
                "job {}: PBS has no per-job disk resource; ask for it through \
                 passthrough.pbs (a site's own resource) instead of resources.disk",
                spec.key
            ),
        ));
    }
    // A name qsub accepts: PBS wants it to begin with a letter.
    let name = if spec.name.starts_with(|c: char| c.is_ascii_alphabetic()) {
        spec.name.clone()
    } else {
        format!("j{}", spec.name)
    };
    options.extend(["-N".to_owned(), name]);
    options.extend(["-v".to_owned(), format!("{KEY_VARIABLE}={}", spec.key)]);
    if let Some(queue) = defaults.queue_for(spec) {
        options.extend(["-q".to_owned(), queue.to_owned()]);
    }
    // An account of the job's own (a `#PBS -A` directive, a passthrough `-A`) wins over
    // the cluster's default: qsub keeps the last `-A` it reads, which would be this one.
    let own_account = options.iter().any(|option| option == "-A");
    if let Some(account) = defaults.account.as_ref().filter(|_| !own_account) {
        options.extend(["-A".to_owned(), account.clone()]);
    }
    let mut chunk = format!("ncpus={}", resources.cpus.unwrap_or(1));
    if let Some(memory) = resources.memory {
        // PBS counts in whole units; MiB rounded up gives the job at least what it asked.
        chunk.push_str(&format!(":mem={}mb", memory.as_u64().div_ceil(MIB)));
    }
    if let Some(gpus) = resources.gpus.filter(|g| *g > 0) {
        chunk.push_str(&format!(":ngpus={gpus}"));
    }
    let nodes = resources.nodes.unwrap_or(1);
    options.extend(["-l".to_owned(), format!("select={nodes}:{chunk}")]);
    if nodes > 1 {
        options.extend(["-l".to_owned(), "place=scatter".to_owned()]);
    }
    if let Some(wall_time) = resources.wall_time {
        // Whole seconds, rounded up so the job gets at least its time.
        let seconds = wall_time.as_secs() + u64::from(wall_time.subsec_nanos() > 0);
        options.extend(["-l".to_owned(), format!("walltime={seconds}")]);
    }
    // PBS refuses an array of one subjob; a one-task array runs as a plain job whose
    // task index is 0 all the same.
    if let Some(array) = spec.array.filter(|a| a.count > 1) {
        let mut range = format!("0-{}", array.count - 1);
        if let Some(max) = array.max_parallel {
            range.push_str(&format!("%{max}"));
        }
        options.extend(["-J".to_owned(), range]);
    }
    // The wrapper's own output (PBS's notes when it kills a job) goes to the job directory
    // (a directory: PBS names the file after the job and subjob); the script's output goes
    // to task-N.stdout and task-N.stderr.
    options.extend([
        "-j".to_owned(),
        "oe".to_owned(),
        "-o".to_owned(),
        format!("{dir}/"),
    ]);
    options.extend(dependency_options(spec, &options)?);
    // The job script is POSIX sh, whatever the user's login shell.
    options.extend(["-S".to_owned(), "/bin/sh".to_owned()]);
    Ok(options)
}

/// qsub's options for [`JobSpec::after`]: one `-W depend=` joining every dependency with
/// `,` (all must be met). PBS deletes a job whose dependency can never be met (it then
/// reads as [`dependency_deleted`](crate::state::dependency_deleted)). A `depend` among
/// `options` already (passthrough, `#PBS -W depend=`) beside `after` is refused: one of
/// them would silently lose.
///
/// ```
/// use batchbridge_core::{Dependency, JobKey, JobSpec};
/// use batchbridge_pbs::script::dependency_options;
///
/// let spec = JobSpec::new(JobKey::new("k")?, "n", "true")
///     .with_after(Dependency::after_ok("41.pbs"))
///     .with_after(Dependency::after_not_ok("42.pbs"));
/// assert_eq!(dependency_options(&spec, &[])?, ["-W", "depend=afterok:41.pbs,afternotok:42.pbs"]);
/// # Ok::<(), batchbridge_core::Error>(())
/// ```
pub fn dependency_options(spec: &JobSpec, options: &[String]) -> Result<Vec<String>> {
    if spec.after.is_empty() {
        return Ok(Vec::new());
    }
    if let Some(own) = options.iter().find(|o| o.starts_with("depend=")) {
        return Err(Error::invalid_input(format!(
            "passthrough.{PASSTHROUGH_KEY}: \"-W {}\" and after both say what the job \
             waits for; keep after alone",
            excerpt(own)
        )));
    }
    let terms = term_list(&spec.after, |condition| match condition {
        Condition::AfterOk => "afterok",
        Condition::AfterNotOk => "afternotok",
        Condition::AfterAny => "afterany",
    });
    Ok(vec!["-W".to_owned(), format!("depend={terms}")])
}

/// Reads one passthrough entry: a single qsub option, its value attached (`-lplace=pack`,
/// `-Pproj`) or after one space (`-W depend=afterok:12`), split into qsub's arguments.
fn check_passthrough(option: &str) -> Result<Vec<String>> {
    let refuse = |why: String| {
        Err(Error::invalid_input(format!(
            "passthrough.{PASSTHROUGH_KEY}: {:?} {why}",
            excerpt(option)
        )))
    };
    let mut letters = option.strip_prefix('-').unwrap_or_default().chars();
    let Some(letter) = letters.next().filter(char::is_ascii_alphabetic) else {
        return refuse(
            "is not a qsub option; write one option per entry, as `-lname=value`".into(),
        );
    };
    if let Some((_, why)) = NOT_PASSTHROUGH.iter().find(|(l, _)| *l == letter) {
        return refuse(format!(
            "{why}; batchbridge needs qsub to submit its own script and print the job id"
        ));
    }
    if letter == 'W' && option.contains("block") {
        return refuse("makes qsub wait for the job to end".into());
    }
    let value = letters.as_str();
    if !WITH_VALUE.contains(letter) {
        if !value.is_empty() {
            return refuse("combines short options; pass one option per entry".into());
        }
        return Ok(vec![option.to_owned()]);
    }
    let value = value.strip_prefix(' ').unwrap_or(value);
    if value.is_empty() {
        return refuse("lacks its value; write it as `-lname=value`".into());
    }
    Ok(vec![format!("-{letter}"), value.to_owned()])
}

/// The job script qsub submits: it enters the spec's working directory (failing the task
/// with [`NOT_STARTED_EXIT_CODE`](batchbridge_core::remote::NOT_STARTED_EXIT_CODE) and a
/// `task-N.reason` file when it cannot), sources the environment file, runs the job's
/// script (inside the container when the spec asks for one) with its output beside it,
/// and writes the task's end to `task-N.exit`; filled in by
/// [`BatchJobWrapper`].
///
/// ```
/// use batchbridge_core::{Container, ContainerRuntime, JobKey, JobSpec};
/// use batchbridge_pbs::script::job_script;
///
/// let mut spec = JobSpec::new(JobKey::new("k")?, "in-a-box", "python -V");
/// spec.container = Some(Container::new("docker://python:3.12").with_runtime(ContainerRuntime::Apptainer));
/// let script = job_script(&spec, "/home/me/jobs/k")?;
/// assert!(script.contains("runner=$(command -v apptainer)"));
/// assert!(script.contains("exec \"$5\" exec --bind \"$4\" docker://python:3.12 bash \"$1\""));
/// # Ok::<(), batchbridge_core::Error>(())
/// ```
pub fn job_script(spec: &JobSpec, dir: &str) -> Result<String> {
    JOB_SCRIPT.render(spec, dir, "pbs")
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use batchbridge_core::spec::{MAX_ARRAY_TASKS, MAX_CPUS, MAX_MEMORY, MAX_NODES};
    use batchbridge_core::{ArraySpec, JobKey};
    use bytesize::ByteSize;

    use super::*;

    fn spec() -> JobSpec {
        JobSpec::new(JobKey::new("key-1").unwrap(), "name", "echo hi")
    }

    fn options(edit: impl FnOnce(&mut JobSpec)) -> Result<Vec<String>> {
        let mut spec = spec();
        edit(&mut spec);
        qsub_options(&spec, &SubmitDefaults::default(), "/w/jobs/key-1")
    }

    /// The options as `-X value` pairs joined by a space, for readable expectations.
    fn pairs(options: &[String]) -> Vec<String> {
        let mut pairs = Vec::new();
        let mut iter = options.iter();
        while let Some(option) = iter.next() {
            match iter.next() {
                Some(value) => pairs.push(format!("{option} {value}")),
                None => pairs.push(option.clone()),
            }
        }
        pairs
    }

    #[test]
    fn options_map_every_field() {
        type Edit = fn(&mut JobSpec);
        let cases: [(Edit, &[&str]); 13] = [
            (|_| {}, &["-l select=1:ncpus=1"]),
            (
                |s| s.resources.cpus = Some(MAX_CPUS),
                &["-l select=1:ncpus=32768"],
            ),
            (
                |s| s.resources.memory = Some(MAX_MEMORY),
                &["-l select=1:ncpus=1:mem=1073741824mb"],
            ),
            (
                |s| s.resources.memory = Some(ByteSize::b(1)),
                &["-l select=1:ncpus=1:mem=1mb"],
            ),
            (
                |s| {
                    s.resources.cpus = Some(4);
                    s.resources.memory = Some(ByteSize::mib(1500));
                    s.resources.gpus = Some(2);
                },
                &["-l select=1:ncpus=4:mem=1500mb:ngpus=2"],
            ),
            (
                |s| s.resources.nodes = Some(MAX_NODES),
                &["-l select=65536:ncpus=1", "-l place=scatter"],
            ),
            (
                |s| s.resources.wall_time = Some(Duration::from_millis(61_500)),
                &["-l walltime=62"],
            ),
            (
                |s| s.array = Some(ArraySpec::new(MAX_ARRAY_TASKS)),
                &["-J 0-9999"],
            ),
            (
                |s| s.array = Some(ArraySpec::new(3).with_max_parallel(2)),
                &["-J 0-2%2"],
            ),
            (|s| s.queue = Some("workq".into()), &["-q workq"]),
            (|s| s.name = "9lives".into(), &["-N j9lives"]),
            (
                |s| {
                    s.passthrough
                        .insert("pbs".into(), vec!["-W depend=afterok:12".into()]);
                },
                &["-W depend=afterok:12"],
            ),
            (
                |s| {
                    s.passthrough.insert("pbs".into(), vec!["-Pphysics".into()]);
                },
                &["-P physics"],
            ),
        ];
        let always = [
            "-v BATCHBRIDGE_JOB_KEY=key-1",
            "-j oe",
            "-o /w/jobs/key-1/",
            "-S /bin/sh",
        ];
        for (edit, expected) in cases {
            let options = options(edit).unwrap();
            let pairs = pairs(&options);
            for option in expected.iter().chain(&always) {
                assert!(
                    pairs.iter().any(|o| o == option) || options.join(" ").contains(option),
                    "{option} missing from {options:?}"
                );
            }
        }
    }

    #[test]
    fn dependencies_become_one_depend_option() {
        use batchbridge_core::Dependency;
        let table: [(&[Dependency], Option<&str>); 4] = [
            (&[], None),
            (
                &[Dependency::after_ok("41.pbs")],
                Some("-W depend=afterok:41.pbs"),
            ),
            (
                &[
                    Dependency::after_not_ok("41.pbs"),
                    Dependency::after_any("42.pbs"),
                ],
                Some("-W depend=afternotok:41.pbs,afterany:42.pbs"),
            ),
            (
                &[
                    Dependency::after_any("7.pbs"),
                    Dependency::after_ok("8[].pbs"),
                ],
                Some("-W depend=afterany:7.pbs,afterok:8[].pbs"),
            ),
        ];
        for (after, expected) in table {
            let options = options(|s| s.after = after.to_vec()).unwrap();
            let depend: Vec<_> = pairs(&options)
                .into_iter()
                .filter(|pair| pair.starts_with("-W depend="))
                .collect();
            assert_eq!(
                depend,
                expected.into_iter().collect::<Vec<_>>(),
                "{after:?}"
            );
        }
        let err = options(|s| {
            s.after = vec![Dependency::after_ok("2.pbs")];
            s.passthrough
                .insert("pbs".into(), vec!["-W depend=afterok:1.pbs".into()]);
        })
        .unwrap_err();
        assert!(err.message().contains("and after both"), "{err}");
    }

    #[test]
    fn a_one_task_array_is_a_plain_job() {
        let options = options(|s| s.array = Some(ArraySpec::new(1))).unwrap();
        assert!(!options.contains(&"-J".to_owned()), "{options:?}");
    }

    #[test]
    fn disk_is_unsupported() {
        let err = options(|s| s.resources.disk = Some(ByteSize::gib(1))).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
    }

    #[test]
    fn passthrough_options_that_break_tracking_are_refused() {
        for (option, words) in [
            ("-J 0-3", "array"),
            ("-Jx", "array"),
            ("-v BATCHBRIDGE_JOB_KEY=other", "environment"),
            ("-V", "environment"),
            ("-z", "job id"),
            ("-I", "interactive"),
            ("-W block=true", "wait for the job"),
            ("-o /tmp/x", "output"),
            ("-N other", "name"),
            ("-S /bin/csh", "shell"),
            ("-hz", "combines"),
            ("-l", "lacks its value"),
            ("select=2", "not a qsub option"),
            ("--wrap", "not a qsub option"),
            ("", "not a qsub option"),
        ] {
            let err = options(|s| {
                s.passthrough.insert("pbs".into(), vec![option.into()]);
            })
            .unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidInput, "{option}: {err}");
            assert!(err.message().contains(words), "{option}: {err}");
            assert!(err.message().starts_with("passthrough.pbs:"), "{err}");
        }
        // A hold is fine: the job is tracked Held until someone releases it.
        assert!(
            options(|s| {
                s.passthrough.insert("pbs".into(), vec!["-h".into()]);
            })
            .unwrap()
            .contains(&"-h".to_owned())
        );
    }

    #[test]
    fn the_job_script_quotes_every_path() {
        let mut spec = spec();
        spec.working_dir = Some("/scratch/it's $(here)".into());
        let script = job_script(&spec, "/w/jobs/key-1").unwrap();
        // What sh makes of the two assignments is the value, byte for byte.
        let assignments: String = script
            .lines()
            .filter(|l| l.starts_with("dir=") || l.starts_with("workdir="))
            .map(|l| format!("{l}\n"))
            .collect();
        let shown = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("{assignments}printf '%s|%s' \"$dir\" \"$workdir\""))
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&shown.stdout),
            "/w/jobs/key-1|/scratch/it's $(here)"
        );
        assert!(
            !script.contains("@DIR@") && !script.contains("@RUNNER@"),
            "{script}"
        );
    }
}
