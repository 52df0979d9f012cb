//! Refused submits by kind, on the real server: a per-user job limit and a disabled queue
//! are temporary (the same submit passes once a job ends or the queue is enabled again), an
//! unknown queue is permanent. Each case uses a queue only it uses (tests/testbed/pbs.sh
//! makes them: `closable`, and `onejob` with `max_queued = [u:PBS_GENERIC=1]`), so other
//! tests running at the same time never see a queue closed or a limit reached.

// Test helpers panic on purpose: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use batchbridge_core::{BatchBackend, Error, ErrorKind, JobId, JobState, Refusal};
use batchbridge_testbed::{RunOnDrop, testbed_script};

fn assert_refused(err: &Error, refusal: Refusal, temporary: bool) {
    assert_eq!(err.kind(), ErrorKind::Rejected, "{err}");
    assert_eq!(err.refusal(), Some(refusal), "{err}");
    assert_eq!(err.is_temporary(), temporary, "{err}");
}

/// Deletes the job when dropped, so that a failed test leaves no job holding the limit.
struct DeleteOnDrop(JobId);

impl Drop for DeleteOnDrop {
    fn drop(&mut self) {
        let id = self.0.as_str().to_owned();
        // The test's runtime may be unwinding: a runtime of its own.
        let _ = std::thread::spawn(move || {
            tokio::runtime::Runtime::new().unwrap().block_on(async {
                common::as_user("sh", &["-c", &format!("qdel {id} || true")]).await
            })
        })
        .join();
    }
}

#[tokio::test]
async fn a_disabled_queue_refuses_for_now() {
    let pbs = common::backend();
    let mut spec = common::spec("disabled", "true\n");
    spec.queue = Some("closable".into());
    let _enable = RunOnDrop::script("pbs.sh", &["qmgr", "set queue closable enabled = True"]);
    testbed_script("pbs.sh", &["qmgr", "set queue closable enabled = False"]);
    let err = pbs.submit(&spec).await.unwrap_err();
    assert_refused(&err, Refusal::QueueClosed, true);
    assert!(err.message().contains("queue \"closable\""), "{err}");

    testbed_script("pbs.sh", &["qmgr", "set queue closable enabled = True"]);
    let id = pbs.submit(&spec).await.unwrap();
    let _delete = DeleteOnDrop(id.clone());
    let done = common::wait_for(&pbs, &id, "the end", |s| s.state.is_terminal()).await;
    assert_eq!(done.state, JobState::Succeeded, "{done:?}");
}

#[tokio::test]
async fn a_per_user_job_limit_refuses_until_a_job_ends() {
    let pbs = common::backend();
    let spec = |name: &str| {
        let mut spec = common::spec(name, "true\n");
        spec.queue = Some("onejob".into());
        spec
    };
    let holder = pbs
        .submit(&spec("holder").with_passthrough("pbs", "-h"))
        .await
        .unwrap();
    let delete_holder = DeleteOnDrop(holder.clone());
    let second = spec("second");
    let err = pbs.submit(&second).await.unwrap_err();
    assert_refused(&err, Refusal::SubmitLimit, true);

    drop(delete_holder);
    common::wait_for(&pbs, &holder, "the holder's end", |s| s.state.is_terminal()).await;
    let id = pbs.submit(&second).await.unwrap();
    let _delete = DeleteOnDrop(id.clone());
    let done = common::wait_for(&pbs, &id, "the end", |s| s.state.is_terminal()).await;
    assert_eq!(done.state, JobState::Succeeded, "{done:?}");
}

#[tokio::test]
async fn an_unknown_queue_is_refused_for_good() {
    let pbs = common::backend();
    let mut spec = common::spec("unknown-queue", "true\n");
    spec.queue = Some("no-such-queue".into());
    let err = pbs.submit(&spec).await.unwrap_err();
    assert_refused(&err, Refusal::InvalidRequest, false);
}
