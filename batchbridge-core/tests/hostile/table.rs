//! The cases: one row per hostile input, in the order the report lists them.
//!
//! `CANARY` in a payload is the canary's absolute path, `NAME` its bare name (see
//! [`Ctx::payload`]). `expect` holds for every backend unless `except` says otherwise.

use batchbridge_core::spec::MAX_CPUS;
use batchbridge_core::{ArraySpec, Container, ContainerRuntime, ErrorKind, JobId, JobKey};

use super::{Backend, Check, Ctx, Expect, Input};

/// One hostile input.
pub(crate) struct Case {
    /// The field it attacks.
    pub(crate) field: &'static str,
    /// The input, described for the report.
    pub(crate) input: &'static str,
    /// Builds the input (and what a run must print) for one run.
    pub(crate) build: fn(&Ctx) -> (Input, Check),
    /// What must happen, on every backend `except` does not name.
    pub(crate) expect: Expect,
    /// What must happen instead on particular backends.
    pub(crate) except: &'static [(Backend, Expect)],
}

impl Case {
    pub(crate) fn expect_for(&self, backend: Backend) -> Expect {
        self.except
            .iter()
            .find(|(b, _)| *b == backend)
            .map_or(self.expect, |(_, e)| *e)
    }
}

use Backend::{Htcondor, Local, Pbs, Slurm};
use ErrorKind::{InvalidInput, NotFound, Rejected, Unsupported};
use Expect::{Fails, NoError, Queued, Refused, Skip, Succeeds, Unknown};

const MIB: usize = 1 << 20;
const NOT_SLURM: &[(Backend, Expect)] = &[
    (Local, Skip("a SLURM cluster default")),
    (Htcondor, Skip("a SLURM cluster default")),
    (Pbs, Skip("a SLURM cluster default")),
];
/// What each backend does with a passthrough entry meant for SLURM that SLURM refuses:
/// the others never read it.
const ONLY_SLURM_READS_IT: &[(Backend, Expect)] =
    &[(Local, Succeeds), (Htcondor, Succeeds), (Pbs, Succeeds)];

fn key(text: String) -> (Input, Check) {
    match JobKey::new(text) {
        Err(err) => (Input::Invalid(err), Check::Any),
        Ok(key) => panic!("{key} is a valid key"),
    }
}

fn named(c: &Ctx, name: String) -> (Input, Check) {
    c.ok_with(|s| s.name = name)
}

fn script(c: &Ctx, script: &str, stdout: &[u8]) -> (Input, Check) {
    (Input::Spec(c.spec(script)), Check::Exact(stdout.to_vec()))
}

fn working_dir(c: &Ctx, dir: String) -> (Input, Check) {
    c.ok_with(|s| s.working_dir = Some(dir))
}

fn queue(c: &Ctx, queue: String) -> (Input, Check) {
    c.ok_with(|s| s.queue = Some(queue))
}

fn container(c: &Ctx, image: String) -> (Input, Check) {
    let (input, _) = c.ok_with(|s| {
        s.container = Some(Container::new(image).with_runtime(ContainerRuntime::Apptainer));
    });
    (input, Check::Any)
}

fn account(c: &Ctx, account: String) -> (Input, Check) {
    (
        Input::Account(account, c.spec("echo ok\n")),
        Check::Exact(b"ok\n".to_vec()),
    )
}

const NAME_REFUSED: Expect = Refused(InvalidInput, ": name \"");
const QUEUE_REFUSED: Expect = Refused(InvalidInput, "queue \"");
const ENV_NAME_REFUSED: Expect = Refused(InvalidInput, "a variable name is a letter or '_'");
const KEY_REFUSED: Expect = Refused(InvalidInput, "job key \"");
const WORKDIR_HTCONDOR: (Backend, Expect) = (
    Htcondor,
    Refused(InvalidInput, "HTCondor needs an absolute path"),
);

pub(crate) static CASES: &[Case] = &[
    // The job key: tokens only, refused on construction (and on deserialization).
    Case {
        field: "job key",
        input: "`k; touch CANARY`",
        build: |c| key(c.payload("k; touch CANARY")),
        expect: KEY_REFUSED,
        except: &[],
    },
    Case {
        field: "job key",
        input: "`$(touch CANARY)`",
        build: |c| key(c.payload("$(touch CANARY)")),
        expect: KEY_REFUSED,
        except: &[],
    },
    Case {
        field: "job key",
        input: "`../../../tmp/NAME` (path traversal)",
        build: |c| key(c.payload("../../../tmp/NAME")),
        expect: KEY_REFUSED,
        except: &[],
    },
    Case {
        field: "job key",
        input: "`k` newline `touch CANARY`",
        build: |c| key(c.payload("k\ntouch CANARY")),
        expect: KEY_REFUSED,
        except: &[],
    },
    Case {
        field: "job key",
        input: "1 MiB of `k`",
        build: |_| key("k".repeat(MIB)),
        expect: KEY_REFUSED,
        except: &[],
    },
    Case {
        field: "job key",
        input: "``k`touch CANARY` `` through `TryFrom<String>` (what deserializing a spec uses)",
        build: |c| match JobKey::try_from(c.payload("k`touch CANARY`")) {
            Err(err) => (Input::Invalid(err), Check::Any),
            Ok(key) => panic!("{key} is a valid key"),
        },
        expect: KEY_REFUSED,
        except: &[],
    },
    // The job name: a token shown by the scheduler.
    Case {
        field: "job name",
        input: "`x$(touch CANARY)`",
        build: |c| named(c, c.payload("x$(touch CANARY)")),
        expect: NAME_REFUSED,
        except: &[],
    },
    Case {
        field: "job name",
        input: "``x`touch CANARY` ``",
        build: |c| named(c, c.payload("x`touch CANARY`")),
        expect: NAME_REFUSED,
        except: &[],
    },
    Case {
        field: "job name",
        input: "`x; touch CANARY`",
        build: |c| named(c, c.payload("x; touch CANARY")),
        expect: NAME_REFUSED,
        except: &[],
    },
    Case {
        field: "job name",
        input: "`x' ; touch CANARY ; echo '`",
        build: |c| named(c, c.payload("x' ; touch CANARY ; echo '")),
        expect: NAME_REFUSED,
        except: &[],
    },
    Case {
        field: "job name",
        input: "`x` newline `touch CANARY`",
        build: |c| named(c, c.payload("x\ntouch CANARY")),
        expect: NAME_REFUSED,
        except: &[],
    },
    Case {
        field: "job name",
        input: "`--wrap=touch CANARY` (an option)",
        build: |c| named(c, c.payload("--wrap=touch CANARY")),
        expect: NAME_REFUSED,
        except: &[],
    },
    Case {
        field: "job name",
        input: "`x` NUL `y`",
        build: |c| named(c, "x\0y".to_owned()),
        expect: NAME_REFUSED,
        except: &[],
    },
    Case {
        field: "job name",
        input: "1 MiB of `n`",
        build: |c| named(c, "n".repeat(MIB)),
        expect: NAME_REFUSED,
        except: &[],
    },
    Case {
        field: "job name",
        input: "`résumé-ジョブ` (non-ASCII)",
        build: |c| named(c, "résumé-ジョブ".to_owned()),
        expect: NAME_REFUSED,
        except: &[],
    },
    Case {
        field: "job name",
        input: "`invoice` U+202E `fdp.sh` (right-to-left override)",
        build: |c| named(c, "invoice\u{202e}fdp.sh".to_owned()),
        expect: NAME_REFUSED,
        except: &[],
    },
    Case {
        field: "job name",
        input: "`job-🚀` (emoji)",
        build: |c| named(c, "job-🚀".to_owned()),
        expect: NAME_REFUSED,
        except: &[],
    },
    Case {
        field: "job name",
        input: "128 characters of `a.b_c-9` (the limit)",
        build: |c| named(c, "a.b_c-9".repeat(19)[..128].to_owned()),
        expect: Succeeds,
        except: &[],
    },
    // The script is code by design: it must arrive byte for byte, whatever it holds.
    Case {
        field: "script",
        input: "quoted heredoc of quotes, backslashes, `$()`, backticks, globs",
        build: |c| {
            script(
                c,
                "cat <<'EOF'\n'single' \"double\" \\back\\slash $(not run) `not run` ${HOME} ; & | > < * ? ~ ! #\nEOF\n",
                b"'single' \"double\" \\back\\slash $(not run) `not run` ${HOME} ; & | > < * ? ~ ! #\n",
            )
        },
        expect: Succeeds,
        except: &[],
    },
    Case {
        field: "script",
        input: "heredoc whose body holds other heredoc markers",
        build: |c| script(c, "cat <<\"X\"\nEOF\n<<EOF\nX\n", b"EOF\n<<EOF\n"),
        expect: Succeeds,
        except: &[],
    },
    Case {
        field: "script",
        input: "CRLF line endings (`printf '%s\\n' crlf` CR LF)",
        build: |c| script(c, "printf '%s\\n' crlf\r\n", b"crlf\r\n"),
        expect: Succeeds,
        except: &[],
    },
    Case {
        field: "script",
        input: "non-ASCII, RTL override, emoji printed",
        build: |c| {
            script(
                c,
                "printf '%s\\n' 'ünï \u{202e}RTL\u{202c} 🚀 日本'\n",
                "ünï \u{202e}RTL\u{202c} 🚀 日本\n".as_bytes(),
            )
        },
        expect: Succeeds,
        except: &[],
    },
    Case {
        field: "script",
        input: "one line of 1 MiB (`echo xxx…`)",
        build: |c| {
            let line = "x".repeat(MIB);
            let mut stdout = line.clone().into_bytes();
            stdout.push(b'\n');
            script(c, &format!("echo {line}\n"), &stdout)
        },
        expect: Succeeds,
        except: &[],
    },
    Case {
        field: "script",
        input: "8 MiB script (100 000 comment lines, then `echo end`)",
        build: |c| {
            let mut text = format!("# {}\n", "y".repeat(81)).repeat(100_000);
            text.push_str("echo end\n");
            script(c, &text, b"end\n")
        },
        expect: Succeeds,
        except: &[],
    },
    Case {
        field: "script",
        input: "no final newline (`printf done`)",
        build: |c| script(c, "printf done", b"done"),
        expect: Succeeds,
        except: &[],
    },
    Case {
        field: "script",
        input: "reads stdin (`cat; echo end`): the submit's stdin must not leak in",
        build: |c| script(c, "cat\necho end\n", b"end\n"),
        expect: Succeeds,
        except: &[],
    },
    Case {
        field: "script",
        input: "NUL byte",
        build: |c| (Input::Spec(c.spec("echo a\0b\n")), Check::Any),
        expect: Refused(InvalidInput, "script: must not contain NUL bytes"),
        except: &[],
    },
    Case {
        field: "script",
        input: "only blanks",
        build: |c| (Input::Spec(c.spec(" \n\t\r\n")), Check::Any),
        expect: Refused(InvalidInput, "script: must not be empty"),
        except: &[],
    },
    Case {
        field: "script (positive control)",
        input: "`touch CONTROL`: scripts run, and the canary search must find this file",
        build: |c| script(c, &format!("touch '{}'\necho ok\n", c.control), b"ok\n"),
        expect: Succeeds,
        except: &[],
    },
    // Output: bytes, not text; large outputs are read in bounded windows.
    Case {
        field: "stdout",
        input: "non-UTF-8 bytes `ff fe 80`",
        build: |c| script(c, "printf '\\377\\376\\200ok\\n'\n", b"\xff\xfe\x80ok\n"),
        expect: Succeeds,
        except: &[],
    },
    Case {
        field: "stdout",
        input: "NUL bytes (`printf 'a\\0b\\0'`)",
        build: |c| script(c, "printf 'a\\0b\\0'\n", b"a\0b\0"),
        expect: Succeeds,
        except: &[],
    },
    Case {
        field: "stdout",
        input: "100 MB (`head -c 100000000 /dev/zero`)",
        build: |c| {
            (
                Input::Spec(c.spec("head -c 100000000 /dev/zero\n")),
                Check::Large(100_000_000),
            )
        },
        expect: Succeeds,
        except: &[],
    },
    // Environment values: quoted, never evaluated, printed back byte for byte.
    Case {
        field: "environment value",
        input: "`$(touch CANARY)`",
        build: |c| c.printing_env("V", c.payload("$(touch CANARY)")),
        expect: Succeeds,
        except: &[],
    },
    Case {
        field: "environment value",
        input: "``touch CANARY`` in backticks",
        build: |c| c.printing_env("V", c.payload("`touch CANARY`")),
        expect: Succeeds,
        except: &[],
    },
    Case {
        field: "environment value",
        input: "`'; touch CANARY; echo '`",
        build: |c| c.printing_env("V", c.payload("'; touch CANARY; echo '")),
        expect: Succeeds,
        except: &[],
    },
    Case {
        field: "environment value",
        input: "`\"; touch CANARY; echo \"`",
        build: |c| c.printing_env("V", c.payload("\"; touch CANARY; echo \"")),
        expect: Succeeds,
        except: &[],
    },
    Case {
        field: "environment value",
        input: "newline `touch CANARY` newline",
        build: |c| c.printing_env("V", c.payload("\ntouch CANARY\n")),
        expect: Succeeds,
        except: &[],
    },
    Case {
        field: "environment value",
        input: "CR LF `; touch NAME` CR LF",
        build: |c| c.printing_env("V", c.payload("\r\n; touch NAME\r\n")),
        expect: Succeeds,
        except: &[],
    },
    Case {
        field: "environment value",
        input: "`${IFS}$((1+1)) !! * ~ $HOME %j %x \\` (expansions, SLURM patterns, trailing backslash)",
        build: |c| c.printing_env("V", "${IFS}$((1+1)) !! * ~ $HOME %j %x \\".to_owned()),
        expect: Succeeds,
        except: &[],
    },
    Case {
        field: "environment value",
        input: "non-ASCII, RTL override, emoji",
        build: |c| c.printing_env("V", "ünï \u{202e}gnp.exe 🚀 日本".to_owned()),
        expect: Succeeds,
        except: &[],
    },
    Case {
        field: "environment value",
        input: "every control character but NUL (0x01–0x1f, 0x7f)",
        build: |c| {
            let mut value: String = (1u8..0x20).map(char::from).collect();
            value.push('\u{7f}');
            c.printing_env("V", value)
        },
        expect: Succeeds,
        except: &[],
    },
    Case {
        field: "environment value",
        input: "`--wrap=touch CANARY` (an option)",
        build: |c| c.printing_env("V", c.payload("--wrap=touch CANARY")),
        expect: Succeeds,
        except: &[],
    },
    Case {
        field: "environment value",
        input: "60 000 bytes of `$(touch CANARY);`",
        build: |c| {
            let unit = c.payload("$(touch CANARY);");
            let value: String = unit.repeat(60_000 / unit.len() + 1)[..60_000].to_owned();
            c.printing_env("V", value)
        },
        expect: Succeeds,
        except: &[],
    },
    Case {
        field: "environment value",
        input: "18 000 bytes of `'$` (the worst case for quoting: 3.3× in env.sh, 6.3× on the command line)",
        build: |c| c.printing_env("V", "'$".repeat(9_000)),
        expect: Succeeds,
        except: &[],
    },
    Case {
        field: "environment value",
        input: "22 000 bytes of `'$` (71 500 once quoted)",
        build: |c| c.printing_env("V", "'$".repeat(11_000)),
        expect: Refused(InvalidInput, "bytes once quoted, more than the 65536"),
        except: &[(Local, Succeeds)],
    },
    Case {
        field: "environment value",
        input: "1 MiB",
        build: |c| c.printing_env("V", "v".repeat(MIB)),
        expect: Refused(
            InvalidInput,
            "environment \"V\": NAME=VALUE is 1048578 bytes",
        ),
        except: &[],
    },
    Case {
        field: "environment value",
        input: "`a` NUL `b`",
        build: |c| c.printing_env("V", "a\0b".to_owned()),
        expect: Refused(InvalidInput, "the value must not contain NUL bytes"),
        except: &[],
    },
    Case {
        field: "environment value",
        input: "500 variables, each `'$(touch CANARY)\"`",
        build: |c| {
            let mut spec = c.spec("compgen -e | grep -c '^H_'\n");
            for i in 0..500 {
                spec.environment
                    .insert(format!("H_{i}"), c.payload("'$(touch CANARY)\""));
            }
            (Input::Spec(spec), Check::Exact(b"500\n".to_vec()))
        },
        expect: Succeeds,
        except: &[],
    },
    // Environment names: a letter or `_`, then letters, digits and `_`.
    Case {
        field: "environment name",
        input: "`A;touch CANARY`",
        build: |c| c.printing_env(&c.payload("A;touch CANARY"), "v".to_owned()),
        expect: ENV_NAME_REFUSED,
        except: &[],
    },
    Case {
        field: "environment name",
        input: "`$(touch CANARY)`",
        build: |c| c.printing_env(&c.payload("$(touch CANARY)"), "v".to_owned()),
        expect: ENV_NAME_REFUSED,
        except: &[],
    },
    Case {
        field: "environment name",
        input: "`A=B`",
        build: |c| c.printing_env("A=B", "v".to_owned()),
        expect: ENV_NAME_REFUSED,
        except: &[],
    },
    Case {
        field: "environment name",
        input: "`A` newline `touch CANARY`",
        build: |c| c.printing_env(&c.payload("A\ntouch CANARY"), "v".to_owned()),
        expect: ENV_NAME_REFUSED,
        except: &[],
    },
    Case {
        field: "environment name",
        input: "`ÜBER` (non-ASCII)",
        build: |c| c.printing_env("ÜBER", "v".to_owned()),
        expect: ENV_NAME_REFUSED,
        except: &[],
    },
    Case {
        field: "environment name",
        input: "1 MiB of `A`, value with a NUL (the message must stay short)",
        build: |c| c.printing_env(&"A".repeat(MIB), "a\0b".to_owned()),
        expect: Refused(InvalidInput, "the value must not contain NUL bytes"),
        except: &[],
    },
    Case {
        field: "environment name",
        input: "`dir` (a variable of the job wrapper) = `/tmp; touch CANARY`",
        build: |c| c.printing_env("dir", c.payload("/tmp; touch CANARY")),
        expect: Succeeds,
        except: &[],
    },
    Case {
        field: "environment name",
        input: "`BATCHBRIDGE_TASK_INDEX` = `$(touch CANARY)` (the wrapper's value wins)",
        build: |c| {
            let mut spec = c.spec("printf '%s' \"$BATCHBRIDGE_TASK_INDEX\"\n");
            spec.environment.insert(
                "BATCHBRIDGE_TASK_INDEX".into(),
                c.payload("$(touch CANARY)"),
            );
            (Input::Spec(spec), Check::Exact(b"0".to_vec()))
        },
        expect: Succeeds,
        except: &[],
    },
    Case {
        field: "environment name",
        input: "`UID` (read-only in bash)",
        build: |c| c.printing_env("UID", "0".to_owned()),
        expect: Fails("UID: readonly variable"),
        // Their job wrappers source env.sh in sh (dash), where UID is an ordinary name.
        except: &[(Htcondor, Succeeds), (Pbs, Succeeds)],
    },
    // The working directory: an absolute path, quoted into the batch script (SLURM), a
    // checked path (HTCondor), an argument of the wrapper (local).
    Case {
        field: "working dir",
        input: "an existing directory named ``it's a \"dir\" $(touch NAME) ; `id` ünï`` U+202E `cod.sh`",
        build: |c| {
            let mut spec = c.spec("pwd\n");
            spec.working_dir = Some(c.hostile_dir.clone());
            let stdout = format!("{}\n", c.hostile_dir).into_bytes();
            (Input::Spec(spec), Check::Exact(stdout))
        },
        expect: Succeeds,
        except: &[WORKDIR_HTCONDOR],
    },
    Case {
        field: "working dir",
        input: "`/tmp/$(touch CANARY)` (does not exist)",
        build: |c| working_dir(c, c.payload("/tmp/$(touch CANARY)")),
        // The job fails before its script runs: never in another directory (SLURM itself
        // would run it in /tmp).
        expect: Fails("cannot enter its working directory"),
        except: &[WORKDIR_HTCONDOR],
    },
    Case {
        field: "working dir",
        input: "`; touch NAME` (relative, does not exist)",
        build: |c| working_dir(c, c.payload("; touch NAME")),
        expect: Refused(InvalidInput, "workingDir: must be an absolute path"),
        except: &[],
    },
    Case {
        field: "working dir",
        input: "`--wrap=touch CANARY` (an option)",
        build: |c| working_dir(c, c.payload("--wrap=touch CANARY")),
        expect: Refused(InvalidInput, "workingDir: must be an absolute path"),
        except: &[],
    },
    Case {
        field: "working dir",
        input: "`/tmp` newline `touch CANARY`",
        build: |c| working_dir(c, c.payload("/tmp\ntouch CANARY")),
        expect: Refused(InvalidInput, "workingDir: must be"),
        except: &[],
    },
    Case {
        field: "working dir",
        input: "`/tmp` NUL `x`",
        build: |c| working_dir(c, "/tmp\0x".to_owned()),
        expect: Refused(InvalidInput, "workingDir: must be"),
        except: &[],
    },
    Case {
        field: "working dir",
        input: "1 MiB path",
        build: |c| working_dir(c, format!("/{}", "d".repeat(MIB))),
        expect: Refused(
            InvalidInput,
            "workingDir: must be an absolute path of at most 4096 bytes",
        ),
        except: &[],
    },
    // The queue or partition: a token (and HTCondor has none).
    Case {
        field: "queue",
        input: "`debug; touch CANARY`",
        build: |c| queue(c, c.payload("debug; touch CANARY")),
        expect: QUEUE_REFUSED,
        except: &[],
    },
    Case {
        field: "queue",
        input: "`$(touch CANARY)`",
        build: |c| queue(c, c.payload("$(touch CANARY)")),
        expect: QUEUE_REFUSED,
        except: &[],
    },
    Case {
        field: "queue",
        input: "`debug` newline `--wrap=touch CANARY`",
        build: |c| queue(c, c.payload("debug\n--wrap=touch CANARY")),
        expect: QUEUE_REFUSED,
        except: &[],
    },
    Case {
        field: "queue",
        input: "1 MiB",
        build: |c| queue(c, "q".repeat(MIB)),
        expect: QUEUE_REFUSED,
        except: &[],
    },
    Case {
        field: "queue",
        input: "`--test-only` (a token that looks like an option)",
        build: |c| queue(c, "--test-only".to_owned()),
        expect: Refused(Rejected, "Invalid partition name specified"),
        except: &[
            (Htcondor, Refused(Unsupported, "HTCondor has no queues")),
            (Local, Succeeds),
            (Pbs, Refused(Rejected, "qsub: Unknown queue")),
        ],
    },
    Case {
        field: "queue",
        input: "`no-such-partition`",
        build: |c| queue(c, "no-such-partition".to_owned()),
        expect: Refused(
            Rejected,
            "on partition \"no-such-partition\": sbatch: error",
        ),
        except: &[
            (Htcondor, Refused(Unsupported, "HTCondor has no queues")),
            (Local, Succeeds),
            (
                Pbs,
                Refused(
                    Rejected,
                    "in queue \"no-such-partition\": qsub: illegally formed destination",
                ),
            ),
        ],
    },
    // The account, a SLURM cluster default.
    Case {
        field: "account (SLURM default)",
        input: "`x; touch CANARY`",
        build: |c| account(c, c.payload("x; touch CANARY")),
        expect: Refused(InvalidInput, "SlurmConfig defaults.account"),
        except: NOT_SLURM,
    },
    Case {
        field: "account (SLURM default)",
        input: "`$(touch${IFS}CANARY)` (one sbatch argument, which SLURM refuses as an unknown account)",
        build: |c| account(c, c.payload("$(touch${IFS}CANARY)")),
        expect: Refused(Rejected, "Invalid account"),
        except: NOT_SLURM,
    },
    Case {
        field: "account (SLURM default)",
        input: "`lab` NUL",
        build: |c| account(c, "lab\0".to_owned()),
        expect: Refused(InvalidInput, "SlurmConfig defaults.account"),
        except: NOT_SLURM,
    },
    // Passthrough options for SLURM: one sbatch argument each, never a shell word.
    Case {
        field: "passthrough.slurm",
        input: "`--comment=$(touch CANARY)` (ours comes later and wins)",
        build: |c| c.passthrough("slurm", c.payload("--comment=$(touch CANARY)")),
        expect: Succeeds,
        except: &[],
    },
    Case {
        field: "passthrough.slurm",
        input: "`--job-name=x'; touch CANARY; echo '`",
        build: |c| c.passthrough("slurm", c.payload("--job-name=x'; touch CANARY; echo '")),
        expect: Succeeds,
        except: &[],
    },
    Case {
        field: "passthrough.slurm",
        input: "`-Jx;touch CANARY` (short option with its value)",
        build: |c| c.passthrough("slurm", c.payload("-Jx;touch CANARY")),
        expect: Succeeds,
        except: &[],
    },
    Case {
        field: "passthrough.slurm",
        input: "`--export=ALL,HOSTILE=$(touch CANARY)`: the job sees the value verbatim",
        build: |c| {
            let value = c.payload("$(touch CANARY)");
            let mut spec = c.spec("printf '%s' \"${HOSTILE-unset}\"\n");
            spec.passthrough.insert(
                "slurm".into(),
                vec![format!("--export=ALL,HOSTILE={value}")],
            );
            let stdout = match c.which {
                Slurm => value.into_bytes(),
                _ => b"unset".to_vec(),
            };
            (Input::Spec(spec), Check::Exact(stdout))
        },
        expect: Succeeds,
        except: &[],
    },
    Case {
        field: "passthrough.slurm",
        input: "`touch CANARY` (not an option)",
        build: |c| c.passthrough("slurm", c.payload("touch CANARY")),
        expect: Refused(InvalidInput, "is not an option"),
        except: ONLY_SLURM_READS_IT,
    },
    Case {
        field: "passthrough.slurm",
        input: "`--wrap=touch CANARY`",
        build: |c| c.passthrough("slurm", c.payload("--wrap=touch CANARY")),
        expect: Refused(InvalidInput, "is sbatch's --wrap"),
        except: ONLY_SLURM_READS_IT,
    },
    Case {
        field: "passthrough.slurm",
        input: "`--wra=touch CANARY` (getopt abbreviation)",
        build: |c| c.passthrough("slurm", c.payload("--wra=touch CANARY")),
        expect: Refused(InvalidInput, "is sbatch's --wrap"),
        except: ONLY_SLURM_READS_IT,
    },
    Case {
        field: "passthrough.slurm",
        input: "`--test-only` (sbatch would print no job id)",
        build: |c| c.passthrough("slurm", "--test-only".to_owned()),
        expect: Refused(InvalidInput, "is sbatch's --test-only"),
        except: ONLY_SLURM_READS_IT,
    },
    Case {
        field: "passthrough.slurm",
        input: "`--quiet` (the job would run, its id unknown)",
        build: |c| c.passthrough("slurm", "--quiet".to_owned()),
        expect: Refused(InvalidInput, "is sbatch's --quiet"),
        except: ONLY_SLURM_READS_IT,
    },
    Case {
        field: "passthrough.slurm",
        input: "`-vQ` (`-Q` hidden in a cluster of flags)",
        build: |c| c.passthrough("slurm", "-vQ".to_owned()),
        expect: Refused(InvalidInput, "combines short options"),
        except: ONLY_SLURM_READS_IT,
    },
    Case {
        field: "passthrough.slurm",
        input: "`--help`",
        build: |c| c.passthrough("slurm", "--help".to_owned()),
        expect: Refused(InvalidInput, "is sbatch's --help"),
        except: ONLY_SLURM_READS_IT,
    },
    Case {
        field: "passthrough.slurm",
        input: "`--wait` (the submit would block until the job ends)",
        build: |c| c.passthrough("slurm", "--wait".to_owned()),
        expect: Refused(InvalidInput, "is sbatch's --wait"),
        except: ONLY_SLURM_READS_IT,
    },
    Case {
        field: "passthrough.slurm",
        input: "`--array=0-2` (tasks batchbridge would not track)",
        build: |c| c.passthrough("slurm", "--array=0-2".to_owned()),
        expect: Refused(InvalidInput, "is sbatch's --array"),
        except: ONLY_SLURM_READS_IT,
    },
    Case {
        field: "passthrough.slurm",
        input: "`--` (would end sbatch's options)",
        build: |c| c.passthrough("slurm", "--".to_owned()),
        expect: Refused(InvalidInput, "would end sbatch's options"),
        except: ONLY_SLURM_READS_IT,
    },
    Case {
        field: "passthrough.slurm",
        input: "`--qos=normal` newline `--wrap=touch CANARY`",
        build: |c| c.passthrough("slurm", c.payload("--qos=normal\n--wrap=touch CANARY")),
        expect: Refused(
            InvalidInput,
            "passthrough.slurm: options must not contain NUL bytes or newlines",
        ),
        except: &[],
    },
    Case {
        field: "passthrough.slurm",
        input: "`--begin=` + 100 000 × `x` (sbatch echoes it back)",
        build: |c| c.passthrough("slurm", format!("--begin={}", "x".repeat(100_000))),
        expect: Refused(Rejected, "Invalid time specification"),
        except: ONLY_SLURM_READS_IT,
    },
    Case {
        field: "passthrough.slurm",
        input: "`--comment=` + 1 MiB",
        build: |c| c.passthrough("slurm", format!("--comment={}", "c".repeat(MIB))),
        expect: Refused(InvalidInput, "the submit command is"),
        except: ONLY_SLURM_READS_IT,
    },
    // Passthrough submit commands for HTCondor: one `name = value` line each.
    Case {
        field: "passthrough.htcondor",
        input: "`+Hostile = \"$(touch CANARY)\"` (a macro, kept literal)",
        build: |c| c.passthrough("htcondor", c.payload("+Hostile = \"$(touch CANARY)\"")),
        expect: Succeeds,
        except: &[],
    },
    Case {
        field: "passthrough.htcondor",
        input: "`arguments = ; touch CANARY` (the wrapper's arguments)",
        build: |c| c.passthrough("htcondor", c.payload("arguments = ; touch CANARY")),
        expect: Succeeds,
        except: &[],
    },
    Case {
        field: "passthrough.htcondor",
        input: "`include : /usr/bin/touch CANARY |` (a command include)",
        build: |c| c.passthrough("htcondor", c.payload("include : /usr/bin/touch CANARY |")),
        expect: Succeeds,
        except: &[(Htcondor, Refused(InvalidInput, "is not a submit command"))],
    },
    Case {
        field: "passthrough.htcondor",
        input: "`+Hostile = \"a\"; touch CANARY`",
        build: |c| c.passthrough("htcondor", c.payload("+Hostile = \"a\"; touch CANARY")),
        expect: Succeeds,
        except: &[(Htcondor, Refused(Rejected, "Parse error in expression"))],
    },
    Case {
        field: "passthrough.htcondor",
        input: "`environment = \"X=$(touch CANARY)\"`",
        build: |c| c.passthrough("htcondor", c.payload("environment = \"X=$(touch CANARY)\"")),
        expect: Succeeds,
        except: &[(Htcondor, Refused(Rejected, "HTCondor refused job"))],
    },
    Case {
        field: "passthrough.htcondor",
        input: "`queue 100`",
        build: |c| c.passthrough("htcondor", "queue 100".to_owned()),
        expect: Succeeds,
        except: &[(Htcondor, Refused(InvalidInput, "is not a submit command"))],
    },
    Case {
        field: "passthrough.htcondor",
        input: "`request_cpus = 1` newline `queue 100`",
        build: |c| c.passthrough("htcondor", "request_cpus = 1\nqueue 100".to_owned()),
        expect: Refused(
            InvalidInput,
            "passthrough.htcondor: options must not contain NUL bytes or newlines",
        ),
        except: &[],
    },
    Case {
        field: "passthrough.htcondor",
        input: "`My.BatchBridgeKey = \"other\"`",
        build: |c| c.passthrough("htcondor", "My.BatchBridgeKey = \"other\"".to_owned()),
        expect: Succeeds,
        except: &[(
            Htcondor,
            Refused(InvalidInput, "sets a command batchbridge needs for itself"),
        )],
    },
    // Passthrough options for PBS: one qsub option each; those that would lose the job id,
    // the key or the output are refused.
    Case {
        field: "passthrough.pbs",
        input: "`-v BATCHBRIDGE_JOB_KEY=$(touch CANARY)` (the key's variable)",
        build: |c| c.passthrough("pbs", c.payload("-v BATCHBRIDGE_JOB_KEY=$(touch CANARY)")),
        expect: Succeeds,
        except: &[(Pbs, Refused(InvalidInput, "sets job variables"))],
    },
    Case {
        field: "passthrough.pbs",
        input: "`-W block=true` (qsub would wait for the job to end)",
        build: |c| c.passthrough("pbs", "-W block=true".to_owned()),
        expect: Succeeds,
        except: &[(Pbs, Refused(InvalidInput, "makes qsub wait"))],
    },
    Case {
        field: "passthrough.pbs",
        input: "`-zN x;touch CANARY` (a flag hiding the job id, clustered)",
        build: |c| c.passthrough("pbs", c.payload("-zN x;touch CANARY")),
        expect: Succeeds,
        except: &[(
            Pbs,
            Refused(InvalidInput, "keeps qsub from printing the job id"),
        )],
    },
    // Arrays.
    Case {
        field: "array",
        input: "count 0",
        build: |c| c.ok_with(|s| s.array = Some(ArraySpec::new(0))),
        expect: Refused(InvalidInput, "array.count: must be at least 1"),
        except: &[],
    },
    Case {
        field: "array",
        input: "maxParallel 0",
        build: |c| c.ok_with(|s| s.array = Some(ArraySpec::new(2).with_max_parallel(0))),
        expect: Refused(InvalidInput, "array.maxParallel: must be at least 1"),
        except: &[],
    },
    Case {
        field: "array",
        input: "count 4 294 967 295",
        build: |c| c.ok_with(|s| s.array = Some(ArraySpec::new(u32::MAX))),
        expect: Refused(
            InvalidInput,
            "array.count: must be at least 1 and at most 10000",
        ),
        except: &[],
    },
    // Container images: quoted into the batch script (SLURM), one checked word (HTCondor).
    Case {
        field: "container image",
        input: "`docker://x; touch CANARY`",
        build: |c| container(c, c.payload("docker://x; touch CANARY")),
        // The test bed has no apptainer: the wrapper finds none and the script never runs.
        expect: Fails("no apptainer in PATH"),
        except: &[
            (Htcondor, Refused(InvalidInput, "must be one word")),
            (Local, Refused(Unsupported, "does not support containers")),
        ],
    },
    Case {
        field: "container image",
        input: "`$(touch CANARY)`",
        build: |c| container(c, c.payload("$(touch CANARY)")),
        expect: Fails("no apptainer in PATH"),
        except: &[
            (Htcondor, Refused(InvalidInput, "must be one word")),
            (Local, Refused(Unsupported, "does not support containers")),
        ],
    },
    Case {
        field: "container image",
        input: "`img` newline `touch CANARY`",
        build: |c| container(c, c.payload("img\ntouch CANARY")),
        expect: Refused(InvalidInput, "container.image: must be"),
        except: &[],
    },
    // Resources.
    Case {
        field: "resources",
        input: "cpus 0",
        build: |c| c.ok_with(|s| s.resources.cpus = Some(0)),
        expect: Refused(InvalidInput, "resources.cpus: must be at least 1"),
        except: &[],
    },
    Case {
        field: "resources",
        input: "cpus 4 294 967 295",
        build: |c| {
            let (input, _) = c.ok_with(|s| s.resources.cpus = Some(u32::MAX));
            (input, Check::Any)
        },
        expect: Refused(
            InvalidInput,
            "resources.cpus: must be at least 1 and at most 32768",
        ),
        except: &[],
    },
    Case {
        field: "resources",
        input: "cpus 32 768 (the maximum)",
        build: |c| {
            let (input, _) = c.ok_with(|s| s.resources.cpus = Some(MAX_CPUS));
            (input, Check::Any)
        },
        expect: Queued,
        except: &[],
    },
    Case {
        field: "resources",
        input: "wall time `Duration::MAX`",
        build: |c| c.ok_with(|s| s.resources.wall_time = Some(std::time::Duration::MAX)),
        expect: Refused(
            InvalidInput,
            "resources.wallTime: must be at least 1 second and at most 365 days",
        ),
        except: &[],
    },
    // Job ids handed to status, cancel and fetch_output.
    Case {
        field: "job id",
        input: "status of `1; touch CANARY`",
        build: |c| {
            (
                Input::Status(JobId::from(c.payload("1; touch CANARY"))),
                Check::Any,
            )
        },
        expect: Unknown,
        except: &[],
    },
    Case {
        field: "job id",
        input: "status of `$(touch CANARY)` and 1 MiB",
        build: |c| {
            (
                Input::Status(JobId::from(format!(
                    "$(touch {}){}",
                    c.canary,
                    "9".repeat(MIB)
                ))),
                Check::Any,
            )
        },
        expect: Unknown,
        except: &[],
    },
    Case {
        field: "job id",
        input: "cancel `1 && touch CANARY`",
        build: |c| {
            (
                Input::Cancel(JobId::from(c.payload("1 && touch CANARY"))),
                Check::Any,
            )
        },
        expect: Refused(InvalidInput, "is not a"),
        except: &[],
    },
    Case {
        field: "job id",
        input: "cancel `999999999` (a number no job has)",
        build: |_| (Input::Cancel(JobId::from("999999999")), Check::Any),
        expect: NoError,
        except: &[],
    },
    Case {
        field: "job id",
        input: "fetch_output of `999999999` (a number no job has)",
        build: |_| (Input::Fetch(JobId::from("999999999")), Check::Any),
        expect: Refused(NotFound, "has no output here"),
        except: &[(Local, Refused(NotFound, "no local job"))],
    },
    Case {
        field: "job id",
        input: "fetch_output of `../../../etc`",
        build: |_| (Input::Fetch(JobId::from("../../../etc")), Check::Any),
        expect: Refused(InvalidInput, "is not a"),
        except: &[],
    },
    Case {
        field: "job id",
        input: "fetch_output of `1;touch CANARY`",
        build: |c| {
            (
                Input::Fetch(JobId::from(c.payload("1;touch CANARY"))),
                Check::Any,
            )
        },
        expect: Refused(InvalidInput, "is not a"),
        except: &[],
    },
];
