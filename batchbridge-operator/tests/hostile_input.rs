//! Hostile input through the operator: BatchJobs whose spec fields (environment names and
//! values, queue, working directory, passthrough options, array, container image, the
//! script and its output, the resource's name) carry injection payloads, NUL bytes, huge
//! values, non-UTF-8 output and 100 MB of output, run by an in-process operator against
//! the test bed's API server, SLURM and HTCondor.
//!
//! Each invalid job must be refused by the API server (the CRD's schema and CEL rules) or
//! end Failed with reason SubmitRejected and a message naming the field; each valid one
//! must Succeed with its exact output in status.outputTail. Afterwards the operator must
//! still be running (a plain job succeeds), and no canary file may exist on either cluster
//! or here. The library-level table is `batchbridge-core/tests/hostile/`.
//! Run alone: `cargo test -p batchbridge-operator --test hostile_input -- --nocapture`.

// Helpers panic on purpose: anything unexpected is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use batchbridge_core::shell::{Command, Shell};
use batchbridge_operator::crd::{BatchJob, BatchJobStatus, Phase};
use batchbridge_operator::reason::Reason;
use batchbridge_testbed::{htcondor_shell, login, ssh_facts};
use common::operator::*;
use common::{Cluster, api_error};
use kube::api::{DynamicObject, ListParams, PostParams};
use serde_json::{Value, json};

/// What one run's jobs know.
struct Ctx {
    /// The canary's path in the cluster user's home, unique to the run.
    canary: String,
    /// Where the positive control's script creates a file the canary search must find.
    control: String,
}

/// What must become of a BatchJob.
#[derive(Clone, Copy)]
enum Expect {
    /// The API server refuses to create it (422), its message containing these words.
    ApiRejects(&'static str),
    /// The API server takes it and the job ends Failed with reason SubmitRejected, the
    /// message containing these words.
    SubmitRejected(&'static str),
    /// Either of the two (for input whose fate at the API server is not ours to decide).
    ApiRejectsOrSubmitRejected(&'static str, &'static str),
    /// The job Succeeds with this outputTail.
    Succeeds(fn(&Ctx) -> String),
    /// The job Fails with this reason.
    Fails(Reason),
}

struct Case {
    /// The BatchJob's name.
    name: &'static str,
    field: &'static str,
    input: &'static str,
    /// The spec, as JSON (`CANARY` is replaced by the job's canary path).
    spec: fn(&Ctx) -> Value,
    expect: Expect,
}

fn slurm_job(script: &str, extra: Value) -> Value {
    let mut spec = json!({"clusterRef": {"name": "slurm"}, "script": script});
    if let (Value::Object(spec), Value::Object(extra)) = (&mut spec, extra) {
        spec.extend(extra);
    }
    spec
}

const PRINT_V: &str = "printf '%s' \"$V\"\n";

fn hostile_value(c: &Ctx) -> String {
    format!(
        "$(touch {0}) `touch {0}` '; touch {0}; echo ' \"; touch {0}; echo \" \n touch {0} \r\n",
        c.canary
    )
}

static CASES: &[Case] = &[
    Case {
        name: "env-injection",
        field: "environment value",
        input: "`$(touch CANARY)`, backticks, `'; …; '`, `\"; …; \"`, newline, CR LF",
        spec: |c| slurm_job(PRINT_V, json!({"environment": {"V": hostile_value(c)}})),
        expect: Expect::Succeeds(hostile_value),
    },
    Case {
        name: "env-unicode",
        field: "environment value",
        input: "non-ASCII, RTL override, emoji, control characters",
        spec: |_| {
            slurm_job(
                PRINT_V,
                json!({"environment": {"V": "ünï \u{202e}gnp.exe 🚀 \u{1}\u{1b}[31m"}}),
            )
        },
        expect: Expect::Succeeds(|_| "ünï \u{202e}gnp.exe 🚀 \u{1}\u{1b}[31m".to_owned()),
    },
    Case {
        name: "env-wrapper-variable",
        field: "environment name",
        input: "`dir` (the wrapper's own variable) = `/tmp; touch CANARY`",
        spec: |c| {
            slurm_job(
                "printf '%s' \"$dir\"\n",
                json!({"environment": {"dir": format!("/tmp; touch {}", c.canary)}}),
            )
        },
        expect: Expect::Succeeds(|c| format!("/tmp; touch {}", c.canary)),
    },
    Case {
        name: "env-name-injection",
        field: "environment name",
        input: "`A;touch CANARY`",
        spec: |c| {
            slurm_job(
                PRINT_V,
                json!({"environment": {format!("A;touch {}", c.canary): "v"}}),
            )
        },
        expect: Expect::ApiRejects("environment variable names must be a letter or '_'"),
    },
    Case {
        name: "env-nul",
        field: "environment value",
        input: "`a` NUL `b`",
        spec: |_| slurm_job(PRINT_V, json!({"environment": {"V": "a\u{0}b"}})),
        expect: Expect::ApiRejectsOrSubmitRejected(
            "",
            "environment \"V\": the value must not contain NUL bytes",
        ),
    },
    Case {
        name: "env-huge",
        field: "environment value",
        input: "200 000 bytes",
        spec: |_| slurm_job(PRINT_V, json!({"environment": {"V": "v".repeat(200_000)}})),
        expect: Expect::SubmitRejected("environment \"V\": NAME=VALUE is 200002 bytes"),
    },
    Case {
        name: "queue-injection",
        field: "queue",
        input: "`debug; touch CANARY`",
        spec: |c| {
            slurm_job(
                "echo ok\n",
                json!({"queue": format!("debug; touch {}", c.canary)}),
            )
        },
        expect: Expect::ApiRejects("spec.queue"),
    },
    Case {
        name: "queue-unknown",
        field: "queue",
        input: "`no-such-partition`",
        spec: |_| slurm_job("echo ok\n", json!({"queue": "no-such-partition"})),
        expect: Expect::SubmitRejected(
            "on partition \"no-such-partition\": sbatch: error: invalid partition specified",
        ),
    },
    Case {
        name: "workdir-injection",
        field: "working dir",
        input: "`/tmp/$(touch CANARY)` (missing: the job fails before its script runs)",
        spec: |c| {
            slurm_job(
                "echo ok\n",
                json!({"workingDir": format!("/tmp/$(touch {})", c.canary)}),
            )
        },
        expect: Expect::Fails(Reason::NotStarted),
    },
    Case {
        name: "workdir-newline",
        field: "working dir",
        input: "`/tmp` newline `touch CANARY`",
        spec: |c| {
            slurm_job(
                "echo ok\n",
                json!({"workingDir": format!("/tmp\ntouch {}", c.canary)}),
            )
        },
        expect: Expect::SubmitRejected("workingDir: must be an absolute path"),
    },
    Case {
        name: "passthrough-verbatim",
        field: "passthrough.slurm",
        input: "`--comment=$(touch CANARY)`, `--job-name=x'; touch CANARY; echo '` (ours win)",
        spec: |c| {
            slurm_job(
                "echo ok\n",
                json!({"passthrough": {"slurm": [
                    format!("--comment=$(touch {})", c.canary),
                    format!("--job-name=x'; touch {}; echo '", c.canary),
                ]}}),
            )
        },
        expect: Expect::Succeeds(|_| "ok\n".to_owned()),
    },
    Case {
        name: "passthrough-wrap",
        field: "passthrough.slurm",
        input: "`--wrap=touch CANARY`",
        spec: |c| {
            slurm_job(
                "echo ok\n",
                json!({"passthrough": {"slurm": [format!("--wrap=touch {}", c.canary)]}}),
            )
        },
        expect: Expect::SubmitRejected("passthrough.slurm: \"--wrap=touch"),
    },
    Case {
        name: "passthrough-quiet",
        field: "passthrough.slurm",
        input: "`--quiet` (the job would run with its id unknown)",
        spec: |_| slurm_job("echo ok\n", json!({"passthrough": {"slurm": ["--quiet"]}})),
        expect: Expect::SubmitRejected("is sbatch's --quiet"),
    },
    Case {
        name: "passthrough-echoed",
        field: "passthrough.slurm",
        input: "`--begin=` + 100 000 × `x`: sbatch echoes it back; the status quotes 2 KiB of it",
        spec: |_| {
            slurm_job(
                "echo ok\n",
                json!({"passthrough": {"slurm": [format!("--begin={}", "x".repeat(100_000))]}}),
            )
        },
        expect: Expect::SubmitRejected("Invalid time specification"),
    },
    Case {
        name: "passthrough-huge",
        field: "passthrough.slurm",
        input: "`--comment=` + 300 000 bytes (longer than a command line)",
        spec: |_| {
            slurm_job(
                "echo ok\n",
                json!({"passthrough": {"slurm": [format!("--comment={}", "c".repeat(300_000))]}}),
            )
        },
        expect: Expect::SubmitRejected("the submit command is"),
    },
    Case {
        name: "array-huge",
        field: "array",
        input: "count 4 294 967 295",
        spec: |_| slurm_job("echo ok\n", json!({"array": {"count": u32::MAX}})),
        expect: Expect::SubmitRejected("array.count: must be at least 1 and at most 10000"),
    },
    Case {
        name: "container-injection",
        field: "container image",
        input: "`docker://x; touch CANARY` (quoted; the test bed has no apptainer, which the wrapper looks for before the script)",
        spec: |c| {
            slurm_job(
                "echo ok\n",
                json!({"container": {"image": format!("docker://x; touch {}", c.canary)}}),
            )
        },
        expect: Expect::Fails(Reason::NotStarted),
    },
    Case {
        name: "script-bytes",
        field: "script",
        input: "quoted heredoc, CRLF, non-UTF-8 output, 900 KB of comments",
        spec: |_| {
            let mut script = "cat <<'EOF'\n'q' \"d\" \\b $(no) `no` ; | *\nEOF\nprintf '%s\\n' crlf\r\nprintf '\\377\\376ok\\n'\n".to_owned();
            script.push_str(&format!("# {}\n", "p".repeat(97)).repeat(9_000));
            slurm_job(&script, json!({}))
        },
        expect: Expect::Succeeds(|_| {
            "'q' \"d\" \\b $(no) `no` ; | *\ncrlf\r\n\u{fffd}\u{fffd}ok\n".to_owned()
        }),
    },
    Case {
        name: "script-control",
        field: "script (positive control)",
        input: "`touch CONTROL`: scripts run, and the search must find this file",
        spec: |c| slurm_job(&format!("touch '{}'\necho ok\n", c.control), json!({})),
        expect: Expect::Succeeds(|_| "ok\n".to_owned()),
    },
    Case {
        name: "output-100mb",
        field: "stdout",
        input: "100 MB (`yes x | head -c 100000000`), then `END`; tailBytes 64",
        spec: |_| {
            slurm_job(
                "yes x | head -c 100000000\necho END\n",
                json!({"outputPolicy": {"tailBytes": 64}}),
            )
        },
        expect: Expect::Succeeds(|_| format!("{}END\n", "x\n".repeat(30))),
    },
    Case {
        name: "Bad;Name",
        field: "metadata.name",
        input: "`Bad;Name` (the resource's name becomes the job's name)",
        spec: |_| slurm_job("echo ok\n", json!({})),
        expect: Expect::ApiRejects("a lowercase RFC 1123 subdomain"),
    },
    Case {
        name: "condor-env-injection",
        field: "environment value (HTCondor)",
        input: "`$(touch CANARY)`, backticks, quotes, newline, CR LF",
        spec: |c| json!({"clusterRef": {"name": "htcondor"}, "script": PRINT_V, "environment": {"V": hostile_value(c)}}),
        expect: Expect::Succeeds(hostile_value),
    },
    Case {
        name: "condor-passthrough-macro",
        field: "passthrough.htcondor",
        input: "`+Hostile = \"$(touch CANARY)\"` (a macro, kept literal)",
        spec: |c| {
            json!({"clusterRef": {"name": "htcondor"}, "script": "echo ok\n", "passthrough": {"htcondor": [
                format!("+Hostile = \"$(touch {})\"", c.canary),
            ]}})
        },
        expect: Expect::Succeeds(|_| "ok\n".to_owned()),
    },
    Case {
        name: "condor-passthrough-include",
        field: "passthrough.htcondor",
        input: "`include : /usr/bin/touch CANARY |` (a command include)",
        spec: |c| {
            json!({"clusterRef": {"name": "htcondor"}, "script": "echo ok\n", "passthrough": {"htcondor": [
                format!("include : /usr/bin/touch {} |", c.canary),
            ]}})
        },
        expect: Expect::SubmitRejected("passthrough.htcondor: \"include : /usr/bin/touch"),
    },
];

/// The API server's answer to creating BatchJob `name` with `spec`: Ok, or its message.
async fn create(bed: &Cluster, name: &str, spec: Value) -> Result<(), String> {
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "batchbridge.dev/v1alpha1",
        "kind": "BatchJob",
        "metadata": {"name": name},
        "spec": spec,
    }))
    .unwrap();
    match bed
        .dynamic::<BatchJob>()
        .create(&PostParams::default(), &object)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 422 => Err(status.message),
        Err(other) => panic!("{name}: creating it failed: {other}"),
    }
}

/// Whether a created job has reached what its case waits for.
fn settled(expect: Expect, status: &BatchJobStatus) -> bool {
    match status.phase {
        Some(Phase::Succeeded) => {
            !matches!(expect, Expect::Succeeds(_)) || status.output_tail.is_some()
        }
        Some(phase) => phase.is_terminal(),
        None => false,
    }
}

fn judge(
    case: &Case,
    ctx: &Ctx,
    created: &Result<(), String>,
    status: Option<&BatchJobStatus>,
) -> (bool, String) {
    let short = |text: &str| -> String {
        let cut: String = text.chars().take(240).collect();
        if cut.len() < text.len() {
            format!("{cut}… ({} bytes)", text.len())
        } else {
            cut
        }
    };
    let rejected = |status: &BatchJobStatus, words: &str| {
        let message = status.message.clone().unwrap_or_default();
        // A clear message is a short one: the status and its conditions quote at most
        // an excerpt of whatever the input or the scheduler said.
        let short_enough = message.len() <= 4 * 1024
            && status
                .conditions
                .iter()
                .all(|c| c.message.len() <= 4 * 1024);
        (
            status.phase == Some(Phase::Failed)
                && status.reason == Some(Reason::SubmitRejected)
                && message.contains(words)
                && short_enough,
            format!("Failed, SubmitRejected: {}", short(&message)),
        )
    };
    match (case.expect, created, status) {
        (
            Expect::ApiRejects(words) | Expect::ApiRejectsOrSubmitRejected(words, _),
            Err(message),
            _,
        ) => (
            message.contains(words),
            format!("API server 422: {}", short(message)),
        ),
        (_, Err(message), _) => (false, format!("API server 422: {}", short(message))),
        (_, Ok(()), None) => (false, "created, then never settled".to_owned()),
        (Expect::ApiRejects(_), Ok(()), Some(s)) => (
            false,
            format!("accepted by the API server; phase {:?}", s.phase),
        ),
        (
            Expect::SubmitRejected(words) | Expect::ApiRejectsOrSubmitRejected(_, words),
            Ok(()),
            Some(s),
        ) => rejected(s, words),
        (Expect::Succeeds(expected), Ok(()), Some(s)) => {
            let want = expected(ctx);
            let tail = s.output_tail.clone().unwrap_or_default();
            (
                s.phase == Some(Phase::Succeeded) && tail == want,
                if tail == want {
                    format!("Succeeded, outputTail exact ({} bytes)", tail.len())
                } else {
                    format!(
                        "{:?}, outputTail {:?} (expected {:?})",
                        s.phase,
                        short(&tail),
                        short(&want)
                    )
                },
            )
        }
        (Expect::Fails(reason), Ok(()), Some(s)) => (
            s.phase == Some(Phase::Failed) && s.reason == Some(reason),
            format!(
                "{:?}, {}, exit code {:?}",
                s.phase,
                s.reason.map_or("", Reason::as_str),
                s.exit_code
            ),
        ),
    }
}

fn describe(expect: Expect) -> String {
    match expect {
        Expect::ApiRejects(w) => format!("API server refuses (\"{w}\")"),
        Expect::SubmitRejected(w) => format!("Failed, SubmitRejected (\"{w}\")"),
        Expect::ApiRejectsOrSubmitRejected(_, w) => {
            format!("API server refuses, or Failed, SubmitRejected (\"{w}\")")
        }
        Expect::Succeeds(_) => "Succeeded, exact outputTail".to_owned(),
        Expect::Fails(r) => format!("Failed ({r})"),
    }
}

/// Paths named `prefix*` in `shell`'s home and /tmp, and in this machine's /tmp.
async fn search(shell: &dyn Shell, prefix: &str) -> Vec<String> {
    let script = "find \"$HOME\" /tmp -maxdepth 6 -name \"$1*\" 2>/dev/null; exit 0";
    let output = shell
        .run(&Command::sh(script, [prefix]).timeout(Duration::from_secs(120)))
        .await
        .unwrap();
    assert!(output.success(), "{}", output.stderr_text());
    let mut found: Vec<String> = output
        .stdout_text()
        .lines()
        .map(|l| format!("{}:{l}", shell.host()))
        .collect();
    for entry in std::fs::read_dir("/tmp").unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with(prefix) {
            found.push(format!("local:/tmp/{name}"));
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hostile_batch_jobs_are_refused_clearly_or_run_verbatim() {
    let started = Instant::now();
    let (bed, operator) = set_up("hostile", "ssh", "slurm").await;
    let condor = login("htcondor");
    create_secret(&bed, "condor-key", &condor).await;
    create_cluster(&bed, "htcondor", "htcondor", &condor, "condor-key").await;
    let run = format!("{}-{}", std::process::id(), started.elapsed().as_nanos());
    let prefix = format!("batchbridge-canary-{run}");
    let slurm_shell = ssh_facts().key_shell();
    let home = slurm(r#"printf '%s' "$HOME""#).await;
    let control = format!("batchbridge-control-{run}");
    let ctx = Ctx {
        canary: format!("{home}/{prefix}"),
        control: format!("{home}/{control}"),
    };

    // Create every job; the API server refuses some at once.
    let mut created = Vec::new();
    for case in CASES {
        created.push(create(&bed, case.name, (case.spec)(&ctx)).await);
    }

    // Wait until each job it took has settled.
    let deadline = Instant::now() + Duration::from_secs(150);
    let statuses = loop {
        let jobs = bed.jobs().list(&ListParams::default()).await.unwrap();
        let statuses: Vec<Option<BatchJobStatus>> = CASES
            .iter()
            .map(|case| {
                jobs.items
                    .iter()
                    .find(|j| j.metadata.name.as_deref() == Some(case.name))
                    .map(status)
            })
            .collect();
        let open: Vec<&str> = CASES
            .iter()
            .zip(&created)
            .zip(&statuses)
            .filter(|((case, made), s)| {
                made.is_ok() && !s.as_ref().is_some_and(|s| settled(case.expect, s))
            })
            .map(|((case, _), _)| case.name)
            .collect();
        if open.is_empty() {
            break statuses;
        }
        assert!(Instant::now() < deadline, "jobs never settled: {open:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    };

    let mut failures = Vec::new();
    println!("| BatchJob | field | input | expected | outcome |\n| --- | --- | --- | --- | --- |");
    for ((case, made), status) in CASES.iter().zip(&created).zip(&statuses) {
        let (passed, outcome) = judge(case, &ctx, made, status.as_ref());
        let row = format!(
            "| `{}` | {} | {} | {} | {}{} |",
            case.name,
            case.field,
            case.input.replace('|', "\\|"),
            describe(case.expect).replace('|', "\\|"),
            if passed { "" } else { "**FAILED** " },
            outcome
                .replace('|', "\\|")
                .replace('\n', "\\n")
                .replace('\r', "\\r"),
        );
        println!("{row}");
        if !passed {
            failures.push(row);
        }
    }

    // The operator is still there and still works.
    assert!(!operator.task.is_finished(), "the operator stopped");
    create_job(
        &bed,
        "after",
        json!({"clusterRef": {"name": "slurm"}, "script": "echo still here\n"}),
    )
    .await;
    let after = wait_for(
        &bed,
        "after",
        "a plain job to succeed with its output",
        |s| s.phase == Some(Phase::Succeeded) && s.output_tail.is_some(),
    )
    .await;
    assert_eq!(status(&after).output_tail.as_deref(), Some("still here\n"));

    // No canary on either cluster, nor here.
    let mut canaries = search(&slurm_shell, &prefix).await;
    canaries.extend(search(&htcondor_shell(), &prefix).await);
    let controls = search(&slurm_shell, &control).await;
    slurm(&format!("rm -f -- '{}'", ctx.control)).await;
    println!(
        "{} BatchJobs in {:.1?}; the operator kept running; canaries found: {canaries:?}; control found: {controls:?}",
        CASES.len(),
        started.elapsed()
    );
    operator.stop().await;
    bed.clean_up().await;
    assert!(
        failures.is_empty(),
        "{} cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(canaries.is_empty(), "canaries found: {canaries:?}");
    assert!(
        !controls.is_empty(),
        "the positive control's file was not found: the canary search is blind"
    );
}

/// A BatchCluster spec reaching the test bed's SLURM, with `change` applied to it.
fn cluster_spec(change: impl FnOnce(&mut Value)) -> Value {
    let login = login("ssh");
    let mut spec = json!({
        "scheduler": "slurm",
        "ssh": {"host": login.host, "port": login.port, "user": login.user},
        "secretRef": {"name": "cluster-key"},
        "knownHosts": std::fs::read_to_string(&login.known_hosts).unwrap(),
    });
    change(&mut spec);
    spec
}

/// The path and long-name cases: a name that would be a request path, a query or an ssh
/// option is refused by the CRD, naming the field; a BatchJob whose name is too long for a
/// label value (100 characters) or for `NAME-output` (250), and one with a short name,
/// reach Succeeded with their ConfigMap and log pod, in a namespace whose ResourceQuota
/// refuses pods that set no requests and limits.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hostile_names_are_refused_and_long_names_finish() {
    use batchbridge_operator::crd::BatchCluster;
    use k8s_openapi::api::core::v1::{ConfigMap, Pod, ResourceQuota};
    use kube::api::{Api, Patch, PatchParams};

    let started = Instant::now();
    let (bed, operator) = set_up("hostile-names", "ssh", "slurm").await;
    let mut failures = Vec::new();

    // (object, field, value, spec): each must be refused with a message naming the field.
    let clusters: Vec<(&str, &str, Value)> = vec![
        (
            "spec.secretRef.name",
            "../../acc-t2/secrets/t2-secret",
            cluster_spec(|s| s["secretRef"]["name"] = json!("../../acc-t2/secrets/t2-secret")),
        ),
        (
            "spec.secretRef.name",
            "login?x=1#frag",
            cluster_spec(|s| s["secretRef"]["name"] = json!("login?x=1#frag")),
        ),
        (
            "spec.ssh.host",
            "-oProxyCommand=touch /tmp/x",
            cluster_spec(|s| s["ssh"]["host"] = json!("-oProxyCommand=touch /tmp/x")),
        ),
        (
            "spec.ssh.host",
            "login -oX",
            cluster_spec(|s| s["ssh"]["host"] = json!("login -oX")),
        ),
        (
            "spec.ssh.user",
            "-oProxyCommand=touch /tmp/x",
            cluster_spec(|s| s["ssh"]["user"] = json!("-oProxyCommand=touch /tmp/x")),
        ),
        (
            "spec.ssh.user",
            "alice bob",
            cluster_spec(|s| s["ssh"]["user"] = json!("alice bob")),
        ),
    ];
    let jobs: Vec<(&str, &str, Value)> = vec![
        (
            "spec.clusterRef.name",
            "../slurm",
            json!({"clusterRef": {"name": "../slurm"}, "script": "true"}),
        ),
        (
            "spec.clusterRef.name",
            "slurm?x=1#frag",
            json!({"clusterRef": {"name": "slurm?x=1#frag"}, "script": "true"}),
        ),
        (
            "spec.placement.clusters[0]",
            "../slurm",
            json!({"placement": {"clusters": ["../slurm"]}, "script": "true"}),
        ),
    ];
    let create = |kind: &'static str, index: usize, spec: Value| {
        let bed = &bed;
        async move {
            let object: DynamicObject = serde_json::from_value(json!({
                "apiVersion": "batchbridge.dev/v1alpha1",
                "kind": kind,
                "metadata": {"name": format!("bad-{index}")},
                "spec": spec,
            }))
            .unwrap();
            let api = match kind {
                "BatchCluster" => bed.dynamic::<BatchCluster>(),
                _ => bed.dynamic::<BatchJob>(),
            };
            api.create(&PostParams::default(), &object).await
        }
    };
    let tried = clusters
        .into_iter()
        .map(|case| ("BatchCluster", case))
        .chain(jobs.into_iter().map(|case| ("BatchJob", case)));
    for (index, (kind, (field, value, spec))) in tried.enumerate() {
        let outcome = match create(kind, index, spec).await {
            Err(kube::Error::Api(status)) if status.code == 422 => status.message,
            Err(other) => format!("failed otherwise: {other}"),
            Ok(_) => "accepted".to_owned(),
        };
        let refused = outcome.contains(field) && outcome.contains("should match");
        println!("{kind} {field} {value:?}: {}", outcome.replace('\n', " "));
        if !refused {
            failures.push(format!(
                "{kind} {field} {value:?} was not refused: {outcome}"
            ));
        }
    }

    // A quota on CPU and memory: the API server refuses pods that name no requests and
    // limits. No quota controller runs in the test bed, so its status is written here.
    let quota: ResourceQuota = serde_json::from_value(json!({
        "metadata": {"name": "compute"},
        "spec": {"hard": {"requests.cpu": "2", "requests.memory": "2Gi", "limits.cpu": "4", "limits.memory": "4Gi"}},
    }))
    .unwrap();
    let quotas = Api::<ResourceQuota>::namespaced(bed.client.clone(), &bed.namespace);
    quotas.create(&PostParams::default(), &quota).await.unwrap();
    let used = json!({"status": {
        "hard": {"requests.cpu": "2", "requests.memory": "2Gi", "limits.cpu": "4", "limits.memory": "4Gi"},
        "used": {"requests.cpu": "0", "requests.memory": "0", "limits.cpu": "0", "limits.memory": "0"},
    }});
    quotas
        .patch_status("compute", &PatchParams::default(), &Patch::Merge(&used))
        .await
        .unwrap();
    // The control: the quota refuses a pod that names no requests and limits.
    let bare: Pod = serde_json::from_value(json!({
        "metadata": {"name": "bare"},
        "spec": {"containers": [{"name": "c", "image": "batchbridge-operator:test"}]},
    }))
    .unwrap();
    let pods = Api::<Pod>::namespaced(bed.client.clone(), &bed.namespace);
    let refusal = api_error(pods.create(&PostParams::default(), &bare).await, 403);
    assert!(refusal.contains("must specify"), "{refusal}");

    // Short (the quota alone); too long for a label value; too long for NAME-output (and
    // NAME-log) as well.
    let names = [
        "short".to_owned(),
        format!("label-{}", "x".repeat(94)),
        format!("name-{}", "y".repeat(245)),
    ];
    for name in &names {
        create_job(
            &bed,
            name,
            json!({
                "clusterRef": {"name": "slurm"},
                "script": "echo long\n",
                "outputPolicy": {"configMap": true, "logPod": true},
            }),
        )
        .await;
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    let maps = Api::<ConfigMap>::namespaced(bed.client.clone(), &bed.namespace);
    for name in &names {
        let finished = loop {
            let job = bed.jobs().get(name).await.unwrap();
            let s = status(&job);
            let output = s
                .conditions
                .iter()
                .find(|c| c.type_ == "OutputCollected")
                .cloned();
            if s.phase == Some(Phase::Succeeded)
                && let Some(output) = output
            {
                break Some((job, output));
            }
            if Instant::now() > deadline {
                failures.push(format!(
                    "BatchJob of {} characters never finished: phase {:?}, message {:?}",
                    name.len(),
                    s.phase,
                    s.message
                ));
                break None;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        let Some((job, output)) = finished else {
            continue;
        };
        println!(
            "BatchJob of {} characters: Succeeded; OutputCollected {} {}: {}",
            name.len(),
            output.status,
            output.reason,
            output.message
        );
        if output.status != "True" {
            failures.push(format!(
                "BatchJob of {} characters: OutputCollected {} {}",
                name.len(),
                output.status,
                output.message
            ));
        }
        let uid = job.metadata.uid.clone().unwrap();
        let selector = format!("batchbridge.dev/job-uid={uid}");
        let owned_maps = maps
            .list(&ListParams::default().labels(&selector))
            .await
            .unwrap();
        let owned_pods = pods
            .list(&ListParams::default().labels(&selector))
            .await
            .unwrap();
        let map = owned_maps.items.first();
        let stdout = map
            .and_then(|m| m.data.as_ref())
            .and_then(|d| d.get("stdout"))
            .cloned();
        let pod = owned_pods.items.first();
        let limits = pod
            .and_then(|p| p.spec.as_ref())
            .and_then(|s| s.containers[0].resources.as_ref())
            .and_then(|r| r.limits.clone())
            .unwrap_or_default();
        println!(
            "  ConfigMap {:?} (stdout {stdout:?}), Pod {:?} (limits {:?})",
            map.map(|m| m.metadata.name.clone().unwrap_or_default()),
            pod.map(|p| p.metadata.name.clone().unwrap_or_default()),
            limits.keys().collect::<Vec<_>>()
        );
        if stdout.as_deref() != Some("long\n") || pod.is_none() {
            failures.push(format!(
                "BatchJob of {} characters: ConfigMap stdout {stdout:?}, log pod found: {}",
                name.len(),
                pod.is_some()
            ));
        }
    }

    println!("hostile names checked in {:.1?}", started.elapsed());
    operator.stop().await;
    bed.clean_up().await;
    assert!(
        failures.is_empty(),
        "{} cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
