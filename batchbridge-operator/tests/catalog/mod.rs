//! What the alerts and the dashboard may query, and what the docs promise: the series the
//! operator's registry really exports (with their labels), the metrics table of
//! `src/metrics.rs`'s documentation, and the metric names a PromQL expression reads. Shared
//! by the chart's alert tests (deploy_manifests.rs), the dashboard's (dashboard.rs) and the
//! scrape of a running operator (leader_election.rs); each uses a part of it.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

use batchbridge_core::shell::{Command, HostKeys, Shell, SshAuth, SshConfig, SshShell};
use batchbridge_operator::crd::{BatchJob, BatchJobStatus};
use batchbridge_operator::metrics::{ClusterLabels, Metrics};
use serde_json::{Value, json};

/// Label names by series name.
pub(crate) type Series = BTreeMap<String, BTreeSet<String>>;

/// The series of one scrape, `text` in the Prometheus text format: each sample's name with
/// its label names (a histogram bucket's `le` left out, as the docs leave it out).
pub(crate) fn series_in(text: &str) -> Series {
    let mut series = Series::new();
    for line in text.lines().filter(|line| !line.starts_with('#')) {
        let name_and_labels = line.rsplit_once(' ').map_or(line, |(sample, _)| sample);
        let (name, labels) = match name_and_labels.split_once('{') {
            Some((name, labels)) => (name, labels.trim_end_matches('}')),
            None => (name_and_labels, ""),
        };
        // Label values of the operator's are names of Kubernetes objects and phases: no
        // commas or quotes inside.
        let names = labels
            .split(',')
            .filter_map(|pair| pair.split_once('=').map(|(key, _)| key.to_owned()))
            .filter(|key| key != "le");
        series.entry(name.to_owned()).or_default().extend(names);
    }
    series
}

/// Every series a scrape of the operator can show, with its label names, from its
/// registry's own text once each of its recording calls (the ones the controllers make) has
/// run once: a family without a sample is not in the text at all. A metric documented in
/// `src/metrics.rs` but not recorded here fails dashboard.rs's
/// `documented_metrics_are_exported`.
pub(crate) fn exported_series() -> Series {
    let metrics = Metrics::new();
    let cluster = ClusterLabels {
        batchjob_namespace: "research".into(),
        batchcluster: "hpc".into(),
    };
    metrics.submitted(&cluster, false);
    metrics.cancelled(&cluster, false);
    metrics.poll_duration(&cluster).observe(0.5);
    metrics.reconcile_failed("BatchJob", "Kube");
    metrics.action_started("submit");
    metrics.reconciles_waiting("woken", 1);
    metrics.set_leader(true);
    metrics.set_cluster_reachable(&cluster, true);
    metrics.set_credential_expiry(&cluster, Some(std::time::SystemTime::now()));
    let job: BatchJob = serde_json::from_value(json!({
        "apiVersion": "batchbridge.dev/v1alpha1",
        "kind": "BatchJob",
        "metadata": {"name": "j", "namespace": "research"},
        "spec": {"clusterRef": {"name": "hpc"}, "script": "true"},
    }))
    .unwrap();
    let status = |finished: bool| -> BatchJobStatus {
        let mut status = json!({
            "phase": "Running", "cluster": "hpc",
            "submitTime": "2026-01-01T00:00:00Z", "startTime": "2026-01-01T00:01:00Z",
        });
        if finished {
            status["phase"] = json!("Succeeded");
            status["finishTime"] = json!("2026-01-01T00:02:00Z");
        }
        serde_json::from_value(status).unwrap()
    };
    metrics.observe_attempt_end(&job, &status(false), &status(true));
    let mut store = kube::runtime::reflector::store::Writer::default();
    store.apply_watcher_event(&kube::runtime::watcher::Event::Apply(job));
    metrics.count_jobs_in(Some(store.as_reader()));
    // A command on the cluster's login node, counted whether or not it reaches it: nothing
    // listens on port 1 here.
    let mut config = SshConfig::new(
        "127.0.0.1",
        "nobody",
        SshAuth::Agent("/nonexistent/agent.socket".into()),
        HostKeys::Entries(String::new()),
    )
    .port(1);
    config.connect_attempts = 1;
    let shell = metrics.metered(Arc::new(SshShell::new(config).unwrap()), cluster);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime
        .block_on(shell.run(&Command::new("squeue")))
        .unwrap_err();

    series_in(&metrics.encode())
}

/// The metrics table of `src/metrics.rs`'s documentation: each metric as a scrape names it
/// (a counter's `_total`, a histogram's family name) with its documented label names.
pub(crate) fn documented_metrics() -> Series {
    metrics_table("batchbridge-operator/src/metrics.rs", "//! | ")
}

/// The metrics table of README.md's "Metrics and health", as [`documented_metrics`].
pub(crate) fn readme_metrics() -> Series {
    metrics_table("README.md", "| ")
}

/// The rows of `file`'s (from the workspace's root) table of metrics, each `row_start`, then
/// the metric names, the type and the label names, all in backticks.
fn metrics_table(file: &str, row_start: &str) -> Series {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(file);
    let source = std::fs::read_to_string(&path).unwrap();
    let mut documented = Series::new();
    for row in source
        .lines()
        .filter_map(|line| line.strip_prefix(row_start))
        .filter(|row| row.starts_with("`batchbridge_"))
    {
        let cells: Vec<&str> = row.split('|').collect();
        let names = |cell: &str| -> Vec<String> {
            cell.split(',')
                .map(|name| name.trim().trim_matches('`').to_owned())
                .filter(|name| !name.is_empty())
                .collect()
        };
        let labels: BTreeSet<String> = names(cells[2]).into_iter().collect();
        for metric in names(cells[0]) {
            documented.insert(metric, labels.clone());
        }
    }
    assert!(documented.len() > 10, "{file}: {documented:?}");
    documented
}

/// The series a documented metric stands for: a histogram's three, anything else itself.
pub(crate) fn samples_of(metric: &str, exported: &Series) -> Vec<String> {
    let histogram = ["_bucket", "_sum", "_count"].map(|suffix| format!("{metric}{suffix}"));
    if exported.contains_key(&histogram[0]) {
        histogram.to_vec()
    } else {
        vec![metric.to_owned()]
    }
}

/// deploy/grafana/batchbridge.json, parsed.
pub(crate) fn dashboard() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/grafana/batchbridge.json");
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap())
        .unwrap_or_else(|err| panic!("{}: {err}", path.display()))
}

/// Every PromQL expression of the dashboard, with where it stands: each panel target's
/// `expr`, and each variable's `label_values(SELECTOR, LABEL)` query as its selector.
pub(crate) fn dashboard_queries(dashboard: &Value) -> Vec<(String, String)> {
    let mut queries = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        let title = panel["title"].as_str().unwrap();
        for target in panel["targets"].as_array().unwrap() {
            queries.push((
                title.to_owned(),
                target["expr"].as_str().unwrap().to_owned(),
            ));
        }
    }
    for variable in dashboard["templating"]["list"].as_array().unwrap() {
        if variable["type"] != "query" {
            continue;
        }
        let query = variable["query"]["query"].as_str().unwrap();
        let selector = query
            .strip_prefix("label_values(")
            .and_then(|args| args.rsplit_once(','))
            .map(|(selector, _)| selector)
            .unwrap_or_else(|| panic!("variable query {query:?} is not label_values(…, label)"));
        let name = variable["name"].as_str().unwrap();
        queries.push((format!("variable {name}"), selector.to_owned()));
    }
    queries
}

/// The metrics the dashboard and the chart's alerts read (the PrometheusRule template's
/// `expr:` blocks, read as text: they hold no Helm syntax but a value's threshold).
pub(crate) fn used_metrics() -> BTreeSet<String> {
    let mut used: BTreeSet<String> = dashboard_queries(&dashboard())
        .iter()
        .flat_map(|(_, expr)| metric_names(expr))
        .collect();
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy/helm/batchbridge-operator/templates/prometheusrule.yaml");
    let template = std::fs::read_to_string(path).unwrap();
    let mut in_expr = false;
    for line in template.lines() {
        let trimmed = line.trim_start();
        if let Some(expr) = trimmed.strip_prefix("expr:") {
            in_expr = true;
            used.extend(metric_names(expr.trim_start_matches(" >-")));
        } else if in_expr && !trimmed.contains(':') {
            used.extend(metric_names(&trimmed.replace("{{", "").replace("}}", "")));
        } else {
            in_expr = false;
        }
    }
    assert!(
        used.contains("batchbridge_reconcile_errors_total"),
        "{used:?}"
    );
    used
}

/// PromQL's words that are not metric names when they stand alone: operators, and the
/// aggregations, which may be followed by `by (…)` rather than their `(`.
const KEYWORDS: &[&str] = &[
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "inf",
    "nan",
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
];

/// The metric names `expr` reads: its identifiers, less label matchers (`{…}`), ranges
/// (`[…]`), strings, functions and aggregations (a name followed by `(`), the label lists of
/// `by`, `without`, `on`, `ignoring` and `group_left`/`group_right`, and keywords. Grafana's
/// `$variables` may stand in ranges and matchers.
pub(crate) fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let chars: Vec<char> = expr.chars().collect();
    let mut i = 0;
    // Whether the next parenthesised list is one of labels (after by, on…).
    let mut label_list_next = false;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '{' | '[' | '"' | '\'' | '`' => {
                let close = match c {
                    '{' => '}',
                    '[' => ']',
                    quote => quote,
                };
                let mut j = i + 1;
                while j < chars.len() && chars[j] != close {
                    if chars[j] == '\\' {
                        j += 1;
                    }
                    j += 1;
                }
                assert!(j < chars.len(), "unclosed {c} in {expr}");
                i = j + 1;
            }
            '(' if label_list_next => {
                let close = chars[i..].iter().position(|&c| c == ')').unwrap();
                i += close + 1;
                label_list_next = false;
            }
            c if c.is_ascii_alphabetic() || c == '_' || c == ':' || c == '$' => {
                let start = i;
                while i < chars.len()
                    && (chars[i].is_ascii_alphanumeric() || matches!(chars[i], '_' | ':' | '$'))
                {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                let next = chars[i..].iter().find(|c| !c.is_whitespace());
                let lower = word.to_ascii_lowercase();
                if matches!(
                    lower.as_str(),
                    "by" | "without" | "on" | "ignoring" | "group_left" | "group_right"
                ) {
                    label_list_next = true;
                    continue;
                }
                // group_left may stand without a list.
                label_list_next = false;
                if next != Some(&'(')
                    && !KEYWORDS.contains(&lower.as_str())
                    && !word.starts_with('$')
                {
                    names.insert(word);
                }
            }
            c if c.is_ascii_digit() || c == '.' => {
                // A number or a duration (5m): its letters are not a name.
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                    i += 1;
                }
            }
            c if c.is_whitespace() => i += 1,
            _ => {
                label_list_next = false;
                i += 1;
            }
        }
    }
    names
}
