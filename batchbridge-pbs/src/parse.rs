//! Pure readers of what PBS's commands print: `qstat -f -F json` (run with `TZ=UTC0`, so
//! its times are UTC) and `pbs_version`.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use batchbridge_core::{Error, ErrorKind, Refusal, Result};
use serde::Deserialize;

/// The environment variable in every job's `Variable_List` (`qsub -v`) holding its
/// batchbridge key. Users pass their environment through the spec (into `env.sh`), and
/// `-v` is refused among passthrough options, so nothing else sets it.
pub const KEY_VARIABLE: &str = "BATCHBRIDGE_JOB_KEY";

/// One job, array or subjob as `qstat -f -F json` prints it, with the attributes a status
/// needs; those it lacks are `None`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[allow(missing_docs)] // The fields are PBS's job attributes of the same names.
pub struct QstatJob {
    pub job_state: String,
    pub substate: Option<u32>,
    #[serde(rename = "Exit_status")]
    pub exit_status: Option<i32>,
    pub comment: Option<String>,
    pub queue: Option<String>,
    #[serde(rename = "Hold_Types")]
    pub hold_types: Option<String>,
    pub ctime: Option<String>,
    pub stime: Option<String>,
    pub obittime: Option<String>,
    pub mtime: Option<String>,
    /// `True` for an array's parent (`SEQ[].SERVER`).
    pub array: Option<String>,
    /// A subjob's index.
    pub array_index: Option<u32>,
    /// How many times PBS started the job (`qrerun`, a requeue after a node failure and
    /// preemption with requeue start it again under the same id).
    pub run_count: Option<u32>,
    #[serde(rename = "Variable_List")]
    pub variable_list: Option<HashMap<String, serde_json::Value>>,
    /// `qsub -W depend=`'s list as the server keeps it (`afterok:12.pbs@pbs,...`).
    pub depend: Option<String>,
}

impl QstatJob {
    /// The batchbridge key in its `Variable_List`, if any.
    pub fn key(&self) -> Option<&str> {
        self.variable_list.as_ref()?.get(KEY_VARIABLE)?.as_str()
    }
}

/// A job id PBS prints, split: `12.pbs` is job 12, `12[].pbs` the array 12, `12[3].pbs` its
/// subjob 3.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PbsId<'a> {
    /// A job that is not an array.
    Job(&'a str),
    /// An array's parent.
    Array(&'a str),
    /// One subjob of an array, with its index.
    Subjob(&'a str, u32),
}

impl<'a> PbsId<'a> {
    /// Parses `SEQ.SERVER`, `SEQ[].SERVER` or `SEQ[INDEX].SERVER` (the server part is
    /// optional); `None` for anything else.
    ///
    /// ```
    /// use batchbridge_pbs::parse::PbsId;
    ///
    /// assert_eq!(PbsId::parse("12.pbs"), Some(PbsId::Job("12")));
    /// assert_eq!(PbsId::parse("12[].pbs"), Some(PbsId::Array("12")));
    /// assert_eq!(PbsId::parse("12[3].pbs"), Some(PbsId::Subjob("12", 3)));
    /// assert_eq!(PbsId::parse("x.pbs"), None);
    /// ```
    pub fn parse(id: &'a str) -> Option<Self> {
        let local = id.split_once('.').map_or(id, |(local, _)| local);
        let parsed = match local.split_once('[') {
            None => Self::Job(local),
            Some((seq, "]")) => Self::Array(seq),
            Some((seq, rest)) => Self::Subjob(seq, rest.strip_suffix(']')?.parse().ok()?),
        };
        let seq = parsed.sequence();
        (!seq.is_empty() && seq.bytes().all(|b| b.is_ascii_digit())).then_some(parsed)
    }

    /// The sequence number: the batchbridge job id.
    pub fn sequence(self) -> &'a str {
        match self {
            Self::Job(seq) | Self::Array(seq) | Self::Subjob(seq, _) => seq,
        }
    }
}

/// What `qstat -f -F json` said about the jobs of one sequence number.
// Not Eq, nor is QstatJob: serde_json 1.0.0, the lowest version this crate supports, has no
// Eq for the Value in `Variable_List`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sighting {
    /// The job itself, or an array's parent.
    pub job: Option<QstatJob>,
    /// An array's subjobs (`qstat -t`), by index.
    pub subjobs: HashMap<u32, QstatJob>,
}

/// Reads `qstat -f -F json` into sightings by sequence number. qstat prints no `Jobs` at
/// all when none of the ids it was asked about exists.
///
/// ```
/// use batchbridge_pbs::parse::parse_qstat;
///
/// let json = r#"{"pbs_version":"23.06.06","Jobs":{
///     "7[].pbs":{"job_state":"B","array":"True"},
///     "7[0].pbs":{"job_state":"X","Exit_status":0,"array_index":0},
///     "8.pbs":{"job_state":"F","Exit_status":3}}}"#;
/// let seen = parse_qstat(json)?;
/// assert_eq!(seen["7"].subjobs[&0].exit_status, Some(0));
/// assert_eq!(seen["8"].job.as_ref().unwrap().exit_status, Some(3));
/// assert!(parse_qstat(r#"{"pbs_version":"23.06.06"}"#)?.is_empty());
/// # Ok::<(), batchbridge_core::Error>(())
/// ```
pub fn parse_qstat(json: &str) -> Result<HashMap<String, Sighting>> {
    #[derive(Deserialize)]
    struct Report {
        #[serde(rename = "Jobs", default)]
        jobs: HashMap<String, QstatJob>,
    }
    let unreadable = |err: serde_json::Error| {
        Error::new(
            ErrorKind::UnexpectedOutput,
            format!("qstat printed JSON batchbridge cannot read: {err}"),
        )
    };
    let report: Report = serde_json::from_str(&escape_controls(json)).map_err(unreadable)?;
    let mut seen: HashMap<String, Sighting> = HashMap::new();
    for (id, job) in report.jobs {
        let Some(parsed) = PbsId::parse(&id) else {
            tracing::warn!(id, "skipping a qstat job id that does not parse");
            continue;
        };
        let sighting = seen.entry(parsed.sequence().to_owned()).or_default();
        match parsed {
            PbsId::Job(_) | PbsId::Array(_) => sighting.job = Some(job),
            PbsId::Subjob(_, index) => {
                sighting.subjobs.insert(index, job);
            }
        }
    }
    Ok(seen)
}

/// qstat copies attribute values into its JSON strings as they are, so a comment or
/// variable with a tab or a line break would make the whole report invalid; inside
/// strings, those bytes become escapes (qstat's own indentation, outside them, stays).
fn escape_controls(json: &str) -> std::borrow::Cow<'_, str> {
    if !json.bytes().any(|b| b < 0x20) {
        return json.into();
    }
    let mut fixed = String::with_capacity(json.len());
    let (mut in_string, mut escaped) = (false, false);
    for c in json.chars() {
        if in_string && (c as u32) < 0x20 {
            fixed.push_str(&format!("\\u{:04x}", c as u32));
            escaped = false;
            continue;
        }
        if c == '"' && !escaped {
            in_string = !in_string;
        }
        escaped = in_string && c == '\\' && !escaped;
        fixed.push(c);
    }
    fixed.into()
}

/// Reads a time as `qstat` prints it with `TZ=UTC0` (C's `ctime`, `Mon Nov 23 14:52:52
/// 2026`) into a [`SystemTime`]; `None` when it does not parse.
///
/// ```
/// use std::time::{Duration, UNIX_EPOCH};
/// use batchbridge_pbs::parse::parse_ctime;
///
/// assert_eq!(parse_ctime("Thu Jan  1 00:01:40 1970"), Some(UNIX_EPOCH + Duration::from_secs(100)));
/// assert_eq!(parse_ctime("Tue Nov 14 22:13:20 2023"), Some(UNIX_EPOCH + Duration::from_secs(1_700_000_000)));
/// assert_eq!(parse_ctime("Thu Feb 29 12:00:00 2024"), Some(UNIX_EPOCH + Duration::from_secs(1_709_208_000)));
/// assert_eq!(parse_ctime("Fri Feb 30 12:00:00 2024"), None);
/// assert_eq!(parse_ctime("yesterday"), None);
/// ```
pub fn parse_ctime(text: &str) -> Option<SystemTime> {
    // The weekday says nothing the date does not; ctime pads a one-digit day with a space.
    let [_weekday, date @ ..] = &text.split_whitespace().collect::<Vec<_>>()[..] else {
        return None;
    };
    let time = jiff::civil::DateTime::strptime("%b %d %H:%M:%S %Y", date.join(" ")).ok()?;
    let seconds = time
        .to_zoned(jiff::tz::TimeZone::UTC)
        .ok()?
        .timestamp()
        .as_second();
    Some(SystemTime::UNIX_EPOCH + Duration::from_secs(u64::try_from(seconds).ok()?))
}

/// The version `pbs_version` prints (`pbs_version = 23.06.06`): `OpenPBS 23.06.06`.
///
/// ```
/// use batchbridge_pbs::parse::pbs_version;
///
/// assert_eq!(pbs_version("pbs_version = 23.06.06\n")?, "OpenPBS 23.06.06");
/// assert!(pbs_version("").is_err());
/// # Ok::<(), batchbridge_core::Error>(())
/// ```
pub fn pbs_version(text: &str) -> Result<String> {
    text.lines()
        .find_map(|line| line.trim().strip_prefix("pbs_version = "))
        .map(|version| format!("OpenPBS {}", version.trim()))
        .filter(|version| !version.contains(|c: char| c.is_control()))
        .ok_or_else(|| {
            Error::new(
                ErrorKind::UnexpectedOutput,
                format!(
                    "pbs_version printed {:?}, not `pbs_version = VERSION`",
                    batchbridge_core::error::excerpt(text.trim())
                ),
            )
        })
}

/// What kind of refusal qsub's message is, in PBS's words (its stderr): a per-user, group
/// or project job limit (`max_queued`, `max_queued_res`) or the older `max_user_queuable`,
/// a queue that is not enabled, or a queue that does not exist. `None` for any other
/// message.
///
/// ```
/// use batchbridge_core::Refusal;
/// use batchbridge_pbs::parse::qsub_refusal;
///
/// assert_eq!(qsub_refusal("qsub: Queue is not enabled\n"), Some(Refusal::QueueClosed));
/// ```
pub fn qsub_refusal(stderr: &str) -> Option<Refusal> {
    const WORDS: &[(&str, Refusal)] = &[
        ("per-user limit", Refusal::SubmitLimit),
        ("per-group limit", Refusal::SubmitLimit),
        ("per-project limit", Refusal::SubmitLimit),
        (
            "Maximum number of jobs already in queue",
            Refusal::SubmitLimit,
        ),
        ("Queue is not enabled", Refusal::QueueClosed),
        ("Unknown queue", Refusal::InvalidRequest),
    ];
    Refusal::named_in(stderr, WORDS)
}

#[cfg(test)]
mod tests {
    /// qsub's refusals as the test bed's OpenPBS 23.06 printed them, each provoked for
    /// real: a queue with `max_queued = [u:PBS_GENERIC=1]` holding one job, a queue with
    /// `enabled = False`, a queue that does not exist.
    #[test]
    fn qsub_refusals_by_kind() {
        use batchbridge_core::Refusal::*;
        let cases = [
            (
                include_str!("testdata/qsub-max-queued.txt"),
                Some(SubmitLimit),
            ),
            (
                include_str!("testdata/qsub-queue-disabled.txt"),
                Some(QueueClosed),
            ),
            (
                include_str!("testdata/qsub-unknown-queue.txt"),
                Some(InvalidRequest),
            ),
            ("qsub: Bad UID for job execution\n", None),
            ("", None),
        ];
        for (said, refusal) in cases {
            assert_eq!(super::qsub_refusal(said), refusal, "{said}");
        }
    }
}
