//! What a submit sends to the cluster, built from a [`JobSpec`]: sbatch's options and the
//! generated batch script (the environment file is [`batchbridge_core::remote::environment_file`]). Every value from the spec reaches the
//! shell quoted by `shlex` or as one argument of its own, never as code.

use batchbridge_core::dependency::{Condition, term_list};
use batchbridge_core::error::excerpt;
use batchbridge_core::remote::SubmitDefaults;
use batchbridge_core::wrapper::BatchJobWrapper;
use batchbridge_core::{Error, JobSpec, Result};

/// The key under [`JobSpec::passthrough`] whose options go to `sbatch`.
pub const PASSTHROUGH_KEY: &str = "slurm";

/// core's batch-job wrapper for SLURM: bash (its job events need no `date`); an array
/// task's id is the array's own (`SLURM_ARRAY_JOB_ID`), the one sbatch printed; a
/// cancelled job ends with 143, which SLURM reads as CANCELLED or TIMEOUT from its own
/// signal.
const BATCH_SCRIPT: BatchJobWrapper = BatchJobWrapper::new(
    "/bin/bash",
    "task=${SLURM_ARRAY_TASK_ID:-0}\njob=${SLURM_ARRAY_JOB_ID:-$SLURM_JOB_ID}",
    "exit 143",
);
/// sbatch's long options that change what sbatch does instead of what the job is: each
/// would leave batchbridge without a job id (`--quiet`, `--test-only`, `--help`,
/// `--usage`, `--version`), with another job than the one it wrote (`--wrap`), blocked
/// until the job ends (`--wait`), or with more tasks than it tracks (`--array`: that is
/// [`JobSpec::array`]'s job). getopt accepts any unambiguous abbreviation (`--wra`), so a
/// passthrough option whose name begins one of these is refused as well.
const NOT_JOB_OPTIONS: [(&str, char); 8] = [
    ("array", 'a'),
    ("help", 'h'),
    ("quiet", 'Q'),
    ("test-only", '\0'),
    ("usage", 'u'),
    ("version", 'V'),
    ("wait", 'W'),
    ("wrap", '\0'),
];
/// sbatch's short options that take a value, which may follow the letter (`-Jname`);
/// after any other letter, more letters would be more options (`-vQ` is `-v -Q`).
const SHORT_WITH_VALUE: &str = "AbBcCdDeFGiIJkLmMnNopqStwx";
const MIB: u64 = 1024 * 1024;
/// `sbatch`'s options for `spec`, whose files live in `dir`. Passthrough options come first,
/// so that the options batchbridge relies on (the comment holding the key, the output file,
/// the array range) win when a passthrough option repeats one.
///
/// ```
/// use batchbridge_core::{JobKey, JobSpec};
/// use batchbridge_slurm::SubmitDefaults;
/// use batchbridge_slurm::script::sbatch_options;
///
/// let mut spec = JobSpec::new(JobKey::new("run-7")?, "train", "python train.py");
/// spec.resources.cpus = Some(4);
/// let options = sbatch_options(&spec, &SubmitDefaults::default(), "/home/me/jobs/run-7")?;
/// assert!(options.contains(&"--cpus-per-task=4".to_owned()));
/// assert!(options.contains(&"--comment=run-7".to_owned()));
/// # Ok::<(), batchbridge_core::Error>(())
/// ```
pub fn sbatch_options(spec: &JobSpec, defaults: &SubmitDefaults, dir: &str) -> Result<Vec<String>> {
    let mut options = Vec::new();
    for option in spec.passthrough.get(PASSTHROUGH_KEY).into_iter().flatten() {
        check_passthrough(option)?;
        options.push(option.clone());
    }
    options.push(format!("--job-name={}", spec.name));
    options.push(format!("--comment={}", spec.key));
    if let Some(partition) = defaults.queue_for(spec) {
        options.push(format!("--partition={partition}"));
    }
    // The job's own account (a passthrough option, an `#SBATCH -A` line) wins over the
    // cluster's default one, as a flag wins over a default.
    let own_account = spec
        .passthrough
        .get(PASSTHROUGH_KEY)
        .into_iter()
        .flatten()
        .any(|option| option.starts_with("--account") || option.starts_with("-A"));
    if let Some(account) = defaults.account.as_ref().filter(|_| !own_account) {
        options.push(format!("--account={account}"));
    }
    let resources = &spec.resources;
    if let Some(cpus) = resources.cpus {
        options.push(format!("--cpus-per-task={cpus}"));
    }
    if let Some(memory) = resources.memory {
        // SLURM counts memory in whole MiB; round up so the job gets at least what it asked.
        options.push(format!("--mem={}M", memory.as_u64().div_ceil(MIB)));
    }
    if let Some(disk) = resources.disk {
        options.push(format!("--tmp={}M", disk.as_u64().div_ceil(MIB)));
    }
    if let Some(wall_time) = resources.wall_time {
        // Time limits are whole minutes; round up so the job gets at least its time.
        options.push(format!("--time={}", wall_time.as_secs().div_ceil(60)));
    }
    if let Some(nodes) = resources.nodes {
        options.push(format!("--nodes={nodes}"));
    }
    if let Some(gpus) = resources.gpus.filter(|g| *g > 0) {
        options.push(format!("--gres=gpu:{gpus}"));
    }
    if let Some(array) = spec.array {
        let mut range = format!("--array=0-{}", array.count - 1);
        if let Some(max) = array.max_parallel {
            range.push_str(&format!("%{max}"));
        }
        options.push(range);
    }
    options.extend(dependency_options(spec)?);
    // The batch script enters the spec's working directory itself (see batch_script).
    options.push(format!("--chdir={dir}"));
    // The wrapper's own output: slurmstepd's notes such as "CANCELLED AT" or "DUE TO TIME
    // LIMIT". The script's output goes to task-N.stdout and task-N.stderr.
    options.push(format!("--output={dir}/wrapper.log"));
    options.push("--open-mode=append".to_owned());
    Ok(options)
}

/// sbatch's options for [`JobSpec::after`]: one `--dependency` joining every dependency
/// with `,` (all must be met), and `--kill-on-invalid-dep=yes`, so that SLURM ends a job
/// whose dependency can never be met (state `CANCELLED`, reason
/// `DependencyNeverSatisfied`) instead of leaving it pending for ever. A passthrough
/// `--dependency` (or an `#SBATCH` one) beside `after` is refused: one of them would
/// silently lose.
///
/// ```
/// use batchbridge_core::{Dependency, JobKey, JobSpec};
/// use batchbridge_slurm::script::dependency_options;
///
/// let spec = JobSpec::new(JobKey::new("k")?, "n", "true")
///     .with_after(Dependency::after_ok("41"))
///     .with_after(Dependency::after_any("42"));
/// assert_eq!(
///     dependency_options(&spec)?,
///     ["--dependency=afterok:41,afterany:42", "--kill-on-invalid-dep=yes"]
/// );
/// # Ok::<(), batchbridge_core::Error>(())
/// ```
pub fn dependency_options(spec: &JobSpec) -> Result<Vec<String>> {
    if spec.after.is_empty() {
        return Ok(Vec::new());
    }
    let own = spec.passthrough.get(PASSTHROUGH_KEY).into_iter().flatten();
    if let Some(option) = own
        .into_iter()
        .find(|o| o.starts_with("--dep") || o.starts_with("-d"))
    {
        return Err(Error::invalid_input(format!(
            "passthrough.{PASSTHROUGH_KEY}: {:?} and after both say what the job waits for; \
             keep after alone",
            excerpt(option)
        )));
    }
    let terms = term_list(&spec.after, |condition| match condition {
        Condition::AfterOk => "afterok",
        Condition::AfterNotOk => "afternotok",
        Condition::AfterAny => "afterany",
    });
    Ok(vec![
        format!("--dependency={terms}"),
        "--kill-on-invalid-dep=yes".to_owned(),
    ])
}

/// Refuses a passthrough entry that is not one sbatch option about the job.
pub(crate) fn check_passthrough(option: &str) -> Result<()> {
    let refuse = |why: String| {
        Err(Error::invalid_input(format!(
            "passthrough.{PASSTHROUGH_KEY}: {:?} {why}",
            excerpt(option)
        )))
    };
    let not_a_job_option = |long: &str| {
        format!(
            "is sbatch's --{long}, which changes what sbatch does rather than the job; \
             batchbridge needs sbatch to submit its own script and print the job id"
        )
    };
    if let Some(long) = option.strip_prefix("--") {
        let name = long.split_once('=').map_or(long, |(name, _)| name);
        if name.is_empty() {
            return refuse("would end sbatch's options; write options as `--name=value`".into());
        }
        if let Some((long, _)) = NOT_JOB_OPTIONS.iter().find(|(o, _)| o.starts_with(name)) {
            return refuse(not_a_job_option(long));
        }
        return Ok(());
    }
    let mut letters = option.strip_prefix('-').unwrap_or_default().chars();
    let Some(letter) = letters.next() else {
        return refuse("is not an option; write options as `--name=value`".into());
    };
    if let Some((long, _)) = NOT_JOB_OPTIONS.iter().find(|(_, short)| *short == letter) {
        return refuse(not_a_job_option(long));
    }
    if letters.next().is_some() && !SHORT_WITH_VALUE.contains(letter) {
        return refuse("combines short options; pass one option per entry".into());
    }
    Ok(())
}

/// The batch script sbatch runs: it enters the spec's working directory (failing the task
/// with [`NOT_STARTED_EXIT_CODE`](batchbridge_core::remote::NOT_STARTED_EXIT_CODE) and a
/// `task-N.reason` file when it cannot), sources the environment file, runs the job's script
/// (inside the container when the spec asks for one) with its output beside it, and writes
/// the task's exit code to `task-N.exit`; filled in by
/// [`BatchJobWrapper`].
///
/// ```
/// use batchbridge_core::{Container, ContainerRuntime, JobKey, JobSpec};
/// use batchbridge_slurm::script::batch_script;
///
/// let mut spec = JobSpec::new(JobKey::new("k")?, "in-a-box", "python -V");
/// spec.container = Some(Container::new("docker://python:3.12").with_runtime(ContainerRuntime::Apptainer));
/// let script = batch_script(&spec, "/home/me/jobs/k")?;
/// assert!(script.contains("runner=$(command -v apptainer)"));
/// assert!(script.contains("exec \"$5\" exec --bind \"$4\" docker://python:3.12 bash \"$1\""));
/// # Ok::<(), batchbridge_core::Error>(())
/// ```
pub fn batch_script(spec: &JobSpec, dir: &str) -> Result<String> {
    BATCH_SCRIPT.render(spec, dir, "slurm")
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use batchbridge_core::spec::{
        MAX_ARRAY_TASKS, MAX_CPUS, MAX_DISK, MAX_MEMORY, MAX_NODES, MAX_WALL_TIME,
    };
    use batchbridge_core::{ArraySpec, ErrorKind, JobKey};
    use bytesize::ByteSize;

    use super::*;

    fn spec() -> JobSpec {
        JobSpec::new(JobKey::new("key-1").unwrap(), "name", "echo hi")
    }

    #[test]
    fn dependencies_become_one_dependency_option_that_ends_impossible_jobs() {
        use batchbridge_core::Dependency;
        let table: [(&[Dependency], &[&str]); 4] = [
            (&[], &[]),
            (
                &[Dependency::after_ok("41")],
                &["--dependency=afterok:41", "--kill-on-invalid-dep=yes"],
            ),
            (
                &[Dependency::after_not_ok("41"), Dependency::after_any("42")],
                &[
                    "--dependency=afternotok:41,afterany:42",
                    "--kill-on-invalid-dep=yes",
                ],
            ),
            (
                &[
                    Dependency::after_any("7"),
                    Dependency::after_ok("8"),
                    Dependency::after_not_ok("9"),
                ],
                &[
                    "--dependency=afterany:7,afterok:8,afternotok:9",
                    "--kill-on-invalid-dep=yes",
                ],
            ),
        ];
        for (after, expected) in table {
            let mut spec = spec();
            spec.after = after.to_vec();
            assert_eq!(dependency_options(&spec).unwrap(), expected, "{after:?}");
            let all = sbatch_options(&spec, &SubmitDefaults::default(), "/w/k").unwrap();
            for option in expected {
                assert!(all.contains(&(*option).to_owned()), "{all:?}");
            }
        }
        for own in ["--dependency=afterok:1", "--dep=singleton", "-dafterok:1"] {
            let mut spec = spec().with_after(Dependency::after_ok("2"));
            spec.passthrough.insert("slurm".into(), vec![own.into()]);
            let err = sbatch_options(&spec, &SubmitDefaults::default(), "/w/k").unwrap_err();
            assert_eq!(err.kind(), batchbridge_core::ErrorKind::InvalidInput);
            assert!(err.message().contains("and after both"), "{err}");
        }
    }

    #[test]
    fn options_map_every_field() {
        type Edit = fn(&mut JobSpec);
        let cases: [(Edit, &[&str]); 18] = [
            (|_| {}, &[]),
            // The maxima, each of which SLURM 22.05 reads back exactly (`scontrol show
            // job`); beyond 35791393 minutes sbatch's time parser overflows.
            (
                |s| s.resources.cpus = Some(MAX_CPUS),
                &["--cpus-per-task=32768"],
            ),
            (
                |s| s.resources.memory = Some(MAX_MEMORY),
                &["--mem=1073741824M"],
            ),
            (
                |s| s.resources.disk = Some(MAX_DISK),
                &["--tmp=1073741824M"],
            ),
            (
                |s| s.resources.wall_time = Some(MAX_WALL_TIME),
                &["--time=525600"],
            ),
            (|s| s.resources.nodes = Some(MAX_NODES), &["--nodes=65536"]),
            (
                |s| {
                    s.array =
                        Some(ArraySpec::new(MAX_ARRAY_TASKS).with_max_parallel(MAX_ARRAY_TASKS))
                },
                &["--array=0-9999%10000"],
            ),
            (
                |s| s.resources.disk = Some(ByteSize::b(MIB + 1)),
                &["--tmp=2M"],
            ),
            (|s| s.queue = Some("debug".into()), &["--partition=debug"]),
            (|s| s.resources.cpus = Some(4), &["--cpus-per-task=4"]),
            (
                |s| s.resources.memory = Some(ByteSize::mib(1500)),
                &["--mem=1500M"],
            ),
            (|s| s.resources.memory = Some(ByteSize::b(1)), &["--mem=1M"]),
            (
                |s| s.resources.disk = Some(ByteSize::gib(2)),
                &["--tmp=2048M"],
            ),
            (
                |s| s.resources.wall_time = Some(Duration::from_secs(61)),
                &["--time=2"],
            ),
            (|s| s.resources.nodes = Some(2), &["--nodes=2"]),
            (|s| s.resources.gpus = Some(1), &["--gres=gpu:1"]),
            (
                |s| s.array = Some(ArraySpec::new(3).with_max_parallel(2)),
                &["--array=0-2%2"],
            ),
            (
                |s| s.working_dir = Some("/scratch/run 1".into()),
                &["--chdir=/w/jobs/key-1"],
            ),
        ];
        let always = [
            "--job-name=name",
            "--comment=key-1",
            "--output=/w/jobs/key-1/wrapper.log",
            "--open-mode=append",
        ];
        for (edit, expected) in cases {
            let mut spec = spec();
            edit(&mut spec);
            let options =
                sbatch_options(&spec, &SubmitDefaults::default(), "/w/jobs/key-1").unwrap();
            for option in expected.iter().chain(&always) {
                assert!(
                    options.iter().any(|o| o == option),
                    "{option} missing from {options:?}"
                );
            }
            let chdir = options.iter().filter(|o| o.starts_with("--chdir=")).count();
            assert_eq!(chdir, 1, "{options:?}");
        }
    }

    #[test]
    fn defaults_apply_unless_the_spec_decides() {
        let mut defaults = SubmitDefaults::default();
        defaults.queue = Some("batch".into());
        defaults.account = Some("lab".into());
        let options = sbatch_options(&spec(), &defaults, "/w").unwrap();
        assert!(options.contains(&"--partition=batch".to_owned()));
        assert!(options.contains(&"--account=lab".to_owned()));
        assert!(
            options.contains(&"--chdir=/w".to_owned()),
            "SLURM starts the batch script in the job dir"
        );
        let mut own = spec();
        own.queue = Some("gpu".into());
        let options = sbatch_options(&own, &defaults, "/w").unwrap();
        assert!(options.contains(&"--partition=gpu".to_owned()));
        assert!(!options.contains(&"--partition=batch".to_owned()));
    }

    #[test]
    fn the_jobs_own_account_wins_over_the_default() {
        let mut defaults = SubmitDefaults::default();
        defaults.account = Some("site".into());
        let mut spec = spec();
        let accounts = |spec: &JobSpec| -> Vec<String> {
            let options = sbatch_options(spec, &defaults, "/w").unwrap();
            options
                .into_iter()
                .filter(|o| o.starts_with("--account") || o.starts_with("-A"))
                .collect()
        };
        assert_eq!(accounts(&spec), ["--account=site"]);
        for own in ["--account=mine", "-Amine"] {
            spec.passthrough.insert("slurm".into(), vec![own.into()]);
            assert_eq!(accounts(&spec), [own]);
        }
    }

    #[test]
    fn passthrough_options_come_first_and_must_be_options() {
        let mut spec = spec();
        spec.passthrough.insert(
            "slurm".into(),
            vec!["--qos=high".into(), "--comment=mine".into()],
        );
        spec.passthrough
            .insert("htcondor".into(), vec!["+Group = \"x\"".into()]);
        let options = sbatch_options(&spec, &SubmitDefaults::default(), "/w").unwrap();
        assert_eq!(&options[..2], ["--qos=high", "--comment=mine"]);
        assert_eq!(
            options
                .iter()
                .rfind(|o| o.starts_with("--comment="))
                .unwrap(),
            "--comment=key-1",
            "ours comes last and wins"
        );
        assert!(
            !options.iter().any(|o| o.contains("Group")),
            "other backends' options are not ours"
        );

        spec.passthrough
            .insert("slurm".into(), vec!["/tmp/other-script.sh".into()]);
        let err = sbatch_options(&spec, &SubmitDefaults::default(), "/w").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
        assert!(err.message().contains("--name=value"), "{err}");
    }

    #[test]
    fn passthrough_options_that_change_what_sbatch_does_are_refused() {
        let cases: &[(&str, Option<&str>)] = &[
            ("--qos=high", None),
            ("--comment=$(touch /tmp/x)", None),
            ("--export=ALL,X='; touch y'", None),
            ("--wait-all-nodes=1", None),
            ("--begin=now+1hour", None),
            ("-Jname; touch x", None),
            ("-pdebug", None),
            ("-H", None),
            ("-k", None),
            ("--wrap=touch /tmp/x", Some("is sbatch's --wrap")),
            ("--wra=touch /tmp/x", Some("is sbatch's --wrap")),
            ("--test-only", Some("is sbatch's --test-only")),
            ("--test", Some("is sbatch's --test-only")),
            ("--quiet", Some("is sbatch's --quiet")),
            ("-Q", Some("is sbatch's --quiet")),
            ("--help", Some("is sbatch's --help")),
            ("-h", Some("is sbatch's --help")),
            ("--usage", Some("is sbatch's --usage")),
            ("--version", Some("is sbatch's --version")),
            ("-V", Some("is sbatch's --version")),
            ("--wait", Some("is sbatch's --wait")),
            ("-W", Some("is sbatch's --wait")),
            ("--array=0-2", Some("is sbatch's --array")),
            ("-a0-2", Some("is sbatch's --array")),
            ("-vQ", Some("combines short options")),
            ("-Hv", Some("combines short options")),
            ("--", Some("would end sbatch's options")),
            ("--=x", Some("would end sbatch's options")),
            ("-", Some("is not an option")),
            ("", Some("is not an option")),
            ("touch /tmp/x", Some("is not an option")),
        ];
        for (option, refusal) in cases {
            let mut spec = spec();
            spec.passthrough
                .insert("slurm".into(), vec![(*option).to_owned()]);
            let result = sbatch_options(&spec, &SubmitDefaults::default(), "/w");
            match (result, refusal) {
                (Ok(options), None) => assert_eq!(options[0], *option),
                (Err(err), Some(words)) => {
                    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{option:?}");
                    assert!(err.message().starts_with("passthrough.slurm: "), "{err}");
                    assert!(err.message().contains(words), "{option:?}: {err}");
                }
                (result, _) => panic!("{option:?}: expected {refusal:?}, got {result:?}"),
            }
        }
    }

    #[test]
    fn a_huge_passthrough_option_is_quoted_only_in_part() {
        let mut spec = spec();
        spec.passthrough
            .insert("slurm".into(), vec![format!("x{}", "y".repeat(1 << 20))]);
        let err = sbatch_options(&spec, &SubmitDefaults::default(), "/w").unwrap_err();
        let limit = 2 * batchbridge_core::error::MAX_QUOTED;
        assert!(err.message().len() < limit, "{} bytes", err.message().len());
    }

    #[test]
    fn batch_script_quotes_the_directory_and_runs_the_script_with_its_output_beside_it() {
        let dir = "/home/o'brien/$(touch x)/key-1";
        let script = batch_script(&spec(), dir).unwrap();
        assert!(script.starts_with("#!/bin/bash\n"));
        let dir_line = script.lines().find(|l| l.starts_with("dir=")).unwrap();
        // A POSIX shell reads the assignment back as one word holding the path verbatim.
        assert_eq!(shlex::split(dir_line).unwrap(), [format!("dir={dir}")]);
        let workdir_line = script.lines().find(|l| l.starts_with("workdir=")).unwrap();
        assert_eq!(
            shlex::split(workdir_line).unwrap(),
            [format!("workdir={dir}")],
            "the job directory is the default working directory"
        );
        let mut elsewhere = spec();
        elsewhere.working_dir = Some("/scratch/it's $(here)".into());
        let script = batch_script(&elsewhere, dir).unwrap();
        let workdir_line = script.lines().find(|l| l.starts_with("workdir=")).unwrap();
        assert_eq!(
            shlex::split(workdir_line).unwrap(),
            ["workdir=/scratch/it's $(here)"]
        );
        assert!(script.contains("enter_working_dir() {"), "{script}");
        assert!(script.contains(&format!(
            "enter_working_dir \"$workdir\" \"$dir/task-$task.reason\" || exit {}",
            batchbridge_core::remote::NOT_STARTED_EXIT_CODE
        )));
        assert!(script.contains("runner=$(command -v bash)"), "{script}");
        assert!(script.contains("exec \"$5\" \"$1\""), "{script}");
        assert!(script.contains(">\"$dir/task-$task.stdout\" 2>\"$dir/task-$task.stderr\""));
        assert!(script.contains("record exit \"$rc\""));
        assert!(
            script.ends_with("exit \"$rc\"\n"),
            "SLURM sees the script's exit code"
        );
        assert!(!script.contains('@'), "a placeholder was left: {script}");
    }
}
