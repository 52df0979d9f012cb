//! Start estimates: whether enough nodes have a free chunk of the job's select now, from
//! the server's node list (`pbsnodes -a -F json`), and how many jobs are queued ahead
//! (`qstat -B -f -F json`): two questions to the server, whatever the cluster's size.
//!
//! A node counts when its state is `free` (up, not busy, not offline), it serves the job's
//! queue (a node tied to another queue does not), and its available CPUs, memory and GPUs
//! minus those assigned cover one chunk (`ncpus`, `mem`, `ngpus` of the select qsub gets).
//! Enough such nodes (one per chunk, as `place=scatter` puts them) is
//! [`EstimatedStart::Now`], at the scheduler's next cycle; too few is
//! [`EstimatedStart::Later`] (OpenPBS gives no start time for a job not yet queued). A
//! chunk no node could hold even when idle is refused, as such a job would never run.
//! Passthrough options (a site's own resources, `-l place=excl`) are not considered, so
//! they can narrow what the estimate promises.

use batchbridge_core::error::excerpt;
use batchbridge_core::estimate::{EstimatedStart, StartEstimate};
use batchbridge_core::remote::{CliScheduler, JobDirs};
use batchbridge_core::shell::Command;
use batchbridge_core::{Error, ErrorKind, JobSpec, Result};
use serde_json::Value;

const KIB: u64 = 1024;

/// One chunk of a job's select, and how many of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Select {
    chunks: u32,
    ncpus: u64,
    /// Bytes, when the spec asks for memory.
    mem: Option<u64>,
    ngpus: Option<u64>,
}

impl Select {
    /// The select qsub gets for `spec` ([`crate::script::qsub_options`]), memory in whole
    /// MiB rounded up as there.
    fn of(spec: &JobSpec) -> Self {
        let resources = &spec.resources;
        Self {
            chunks: resources.nodes.unwrap_or(1).max(1),
            ncpus: u64::from(resources.cpus.unwrap_or(1)),
            mem: resources
                .memory
                .map(|m| m.as_u64().div_ceil(KIB * KIB) * KIB * KIB),
            ngpus: resources.gpus.filter(|g| *g > 0).map(u64::from),
        }
    }

    /// Whether `resources` (a node's available ones, perhaps less those assigned) hold one
    /// chunk; `assigned` are subtracted.
    fn fits(&self, available: &Value, assigned: &Value) -> bool {
        let free = |name: &str, read: fn(&Value) -> Option<u64>| {
            let total = available.get(name).and_then(read)?;
            let used = assigned.get(name).and_then(read).unwrap_or(0);
            Some(total.saturating_sub(used))
        };
        let enough = |wanted: Option<u64>, name, read| {
            wanted.is_none_or(|wanted| free(name, read).is_some_and(|free| free >= wanted))
        };
        enough(Some(self.ncpus), "ncpus", count)
            && enough(self.mem, "mem", size)
            && enough(self.ngpus, "ngpus", count)
    }
}

/// A count PBS prints as a number (or, from some versions, a string of digits).
fn count(value: &Value) -> Option<u64> {
    value
        .as_u64()
        .or_else(|| value.as_str()?.trim().parse().ok())
}

/// A PBS size (`24684084kb`, `0mb`, `2gb`, `512`: bytes without a unit) in bytes; `None`
/// for what it cannot read (word units), which then covers nothing.
fn size(value: &Value) -> Option<u64> {
    if let Some(bytes) = value.as_u64() {
        return Some(bytes);
    }
    let text = value.as_str()?.trim().to_ascii_lowercase();
    let digits = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(digits);
    let shift = match unit {
        "" | "b" => 0,
        "kb" => 10,
        "mb" => 20,
        "gb" => 30,
        "tb" => 40,
        "pb" => 50,
        _ => return None,
    };
    number.parse::<u64>().ok()?.checked_mul(1 << shift)
}

fn unexpected(what: &str, text: &str) -> Error {
    Error::new(
        ErrorKind::UnexpectedOutput,
        format!("{what}: not the JSON expected: {}", excerpt(text.trim())),
    )
}

/// The estimate for `spec` in `queue` (the job's or the configured default; the server's
/// default queue when `None`) from what `pbsnodes -a -F json` (`nodes`) and `qstat -B -f -F
/// json` (`server`) printed.
///
/// ```
/// use batchbridge_core::{JobKey, JobSpec};
/// use batchbridge_core::estimate::EstimatedStart;
/// use batchbridge_pbs::estimate::read_estimate;
///
/// let nodes = r#"{"nodes": {"n1": {"state": "free",
///     "resources_available": {"ncpus": 16, "mem": "24684084kb"},
///     "resources_assigned": {"ncpus": 12, "mem": "102400kb"}}}}"#;
/// let server = r#"{"Server": {"pbs": {"state_count": "Transit:0 Queued:2 Held:0 Running:1 ",
///     "default_queue": "workq"}}}"#;
/// let mut spec = JobSpec::new(JobKey::new("k")?, "n", "true");
/// spec.resources.cpus = Some(4);
/// let estimate = read_estimate(nodes, server, &spec, None)?;
/// assert_eq!(estimate.start, EstimatedStart::Now);
/// assert_eq!(estimate.queue.as_deref(), Some("workq"));
/// spec.resources.cpus = Some(8);
/// assert_eq!(read_estimate(nodes, server, &spec, None)?.start, EstimatedStart::Later);
/// # Ok::<(), batchbridge_core::Error>(())
/// ```
pub fn read_estimate(
    nodes: &str,
    server: &str,
    spec: &JobSpec,
    queue: Option<&str>,
) -> Result<StartEstimate> {
    let node_list: Value =
        serde_json::from_str(nodes).map_err(|_| unexpected("pbsnodes -a -F json", nodes))?;
    let server_status: Value =
        serde_json::from_str(server).map_err(|_| unexpected("qstat -B -f -F json", server))?;
    let server_ad = server_status
        .get("Server")
        .and_then(Value::as_object)
        .and_then(|servers| servers.values().next())
        .ok_or_else(|| unexpected("qstat -B -f -F json", server))?;
    let queue = queue
        .map(str::to_owned)
        .or_else(|| server_ad.get("default_queue")?.as_str().map(str::to_owned));
    let queued = server_ad
        .get("state_count")
        .and_then(Value::as_str)
        .and_then(|counts| {
            counts
                .split_whitespace()
                .find_map(|count| count.strip_prefix("Queued:")?.parse::<u64>().ok())
        })
        .ok_or_else(|| unexpected("qstat -B -f -F json (state_count)", server))?;

    let select = Select::of(spec);
    let empty = Value::Object(serde_json::Map::new());
    let (mut could_ever, mut free_now) = (0_u32, 0_u32);
    for node in node_list
        .get("nodes")
        .and_then(Value::as_object)
        .into_iter()
        .flat_map(|nodes| nodes.values())
    {
        let serves_queue = match node.get("queue").and_then(Value::as_str) {
            Some(only) => queue.as_deref() == Some(only),
            None => true,
        };
        let available = node.get("resources_available").unwrap_or(&empty);
        if !serves_queue || !select.fits(available, &empty) {
            continue;
        }
        could_ever += 1;
        let up_and_free = node.get("state").and_then(Value::as_str) == Some("free");
        let assigned = node.get("resources_assigned").unwrap_or(&empty);
        if up_and_free && select.fits(available, assigned) {
            free_now += 1;
        }
    }
    if could_ever < select.chunks {
        return Err(Error::invalid_input(format!(
            "job {}: {} of the PBS server's nodes serving queue {} could ever hold a chunk \
             of ncpus={}{}{}; it asks for {}",
            spec.key,
            could_ever,
            queue.as_deref().unwrap_or("(default)"),
            select.ncpus,
            select
                .mem
                .map(|m| format!(":mem={}mb", m >> 20))
                .unwrap_or_default(),
            select
                .ngpus
                .map(|g| format!(":ngpus={g}"))
                .unwrap_or_default(),
            select.chunks
        )));
    }
    let start = match free_now >= select.chunks {
        true => EstimatedStart::Now,
        false => EstimatedStart::Later,
    };
    let mut estimate = StartEstimate::new(start);
    estimate.queue = queue;
    estimate.detail = Some(format!(
        "{free_now} of {could_ever} nodes have a free chunk; {queued} jobs queued"
    ));
    Ok(estimate)
}

/// Asks the server for its nodes and its queue counts ([`read_estimate`]).
pub(crate) async fn estimate_start<S: CliScheduler>(
    pbs: &S,
    jobs: &JobDirs,
    spec: &JobSpec,
    queue: Option<&str>,
) -> Result<StartEstimate> {
    let mut answers = Vec::with_capacity(2);
    for (what, command) in [
        (
            "pbsnodes",
            Command::new("pbsnodes").args(["-a", "-F", "json"]),
        ),
        (
            "qstat",
            Command::new("qstat").args(["-B", "-f", "-F", "json"]),
        ),
    ] {
        let output = jobs.run(command).await?;
        if !output.success() {
            return Err(pbs.failure(what, &output));
        }
        answers.push(output.stdout_text());
    }
    read_estimate(&answers[0], &answers[1], spec, queue)
}

#[cfg(test)]
mod tests {
    use batchbridge_core::{ByteSize, JobKey};

    use super::*;

    /// `pbsnodes -a -F json` of the test bed's server with one idle node, captured.
    const IDLE: &str = r#"{
	"timestamp":	1795455631,
	"pbs_version":	"23.06.06",
	"pbs_server":	"pbs",
	"nodes":	{
		"pbs":	{
			"Mom":	"pbs",
			"ntype":	"PBS",
			"state":	"free",
			"pcpus":	2,
			"resources_available":	{
				"arch":	"linux",
				"host":	"pbs",
				"mem":	"24684084kb",
				"ncpus":	16,
				"vnode":	"pbs"
			},
			"resources_assigned":	{
			},
			"resv_enable":	"True",
			"sharing":	"default_shared",
			"license":	"l",
			"last_state_change_time":	1795455175,
			"last_used_time":	1795455176
		}
	}
}"#;

    /// The same with a job holding all 16 CPUs and 100 MiB, captured.
    const BUSY: &str = r#"{
	"timestamp":	1795455974,
	"pbs_version":	"23.06.06",
	"pbs_server":	"pbs",
	"nodes":	{
		"pbs":	{
			"Mom":	"pbs",
			"ntype":	"PBS",
			"state":	"job-busy",
			"pcpus":	2,
			"jobs":	["6001.pbs"],
			"resources_available":	{
				"arch":	"linux",
				"host":	"pbs",
				"mem":	"24684084kb",
				"ncpus":	16,
				"vnode":	"pbs"
			},
			"resources_assigned":	{
				"mem":	"102400kb",
				"ncpus":	16
			},
			"resv_enable":	"True",
			"sharing":	"default_shared",
			"license":	"l",
			"last_state_change_time":	1795455970,
			"last_used_time":	1795455176
		}
	}
}"#;

    /// Three nodes: one free with 8 CPUs and 2 GPUs left, one free tied to queue `gpu`, one
    /// down.
    const THREE: &str = r#"{"nodes": {
        "a": {"state": "free", "resources_available": {"ncpus": 16, "mem": "64gb", "ngpus": 2},
              "resources_assigned": {"ncpus": 8, "mem": "32gb"}},
        "b": {"state": "free", "queue": "gpu", "resources_available": {"ncpus": 16, "mem": "64gb"}},
        "c": {"state": "down,offline", "resources_available": {"ncpus": 16, "mem": "64gb"}}
    }}"#;

    /// `qstat -B -f -F json`'s server, cut to what is read, captured.
    const SERVER: &str = r#"{"timestamp": 1795455976, "Server": {"pbs": {
        "server_state": "Active",
        "state_count": "Transit:0 Queued:3 Held:0 Waiting:0 Running:0 Exiting:0 Begun:0 ",
        "default_queue": "workq"}}}"#;

    #[test]
    fn estimates_from_the_server_s_nodes() {
        /// Name, nodes, the spec's edit, its queue, the start and how the detail begins.
        type Case = (
            &'static str,
            &'static str,
            fn(&mut JobSpec),
            Option<&'static str>,
            EstimatedStart,
            &'static str,
        );
        #[rustfmt::skip]
        let cases: [Case; 9] = [
            ("idle node", IDLE, |_| {}, None, EstimatedStart::Now, "1 of 1 nodes have a free chunk; 3 jobs queued"),
            ("idle node, all CPUs and 20 GiB", IDLE, |s| { s.resources.cpus = Some(16); s.resources.memory = Some(ByteSize::gib(20)) }, None, EstimatedStart::Now, "1 of 1"),
            ("busy node", BUSY, |_| {}, None, EstimatedStart::Later, "0 of 1 nodes have a free chunk"),
            ("8 CPUs left on a", THREE, |s| s.resources.cpus = Some(8), None, EstimatedStart::Now, "1 of 2"),
            ("9 CPUs: a is too full, c is down", THREE, |s| s.resources.cpus = Some(9), None, EstimatedStart::Later, "0 of 2"),
            ("queue gpu may use b", THREE, |s| s.resources.cpus = Some(9), Some("gpu"), EstimatedStart::Now, "1 of 3"),
            ("two chunks: one free node", THREE, |s| s.resources.nodes = Some(2), None, EstimatedStart::Later, "1 of 2"),
            ("GPUs only on a", THREE, |s| s.resources.gpus = Some(2), None, EstimatedStart::Now, "1 of 1"),
            ("32 GiB left on a", THREE, |s| s.resources.memory = Some(ByteSize::gib(33)), None, EstimatedStart::Later, "0 of 2"),
        ];
        for (name, nodes, edit, queue, start, detail) in cases {
            let mut spec = JobSpec::new(JobKey::new("k").unwrap(), "n", "true");
            edit(&mut spec);
            let estimate = read_estimate(nodes, SERVER, &spec, queue).unwrap();
            assert_eq!(estimate.start, start, "{name}: {estimate:?}");
            assert!(
                estimate.detail.as_deref().unwrap().starts_with(detail),
                "{name}: {estimate:?}"
            );
            assert_eq!(
                estimate.queue.as_deref(),
                Some(queue.unwrap_or("workq")),
                "{name}"
            );
        }
    }

    #[test]
    fn a_chunk_no_node_could_ever_hold_is_refused() {
        let mut spec = JobSpec::new(JobKey::new("k").unwrap(), "n", "true");
        spec.resources.cpus = Some(17);
        let err = read_estimate(IDLE, SERVER, &spec, None).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
        assert_eq!(
            err.message(),
            "job k: 0 of the PBS server's nodes serving queue workq could ever hold a chunk of \
             ncpus=17; it asks for 1"
        );
        spec.resources.cpus = Some(1);
        spec.resources.gpus = Some(1);
        let err = read_estimate(IDLE, SERVER, &spec, None).unwrap_err();
        assert!(err.message().contains("ncpus=1:ngpus=1"), "{err}");
    }

    #[test]
    fn sizes_and_odd_answers() {
        for (text, bytes) in [
            ("24684084kb", Some(24_684_084 * 1024)),
            ("0mb", Some(0)),
            ("2GB", Some(2 << 30)),
            ("512", Some(512)),
            ("512b", Some(512)),
            ("10kw", None),
            ("", None),
            ("99999999999999pb", None),
        ] {
            assert_eq!(size(&Value::from(text)), bytes, "{text}");
        }
        let spec = JobSpec::new(JobKey::new("k").unwrap(), "n", "true");
        for (nodes, server) in [
            ("not json", SERVER),
            (IDLE, "{}"),
            (IDLE, r#"{"Server": {"pbs": {"state_count": "Transit:0"}}}"#),
        ] {
            let err = read_estimate(nodes, server, &spec, None).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::UnexpectedOutput, "{nodes} {server}");
        }
    }
}
