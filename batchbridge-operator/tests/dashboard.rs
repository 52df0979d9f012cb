//! The Grafana dashboard, deploy/grafana/batchbridge.json (issue 33, point 3): every query of
//! its panels and variables reads only series the operator really exports, as its metrics
//! registry encodes them, and it has the panels README's Deploy section shows.

#![allow(clippy::unwrap_used)]

mod catalog;

use std::collections::BTreeSet;

/// Every metric of metrics.rs's table is exported with exactly the documented labels, and
/// every exported series is documented: the catalog the checks below rely on is complete.
#[test]
fn documented_metrics_are_exported() {
    let exported = catalog::exported_series();
    let documented = catalog::documented_metrics();
    let mut covered = BTreeSet::new();
    for (metric, labels) in &documented {
        for sample in catalog::samples_of(metric, &exported) {
            let got = exported
                .get(&sample)
                .unwrap_or_else(|| panic!("{sample} is documented but not exported: {exported:?}"));
            assert_eq!(got, labels, "the labels of {sample}");
            covered.insert(sample);
        }
    }
    let undocumented: Vec<&String> = exported.keys().filter(|s| !covered.contains(*s)).collect();
    assert!(
        undocumented.is_empty(),
        "not in metrics.rs's table: {undocumented:?}"
    );
}

/// README's table of metrics names the same metrics with the same labels as metrics.rs's.
#[test]
fn readme_documents_the_metrics_as_metrics_rs_does() {
    assert_eq!(catalog::readme_metrics(), catalog::documented_metrics());
}

#[test]
fn every_query_reads_series_the_operator_exports() {
    let exported = catalog::exported_series();
    let queries = catalog::dashboard_queries(&catalog::dashboard());
    assert!(queries.len() > 10, "{queries:?}");
    for (place, expr) in queries {
        let read = catalog::metric_names(&expr);
        assert!(!read.is_empty(), "{place}: {expr} reads no metric");
        for metric in read {
            assert!(
                exported.contains_key(&metric),
                "{place}: {metric} is not a series the operator exports ({expr}); it exports \
                 {:?}",
                exported.keys()
            );
        }
    }
}

/// The panels issue 33 asks for (and the credential expiry its alert is about), which
/// README shows.
#[test]
fn the_dashboard_has_its_panels() {
    let dashboard = catalog::dashboard();
    let titles: BTreeSet<&str> = dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|panel| panel["title"].as_str().unwrap())
        .collect();
    for title in [
        "Jobs by phase and cluster",
        "Cluster reachable",
        "Queue wait (submit to start)",
        "Run time (start to finish)",
        "Status lag: poll duration",
        "Scheduler command rate",
        "Credential expiry (time left)",
    ] {
        assert!(titles.contains(title), "no panel {title:?}: {titles:?}");
    }
}

/// The parser of metric names that both checks rely on.
#[test]
fn metric_names_are_told_from_functions_labels_and_ranges() {
    let expr = r#"histogram_quantile(0.9, sum by (le, batchcluster) (rate(batchbridge_job_queue_wait_seconds_bucket{batchjob_namespace=~"$ns", outcome!="x"}[$__rate_interval])))
        / on (batchcluster) group_left sum without (instance) (batchbridge_submits_total offset 5m) > bool 0.5
        or max(batchbridge_cluster_reachable) == 0 and time() - 1e3 > 86400"#;
    assert_eq!(
        catalog::metric_names(expr),
        BTreeSet::from(
            [
                "batchbridge_job_queue_wait_seconds_bucket",
                "batchbridge_submits_total",
                "batchbridge_cluster_reachable",
            ]
            .map(String::from)
        )
    );
}
