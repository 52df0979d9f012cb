//! A BatchJob's inputs (spec.inputs) and outputs (spec.outputs): what is put in the job's
//! working directory before its script runs, and what is sent from it after.

// `KubeSchema` copies each struct it derives for into a function body as a `pub` item.
#![allow(unreachable_pub)]

use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::names::DNS_SUBDOMAIN;

/// The CEL rule for a path in the job's working directory: relative, no `..` component, no
/// control character (a newline would end a line of the job's wrapper, so the operator
/// refuses it again however it got in).
const RELATIVE_PATH: &str = "!self.startsWith('/') && !self.matches('(^|/)[.][.](/|$)') && !self.matches('[\\\\x00-\\\\x1f\\\\x7f]')";
const RELATIVE_PATH_MESSAGE: &str = "path must be relative to the job's working directory, without '..' components or control characters";

/// One input of a job: a file written to `path` in the job's working directory before its
/// script runs, from exactly one of configMap, secret or objectStore. If one cannot be had
/// (its ConfigMap, Secret or object is missing, or too big), nothing is submitted: the job
/// fails with reason InputRefused, naming the input.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("[has(self.configMap), has(self.secret), has(self.objectStore)].filter(x, x).size() == 1")
        .message("an input names exactly one of configMap, secret or objectStore")
        .reason(Reason::FieldValueInvalid),
)]
pub struct JobInput {
    /// Where the input goes, relative to the job's working directory, such as
    /// "data/input.csv"; missing directories are made. For an objectStore prefix, the
    /// directory the objects go under (each at its key less the prefix).
    #[x_kube(validation = Rule::new(RELATIVE_PATH).message(RELATIVE_PATH_MESSAGE))]
    #[schemars(length(min = 1, max = 1024))]
    pub path: String,
    /// A key of a ConfigMap in the job's own namespace (there is no namespace field: a
    /// job never reads another namespace's ConfigMaps).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map: Option<KeyReference>,
    /// A key of a Secret in the job's own namespace (there is no namespace field: a job
    /// never reads another namespace's Secrets). The file is made readable by the job's
    /// user only (mode 600).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<KeyReference>,
    /// An object, or every object under a prefix, of an S3-compatible object store,
    /// fetched by the job itself from a presigned URL (curl or wget on the cluster).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_store: Option<ObjectLocation>,
}

/// A key of a ConfigMap or Secret in the job's namespace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct KeyReference {
    /// The object's name, in the job's namespace: a DNS subdomain.
    #[schemars(length(min = 1, max = 253), regex(pattern = DNS_SUBDOMAIN))]
    pub name: String,
    /// The key in its data.
    #[schemars(length(min = 1, max = 253), regex(pattern = r"^[-._a-zA-Z0-9]+$"))]
    pub key: String,
}

/// Where in an S3-compatible object store, and with which credentials.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("has(self.key) != has(self.prefix)")
        .message("an object store location names exactly one of key or prefix")
        .reason(Reason::FieldValueInvalid),
)]
pub struct ObjectLocation {
    /// The store's endpoint URL: http or https, a host and maybe a port, no path (such as
    /// the URL of s3.eu-west-1.amazonaws.com, or of minio.storage:9000); buckets are
    /// addressed by path. The cluster's nodes fetch
    /// from and send to it; the operator itself only lists a prefix.
    #[x_kube(validation = Rule::new("self.matches('^https?://[^/?#@\\\\s]+/?$')")
        .message("endpoint must be an http or https URL with a host and no path, query or user"))]
    #[schemars(length(min = 8, max = 512))]
    pub endpoint: String,
    /// The region the credentials sign for; us-east-1 when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64), regex(pattern = r"^[a-z0-9-]+$"))]
    pub region: Option<String>,
    /// The bucket.
    #[schemars(
        length(min = 3, max = 63),
        regex(pattern = r"^[a-z0-9][a-z0-9.-]*[a-z0-9]$")
    )]
    pub bucket: String,
    /// One object's key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    pub key: Option<String>,
    /// Every object whose key starts with this (inputs only), at most 1000 of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    pub prefix: Option<String>,
    /// A Secret in the job's namespace with the keys accessKeyId and secretAccessKey. The
    /// credentials never reach the cluster: the operator signs a URL for each transfer,
    /// valid for as long as the job may take.
    pub credentials_secret: SecretName,
}

/// A Secret in the job's namespace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SecretName {
    /// The Secret's name: a DNS subdomain.
    #[schemars(length(min = 1, max = 253), regex(pattern = DNS_SUBDOMAIN))]
    pub name: String,
}

/// One output of a job: a file of its working directory sent, when the job ends, to an
/// object store (by the job itself, through a presigned URL, with curl or wget) or, for a
/// small result, into a key of a ConfigMap of the job's namespace (fetched by the operator
/// over the cluster connection; at most 512 KiB for all of a job's ConfigMap outputs,
/// refused beyond). Whether each arrived is the condition OutputsStaged; the job's phase
/// stays what the script did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("has(self.objectStore) != has(self.configMap)")
        .message("an output names exactly one of objectStore or configMap")
        .reason(Reason::FieldValueInvalid),
    validation = Rule::new("!has(self.objectStore) || has(self.objectStore.key)")
        .message("an output's objectStore names a key, not a prefix")
        .reason(Reason::FieldValueInvalid),
)]
pub struct JobOutput {
    /// The file, relative to the job's working directory, such as "results/summary.csv".
    #[x_kube(validation = Rule::new(RELATIVE_PATH).message(RELATIVE_PATH_MESSAGE))]
    #[schemars(length(min = 1, max = 1024))]
    pub path: String,
    /// When it is sent: OnSuccess (the default; the script exited 0), OnFailure or Always.
    #[serde(default)]
    pub when: StageWhen,
    /// The object it becomes (key, not prefix).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_store: Option<ObjectLocation>,
    /// The ConfigMap key it becomes: a ConfigMap of the job's namespace that the job owns
    /// (created if missing; one of that name not owned by the job is left alone and the
    /// output reported not staged).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map: Option<KeyReference>,
}

/// When an output is sent, as the script ended (PSI/J's flags).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum StageWhen {
    /// Only when the script exited 0.
    #[default]
    OnSuccess,
    /// Only when the script exited with another code.
    OnFailure,
    /// Whatever the script's exit code.
    Always,
}

impl StageWhen {
    /// Whether an output with this `when` is sent after a script that `succeeded` (exited 0).
    ///
    /// ```
    /// use batchbridge_operator::crd::StageWhen;
    ///
    /// assert!(StageWhen::Always.applies(false));
    /// assert!(!StageWhen::OnSuccess.applies(false));
    /// assert!(!StageWhen::OnFailure.applies(true));
    /// ```
    pub fn applies(self, succeeded: bool) -> bool {
        match self {
            Self::Always => true,
            Self::OnSuccess => succeeded,
            Self::OnFailure => !succeeded,
        }
    }
}
