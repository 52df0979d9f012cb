use std::time::Duration;

use batchbridge_core::ArraySpec;
use batchbridge_core::bytesize::ByteSize;

use super::*;

fn spec_of(script: &str) -> JobSpec {
    JobSpec::new(JobKey::new("k").unwrap(), "", script)
}

/// The fates of one directive line's options, and the spec they leave.
fn applied(line: &str) -> (Vec<Fate>, JobSpec) {
    let script = format!("#!/bin/bash\n{line}\necho hi\n");
    let (spec, report) = apply_directives(spec_of(&script));
    (report.lines.into_iter().map(|l| l.fate).collect(), spec)
}

fn taken(field: SpecField) -> Fate {
    Fate::Taken { field }
}

fn passed(option: &str) -> Fate {
    Fate::Passed {
        options: vec![option.to_owned()],
    }
}

/// What becomes of each directive on its own: the table the crate README shows, read the
/// way sbatch reads its options (`man sbatch`: long options with `=` or a separate value,
/// short ones with the value attached or separate, getopt's abbreviations).
#[test]
fn each_directive_has_its_fate() {
    use SpecField::*;
    type Check = fn(&JobSpec) -> bool;
    let cases: &[(&str, Fate, Check)] = &[
        ("#SBATCH --time=1", taken(WallTime), |s| {
            s.resources.wall_time == Some(Duration::from_secs(60))
        }),
        ("#SBATCH -t 1-02:00:00", taken(WallTime), |s| {
            s.resources.wall_time == Some(Duration::from_secs(26 * 3600))
        }),
        ("#SBATCH --time 30:00", taken(WallTime), |s| {
            s.resources.wall_time == Some(Duration::from_secs(1800))
        }),
        ("#SBATCH -t5", taken(WallTime), |s| {
            s.resources.wall_time == Some(Duration::from_secs(300))
        }),
        ("#SBATCH -p single", taken(Queue), |s| {
            s.queue.as_deref() == Some("single")
        }),
        ("#SBATCH --partition=debug", taken(Queue), |s| {
            s.queue.as_deref() == Some("debug")
        }),
        ("#SBATCH --part=debug", taken(Queue), |s| {
            s.queue.as_deref() == Some("debug")
        }),
        ("#SBATCH --mem=100M", taken(Memory), |s| {
            s.resources.memory == Some(ByteSize::mib(100))
        }),
        ("#SBATCH --mem 4G", taken(Memory), |s| {
            s.resources.memory == Some(ByteSize::gib(4))
        }),
        ("#SBATCH --mem=2000", taken(Memory), |s| {
            s.resources.memory == Some(ByteSize::mib(2000))
        }),
        ("#SBATCH --tmp=10G", taken(Disk), |s| {
            s.resources.disk == Some(ByteSize::gib(10))
        }),
        ("#SBATCH -c 4", taken(Cpus), |s| s.resources.cpus == Some(4)),
        ("#SBATCH --cpus-per-task=8", taken(Cpus), |s| {
            s.resources.cpus == Some(8)
        }),
        ("#SBATCH -N2", taken(Nodes), |s| {
            s.resources.nodes == Some(2)
        }),
        ("#SBATCH --nodes=1-3", passed("--nodes=1-3"), |s| {
            s.resources.nodes.is_none()
        }),
        ("#SBATCH --gpus=2", taken(Gpus), |s| {
            s.resources.gpus == Some(2)
        }),
        ("#SBATCH -G 1", taken(Gpus), |s| s.resources.gpus == Some(1)),
        ("#SBATCH --gres=gpu:3", taken(Gpus), |s| {
            s.resources.gpus == Some(3)
        }),
        (
            "#SBATCH --gres=gpu:a100:2",
            passed("--gres=gpu:a100:2"),
            |s| s.resources.gpus.is_none(),
        ),
        ("#SBATCH --gpus=a100:2", passed("--gpus=a100:2"), |s| {
            s.resources.gpus.is_none()
        }),
        ("#SBATCH -J my-job", taken(Name), |s| s.name == "my-job"),
        ("#SBATCH --job-name=\"sweep.1\"", taken(Name), |s| {
            s.name == "sweep.1"
        }),
        ("#SBATCH --array=0-9%2", taken(Array), |s| {
            s.array == Some(ArraySpec::new(10).with_max_parallel(2))
        }),
        ("#SBATCH -a 0-3", taken(Array), |s| {
            s.array == Some(ArraySpec::new(4))
        }),
        ("#SBATCH --export=A=1,B=two", taken(Environment), |s| {
            s.environment.get("A").map(String::as_str) == Some("1")
                && s.environment.get("B").map(String::as_str) == Some("two")
        }),
        ("#SBATCH --export=ALL,MODE=fast", taken(Environment), |s| {
            s.environment.len() == 1
        }),
        ("#SBATCH -D /scratch/me", taken(WorkingDir), |s| {
            s.working_dir.as_deref() == Some("/scratch/me")
        }),
        ("#SBATCH --chdir=/tmp", taken(WorkingDir), |s| {
            s.working_dir.as_deref() == Some("/tmp")
        }),
        ("#SBATCH -A physics", passed("--account=physics"), |s| {
            s.passthrough["slurm"] == ["--account=physics"]
        }),
        ("#SBATCH --qos=normal", passed("--qos=normal"), |_| true),
        ("#SBATCH -q normal", passed("--qos=normal"), |_| true),
        (
            "#SBATCH --constraint=\"intel&ib\"",
            passed("--constraint=intel&ib"),
            |_| true,
        ),
        (
            "#SBATCH --mail-type=END,FAIL",
            passed("--mail-type=END,FAIL"),
            |_| true,
        ),
        (
            "#SBATCH --mail-user me@example.org",
            passed("--mail-user=me@example.org"),
            |_| true,
        ),
        ("#SBATCH --exclusive", passed("--exclusive"), |_| true),
        ("#SBATCH -H", passed("--hold"), |_| true),
        ("#SBATCH --requeue", passed("--requeue"), |_| true),
        ("#SBATCH -n 4", passed("--ntasks=4"), |_| true),
        (
            "#SBATCH --ntasks-per-node=2",
            passed("--ntasks-per-node=2"),
            |_| true,
        ),
        (
            "#SBATCH --mem-per-cpu=2G",
            passed("--mem-per-cpu=2G"),
            |_| true,
        ),
        (
            "#SBATCH -d afterok:12",
            passed("--dependency=afterok:12"),
            |_| true,
        ),
        (
            "#SBATCH --signal=B:USR1@60",
            passed("--signal=B:USR1@60"),
            |_| true,
        ),
        (
            "#SBATCH --reservation=maint",
            passed("--reservation=maint"),
            |_| true,
        ),
        (
            "#SBATCH --begin=now+1hour",
            passed("--begin=now+1hour"),
            |_| true,
        ),
        ("#SBATCH --time-min=10", passed("--time-min=10"), |_| true),
        (
            "#SBATCH --some-future-option=1",
            passed("--some-future-option=1"),
            |_| true,
        ),
        ("#SBATCH --export=ALL", ignored(), |s| {
            s.environment.is_empty()
        }),
        ("#SBATCH --export=HOME,PATH", ignored(), |s| {
            s.environment.is_empty()
        }),
        ("#SBATCH --ignore-pbs", ignored(), |_| true),
    ];
    for (line, expected, check) in cases {
        let (fates, spec) = applied(line);
        let fate = fates.first().cloned().expect("a fate");
        assert!(same_kind(&fate, expected), "{line}: {fate:?}");
        assert!(check(&spec), "{line}: {spec:?}");
        assert!(fates.len() <= 1, "{line}: {fates:?}");
    }
}

/// Lines that would break what batchbridge relies on, or whose value the spec cannot hold,
/// are refused with a reason naming the trouble; the spec keeps nothing from them.
#[test]
fn refused_directives_say_why() {
    let cases = [
        ("#SBATCH --output=out.txt", "output in its job directory"),
        ("#SBATCH -o out.%j", "output in its job directory"),
        ("#SBATCH -e err.txt", "output in its job directory"),
        ("#SBATCH --error err.txt", "output in its job directory"),
        (
            "#SBATCH --open-mode=truncate",
            "output in its job directory",
        ),
        ("#SBATCH -i in.txt", "no standard input"),
        ("#SBATCH --outp=x", "output in its job directory"),
        (
            "#SBATCH --wrap=\"hostname\"",
            "command line instead of this script",
        ),
        ("#SBATCH --parsable", "--parsable itself"),
        ("#SBATCH -W", "until the job ends"),
        ("#SBATCH --wait", "until the job ends"),
        ("#SBATCH --test-only", "submit nothing"),
        ("#SBATCH --comment=mine", "key in its comment"),
        ("#SBATCH -M other", "another cluster"),
        ("#SBATCH --clusters=other", "another cluster"),
        ("#SBATCH --help", "what sbatch does"),
        ("#SBATCH -Q", "is sbatch's --quiet"),
        ("#SBATCH --export=NONE", "environment sbatch passes on"),
        ("#SBATCH --export=NONE,A=1", "environment sbatch passes on"),
        ("#SBATCH -D relative/dir", "absolute path"),
        ("#SBATCH --time=UNLIMITED", "time \"UNLIMITED\""),
        ("#SBATCH --time=0", "no limit"),
        ("#SBATCH --mem=0", "all of a node's memory"),
        ("#SBATCH --mem=lots", "size \"lots\""),
        ("#SBATCH -c 0", "resources.cpus"),
        ("#SBATCH -c many", "not a count"),
        (
            "#SBATCH --array=1-10",
            "0-9 and use $((BATCHBRIDGE_TASK_INDEX + 1))",
        ),
        ("#SBATCH --array=1,3,5", "lists are not supported"),
        ("#SBATCH -J 'my job'", "name \"my job\""),
        ("#SBATCH -p a,b", "queue \"a,b\""),
        ("#SBATCH --export=1BAD=x", "variable name"),
        ("#SBATCH --job-name=\"unclosed", "quote is not closed"),
        ("#SBATCH stray", "\"stray\" is not an option"),
        ("#SBATCHX -J q", "\"X\" is not an option"),
        ("#SBATCH -J x\\ y", "backslash outside quotes"),
        ("#SBATCH -Z 1", "-Z is not an sbatch option"),
        ("#SBATCH -Hk", "combines short options"),
        ("#SBATCH --me=1G", "ambiguous"),
        ("#SBATCH -- -p x", "ends sbatch's options"),
        ("#SBATCH --time", "--time needs a value"),
    ];
    for (line, said) in cases {
        let (fates, spec) = applied(line);
        match fates.first() {
            Some(Fate::Refused { reason }) => assert!(reason.contains(said), "{line}: {reason}"),
            other => panic!("{line}: {other:?}"),
        }
        let untouched = spec_of(&spec.script);
        assert_eq!(spec, untouched, "{line}");
    }
}

/// A script with many directives, some also given as flags: the flags win and are reported
/// Overridden, a repeated directive's last value wins (sbatch takes the last), every line
/// is in the report in order, and a refused one makes `check` name it.
#[test]
fn a_script_with_many_directives_becomes_one_spec() {
    let script = "#!/bin/bash\n\
                  # set up as on our old cluster\n\
                  #SBATCH --job-name=simulate\n\
                  #SBATCH -p single\n\
                  #SBATCH --time=1\n\
                  #SBATCH --time=2 # the last wins\n\
                  #SBATCH -N 1 -c 2\n\
                  \n\
                  #SBATCH --mem=100M\n\
                  #SBATCH --export=MODE=fast,LEVEL=3\n\
                  #SBATCH --array=0-3%2\n\
                  #SBATCH -A physics --qos=normal\n\
                  #SBATCH --output=sim-%j.out\n\
                  set -e\n\
                  #SBATCH --partition=never-read\n\
                  ./simulate\n";
    let mut spec = spec_of(script);
    spec.resources.cpus = Some(8); // a flag
    spec.environment.insert("LEVEL".into(), "9".into()); // a flag
    let (spec, report) = apply_directives(spec);
    let fates: Vec<(usize, String)> = report
        .lines
        .iter()
        .map(|l| (l.line, l.fate.to_string()))
        .collect();
    let expected: Vec<(usize, String)> = [
        (3, "taken into name"),
        (4, "taken into queue"),
        (5, "overridden: resources.wallTime was set already"),
        (6, "taken into resources.wallTime"),
        (7, "taken into resources.nodes"),
        (7, "overridden: resources.cpus was set already"),
        (9, "taken into resources.memory"),
        (10, "taken into environment"),
        (11, "taken into array"),
        (12, "passed to the scheduler as [\"--account=physics\"]"),
        (12, "passed to the scheduler as [\"--qos=normal\"]"),
        (13, "refused: "),
    ]
    .into_iter()
    .map(|(line, fate)| (line, fate.to_owned()))
    .collect();
    assert_eq!(fates.len(), expected.len(), "{report}");
    for ((line, fate), (want_line, want)) in fates.iter().zip(&expected) {
        assert_eq!(line, want_line, "{report}");
        assert!(fate.starts_with(want.as_str()), "{fate} is not {want}");
    }
    assert_eq!(spec.name, "simulate");
    assert_eq!(spec.queue.as_deref(), Some("single"));
    assert_eq!(spec.resources.wall_time, Some(Duration::from_secs(120)));
    assert_eq!(spec.resources.nodes, Some(1));
    assert_eq!(spec.resources.cpus, Some(8));
    assert_eq!(spec.resources.memory, Some(ByteSize::mib(100)));
    assert_eq!(spec.environment["MODE"], "fast");
    assert_eq!(spec.environment["LEVEL"], "9");
    assert_eq!(spec.array, Some(ArraySpec::new(4).with_max_parallel(2)));
    assert_eq!(
        spec.passthrough["slurm"],
        ["--account=physics", "--qos=normal"]
    );
    let err = report.check().unwrap_err();
    assert!(
        err.message()
            .starts_with("line 13: #SBATCH --output=sim-%j.out: "),
        "{err}"
    );
}

/// A working directory given for the job wins over the same `--chdir` and refuses another.
#[test]
fn an_explicit_working_directory_meets_chdir() {
    let script = "#SBATCH -D /a\n";
    let mut spec = spec_of(script);
    spec.working_dir = Some("/a".into());
    let (_, report) = apply_directives(spec);
    assert_eq!(
        report.lines[0].fate,
        Fate::Overridden {
            field: SpecField::WorkingDir
        }
    );

    let mut spec = spec_of(script);
    spec.working_dir = Some("/b".into());
    let (_, report) = apply_directives(spec);
    assert!(matches!(&report.lines[0].fate, Fate::Refused { reason } if reason.contains("\"/b\"")));
}

/// Words as sbatch 22.05 and 24.11 split them, each case checked with `sbatch --hold` and the
/// `JobName` `scontrol show job` showed for `#SBATCH -J …`.
#[test]
fn words_split_as_sbatch_splits_them() {
    let cases: &[(&str, &[&str])] = &[
        (" -p a", &["-p", "a"]),
        ("\t-J tab", &["-J", "tab"]),
        (" -J 'a b'", &["-J", "a b"]),
        ("\t--job-name=\"a b\"  -t 5", &["--job-name=a b", "-t", "5"]),
        (" -J a\"b c\"d", &["-J", "ab cd"]),
        (" -J \"a\\\"b\"", &["-J", "a\"b"]),
        (" -J \"a#b\"", &["-J", "a#b"]),
        (" -J a # comment", &["-J", "a"]),
        (" -J a#b", &["-J", "a"]),
        (" \"\"", &[""]),
        ("", &[]),
    ];
    for (text, words) in cases {
        assert_eq!(split_words(text).unwrap(), *words, "{text:?}");
    }
    assert!(split_words(" -J 'open").is_err());
    // 22.05 keeps it (and refuses the script), 24.11 escapes: either way not one reading.
    assert!(
        split_words(" -J x\\ y")
            .unwrap_err()
            .contains("backslash outside quotes")
    );
}

fn ignored() -> Fate {
    Fate::Ignored {
        reason: String::new(),
    }
}

/// Whether two fates are of one kind and, but for reasons, equal.
fn same_kind(fate: &Fate, expected: &Fate) -> bool {
    match (fate, expected) {
        (Fate::Ignored { .. }, Fate::Ignored { .. }) => true,
        (Fate::Refused { .. }, Fate::Refused { .. }) => true,
        _ => fate == expected,
    }
}

#[test]
fn the_header_ends_at_the_first_command() {
    // (script, the #SBATCH lines found)
    let cases: &[(&str, &[usize])] = &[
        ("", &[]),
        ("#SBATCH -p a\n", &[1]),
        ("#!/bin/sh\n#SBATCH -p a\n#SBATCH -t 1", &[2, 3]),
        // Blank lines (spaces and tabs too) and comments keep the header open.
        ("#!/bin/sh\n\n \t\n# note\n#SBATCH -p a\n", &[5]),
        // The first command closes it: later directives are comments.
        ("#!/bin/sh\necho hi\n#SBATCH -p a\n", &[]),
        ("#SBATCH -p a\nset -e\n#SBATCH -t 1\n", &[1]),
        // An indented directive is a comment, and keeps the header open.
        ("  #SBATCH -p a\n #\n#SBATCH -t 1\n", &[3]),
        // The prefix's case matters; what follows it is the options, spaced or not.
        ("#sbatch -p a\n#SBATCHX -p a\n#SBATCH\t-t 1\n", &[2, 3]),
        ("#SBATCH\n", &[1]),
        // Other schedulers' directives are comments.
        ("#PBS -q a\n#SBATCH -p a\n", &[2]),
        // CRLF line endings do not hide a directive.
        ("#!/bin/sh\r\n#SBATCH -p a\r\n", &[2]),
    ];
    for (script, expected) in cases {
        let found: Vec<usize> = header_directives(script).iter().map(|d| d.line).collect();
        assert_eq!(&found, expected, "{script:?}");
    }
}
