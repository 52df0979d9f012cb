//! Start estimates: `sbatch --test-only` with the options and batch script of the real
//! submit, which asks slurmctld when and where the job would start without queueing it.
//!
//! sbatch answers on stderr, with times in seconds under `SLURM_TIME_FORMAT=%s` (the way
//! squeue's are read, so no time zone is involved):
//!
//! ```text
//! sbatch: Job 17014 to start at 1795455578 using 2 processors on nodes vm in partition debug
//! ```
//!
//! A start not after the login node's clock is [`EstimatedStart::Now`]; a start half a year
//! or more ahead is SLURM planning running jobs without a time limit to end a year after
//! they started, which is no estimate: [`EstimatedStart::Later`] (the status path reads
//! squeue's start of a waiting job by the same rule).

use batchbridge_core::error::excerpt;
use batchbridge_core::estimate::{EstimatedStart, StartEstimate};
use batchbridge_core::shell::Command;
use batchbridge_core::{Error, ErrorKind, JobSpec, Result};

use crate::parse::{is_no_estimate, parse_time};
use batchbridge_core::remote::SubmitDefaults;

use crate::script::{batch_script, sbatch_options};

const ESTIMATE: &str = include_str!("sh/estimate.sh");
/// What sbatch --test-only says before the start time.
const TO_START_AT: &str = " to start at ";
/// The most bytes of sbatch's answer kept: one line, plus room for warnings.
const OUTPUT_LIMIT: usize = 64 * 1024;

/// The command that asks slurmctld when `spec` would start: sbatch's options for the submit
/// into `dir`, `--test-only`, and the batch script on stdin.
pub(crate) fn estimate_command(
    spec: &JobSpec,
    defaults: &SubmitDefaults,
    dir: &str,
) -> Result<Command> {
    let options = sbatch_options(spec, defaults, dir)?;
    Ok(Command::sh(ESTIMATE, options)
        .stdin(batch_script(spec, dir)?)
        .output_limit(OUTPUT_LIMIT))
}

/// Reads what the estimate command printed: sbatch's answer on stderr and, on stdout, the
/// login node's clock after it answered. A refusal (the spec can never run there) is for
/// the caller to turn into an error; this reads an answer that succeeded.
///
/// ```
/// use std::time::{Duration, UNIX_EPOCH};
/// use batchbridge_core::estimate::EstimatedStart;
/// use batchbridge_slurm::estimate::parse_test_only;
///
/// let said = "sbatch: Job 9 to start at 1795455900 using 4 processors on nodes n[1-2] in partition debug\n";
/// let estimate = parse_test_only(said, "1795455600\n")?;
/// assert_eq!(estimate.start, EstimatedStart::At(UNIX_EPOCH + Duration::from_secs(1_795_455_900)));
/// assert_eq!(estimate.queue.as_deref(), Some("debug"));
/// assert_eq!(estimate.nodes.as_deref(), Some("n[1-2]"));
/// # Ok::<(), batchbridge_core::Error>(())
/// ```
pub fn parse_test_only(stderr: &str, stdout: &str) -> Result<StartEstimate> {
    let unexpected = |what: &str| {
        Error::new(
            ErrorKind::UnexpectedOutput,
            format!(
                "sbatch --test-only: {what} in its answer: {}",
                excerpt(stderr.trim())
            ),
        )
    };
    let now = parse_time(stdout.lines().next().unwrap_or_default())
        .ok_or_else(|| unexpected("no clock of the login node"))?;
    let answer = stderr
        .lines()
        .find_map(|line| line.split_once(TO_START_AT))
        .map(|(_, answer)| answer)
        .ok_or_else(|| unexpected("no start time"))?;
    let (time, rest) = answer
        .split_once(" using ")
        .ok_or_else(|| unexpected("no processor count"))?;
    let start = parse_time(time).ok_or_else(|| unexpected("no start time"))?;
    let (processors, rest) = rest
        .split_once(" processors on nodes ")
        .ok_or_else(|| unexpected("no nodes"))?;
    let (nodes, partition) = rest
        .rsplit_once(" in partition ")
        .ok_or_else(|| unexpected("no partition"))?;
    let (start, detail) = if start <= now {
        (
            EstimatedStart::Now,
            format!("would start now using {processors} processors"),
        )
    } else if is_no_estimate(start, Some(now)) {
        (
            EstimatedStart::Later,
            "would wait for running jobs without a time limit".to_owned(),
        )
    } else {
        (
            EstimatedStart::At(start),
            format!(
                "would start in {} s using {processors} processors",
                start.duration_since(now).unwrap_or_default().as_secs()
            ),
        )
    };
    let mut estimate = StartEstimate::new(start);
    estimate.queue = Some(excerpt(partition.trim()).into_owned());
    estimate.nodes = Some(excerpt(nodes.trim()).into_owned());
    estimate.detail = Some(excerpt(&detail).into_owned());
    Ok(estimate)
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    fn at(seconds: u64) -> EstimatedStart {
        EstimatedStart::At(UNIX_EPOCH + Duration::from_secs(seconds))
    }

    #[test]
    fn answers_of_both_slurm_versions() {
        // The first four captured from the test bed's SLURM 22.05 and 24.11 (the same words
        // in both; the login node's clock read right after, 1795455578); the others vary them.
        #[rustfmt::skip]
        let cases: [(&str, &str, EstimatedStart, &str, &str); 6] = [
            ("idle node, 22.05", "sbatch: Job 17014 to start at 1795455578 using 2 processors on nodes vm in partition debug\n", EstimatedStart::Now, "vm", "debug"),
            ("idle node, 24.11", "sbatch: Job 747 to start at 1795455578 using 2 processors on nodes slurm2node in partition debug\n", EstimatedStart::Now, "slurm2node", "debug"),
            ("a blocker with a 10 minute limit", "sbatch: Job 17020 to start at 1795456178 using 1 processors on nodes vm in partition single\n", at(1_795_456_178), "vm", "single"),
            ("a blocker without a limit: a year ahead", "sbatch: Job 17019 to start at 1826991651 using 1 processors on nodes vm in partition debug\n", EstimatedStart::Later, "vm", "debug"),
            ("a node list and a warning first", "sbatch: warning: can't honor --ntasks-per-node set to 2\nsbatch: Job 5 to start at 1795455579 using 32 processors on nodes n[01-04],gpu1 in partition batch\n", at(1_795_455_579), "n[01-04],gpu1", "batch"),
            ("a start a moment in the past", "sbatch: Job 5 to start at 1795455570 using 1 processors on nodes vm in partition debug\n", EstimatedStart::Now, "vm", "debug"),
        ];
        for (name, stderr, start, nodes, partition) in cases {
            let estimate = parse_test_only(stderr, "1795455578\n").unwrap();
            assert_eq!(estimate.start, start, "{name}");
            assert_eq!(estimate.nodes.as_deref(), Some(nodes), "{name}");
            assert_eq!(estimate.queue.as_deref(), Some(partition), "{name}");
            assert!(estimate.detail.is_some(), "{name}");
        }
    }

    #[test]
    fn answers_that_say_nothing_usable_are_clear_errors() {
        let huge = format!(
            "sbatch: Job 5 to start at 1795455579 using 1 processors on nodes {} in partition debug",
            "n".repeat(1 << 20)
        );
        for (stderr, stdout, says) in [
            ("", "1795455578\n", "no start time"),
            (
                "sbatch: Job 5 to start at soon using 1 processors on nodes vm in partition debug",
                "1795455578\n",
                "no start time",
            ),
            (
                "sbatch: Job 5 to start at 1795455579",
                "1795455578\n",
                "no processor count",
            ),
            (
                "sbatch: Job 5 to start at 1795455579 using 1 processors",
                "1795455578\n",
                "no nodes",
            ),
            (
                "sbatch: Job 5 to start at 1795455579 using 1 processors on nodes vm",
                "1795455578\n",
                "no partition",
            ),
            (
                "sbatch: Job 5 to start at 1795455579 using 1 processors on nodes vm in partition debug",
                "",
                "no clock",
            ),
        ] {
            let err = parse_test_only(stderr, stdout).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::UnexpectedOutput, "{stderr}");
            assert!(err.message().contains(says), "{err}");
        }
        // A huge answer is kept only in part.
        let estimate = parse_test_only(&huge, "1795455578\n").unwrap();
        assert!(estimate.nodes.unwrap().len() < 2 * batchbridge_core::error::MAX_QUOTED);
    }

    #[test]
    fn the_command_is_the_submit_with_test_only_and_the_script_on_stdin() {
        let mut spec = JobSpec::new(batchbridge_core::JobKey::new("k").unwrap(), "n", "true");
        spec.resources.cpus = Some(4);
        spec.passthrough
            .insert("slurm".into(), vec!["--constraint=fast".into()]);
        let dir = "/home/b/w/jobs/k";
        let defaults = SubmitDefaults::default();
        let command = estimate_command(&spec, &defaults, dir).unwrap();
        let options = sbatch_options(&spec, &defaults, dir).unwrap();
        assert_eq!(command.get_args()[1], ESTIMATE);
        assert_eq!(&command.get_args()[3..], options.as_slice());
        assert!(options.contains(&"--constraint=fast".to_owned()));
        let script = batch_script(&spec, dir).unwrap();
        assert_eq!(command.get_stdin(), Some(script.as_bytes()));

        spec.passthrough
            .insert("slurm".into(), vec!["--test-only".into()]);
        let err = estimate_command(&spec, &defaults, dir).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
    }
}
