//! The conformance suite against `LocalBackend`, with a capacity of 2 CPUs.

use batchbridge_core::LocalBackend;

batchbridge_core::conformance_tests!(async {
    let dir = tempfile::tempdir().expect("temp dir").keep();
    LocalBackend::with_capacity(dir, 2).expect("local backend")
});
