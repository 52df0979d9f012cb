//! Measures the PBS backend against the test bed's OpenPBS server (`tests/testbed/up.sh`
//! first):
//!
//! - for N = 10, 100 and 1000 jobs, status cycles over all N until every job ended: the
//!   scheduler commands (qstat) each cycle ran and the wall time of a cycle;
//! - submit throughput through the backend over one SSH connection (200 concurrent
//!   `submit`s, and one `submit_many`), against a plain `qsub` loop (one job per call) in
//!   one SSH session, in the same run;
//! - the SSH connections opened over the whole run.
//!
//! ```text
//! cargo run --release --example pbs_bench            # N = 10, 100, 1000
//! cargo run --release --example pbs_bench -- 10 50   # other sizes
//! ```

#![allow(clippy::print_stdout)]

use std::time::Duration;

use batchbridge_core::Result;
use batchbridge_examples::bench::{Scheduler, cycles_and_throughput};
use batchbridge_pbs::{PbsBackend, PbsConfig};
use batchbridge_testbed::pbs_shell;

#[tokio::main]
async fn main() -> Result<()> {
    let pbs = Scheduler {
        status_commands: &["qstat"],
        plain_submit: "qsub -f -o /dev/null -j oe -- /bin/true",
        submit_tool: "qsub",
        submit_at_once: None,
        backend: "PbsBackend",
        // Each qsub authenticates from a privileged port that stays in TIME_WAIT for 60 s:
        // without a rest, a way of submitting waits for the ports the one before it used.
        rest_between: Duration::from_secs(61),
    };
    cycles_and_throughput(&pbs, pbs_shell, |shell| {
        PbsBackend::new(shell, PbsConfig::default())
    })
    .await
}
