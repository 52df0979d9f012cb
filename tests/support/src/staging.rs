//! The staging scenarios every SSH backend's real-cluster tests run (issue 32): a 200 MiB
//! file in and out in bounded memory, and a stage-out cut off by killing this process's
//! OpenSSH master mid-file. Each backend calls [`large_file_and_killed_master`] from a test
//! binary of its own, so that no other test's memory counts in the peak.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use batchbridge_core::conformance::{self, Config, file_sha256};
use batchbridge_core::staging::{StageIn, StageOut, Transfer};
use batchbridge_core::{BatchBackend, ErrorKind, JobSpec, JobState, OutputRequest};

/// The most this test process may hold resident during a 200 MiB transfer.
pub const MAX_STAGING_RSS: u64 = 64 << 20;

/// Both scenarios, one after the other, on `backend`; `customize` sets what the backend's
/// specs need (a queue).
pub async fn large_file_and_killed_master<B: BatchBackend + ?Sized>(backend: &B, config: &Config) {
    conformance::a_large_file_stages_in_and_out_in_bounded_memory(backend, config, MAX_STAGING_RSS)
        .await
        .unwrap_or_else(|err| panic!("200 MiB staging: {err}"));
    a_stage_out_cut_off_by_a_killed_master_leaves_no_partial_file(backend, config).await;
}

/// A job writes 200 MiB of random bytes and prints their SHA-256; its stage-out is cut off
/// by killing this process's OpenSSH master once 20 MiB arrived: it fails, and neither the
/// final name nor a partial file is left; run again, it completes with the right digest.
pub async fn a_stage_out_cut_off_by_a_killed_master_leaves_no_partial_file<
    B: BatchBackend + ?Sized,
>(
    backend: &B,
    config: &Config,
) {
    let local = tempfile::tempdir().unwrap();
    let back = local.path().join("back");
    let mut spec = JobSpec::new(
        conformance::unique_key("staging-cut"),
        "staging-cut",
        "mkdir -p out && head -c 209715200 /dev/urandom > out/big.bin && \
         sha256sum out/big.bin | cut -d' ' -f1\n",
    )
    .with_stage_in(StageIn::bytes(b"x".to_vec(), "x"))
    .with_stage_out(StageOut::new("out/big.bin", &back));
    (config.customize)(&mut spec);
    let id = backend.submit(&spec).await.unwrap();
    let status = conformance::wait_terminal(backend, &id, config)
        .await
        .unwrap();
    assert_eq!(status.state, JobState::Succeeded, "{status:?}");
    let output = backend
        .fetch_output(&id, &OutputRequest::tail(200))
        .await
        .unwrap();
    let digest = output.stdout.text().trim().to_owned();
    assert_eq!(digest.len(), 64, "the job printed {digest:?}");

    let killed = Arc::new(AtomicBool::new(false));
    let kill = Arc::clone(&killed);
    let cut = Transfer::default().with_progress(move |p| {
        if p.done >= 20 << 20 && p.done < p.total && !kill.swap(true, Ordering::SeqCst) {
            kill_ssh_masters_of_this_process();
        }
    });
    let err = backend
        .stage_out(&id, &spec.stage_out, &spec.stage_limits, &cut)
        .await
        .expect_err("a stage-out whose connection was killed mid-file succeeded");
    assert!(killed.load(Ordering::SeqCst), "the master was never killed");
    assert!(
        matches!(
            err.kind(),
            ErrorKind::ConnectionLost | ErrorKind::CommandFailed | ErrorKind::Io
        ),
        "{err}"
    );
    let left: Vec<_> = std::fs::read_dir(back.join("out"))
        .map(|dir| dir.map(|e| e.unwrap().file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "a cut-off stage-out left {left:?}");

    let staged = backend
        .stage_out(
            &id,
            &spec.stage_out,
            &spec.stage_limits,
            &Transfer::default(),
        )
        .await
        .unwrap();
    assert_eq!(staged.files.len(), 1);
    assert_eq!(file_sha256(&back.join("out/big.bin")).unwrap(), digest);
    backend.cleanup(&spec.key).await.unwrap();
}

/// Sends SIGKILL to every `ssh` process this process started (its OpenSSH masters).
pub fn kill_ssh_masters_of_this_process() {
    let me = std::process::id().to_string();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid ...
        let Some((comm, rest)) = stat.split_once(") ") else {
            continue;
        };
        let parent = rest.split_whitespace().nth(1);
        if comm.ends_with("(ssh") && parent == Some(me.as_str()) {
            let pid = entry.file_name().to_string_lossy().into_owned();
            let _ = std::process::Command::new("kill")
                .args(["-KILL", &pid])
                .status();
        }
    }
}
