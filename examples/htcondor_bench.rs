//! Measures the HTCondor backend against the test bed's pool (`tests/testbed/up.sh` first):
//!
//! - for N = 10, 100 and 1000 jobs, status cycles over all N until every job ended: the
//!   scheduler commands (condor_q, condor_history) each cycle ran and the wall time of a
//!   cycle;
//! - submit throughput through the backend over one SSH connection (200 concurrent
//!   `submit`s, and one `submit_many`), against a plain `condor_submit` loop (one job per
//!   call) in one SSH session and one `condor_submit` of 200 jobs (`queue 200`), in the same
//!   run;
//! - the SSH connections opened over the whole run.
//!
//! ```text
//! cargo run --release --example htcondor_bench            # N = 10, 100, 1000
//! cargo run --release --example htcondor_bench -- 10 50   # other sizes
//! ```

#![allow(clippy::print_stdout)]

use std::time::Duration;

use batchbridge_core::Result;
use batchbridge_examples::bench::{Scheduler, cycles_and_throughput};
use batchbridge_htcondor::{HtcondorBackend, HtcondorConfig};
use batchbridge_testbed::htcondor_shell;

#[tokio::main]
async fn main() -> Result<()> {
    let condor = Scheduler {
        status_commands: &["condor_q", "condor_history"],
        plain_submit: "printf 'executable = /bin/true\\nqueue\\n' | condor_submit -terse -",
        submit_tool: "condor_submit",
        // The jobs of one cluster: what an array does, not N jobs of their own.
        submit_at_once: Some(
            "printf 'executable = /bin/true\\nqueue %s\\n' \"$1\" | condor_submit -terse - >/dev/null",
        ),
        backend: "HtcondorBackend",
        rest_between: Duration::ZERO,
    };
    cycles_and_throughput(&condor, htcondor_shell, |shell| {
        HtcondorBackend::new(shell, HtcondorConfig::default())
    })
    .await
}
