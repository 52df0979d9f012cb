//! The lean copy of a BatchJob the operator's cache keeps: only what its decisions read.
//!
//! At 10,000 held BatchJobs every byte kept per job counts (docs/PERFORMANCE.md). The
//! cache never needs a job's managedFields, `kubectl apply`'s copy of the whole object in
//! the last-applied annotation, or its script: the script is read only to submit (or
//! place) an attempt, which uses the job as its status write returned it, or reads it
//! again ([`BatchJob::is_lean`]). What the decisions need of the script, the spec's
//! digest, is computed before the script goes and kept with the copy.

use kube::ResourceExt;

use super::BatchJob;

/// The annotation of a lean copy that holds its full spec's [`digest`](super::BatchJobSpec::digest).
/// It exists only in the operator's memory: a lean copy is never written back.
const SPEC_DIGEST: &str = "batchbridge.dev/lean-spec-digest";

/// `kubectl apply`'s copy of the object as last applied: the whole spec once more.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

impl BatchJob {
    /// Makes this job the lean copy the cache keeps: without managedFields, the
    /// last-applied annotation or the script, its spec's digest kept.
    ///
    /// ```
    /// use batchbridge_operator::crd::BatchJob;
    ///
    /// let mut job: BatchJob = serde_json::from_str(r#"{
    ///     "apiVersion": "batchbridge.dev/v1alpha1", "kind": "BatchJob",
    ///     "metadata": {"name": "hello", "uid": "u1"},
    ///     "spec": {"clusterRef": {"name": "hpc"}, "script": "echo hello"}
    /// }"#)?;
    /// let digest = job.spec_digest();
    /// job.make_lean();
    /// assert!(job.is_lean());
    /// assert!(job.spec.script.is_empty());
    /// assert_eq!(job.spec_digest(), digest);
    /// assert!(job.job_spec(1).is_err(), "a lean copy is never submitted");
    /// # Ok::<(), serde_json::Error>(())
    /// ```
    pub fn make_lean(&mut self) {
        self.managed_fields_mut().clear();
        if self.is_lean() {
            return;
        }
        let digest = self.spec.digest();
        let annotations = self.annotations_mut();
        annotations.remove(LAST_APPLIED);
        annotations.insert(SPEC_DIGEST.to_owned(), digest);
        self.spec.script = String::new();
    }

    /// Whether this is a lean copy, whose script is not here: the API server refuses a
    /// BatchJob with an empty script (`script must not be empty`), so only
    /// [`make_lean`](Self::make_lean) leaves one.
    pub fn is_lean(&self) -> bool {
        self.spec.script.is_empty()
    }

    /// The [`digest`](super::BatchJobSpec::digest) of this job's full spec, of a lean copy
    /// as of a full one.
    pub fn spec_digest(&self) -> String {
        match self.annotations().get(SPEC_DIGEST) {
            Some(digest) if self.is_lean() => digest.clone(),
            _ => self.spec.digest(),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn job(metadata: serde_json::Value, script: &str) -> BatchJob {
        serde_json::from_value(json!({
            "apiVersion": "batchbridge.dev/v1alpha1",
            "kind": "BatchJob",
            "metadata": metadata,
            "spec": {
                "clusterRef": {"name": "hpc"},
                "script": script,
                "resources": {"cpus": 2},
                "environment": {"MODE": "fast"},
            },
            "status": {"phase": "Queued", "jobId": "42", "attempts": 1},
        }))
        .unwrap()
    }

    /// What `kubectl apply` leaves on a job: its managedFields and the whole object again
    /// in an annotation, beside the user's own annotations.
    fn applied(script: &str) -> BatchJob {
        job(
            json!({
                "name": "big",
                "namespace": "research",
                "uid": "u-1",
                "generation": 3,
                "resourceVersion": "812",
                "labels": {"team": "a"},
                "annotations": {
                    LAST_APPLIED: format!("{{\"spec\":{{\"script\":{script:?}}}}}"),
                    "team.example.org/owner": "alice",
                },
                "finalizers": ["batchbridge.dev/cancel-on-delete"],
                "managedFields": [{
                    "manager": "kubectl-client-side-apply",
                    "operation": "Update",
                    "apiVersion": "batchbridge.dev/v1alpha1",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:spec": {"f:script": {}}},
                }],
            }),
            script,
        )
    }

    #[test]
    fn the_lean_copy_keeps_what_decisions_read() {
        let script = format!(
            "#!/bin/bash\n#SBATCH --time=10\n{}",
            "echo x\n".repeat(2000)
        );
        let full = applied(&script);
        let mut lean = full.clone();
        lean.make_lean();

        let size = |job: &BatchJob| serde_json::to_vec(job).unwrap().len();
        assert!(
            size(&lean) * 10 < size(&full),
            "lean {} bytes, full {} bytes",
            size(&lean),
            size(&full)
        );
        // Gone: the script, managedFields and the last-applied copy.
        assert!(lean.is_lean() && !full.is_lean());
        assert!(lean.spec.script.is_empty());
        assert!(lean.managed_fields().is_empty());
        assert!(!lean.annotations().contains_key(LAST_APPLIED));
        // Kept: every other field, the status, and the spec's digest.
        assert_eq!(lean.spec_digest(), full.spec_digest());
        assert_eq!(lean.spec_digest(), full.spec.digest());
        assert_eq!(lean.status, full.status);
        assert_eq!(lean.spec.resources, full.spec.resources);
        assert_eq!(lean.spec.environment, full.spec.environment);
        assert_eq!(lean.spec.fixed_cluster(), Some("hpc"));
        assert_eq!(lean.metadata.generation, Some(3));
        assert_eq!(lean.resource_version().as_deref(), Some("812"));
        assert_eq!(lean.uid().as_deref(), Some("u-1"));
        assert_eq!(lean.labels(), full.labels());
        assert_eq!(lean.finalizers(), full.finalizers());
        assert_eq!(
            lean.annotations()
                .get("team.example.org/owner")
                .map(String::as_str),
            Some("alice")
        );
    }

    #[test]
    fn a_lean_copy_made_lean_again_keeps_its_digest() {
        let full = applied("echo hello");
        let mut lean = full.clone();
        lean.make_lean();
        let once = lean.clone();
        lean.make_lean();
        assert_eq!(
            serde_json::to_value(&lean).unwrap(),
            serde_json::to_value(&once).unwrap()
        );
        assert_eq!(lean.spec_digest(), full.spec.digest());
    }

    #[test]
    fn a_digest_annotation_on_a_full_job_is_not_believed() {
        // A tenant may write the annotation on their job; only a lean copy's counts.
        let mut forged = applied("echo hello");
        forged
            .annotations_mut()
            .insert(SPEC_DIGEST.to_owned(), "0000000000000000".to_owned());
        assert!(!forged.is_lean());
        assert_eq!(forged.spec_digest(), forged.spec.digest());
        let mut lean = forged.clone();
        lean.make_lean();
        assert_eq!(lean.spec_digest(), forged.spec.digest());
    }

    #[test]
    fn a_lean_copy_makes_no_job_spec() {
        let mut lean = applied("echo hello");
        lean.make_lean();
        let err = lean.job_spec(1).unwrap_err();
        assert!(err.to_string().contains("script"), "{err}");
        assert!(applied("echo hello").job_spec(1).is_ok());
    }
}
