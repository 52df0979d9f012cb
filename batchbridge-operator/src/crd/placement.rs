//! A BatchJob's candidate clusters ([`Placement`]) and what placement saw and did
//! ([`PlacementStatus`], [`Move`]).

// `KubeSchema` copies each struct it derives for into a function body as a `pub` item, which
// the lint flags at the struct (kube-derive 5.0). Every type here is re-exported by `crd`.
#![allow(unreachable_pub)]

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::DURATION_OF_AT_LEAST_1S;
use super::names::DNS_LABEL;

/// The most candidates a job may name, or a selector may bring: each one is asked for an
/// estimate before the job is placed.
pub const MAX_CANDIDATES: usize = 16;

/// Where a job may run and how the cluster is chosen: candidates named in a list or by a
/// label selector over the BatchClusters of the job's namespace, a policy, and whether a
/// job that waits too long in one queue moves to another candidate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.clusters) != has(self.selector)")
    .message("placement names its candidates in exactly one of clusters (a list of BatchCluster names) or selector (labels of BatchClusters)"))]
pub struct Placement {
    /// The candidate BatchClusters of this namespace by name, at most 16, each once; with
    /// the Ordered policy, in order of preference.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    // Patterns and lengths rather than CEL: the API server bounds a CRD's CEL cost, and
    // these cost nothing. DNS labels, not subdomains: a candidate's name goes into the
    // action of its Placed Event, which the API server caps at 128 characters.
    #[schemars(
        length(min = 1, max = 16),
        inner(length(min = 1, max = 63), regex(pattern = DNS_LABEL)),
        extend("x-kubernetes-list-type" = "set")
    )]
    pub clusters: Vec<String>,
    /// The candidates as the BatchClusters of this namespace whose labels match, taken in
    /// name order, at most 16 (the first 16 by name when more match).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<ClusterSelector>,
    /// How the cluster is chosen: EarliestStart (the default) asks every candidate when the
    /// job would start and takes the earliest; Ordered takes the first candidate where it
    /// would start at once, else the first that answered. Unreachable candidates are
    /// skipped either way.
    #[serde(default)]
    pub policy: PlacementPolicy,
    /// How long the job may wait in a queue, never having started, before it is moved to a
    /// candidate that promises a clearly earlier start (at least 5 minutes earlier, or,
    /// when its queue gives no estimate, a start within 5 minutes), such as "30m"; absent,
    /// the job never moves. A move cancels the waiting job, waits until its scheduler
    /// confirms it was cancelled without starting, then submits it to the other cluster;
    /// a job that started meanwhile stays where it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new(DURATION_OF_AT_LEAST_1S)
        .message("moveAfter must be a duration of at least 1s, such as 30m"))]
    #[schemars(length(max = 64))]
    pub move_after: Option<kube::core::Duration>,
    /// How many times the job may move, 1 to 3 (1 by default).
    #[serde(default = "default_max_moves")]
    #[schemars(range(min = 1, max = 3))]
    pub max_moves: u32,
}

fn default_max_moves() -> u32 {
    1
}

/// How placement chooses among the candidates that answered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum PlacementPolicy {
    /// The candidate with the earliest estimated start; ties go to the earlier candidate.
    #[default]
    EarliestStart,
    /// The first candidate where the job would start at once, else the first that answered.
    Ordered,
}

impl From<PlacementPolicy> for batchbridge_core::placement::Policy {
    fn from(policy: PlacementPolicy) -> Self {
        match policy {
            PlacementPolicy::EarliestStart => Self::EarliestStart,
            PlacementPolicy::Ordered => Self::Ordered,
        }
    }
}

/// Labels a BatchCluster must carry to be a candidate; every entry must match.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.matchLabels) || has(self.matchExpressions)")
    .message("selector must have matchLabels or matchExpressions: an empty selector would take every BatchCluster of the namespace"))]
pub struct ClusterSelector {
    /// Labels the cluster must have, with these values (label values: at most 63 letters,
    /// digits, '-', '_' or '.'; keys at most 317 characters).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 16, "minProperties" = 1))]
    #[x_kube(validation = Rule::new("self.all(key, size(key) > 0 && size(key) <= 317)")
        .message("matchLabels keys must be label keys of 1 to 317 characters"))]
    pub match_labels: BTreeMap<String, LabelValue>,
    /// Conditions on the cluster's labels.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 1, max = 16))]
    pub match_expressions: Vec<LabelRequirement>,
}

/// A label's value: at most 63 letters, digits, '-', '_' or '.', beginning and ending with a
/// letter or digit.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct LabelValue(
    #[schemars(
        length(max = 63),
        regex(pattern = r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
    )]
    pub String,
);

/// One condition on a label.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("(self.operator in ['In', 'NotIn']) == (has(self.values) && size(self.values) > 0)")
    .message("In and NotIn need values; Exists and DoesNotExist take none"))]
pub struct LabelRequirement {
    /// The label's key: [prefix/]name, the name at most 63 letters, digits, '-', '_' or
    /// '.', the prefix a DNS subdomain.
    #[schemars(
        length(min = 1, max = 317),
        regex(
            pattern = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
        )
    )]
    pub key: String,
    /// How the label is compared.
    pub operator: LabelOperator,
    /// The values for In and NotIn, at most 16, each a label value.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 16),
        inner(
            length(max = 63),
            regex(pattern = r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
        )
    )]
    pub values: Vec<String>,
}

/// How a [`LabelRequirement`] compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum LabelOperator {
    /// The label has one of the values.
    In,
    /// The label is absent or has none of the values.
    NotIn,
    /// The label is present.
    Exists,
    /// The label is absent.
    DoesNotExist,
}

impl ClusterSelector {
    /// Whether a cluster with `labels` matches.
    ///
    /// ```
    /// use std::collections::BTreeMap;
    /// use batchbridge_operator::crd::{ClusterSelector, LabelOperator, LabelRequirement, LabelValue};
    ///
    /// let selector = ClusterSelector {
    ///     match_labels: BTreeMap::from([("site".into(), LabelValue("campus".into()))]),
    ///     match_expressions: vec![LabelRequirement {
    ///         key: "gpu".into(),
    ///         operator: LabelOperator::DoesNotExist,
    ///         values: vec![],
    ///     }],
    /// };
    /// assert!(selector.matches(&BTreeMap::from([("site".into(), "campus".into())])));
    /// assert!(!selector.matches(&BTreeMap::from([("site".into(), "national".into())])));
    /// ```
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let labelled = self
            .match_labels
            .iter()
            .all(|(key, value)| labels.get(key) == Some(&value.0));
        labelled
            && self.match_expressions.iter().all(|requirement| {
                let value = labels.get(&requirement.key);
                match requirement.operator {
                    LabelOperator::In => value.is_some_and(|v| requirement.values.contains(v)),
                    LabelOperator::NotIn => !value.is_some_and(|v| requirement.values.contains(v)),
                    LabelOperator::Exists => value.is_some(),
                    LabelOperator::DoesNotExist => value.is_none(),
                }
            })
    }
}

/// What placement saw when it last chose, or checked whether to move, the job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlacementStatus {
    /// When the candidates were asked.
    pub time: Time,
    /// Each candidate's answer, in candidate order.
    #[schemars(length(max = 16))]
    pub candidates: Vec<CandidateAnswer>,
}

/// One candidate's answer to "when would this job start".
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CandidateAnswer {
    /// The BatchCluster.
    pub cluster: String,
    /// What it answered.
    pub answer: Estimate,
    /// When the job would start there, when it gave a time (now, for StartsNow).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    /// The scheduler's words (the partition, the nodes, what it said) or why the candidate
    /// was skipped, shortened to 256 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// A candidate's answer, in one word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum Estimate {
    /// The job would start at once.
    StartsNow,
    /// The job would start at startTime.
    StartsAt,
    /// The job would wait, and the scheduler gives no time.
    StartsLater,
    /// The cluster answered but cannot estimate starts.
    NoEstimate,
    /// The cluster could not be reached, or cannot be used (its BatchCluster or Secret).
    Unreachable,
    /// The cluster was reached but its scheduler did not answer.
    NoAnswer,
    /// The cluster cannot run this job.
    Unsuitable,
}

/// A move of a waiting job from one cluster to another.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Move {
    /// The cluster it waited on.
    pub from: String,
    /// The cluster it moves to.
    pub to: String,
    /// Its job id on `from`.
    pub job_id: String,
    /// When the move began.
    pub time: Time,
    /// Where the move is, or how it ended.
    pub outcome: MoveOutcome,
}

/// Where a move is, or how it ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum MoveOutcome {
    /// The job on `from` is being withdrawn (cancelled only if it has not started); the
    /// move waits for its scheduler to confirm.
    Cancelling,
    /// Cancelled on `from` without having started, and submitted to `to`.
    Moved,
    /// The job started (or ended) on `from` before it was withdrawn: it stays there, and
    /// never moves again.
    StartedFirst,
}
