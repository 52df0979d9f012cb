//! What the real-pool tests share: a backend on the test bed's pool, unique keys, waiting.

// Each test binary compiles this module and uses part of it.
#![allow(dead_code, unreachable_pub, unused_imports)]

use std::sync::Arc;
use std::time::Duration;

use batchbridge_core::conformance::unique_key;
use batchbridge_core::events::EventStream;
use batchbridge_core::shell::{Command, Shell};
use batchbridge_core::{BatchBackend, JobId, JobStatus};
use batchbridge_htcondor::events::EVENT_LOG;
use batchbridge_htcondor::{HtcondorBackend, HtcondorConfig};
use batchbridge_testbed::{htcondor_shell, wait_until};

/// How long an events test waits for an event before it fails (a guard against hanging,
/// not a measure: the pool starts a job within seconds).
pub const PATIENCE: Duration = Duration::from_secs(120);

pub use batchbridge_testbed::unique_spec as spec;

/// A backend for the test bed's pool over its own SSH connection.
pub fn backend() -> HtcondorBackend {
    HtcondorBackend::new(Arc::new(htcondor_shell()), HtcondorConfig::default()).unwrap()
}

/// Polls the backend until `done` holds for the job; fails after 2 minutes.
pub async fn wait_for(
    backend: &HtcondorBackend,
    id: &JobId,
    what: &str,
    done: impl Fn(&JobStatus) -> bool,
) -> JobStatus {
    wait_until(backend, id, Duration::from_secs(120), what, done).await
}

/// A backend on the test bed's pool with a work directory (and so an event log) of its
/// own, its shell, and the work directory's path relative to the login directory.
pub fn events_backend(name: &str) -> (HtcondorBackend, Arc<dyn Shell>, String) {
    let work = format!(".batchbridge/htcondor-events/{}", unique_key(name));
    let shell: Arc<dyn Shell> = Arc::new(htcondor_shell());
    let config = HtcondorConfig::default().with_work_dir(work.clone());
    let backend = HtcondorBackend::new(Arc::clone(&shell), config).unwrap();
    (backend, shell, work)
}

/// Opens the backend's event source and waits until its follower reads the log: a marker
/// event appended to the log by hand comes back (cluster 0, which no job has).
pub async fn open_events(backend: &HtcondorBackend, shell: &dyn Shell, work: &str) -> EventStream {
    let mut events = backend.events().unwrap().open().await.unwrap();
    let marker = JobId::from("0");
    let append = Command::sh(
        "printf '001 (0.000.000) marker\\n...\\n' >>\"$1/$2\"",
        [work, EVENT_LOG],
    );
    loop {
        // The log may not exist before the follower creates it, nor be tailed yet: again.
        let _ = shell.run(&append).await;
        let marked = tokio::time::timeout(Duration::from_secs(2), async {
            while let Some(event) = events.recv().await {
                if event.id == marker {
                    return true;
                }
            }
            panic!("the event stream ended before the follower read the log");
        })
        .await;
        if marked.is_ok() {
            return events;
        }
    }
}
