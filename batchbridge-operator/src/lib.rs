//! The batchbridge Kubernetes operator: `BatchJob` and `BatchCluster` custom resources
//! reconciled onto any `BatchBackend`.
//!
//! Not implemented yet: this crate is a placeholder in the workspace layout.
