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
    /// Every object whose key starts with this, at most 1000 of them (an input); where
    /// the files of a glob or directory output go (ending in /).
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

// The CEL test of an output path that names many files: a glob or a directory (as
// `OutputFiles::of` says).
macro_rules! MANY_FILES {
    () => {
        "(self.path.endsWith('/') || self.path.contains('*') || self.path.contains('?') || self.path.contains('['))"
    };
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
    validation = Rule::new(concat!("!has(self.objectStore) || has(self.objectStore.prefix) == ", MANY_FILES!()))
        .message("an output's objectStore names a prefix for a glob or directory path (with *, ? or [, or ending in /) and a key for one file")
        .reason(Reason::FieldValueInvalid),
    validation = Rule::new("!has(self.objectStore) || !has(self.objectStore.prefix) || self.objectStore.prefix.endsWith('/')")
        .message("an output's objectStore prefix ends with /")
        .reason(Reason::FieldValueInvalid),
    validation = Rule::new(concat!("!has(self.configMap) || !", MANY_FILES!()))
        .message("a configMap output is one file, not a glob or directory")
        .reason(Reason::FieldValueInvalid),
)]
pub struct JobOutput {
    /// The file, relative to the job's working directory, such as "results/summary.csv";
    /// for an objectStore prefix, a glob ("results/*.csv": *, ? and [...] within one path
    /// component, as the shell expands them) or a directory ending in / ("results/", every
    /// file under it). Of a glob or directory, only regular files are sent, at most 1000
    /// and 5 GiB together (beyond either, none is); names with a control character, a "."
    /// or ".." component are skipped, symbolic links are not followed.
    #[x_kube(validation = Rule::new(RELATIVE_PATH).message(RELATIVE_PATH_MESSAGE))]
    #[schemars(length(min = 1, max = 1024))]
    pub path: String,
    /// When it is sent: OnSuccess (the default; the script exited 0), OnFailure or Always.
    #[serde(default)]
    pub when: StageWhen,
    /// The object it becomes (key), or for a glob or directory the prefix (ending in /)
    /// each of its files goes under: at the prefix and its path less the directory (or the
    /// glob's leading directories), such as results/sub/c.txt of "results/" under prefix
    /// "run-1/" as "run-1/sub/c.txt". The job sends such files with curl (a node without
    /// curl reports them not sent).
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

/// What an output's path names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputFiles<'a> {
    /// One file.
    One,
    /// The regular files a glob matches; the key of each is its path less `leading` (the
    /// glob's components before the first with a wildcard, each with its /).
    Glob {
        /// The directories before the first wildcard, such as "results/".
        leading: &'a str,
    },
    /// Every regular file under a directory (the path ends in /); the key of each is its
    /// path less the directory's.
    Directory,
}

impl<'a> OutputFiles<'a> {
    /// What `path` names: a directory if it ends in /, a glob if it has *, ? or [.
    ///
    /// ```
    /// use batchbridge_operator::crd::OutputFiles;
    ///
    /// assert_eq!(OutputFiles::of("results/summary.csv"), OutputFiles::One);
    /// assert_eq!(OutputFiles::of("results/"), OutputFiles::Directory);
    /// assert_eq!(OutputFiles::of("results/*/x.txt"), OutputFiles::Glob { leading: "results/" });
    /// assert_eq!(OutputFiles::of("*.csv"), OutputFiles::Glob { leading: "" });
    /// ```
    pub fn of(path: &'a str) -> Self {
        let wildcard = |part: &str| part.contains(['*', '?', '[']);
        if path.ends_with('/') {
            Self::Directory
        } else if wildcard(path) {
            let first = path.split('/').take_while(|part| !wildcard(part));
            let leading = first.map(|part| part.len() + 1).sum();
            Self::Glob {
                leading: &path[..leading],
            }
        } else {
            Self::One
        }
    }
}
