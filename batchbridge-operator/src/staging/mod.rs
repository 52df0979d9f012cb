//! A BatchJob's spec.inputs and spec.outputs.
//!
//! The job moves its own data: the operator reads the ConfigMap and Secret keys (small,
//! carried in the job's script), signs a URL for each object to fetch or send (the
//! credentials stay in the operator), and wraps the script with the lines that fetch the
//! inputs first and send the outputs when it exits ([`wrap_script`]), with curl or wget,
//! whichever the node has. Objects of any size so never pass through the operator's memory,
//! nothing is installed on the cluster, and a transfer runs where the data is used (the
//! compute node), not through the operator's SSH connection. After the job ended the
//! operator asks the store whether each output arrived ([`check_outputs`]): the condition
//! OutputsStaged.
//!
//! Tenant safety: every object read is in the job's own namespace (the fields have no
//! namespace); a Secret (an input or an object store's credentials) is used only if it
//! carries the label [`JOB_INPUT_LABEL`]` = "true"`, which whoever may write the Secret
//! sets: the operator cannot know whether the job's author may read a Secret (the
//! BatchJob does not say who created it), so the Secret's owner says BatchJobs may.

mod allowed;
mod config_map;
mod post_policy;
mod script;
mod store;

use std::collections::BTreeMap;
use std::time::SystemTime;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::{Api, Client, ResourceExt as _};

pub use allowed::{AllowedStores, BadEndpoint};
pub use config_map::{MAX_CONFIG_MAP_OUTPUTS, to_config_maps};
pub use post_policy::{PolicyTerms, PostForm};
pub use script::{
    InputSource, MAX_INLINE_BYTES, MAX_OUTPUT_BYTES, MAX_OUTPUT_FILES, OutputTarget, StagedInput,
    StagedOutput, wrap_script,
};
pub use store::{
    Listed, MAX_OUTPUT_PREFIX_OBJECTS, MAX_PREFIX_OBJECTS, Store, StoreError, URL_VALIDITY,
};

use crate::crd::{BatchJob, JobInput, JobOutput, KeyReference, ObjectLocation};

/// The label a Secret needs (value "true") before a BatchJob may use it, as an input or as
/// an object store's credentials.
pub const JOB_INPUT_LABEL: &str = "batchbridge.dev/job-input";

/// The keys of an object store's credentials Secret.
pub const ACCESS_KEY_ID: &str = "accessKeyId";
/// See [`ACCESS_KEY_ID`].
pub const SECRET_ACCESS_KEY: &str = "secretAccessKey";

/// What the job's script needs to fetch its inputs and send its outputs.
#[derive(Debug, Default)]
pub struct Staging {
    /// The inputs, in spec order (a prefix expanded to its objects).
    pub inputs: Vec<StagedInput>,
    /// The outputs, in spec order.
    pub outputs: Vec<StagedOutput>,
    /// The bytes of the ConfigMap and Secret inputs, carried in the script.
    pub inline_bytes: usize,
    /// The bytes of the objects of the inputs' prefixes, as listed.
    pub listed_bytes: u64,
}

impl Staging {
    /// The inputs in words for an Event: how many files, from where, how many bytes known
    /// before the job fetches them.
    pub fn inputs_summary(&self) -> String {
        let inline = self
            .inputs
            .iter()
            .filter(|input| matches!(input.source, InputSource::Inline { .. }))
            .count();
        let objects = self.inputs.len() - inline;
        format!(
            "{} files: {inline} from ConfigMaps and Secrets ({} bytes, in the script), {objects} \
             objects fetched by the job ({} bytes listed under prefixes)",
            self.inputs.len(),
            self.inline_bytes,
            self.listed_bytes
        )
    }
}

/// Why an input or output cannot be had: the message for the job's status (reason
/// InputRefused), naming the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

/// Reads and signs everything the job's spec.inputs and spec.outputs name, in the job's
/// namespace only, from the object stores `allowed` lets it name only.
pub async fn prepare(
    client: &Client,
    allowed: &AllowedStores,
    job: &BatchJob,
) -> Result<Staging, Refused> {
    Reader::new(client, allowed, job).prepare(job).await
}

struct Reader<'a> {
    config_maps: Api<ConfigMap>,
    secrets: Api<Secret>,
    allowed: &'a AllowedStores,
    stores: BTreeMap<String, Store>,
}

impl<'a> Reader<'a> {
    fn new(client: &Client, allowed: &'a AllowedStores, job: &BatchJob) -> Self {
        let namespace = job.namespace().unwrap_or_default();
        Self {
            config_maps: Api::namespaced(client.clone(), &namespace),
            secrets: Api::namespaced(client.clone(), &namespace),
            allowed,
            stores: BTreeMap::new(),
        }
    }

    async fn prepare(mut self, job: &BatchJob) -> Result<Staging, Refused> {
        let mut staging = Staging::default();
        let mut inline = 0;
        for (index, input) in job.spec.inputs.iter().enumerate() {
            let field = format!("spec.inputs[{index}] ({})", input.path);
            let within = |err: Refused| Refused(format!("{field}: {}", err.0));
            if let Some(reference) = &input.config_map {
                let bytes = self.config_map_key(reference).await.map_err(within)?;
                inline += bytes.len();
                staging.inputs.push(StagedInput {
                    path: input.path.clone(),
                    source: InputSource::Inline {
                        bytes,
                        private: false,
                    },
                });
            } else if let Some(reference) = &input.secret {
                let bytes = self.secret_key(reference).await.map_err(within)?;
                inline += bytes.len();
                staging.inputs.push(StagedInput {
                    path: input.path.clone(),
                    source: InputSource::Inline {
                        bytes,
                        private: true,
                    },
                });
            } else if let Some(location) = &input.object_store {
                let store = self.store(location).await.map_err(within)?;
                if let Some(key) = &location.key {
                    staging.inputs.push(StagedInput {
                        path: input.path.clone(),
                        source: InputSource::Url(store.get_url(key)),
                    });
                } else if let Some(prefix) = &location.prefix {
                    let objects = store
                        .list(prefix, MAX_PREFIX_OBJECTS)
                        .await
                        .map_err(|err| within(Refused(err.0)))?;
                    for object in objects {
                        staging.listed_bytes += object.size;
                        let path =
                            prefixed_path(&input.path, prefix, &object.key).map_err(within)?;
                        staging.inputs.push(StagedInput {
                            path,
                            source: InputSource::Url(store.get_url(&object.key)),
                        });
                    }
                }
            }
            staging.inline_bytes = inline;
            if inline > MAX_INLINE_BYTES {
                return Err(within(Refused(format!(
                    "the ConfigMap and Secret inputs come to more than {MAX_INLINE_BYTES} \
                     bytes: put large inputs in an object store"
                ))));
            }
        }
        for (index, output) in job.spec.outputs.iter().enumerate() {
            let Some(location) = &output.object_store else {
                continue;
            };
            let field = format!("spec.outputs[{index}] ({})", output.path);
            let store = self
                .store(location)
                .await
                .map_err(|err| Refused(format!("{field}: {}", err.0)))?;
            let target = match (&location.key, &location.prefix) {
                (Some(key), _) => OutputTarget::Put(store.put_url(key)),
                (None, prefix) => OutputTarget::Post(
                    store.post_form(prefix.as_deref().unwrap_or_default(), MAX_OUTPUT_BYTES),
                ),
            };
            staging.outputs.push(StagedOutput {
                path: output.path.clone(),
                when: output.when,
                target,
            });
        }
        Ok(staging)
    }

    async fn config_map_key(&self, reference: &KeyReference) -> Result<Vec<u8>, Refused> {
        let map = self
            .config_maps
            .get_opt(&reference.name)
            .await
            .map_err(|err| Refused(format!("ConfigMap {:?}: {err}", reference.name)))?
            .ok_or_else(|| {
                Refused(format!(
                    "no ConfigMap {:?} in the job's namespace",
                    reference.name
                ))
            })?;
        let text = map.data.as_ref().and_then(|data| data.get(&reference.key));
        let binary = map
            .binary_data
            .as_ref()
            .and_then(|data| data.get(&reference.key));
        match (text, binary) {
            (Some(text), _) => Ok(text.clone().into_bytes()),
            (None, Some(bytes)) => Ok(bytes.0.clone()),
            (None, None) => Err(Refused(format!(
                "ConfigMap {:?} has no key {:?}",
                reference.name, reference.key
            ))),
        }
    }

    /// A Secret of the job's namespace that carries [`JOB_INPUT_LABEL`].
    async fn secret(&self, name: &str) -> Result<Secret, Refused> {
        let secret = self
            .secrets
            .get_opt(name)
            .await
            .map_err(|err| Refused(format!("Secret {name:?}: {err}")))?
            .ok_or_else(|| Refused(format!("no Secret {name:?} in the job's namespace")))?;
        if secret.labels().get(JOB_INPUT_LABEL).map(String::as_str) != Some("true") {
            return Err(Refused(format!(
                "Secret {name:?} is not labelled {JOB_INPUT_LABEL}=true: its owner has not \
                 let BatchJobs use it"
            )));
        }
        Ok(secret)
    }

    async fn secret_key(&self, reference: &KeyReference) -> Result<Vec<u8>, Refused> {
        let secret = self.secret(&reference.name).await?;
        secret_bytes(&secret, &reference.key).ok_or_else(|| {
            Refused(format!(
                "Secret {:?} has no key {:?}",
                reference.name, reference.key
            ))
        })
    }

    /// The store of `location`, if its endpoint is allowed, its credentials read once per
    /// Secret and endpoint.
    async fn store(&mut self, location: &ObjectLocation) -> Result<Store, Refused> {
        self.allowed.check(&location.endpoint)?;
        let name = &location.credentials_secret.name;
        let id = format!("{name}\n{}\n{}", location.endpoint, location.bucket);
        if let Some(store) = self.stores.get(&id) {
            return Ok(store.clone());
        }
        let secret = self.secret(name).await?;
        let key = |key: &str| {
            secret_bytes(&secret, key)
                .and_then(|bytes| String::from_utf8(bytes).ok())
                .map(|text| text.trim().to_owned())
                .ok_or_else(|| Refused(format!("Secret {name:?} has no key {key:?}")))
        };
        let store = Store::new(location, &key(ACCESS_KEY_ID)?, &key(SECRET_ACCESS_KEY)?)
            .map_err(|err| Refused(err.0))?;
        self.stores.insert(id, store.clone());
        Ok(store)
    }
}

fn secret_bytes(secret: &Secret, key: &str) -> Option<Vec<u8>> {
    let binary = secret.data.as_ref().and_then(|data| data.get(key));
    let text = secret.string_data.as_ref().and_then(|data| data.get(key));
    binary
        .map(|bytes| bytes.0.clone())
        .or_else(|| text.map(|text| text.clone().into_bytes()))
}

/// Where an output goes, in words for Events: "BUCKET/KEY at ENDPOINT" (or a prefix) or
/// "ConfigMap NAME, key KEY".
pub fn destination(output: &JobOutput) -> String {
    match (&output.object_store, &output.config_map) {
        (Some(store), _) => format!(
            "{}/{} at {}",
            store.bucket,
            store
                .key
                .as_ref()
                .or(store.prefix.as_ref())
                .map_or("", String::as_str),
            store.endpoint
        ),
        (None, Some(map)) => format!("ConfigMap {}, key {}", map.name, map.key),
        (None, None) => String::new(),
    }
}

/// Where an input comes from, in words for Events.
pub fn origin(input: &JobInput) -> String {
    match (&input.config_map, &input.secret, &input.object_store) {
        (Some(map), _, _) => format!("ConfigMap {}, key {}", map.name, map.key),
        (None, Some(secret), _) => format!("Secret {}, key {}", secret.name, secret.key),
        (None, None, Some(store)) => match (&store.key, &store.prefix) {
            (Some(key), _) => format!("{}/{key} at {}", store.bucket, store.endpoint),
            (None, prefix) => format!(
                "every object under {}/{} at {}",
                store.bucket,
                prefix.as_deref().unwrap_or_default(),
                store.endpoint
            ),
        },
        (None, None, None) => String::new(),
    }
}

/// Where the object `key` listed under `prefix` goes: `dir`/(key less prefix). A key whose
/// rest would climb out of `dir` (a `..` component, an absolute path) is refused: keys are
/// whatever whoever writes the bucket chose.
fn prefixed_path(dir: &str, prefix: &str, key: &str) -> Result<String, Refused> {
    let rest = key
        .strip_prefix(prefix)
        .unwrap_or(key)
        .trim_start_matches('/');
    let hostile = rest.is_empty()
        || rest.ends_with('/')
        || rest
            .split('/')
            .any(|part| part == ".." || part == "." || part.is_empty())
        || rest.chars().any(char::is_control);
    if hostile {
        return Err(Refused(format!(
            "object {key:?} under prefix {prefix:?} has no name a file can take"
        )));
    }
    Ok(format!("{}/{rest}", dir.trim_end_matches('/')))
}

/// What arrived of one output: nothing to say of one file; of a glob or directory, the
/// objects written under its prefix by this attempt.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Arrived {
    /// How many objects (0 for one file's output).
    pub objects: usize,
    /// Their bytes together.
    pub bytes: u64,
}

/// Whether each of the job's outputs its `when` applies to arrived in its store after
/// `since` (the start of the job's attempt): for each output, its path and what the store
/// said (for a glob or directory, how many objects its prefix holds that were written
/// since, at least one). `succeeded` is whether the script exited 0. A store `allowed` no
/// longer lets the job name (the administrator changed the list) is not asked.
pub async fn check_outputs(
    client: &Client,
    allowed: &AllowedStores,
    job: &BatchJob,
    succeeded: bool,
    since: SystemTime,
) -> Vec<(JobOutput, Result<Arrived, String>)> {
    let mut reader = Reader::new(client, allowed, job);
    let mut checked = Vec::new();
    for output in &job.spec.outputs {
        let Some(location) = &output.object_store else {
            continue;
        };
        if !output.when.applies(succeeded) {
            continue;
        }
        let store = match reader.store(location).await {
            Err(refused) => {
                checked.push((output.clone(), Err(refused.0)));
                continue;
            }
            Ok(store) => store,
        };
        let result = match (&location.key, &location.prefix) {
            (Some(key), _) => one_arrived(&store, location, key, since).await,
            (None, prefix) => {
                many_arrived(
                    &store,
                    location,
                    prefix.as_deref().unwrap_or_default(),
                    since,
                )
                .await
            }
        };
        checked.push((output.clone(), result));
    }
    checked
}

async fn one_arrived(
    store: &Store,
    location: &ObjectLocation,
    key: &str,
    since: SystemTime,
) -> Result<Arrived, String> {
    match store.modified(key).await {
        Ok(Some(at)) if at + std::time::Duration::from_secs(1) >= since => Ok(Arrived::default()),
        Ok(Some(at)) => Err(format!(
            "{key:?} in bucket {:?} was written at {}, before this attempt: the job did \
             not send it",
            location.bucket,
            humantime::format_rfc3339_seconds(at)
        )),
        Ok(None) => Err(format!(
            "{key:?} is not in bucket {:?}: the job did not send it (see its stderr)",
            location.bucket
        )),
        Err(err) => Err(err.0),
    }
}

async fn many_arrived(
    store: &Store,
    location: &ObjectLocation,
    prefix: &str,
    since: SystemTime,
) -> Result<Arrived, String> {
    let listed = store
        .list(prefix, MAX_OUTPUT_PREFIX_OBJECTS)
        .await
        .map_err(|err| err.0)?;
    let arrived = written_since(&listed, since);
    if arrived.objects == 0 {
        return Err(format!(
            "no object under {prefix:?} in bucket {:?} was written by this attempt: the job \
             sent none (see its stderr)",
            location.bucket
        ));
    }
    Ok(arrived)
}

/// The objects of `listed` written at or after `since` (a store that does not say when
/// counts as now), with their bytes.
fn written_since(listed: &[Listed], since: SystemTime) -> Arrived {
    listed
        .iter()
        .filter(|object| {
            object
                .modified
                .is_none_or(|at| at + std::time::Duration::from_secs(1) >= since)
        })
        .fold(Arrived::default(), |arrived, object| Arrived {
            objects: arrived.objects + 1,
            bytes: arrived.bytes + object.size,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixed_keys_land_under_the_directory_or_are_refused() {
        let cases = [
            ("data", "in/", "in/a.csv", Ok("data/a.csv")),
            ("data/", "in/", "in/sub/b.csv", Ok("data/sub/b.csv")),
            ("data", "in", "in/c", Ok("data/c")),
            ("data", "in/", "in/../../etc/passwd", Err(())),
            ("data", "in/", "in//x", Ok("data/x")),
            ("data", "in/", "in/a//b", Err(())),
            ("data", "in/", "in/./b", Err(())),
            ("data", "in/", "in/dir/", Err(())),
            ("data", "in/", "in/", Err(())),
            ("data", "in/", "in/a\nb", Err(())),
        ];
        for (dir, prefix, key, expected) in cases {
            let got = prefixed_path(dir, prefix, key);
            assert_eq!(got.as_deref().map_err(|_| ()), expected, "{key:?}: {got:?}");
        }
    }

    #[test]
    fn only_objects_written_since_the_attempt_count() {
        let at = |secs| Some(SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(secs));
        let listed = |size, modified| Listed {
            key: "p/k".into(),
            size,
            modified,
        };
        let since = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1000);
        let cases = [
            (vec![], (0, 0)),
            (vec![listed(5, at(1000)), listed(7, at(2000))], (2, 12)),
            (vec![listed(5, at(10)), listed(7, None)], (1, 7)),
            (vec![listed(5, at(999))], (1, 5)),
            (vec![listed(5, at(998))], (0, 0)),
        ];
        for (objects, (count, bytes)) in cases {
            let arrived = written_since(&objects, since);
            assert_eq!(
                (arrived.objects, arrived.bytes),
                (count, bytes),
                "{objects:?}"
            );
        }
    }
}
