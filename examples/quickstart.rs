//! Submit a small script to the local backend, print each state change as it happens, then
//! print the script's output.
//!
//! ```text
//! cargo run --example quickstart
//! ```

#![allow(clippy::print_stdout)]

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use batchbridge_core::{
    BatchBackend, JobKey, JobSpec, JobState, LocalBackend, OutputRequest, Tracker,
};

const SCRIPT: &str = r#"echo "hello from job $BATCHBRIDGE_JOB_ID on $(hostname)"
for step in 1 2 3; do
    echo "step $step of 3"
    sleep 0.5
done
echo "done"
"#;

#[tokio::main]
async fn main() -> batchbridge_core::Result<()> {
    let state_dir = std::env::temp_dir().join("batchbridge-quickstart");
    let backend = Arc::new(LocalBackend::new(&state_dir)?);
    // One status call per interval for every job the tracker follows.
    let tracker = Tracker::new(backend.clone(), Duration::from_millis(100))?;

    // The key makes submit idempotent; a fresh one per run starts a fresh job.
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    let spec = JobSpec::new(
        JobKey::new(format!("quickstart-{nanos}"))?,
        "quickstart",
        SCRIPT,
    );
    let id = backend.submit(&spec).await?;
    println!(
        "submitted job {id} to the local backend (state in {})",
        state_dir.display()
    );

    // A submitted job starts Queued; print every state the tracker sees after that.
    let mut state = JobState::Queued;
    println!("{state}");
    let status = tracker
        .wait_with(&id, Duration::from_secs(60), |status| {
            if status.state != state {
                state = status.state;
                println!("{state}");
            }
        })
        .await?;

    match status.exit_code {
        Some(code) => println!("exit code {code}"),
        None => println!("no exit code ({})", status.reason.unwrap_or_default()),
    }
    let output = backend
        .fetch_output(&id, &OutputRequest::tail(64 * 1024))
        .await?;
    println!("--- output ---");
    print!("{}", output.stdout.text());
    if !output.stderr.data.is_empty() {
        println!("--- stderr ---");
        print!("{}", output.stderr.text());
    }
    Ok(())
}
