//! The operator's Event recorder (`controller::recorder`) against the test bed's real
//! kube-apiserver, as the operator's own ServiceAccount: a repeat within the series window
//! is one Event with a series count, another action is an Event of its own, a repeat
//! whose first Event is gone (the API server's event TTL) is created anew, and a BatchJob
//! with a name of 253 characters gets its Events.

// Helpers panic on purpose: an Event missing is a failed test.
#![allow(clippy::unwrap_used)]

use batchbridge_operator::controller::recorder::Recorder;
use batchbridge_operator::crd::{BatchJob, BatchJobSpec};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};
use serde_json::json;

mod common;

use common::Cluster;

/// The Events about `job`: (reason, action, series count, note), by name.
async fn events_about(
    events: &Api<Event>,
    job: &BatchJob,
) -> Vec<(String, String, Option<i32>, String)> {
    let mut listed = events.list(&ListParams::default()).await.unwrap().items;
    listed.retain(|e| e.regarding.as_ref().and_then(|r| r.uid.as_deref()) == job.uid().as_deref());
    listed.sort_by_key(|e| e.name_any());
    listed
        .into_iter()
        .map(|e| {
            (
                e.reason.unwrap_or_default(),
                e.action.unwrap_or_default(),
                e.series.map(|s| s.count),
                e.note.unwrap_or_default(),
            )
        })
        .collect()
}

#[tokio::test]
async fn repeats_fold_into_a_series_and_a_deleted_event_is_made_again() {
    let bed = Cluster::new("events").await;
    let spec: BatchJobSpec =
        serde_json::from_value(json!({"clusterRef": {"name": "hpc"}, "script": "true"})).unwrap();
    let job = bed
        .jobs()
        .create(&PostParams::default(), &BatchJob::new("noted", spec))
        .await
        .unwrap();
    let recorder = Recorder::new(bed.operator_client().await, "batchbridge-operator", "test");
    // Read and removed as the administrator: the operator only creates and patches Events.
    let events: Api<Event> = Api::namespaced(bed.client.clone(), &bed.namespace);
    let about = job.object_ref(&());
    let warn = |action: &'static str, note: &'static str| {
        recorder.publish(
            &about,
            EventType::Warning,
            "ClusterUnreachable",
            action,
            note,
        )
    };

    warn("Reconcile", "first").await.unwrap();
    warn("Reconcile", "second").await.unwrap();
    warn("Probe", "third").await.unwrap();
    let seen = events_about(&events, &job).await;
    let mut shapes: Vec<_> = seen
        .iter()
        .map(|(_, action, count, note)| (action.as_str(), *count, note.as_str()))
        .collect();
    shapes.sort_unstable();
    assert_eq!(
        shapes,
        [("Probe", None, "third"), ("Reconcile", Some(2), "first")],
        "{seen:?}"
    );

    // The API server's event TTL removed the series' Event: its next repeat is a new one.
    events
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await
        .unwrap();
    warn("Reconcile", "fourth").await.unwrap();
    let seen = events_about(&events, &job).await;
    assert_eq!(
        seen,
        [(
            "ClusterUnreachable".to_owned(),
            "Reconcile".to_owned(),
            None,
            "fourth".to_owned()
        )]
    );

    // A BatchJob's name may take all 253 characters a name has: its Events' names still fit.
    let spec: BatchJobSpec =
        serde_json::from_value(json!({"clusterRef": {"name": "hpc"}, "script": "true"})).unwrap();
    let longest = format!("{}.{}", "a".repeat(200), "b".repeat(52));
    let long = bed
        .jobs()
        .create(&PostParams::default(), &BatchJob::new(&longest, spec))
        .await
        .unwrap();
    recorder
        .publish(
            &long.object_ref(&()),
            EventType::Normal,
            "Submitted",
            "SubmitAttempt1",
            "job 1",
        )
        .await
        .unwrap();
    assert_eq!(events_about(&events, &long).await.len(), 1);
    bed.clean_up().await;
}
