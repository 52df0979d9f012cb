//! Pure readers of what `condor_q -json`, `condor_history -json`, `condor_version` and a
//! refusing `condor_submit` print.

use std::collections::HashMap;

use batchbridge_core::{Error, ErrorKind, Refusal, Result};
use serde::Deserialize;

/// The job attributes a status cycle asks for; nothing else crosses the wire.
pub const ATTRIBUTES: &str = "ClusterId,ProcId,JobStatus,ExitCode,ExitBySignal,ExitSignal,\
                              HoldReason,HoldReasonCode,RemoveReason,LastRejMatchReason,QDate,\
                              JobStartDate,CompletionDate,EnteredCurrentStatus,BatchBridgeTasks,\
                              WantContainer,NumJobStarts";

/// One proc's job ad, with the attributes of [`ATTRIBUTES`]; those the ad lacks are `None`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "PascalCase")]
#[allow(missing_docs)] // The fields are HTCondor's job attributes of the same names.
pub struct ProcAd {
    pub cluster_id: u64,
    pub proc_id: u32,
    pub job_status: u8,
    pub exit_code: Option<i32>,
    pub exit_by_signal: Option<bool>,
    pub exit_signal: Option<i32>,
    pub hold_reason: Option<String>,
    pub hold_reason_code: Option<i32>,
    pub remove_reason: Option<String>,
    pub last_rej_match_reason: Option<String>,
    #[serde(rename = "QDate")]
    pub q_date: Option<i64>,
    pub job_start_date: Option<i64>,
    pub completion_date: Option<i64>,
    pub entered_current_status: Option<i64>,
    pub batch_bridge_tasks: Option<u32>,
    pub want_container: Option<bool>,
    pub num_job_starts: Option<u32>,
    /// Not an attribute: why the proc's script never ran, from its job directory (see
    /// [`parse_not_started`]).
    #[serde(skip)]
    pub not_started: Option<String>,
}

/// Reads the JSON array `condor_q -json` or `condor_history -json` prints. `condor_q`
/// prints nothing at all when no job matches.
///
/// ```
/// use batchbridge_htcondor::parse::parse_ads;
///
/// assert!(parse_ads("")?.is_empty());
/// assert!(parse_ads("[ ]\n")?.is_empty());
/// let ads = parse_ads(r#"[ { "ClusterId": 7, "ProcId": 0, "JobStatus": 4, "ExitCode": 3 } ]"#)?;
/// assert_eq!((ads[0].cluster_id, ads[0].exit_code), (7, Some(3)));
/// # Ok::<(), batchbridge_core::Error>(())
/// ```
pub fn parse_ads(json: &str) -> Result<Vec<ProcAd>> {
    if json.trim().is_empty() {
        return Ok(Vec::new());
    }
    serde_json::from_str(json).map_err(|err| {
        Error::new(
            ErrorKind::UnexpectedOutput,
            format!("HTCondor printed job ads batchbridge cannot read: {err}"),
        )
    })
}

/// Reads the not-started script's `CLUSTER PROC TEXT` lines: why each proc's script never
/// ran, by cluster and proc.
///
/// ```
/// use batchbridge_htcondor::parse::parse_not_started;
///
/// let reasons = parse_not_started("7 0 the script never ran: no dir\nnonsense\n");
/// assert_eq!(reasons[&(7, 0)], "the script never ran: no dir");
/// assert_eq!(reasons.len(), 1);
/// ```
pub fn parse_not_started(text: &str) -> HashMap<(u64, u32), String> {
    text.lines()
        .filter_map(|line| {
            let mut words = line.splitn(3, ' ');
            let cluster = words.next()?.parse().ok()?;
            let proc_id = words.next()?.parse().ok()?;
            Some(((cluster, proc_id), words.next()?.to_owned()))
        })
        .collect()
}

/// Reads `-af ClusterId` output: the first cluster id listed.
pub fn first_cluster(text: &str) -> Option<String> {
    text.split_whitespace()
        .next()
        .filter(|id| id.bytes().all(|b| b.is_ascii_digit()))
        .map(str::to_owned)
}

/// Reads what `condor_version` prints into `htcondor VERSION`. Its first line is
/// `$CondorVersion: 23.9.6 2024-08-08 BuildID: … $`; the version is the word after the
/// tag. Output without one is [`ErrorKind::UnexpectedOutput`].
///
/// ```
/// use batchbridge_htcondor::parse::condor_version;
///
/// let printed = "$CondorVersion: 23.9.6 2024-08-08 BuildID: Debian-23.9.6+dfsg-2 \
///                PackageID: Debian-23.9.6+dfsg-2 $\n$CondorPlatform: X86_64-Debian_13 $\n";
/// assert_eq!(condor_version(printed)?, "htcondor 23.9.6");
/// assert!(condor_version("").is_err());
/// # Ok::<(), batchbridge_core::Error>(())
/// ```
pub fn condor_version(text: &str) -> Result<String> {
    let version = text
        .lines()
        .find(|line| !line.trim().is_empty())
        .and_then(|line| line.trim().strip_prefix("$CondorVersion:"))
        .and_then(|rest| rest.split_whitespace().next())
        .filter(|word| {
            word.starts_with(|c: char| c.is_ascii_digit())
                && word
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '+' | '~' | '_'))
        });
    match version {
        Some(version) => Ok(format!("htcondor {version}")),
        None => {
            let shown: String = text.chars().take(200).collect();
            Err(Error::new(
                ErrorKind::UnexpectedOutput,
                format!("condor_version printed {shown:?}, which names no $CondorVersion"),
            ))
        }
    }
}

/// What kind of refusal condor_submit's message is, in the schedd's words (its stderr): the
/// schedd's limit on one owner's jobs in its queue (`MAX_JOBS_PER_OWNER`) or on all jobs in
/// it (`MAX_JOBS_SUBMITTED`), both a [`Refusal::SubmitLimit`] that passes once jobs leave the
/// queue. `None` for any other message.
///
/// ```
/// use batchbridge_core::Refusal;
/// use batchbridge_htcondor::parse::condor_submit_refusal;
///
/// let said = "ERROR: Failed to create proc\n\
///             Number of submitted jobs would exceed MAX_JOBS_PER_OWNER\n";
/// assert_eq!(condor_submit_refusal(said), Some(Refusal::SubmitLimit));
/// ```
pub fn condor_submit_refusal(stderr: &str) -> Option<Refusal> {
    // The schedd names the parameter in every wording it has: "Number of submitted jobs
    // would exceed MAX_JOBS_PER_OWNER" when the proc is created, "MAX_JOBS_SUBMITTED
    // exceeded. Current=2, Limit=2" when the submission is committed.
    const WORDS: &[(&str, Refusal)] = &[
        ("MAX_JOBS_PER_OWNER", Refusal::SubmitLimit),
        ("MAX_JOBS_SUBMITTED", Refusal::SubmitLimit),
    ];
    Refusal::named_in(stderr, WORDS)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// condor_submit's refusals as the test bed's HTCondor 23.9 printed them, each provoked
    /// for real on the capped schedd (tests/testbed/htcondor.sh): an eleventh job of an owner
    /// under MAX_JOBS_PER_OWNER = 10, a third job under MAX_JOBS_SUBMITTED = 2 (refused when
    /// its proc was created, and, in another run, when its submission was committed).
    #[test]
    fn condor_submit_refusals_by_kind() {
        let cases = [
            (
                include_str!("testdata/condor_submit-max-jobs-per-owner.txt"),
                Some(Refusal::SubmitLimit),
            ),
            (
                include_str!("testdata/condor_submit-max-jobs-submitted.txt"),
                Some(Refusal::SubmitLimit),
            ),
            (
                include_str!("testdata/condor_submit-max-jobs-submitted-at-commit.txt"),
                Some(Refusal::SubmitLimit),
            ),
            ("ERROR: Can't find address of local schedd\n", None),
            ("ERROR: Parse error in expression: x\n", None),
            ("", None),
        ];
        for (said, refusal) in cases {
            assert_eq!(condor_submit_refusal(said), refusal, "{said}");
        }
    }

    /// `condor_q -json -attributes ATTRIBUTES` on the test bed: an idle proc that matched
    /// nothing, a held one, a running one.
    const QUEUE: &str = r#"[
{
  "BatchBridgeTasks": 1,
  "ClusterId": 11,
  "EnteredCurrentStatus": 1795250444,
  "JobStatus": 1,
  "LastRejMatchReason": "no match found ",
  "ProcId": 0,
  "QDate": 1795250444
}
,
{
  "BatchBridgeTasks": 3,
  "ClusterId": 9,
  "EnteredCurrentStatus": 1795250441,
  "HoldReason": "Error from slot1_1@vm: Failed to execute '/tmp/x/job.sh' with arguments 0 9: Cannot access initial working directory \"/tmp/x\" (errno=2: 'No such file or directory')",
  "HoldReasonCode": 6,
  "JobStatus": 5,
  "ProcId": 0,
  "QDate": 1795250438
}
,
{
  "BatchBridgeTasks": 1,
  "ClusterId": 12,
  "EnteredCurrentStatus": 1795250470,
  "JobStartDate": 1795250470,
  "JobStatus": 2,
  "ProcId": 0,
  "QDate": 1795250468
}
]
"#;

    #[test]
    fn queue_ads_keep_every_attribute_asked_for() {
        let ads = parse_ads(QUEUE).unwrap();
        assert_eq!(ads.len(), 3);
        assert_eq!(
            ads[0].last_rej_match_reason.as_deref(),
            Some("no match found ")
        );
        assert_eq!((ads[1].job_status, ads[1].hold_reason_code), (5, Some(6)));
        assert!(ads[1].hold_reason.as_deref().unwrap().contains("errno=2"));
        assert_eq!(
            (ads[2].job_status, ads[2].job_start_date, ads[2].exit_code),
            (2, Some(1_795_250_470), None)
        );
    }

    #[test]
    fn output_that_is_not_job_ads_is_an_error() {
        for bad in ["garbage", "[{\"ProcId\": 0}]", "{}"] {
            let err = parse_ads(bad).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::UnexpectedOutput, "{bad}");
        }
    }

    #[test]
    fn first_cluster_reads_af_output() {
        assert_eq!(first_cluster("12\n13\n").as_deref(), Some("12"));
        assert_eq!(first_cluster("").as_deref(), None);
        assert_eq!(first_cluster("undefined\n").as_deref(), None);
    }

    #[test]
    fn condor_versions() {
        let cases = [
            // The test bed's pool (Debian trixie).
            (
                "$CondorVersion: 23.9.6 2026-07-12 PackageID: 23.9.6+dfsg-2.1+b10 $\n\
                 $CondorPlatform: X86_64-Debian_13 $\n",
                Some("htcondor 23.9.6"),
            ),
            (
                "$CondorVersion: 23.9.6 2024-08-08 BuildID: Debian-23.9.6+dfsg-2 \
                 PackageID: Debian-23.9.6+dfsg-2 $\n$CondorPlatform: X86_64-Debian_13 $\n",
                Some("htcondor 23.9.6"),
            ),
            (
                "$CondorVersion: 8.8.15 Jul 14 2021 BuildID: 537466 PackageID: 8.8.15-1 $\r\n\
                 $CondorPlatform: x86_64_CentOS7 $\r\n",
                Some("htcondor 8.8.15"),
            ),
            (
                "\n  $CondorVersion: 24.0.1 2024-10-31 $\n",
                Some("htcondor 24.0.1"),
            ),
            ("", None),
            ("condor_version: command not found\n", None),
            ("$CondorPlatform: X86_64-Debian_13 $\n", None),
            ("$CondorVersion: $\n", None),
            ("$CondorVersion: 23.9.6\u{1b}[0m 2024-08-08 $\n", None),
        ];
        for (text, expected) in cases {
            let parsed = condor_version(text);
            match expected {
                Some(version) => assert_eq!(parsed.unwrap(), version, "{text:?}"),
                None => {
                    let err = parsed.unwrap_err();
                    assert_eq!(err.kind(), ErrorKind::UnexpectedOutput, "{text:?}");
                }
            }
        }
    }
}
