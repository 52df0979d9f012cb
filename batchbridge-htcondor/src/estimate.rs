//! Start estimates: whether idle slots match the job's resources now, and how many idle
//! jobs wait in the queue ahead of it.
//!
//! Two questions, whatever the pool's size: the collector for the Unclaimed slots whose
//! free CPUs, memory, disk and GPUs cover the spec's (`condor_status -constraint`), and the
//! schedd for the idle jobs of all users (`condor_q -allusers -totals`). A matching slot
//! means [`EstimatedStart::Now`] (at the negotiator's next cycle); none means
//! [`EstimatedStart::Later`]: HTCondor gives no start time. The constraint is built from
//! the spec's numbers alone; passthrough submit commands (a `requirements` of the job's
//! own) are not part of it, so they can narrow what the estimate promises.

use batchbridge_core::estimate::{EstimatedStart, StartEstimate};
use batchbridge_core::remote::{CliScheduler, JobDirs};
use batchbridge_core::shell::Command;
use batchbridge_core::{Error, ErrorKind, JobSpec, Result};

use crate::description::{KIB, MIB};

/// The ClassAd constraint on slots that could start `spec` now: Unclaimed, not refusing
/// every job, with the free resources it asks for (rounded as its submit description
/// rounds them; HTCondor's default of one CPU). Numbers only: nothing of the spec's text
/// enters the expression.
///
/// ```
/// use batchbridge_core::{ByteSize, JobKey, JobSpec};
/// use batchbridge_htcondor::estimate::slot_constraint;
///
/// let mut spec = JobSpec::new(JobKey::new("k")?, "n", "true");
/// spec.resources.cpus = Some(2);
/// spec.resources.memory = Some(ByteSize::gib(1));
/// assert_eq!(
///     slot_constraint(&spec),
///     "State == \"Unclaimed\" && Start =!= false && Cpus >= 2 && Memory >= 1024"
/// );
/// # Ok::<(), batchbridge_core::Error>(())
/// ```
pub fn slot_constraint(spec: &JobSpec) -> String {
    let resources = &spec.resources;
    let cpus = resources.cpus.unwrap_or(1);
    let mut constraint = format!("State == \"Unclaimed\" && Start =!= false && Cpus >= {cpus}");
    if let Some(memory) = resources.memory {
        let mib = memory.as_u64().div_ceil(MIB);
        constraint.push_str(&format!(" && Memory >= {mib}"));
    }
    if let Some(disk) = resources.disk {
        let kib = disk.as_u64().div_ceil(KIB);
        constraint.push_str(&format!(" && Disk >= {kib}"));
    }
    if let Some(gpus) = resources.gpus.filter(|g| *g > 0) {
        // Machines without GPUs leave the attribute undefined.
        constraint.push_str(&format!(" && (GPUs ?: 0) >= {gpus}"));
    }
    constraint
}

/// The estimate from what the two questions answered: `slots`, `condor_status -af Name`'s
/// output (one matching slot a line), and `totals`, `condor_q -allusers -totals -af
/// AllusersIdle`'s (the idle jobs of all users).
///
/// ```
/// use batchbridge_core::estimate::EstimatedStart;
/// use batchbridge_htcondor::estimate::read_estimate;
///
/// let estimate = read_estimate("slot1@vm\nslot2@vm\n", "3\n\n")?;
/// assert_eq!(estimate.start, EstimatedStart::Now);
/// assert_eq!(estimate.detail.as_deref(), Some("2 matching idle slots; 3 idle jobs in the queue"));
/// assert_eq!(read_estimate("", "0\n")?.start, EstimatedStart::Later);
/// # Ok::<(), batchbridge_core::Error>(())
/// ```
pub fn read_estimate(slots: &str, totals: &str) -> Result<StartEstimate> {
    let matching = slots.lines().filter(|line| !line.trim().is_empty()).count();
    let idle: u64 = totals
        .split_whitespace()
        .next()
        .and_then(|count| count.parse().ok())
        .ok_or_else(|| {
            Error::new(
                ErrorKind::UnexpectedOutput,
                format!(
                    "condor_q -totals: no idle job count in {:?}",
                    batchbridge_core::error::excerpt(totals.trim())
                ),
            )
        })?;
    let start = match matching {
        0 => EstimatedStart::Later,
        _ => EstimatedStart::Now,
    };
    let mut estimate = StartEstimate::new(start);
    estimate.detail = Some(format!(
        "{}; {} in the queue",
        counted(
            u64::try_from(matching).unwrap_or(u64::MAX),
            "matching idle slot"
        ),
        counted(idle, "idle job")
    ));
    Ok(estimate)
}

/// `n` of `what`, in words: `1 idle job`, `2 idle jobs`.
fn counted(n: u64, what: &str) -> String {
    match n {
        1 => format!("1 {what}"),
        n => format!("{n} {what}s"),
    }
}

/// Asks the collector and the schedd ([`slot_constraint`], [`read_estimate`]).
pub(crate) async fn estimate_start<S: CliScheduler>(
    condor: &S,
    jobs: &JobDirs,
    spec: &JobSpec,
) -> Result<StartEstimate> {
    let slots = jobs
        .run(Command::new("condor_status").args([
            "-constraint".to_owned(),
            slot_constraint(spec),
            "-af".to_owned(),
            "Name".to_owned(),
        ]))
        .await?;
    if !slots.success() {
        return Err(condor.failure("condor_status", &slots));
    }
    let totals = jobs
        .run(Command::new("condor_q").args(["-allusers", "-totals", "-af", "AllusersIdle"]))
        .await?;
    if !totals.success() {
        return Err(condor.failure("condor_q", &totals));
    }
    read_estimate(&slots.stdout_text(), &totals.stdout_text())
}

#[cfg(test)]
mod tests {
    use batchbridge_core::{ByteSize, JobKey};

    use super::*;

    #[test]
    fn constraints_ask_for_the_spec_s_numbers_as_its_submit_rounds_them() {
        type Edit = fn(&mut JobSpec);
        let base = "State == \"Unclaimed\" && Start =!= false";
        #[rustfmt::skip]
        let cases: [(Edit, &str); 6] = [
            (|_| {}, " && Cpus >= 1"),
            (|s| s.resources.cpus = Some(8), " && Cpus >= 8"),
            (|s| s.resources.memory = Some(ByteSize::mib(1500)), " && Cpus >= 1 && Memory >= 1500"),
            (|s| s.resources.memory = Some(ByteSize::b(1)), " && Cpus >= 1 && Memory >= 1"),
            (|s| s.resources.disk = Some(ByteSize::mib(2)), " && Cpus >= 1 && Disk >= 2048"),
            (|s| { s.resources.gpus = Some(2); s.resources.cpus = Some(4) }, " && Cpus >= 4 && (GPUs ?: 0) >= 2"),
        ];
        for (edit, expected) in cases {
            let mut spec = JobSpec::new(JobKey::new("k").unwrap(), "n", "true");
            edit(&mut spec);
            assert_eq!(slot_constraint(&spec), format!("{base}{expected}"));
        }
    }

    #[test]
    fn answers_of_the_pool() {
        // Captured from the test bed's pool (HTCondor 23.9): a partitionable slot with room,
        // then none, with a job idle behind the blocker.
        for (slots, totals, start, detail) in [
            (
                "slot1@vm\n",
                "0\n\n",
                EstimatedStart::Now,
                "1 matching idle slot; 0 idle jobs in the queue",
            ),
            (
                "",
                "1\n\n",
                EstimatedStart::Later,
                "0 matching idle slots; 1 idle job in the queue",
            ),
            (
                "slot1@a\nslot1@b\n",
                "12\n",
                EstimatedStart::Now,
                "2 matching idle slots; 12 idle jobs in the queue",
            ),
        ] {
            let estimate = read_estimate(slots, totals).unwrap();
            assert_eq!(estimate.start, start, "{slots:?}");
            assert_eq!(estimate.detail.as_deref(), Some(detail));
        }
        for totals in ["", "undefined\n", "-1\n"] {
            let err = read_estimate("slot1@vm\n", totals).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::UnexpectedOutput, "{totals:?}");
        }
    }
}
