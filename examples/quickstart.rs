//! Submit a small script to the local backend, print each state change as it happens, then
//! print the script's output.
//!
//! ```text
//! cargo run --example quickstart
//! ```

#![allow(clippy::print_stdout)]

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use batchbridge_core::{BatchBackend, JobKey, JobSpec, JobState, LocalBackend, OutputRequest};

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
    let backend = LocalBackend::new(&state_dir)?;

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

    // A submitted job starts Queued; print every change the status calls show after that.
    let mut state = JobState::Queued;
    println!("{state}");
    let status = loop {
        let status = backend
            .status(std::slice::from_ref(&id))
            .await?
            .remove(&id)
            .unwrap_or_else(|| {
                batchbridge_core::JobStatus::unknown("the backend did not answer for this job")
            });
        if status.state != state {
            state = state.transition(status.state).map_err(|err| {
                batchbridge_core::Error::new(
                    batchbridge_core::ErrorKind::UnexpectedOutput,
                    err.to_string(),
                )
            })?;
            println!("{state}");
        }
        if state.is_terminal() {
            break status;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };

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
