//! A script's `#SBATCH` lines, read on the client as sbatch would read them, applied to its
//! [`JobSpec`]: sbatch itself only ever sees batchbridge's wrapper, whose directives are
//! its own. What becomes of each option is in the crate README's table of directives.
//!
//! Reading follows sbatch, as seen on SLURM 22.05 and 24.11: the lines starting `#SBATCH`
//! in the script's header (up to the first line that is neither blank nor a comment), each
//! split into words on whitespace (quotes group words even mid-word, a backslash escapes
//! inside quotes and is refused outside them, where the two versions differ; an unquoted
//! `#` starts a comment); options as sbatch's getopt takes them (`--opt=value`,
//! `--opt value`, `-X value`, `-Xvalue`, an unambiguous abbreviation of a long option).

use std::collections::HashMap;

use batchbridge_core::directives::{DirectiveLine, DirectiveReport, Fate, SpecField};
use batchbridge_core::spec::{parse_array, parse_size, parse_wall_time};
use batchbridge_core::{JobKey, JobSpec};

use crate::script::{PASSTHROUGH_KEY, check_passthrough};

/// What starts a directive line.
pub const DIRECTIVE: &str = "#SBATCH";

/// sbatch's short options and the long options they stand for.
const SHORT: [(char, &str); 36] = [
    ('A', "account"),
    ('a', "array"),
    ('B', "extra-node-info"),
    ('b', "begin"),
    ('C', "constraint"),
    ('c', "cpus-per-task"),
    ('D', "chdir"),
    ('d', "dependency"),
    ('e', "error"),
    ('F', "nodefile"),
    ('G', "gpus"),
    ('H', "hold"),
    ('h', "help"),
    ('i', "input"),
    ('J', "job-name"),
    ('k', "no-kill"),
    ('L', "licenses"),
    ('M', "clusters"),
    ('m', "distribution"),
    ('N', "nodes"),
    ('n', "ntasks"),
    ('O', "overcommit"),
    ('o', "output"),
    ('p', "partition"),
    ('Q', "quiet"),
    ('q', "qos"),
    ('S', "core-spec"),
    ('s', "oversubscribe"),
    ('t', "time"),
    ('u', "usage"),
    ('V', "version"),
    ('v', "verbose"),
    ('W', "wait"),
    ('w', "nodelist"),
    ('x', "exclude"),
    ('I', "immediate"),
];

/// sbatch's long options (`man sbatch`, 22.05 to 24.11), for resolving an abbreviation as
/// its getopt does.
const LONG: &[&str] = &[
    "account",
    "acctg-freq",
    "array",
    "batch",
    "bb",
    "bbf",
    "begin",
    "chdir",
    "cluster-constraint",
    "clusters",
    "comment",
    "constraint",
    "container",
    "container-id",
    "contiguous",
    "core-spec",
    "cores-per-socket",
    "cpu-freq",
    "cpus-per-gpu",
    "cpus-per-task",
    "deadline",
    "delay-boot",
    "dependency",
    "distribution",
    "error",
    "exclude",
    "exclusive",
    "export",
    "export-file",
    "extra",
    "extra-node-info",
    "get-user-env",
    "gid",
    "gpu-bind",
    "gpu-freq",
    "gpus",
    "gpus-per-node",
    "gpus-per-socket",
    "gpus-per-task",
    "gres",
    "gres-flags",
    "help",
    "hint",
    "hold",
    "ignore-pbs",
    "immediate",
    "input",
    "job-name",
    "kill-on-invalid-dep",
    "licenses",
    "mail-type",
    "mail-user",
    "mcs-label",
    "mem",
    "mem-bind",
    "mem-per-cpu",
    "mem-per-gpu",
    "mincpus",
    "network",
    "nice",
    "no-kill",
    "no-requeue",
    "nodefile",
    "nodelist",
    "nodes",
    "ntasks",
    "ntasks-per-core",
    "ntasks-per-gpu",
    "ntasks-per-node",
    "ntasks-per-socket",
    "oom-kill-step",
    "open-mode",
    "output",
    "overcommit",
    "oversubscribe",
    "parsable",
    "partition",
    "power",
    "prefer",
    "priority",
    "profile",
    "propagate",
    "qos",
    "quiet",
    "reboot",
    "requeue",
    "reservation",
    "resv-ports",
    "segment",
    "signal",
    "sockets-per-node",
    "spread-job",
    "switches",
    "test-only",
    "thread-spec",
    "threads-per-core",
    "time",
    "time-min",
    "tmp",
    "tres-bind",
    "tres-per-task",
    "uid",
    "usage",
    "use-min-nodes",
    "verbose",
    "version",
    "wait",
    "wait-all-nodes",
    "wckey",
    "wrap",
];

/// Long options that take no value, or one only after `=`: the next word is not theirs.
const NO_SEPARATE_VALUE: &[&str] = &[
    "contiguous",
    "exclusive",
    "get-user-env",
    "help",
    "hold",
    "ignore-pbs",
    "immediate",
    "nice",
    "no-kill",
    "no-requeue",
    "overcommit",
    "oversubscribe",
    "parsable",
    "propagate",
    "quiet",
    "reboot",
    "requeue",
    "spread-job",
    "test-only",
    "usage",
    "use-min-nodes",
    "verbose",
    "version",
    "wait",
];

/// Options refused, and why: each would take from batchbridge where the job's output goes,
/// which job it tracks or whether sbatch prints the id it reads.
const REFUSED: [(&str, &str); 13] = [
    ("output", OUTPUT),
    ("error", OUTPUT),
    (
        "input",
        "batchbridge runs the script with no standard input; read the file in the script",
    ),
    ("open-mode", OUTPUT),
    (
        "parsable",
        "batchbridge runs sbatch --parsable itself; remove the line",
    ),
    ("wrap", "would submit a command line instead of this script"),
    (
        "wait",
        "would block sbatch until the job ends; use `batchbridge submit --wait`",
    ),
    (
        "test-only",
        "would submit nothing; use `batchbridge submit --dry-run` to see the spec",
    ),
    (
        "comment",
        "batchbridge keeps the job's key in its comment, to find the job again",
    ),
    (
        "clusters",
        "would submit to another cluster than the one batchbridge follows the job on; configure that cluster in batchbridge and choose it",
    ),
    ("help", SBATCH_ITSELF),
    ("usage", SBATCH_ITSELF),
    ("version", SBATCH_ITSELF),
];
const OUTPUT: &str = "batchbridge keeps the script's output in its job directory (task-N.stdout, \
                      task-N.stderr), where `logs` reads it; redirect inside the script instead";
const SBATCH_ITSELF: &str = "changes what sbatch does instead of the job";

/// `spec` with its script's `#SBATCH` lines applied, and each line's fate.
///
/// ```
/// use batchbridge_core::directives::{Fate, SpecField};
/// use batchbridge_core::{JobKey, JobSpec};
/// use batchbridge_slurm::directives::apply_directives;
///
/// let script = "#!/bin/bash\n#SBATCH --time=1\n#SBATCH -p single\n#SBATCH --mem=100M\nhostname\n";
/// let mut spec = JobSpec::new(JobKey::new("k")?, "", script);
/// spec.queue = Some("debug".into()); // as from a command-line flag: it wins
/// let (spec, report) = apply_directives(spec);
/// report.check()?;
/// assert_eq!(spec.resources.wall_time, Some(std::time::Duration::from_secs(60)));
/// assert_eq!(spec.queue.as_deref(), Some("debug"));
/// assert_eq!(report.lines[1].fate, Fate::Overridden { field: SpecField::Queue });
/// assert_eq!(spec.resources.memory, Some(bytesize::ByteSize::mib(100)));
/// # Ok::<(), batchbridge_core::Error>(())
/// ```
pub fn apply_directives(spec: JobSpec) -> (JobSpec, DirectiveReport) {
    let script = spec.script.clone();
    let mut applying = Applying {
        explicit: Explicit::of(&spec),
        spec,
        report: DirectiveReport::default(),
        taken: HashMap::new(),
    };
    for directive in header_directives(&script) {
        let fates = match split_words(directive.options) {
            Ok(words) => applying.apply_line(&words),
            Err(why) => vec![Fate::Refused { reason: why }],
        };
        for fate in fates {
            let index = applying.report.lines.len();
            if let Fate::Taken { field } = &fate
                && let Some(earlier) = applying.taken.insert(*field, index)
            {
                // sbatch takes the last of repeated options.
                applying.report.lines[earlier].fate = Fate::Overridden { field: *field };
            }
            applying
                .report
                .push(DirectiveLine::new(directive.line, directive.text, fate));
        }
    }
    (applying.spec, applying.report)
}

/// The fields the caller set, which directives do not change.
struct Explicit {
    fields: Vec<SpecField>,
    environment: Vec<String>,
}

impl Explicit {
    fn of(spec: &JobSpec) -> Self {
        let r = &spec.resources;
        let set = [
            (SpecField::Name, !spec.name.is_empty()),
            (SpecField::Queue, spec.queue.is_some()),
            (SpecField::Cpus, r.cpus.is_some()),
            (SpecField::Memory, r.memory.is_some()),
            (SpecField::Disk, r.disk.is_some()),
            (SpecField::WallTime, r.wall_time.is_some()),
            (SpecField::Nodes, r.nodes.is_some()),
            (SpecField::Gpus, r.gpus.is_some()),
            (SpecField::Array, spec.array.is_some()),
            (SpecField::WorkingDir, spec.working_dir.is_some()),
        ];
        Self {
            fields: set
                .iter()
                .filter(|(_, set)| *set)
                .map(|(f, _)| *f)
                .collect(),
            environment: spec.environment.keys().cloned().collect(),
        }
    }
}

struct Applying {
    spec: JobSpec,
    explicit: Explicit,
    report: DirectiveReport,
    /// The report line that last took each field, which a later line overrides.
    taken: HashMap<SpecField, usize>,
}

impl Applying {
    /// The fate of each option on one line, whose words are `words`.
    fn apply_line(&mut self, words: &[String]) -> Vec<Fate> {
        let mut fates = Vec::new();
        let mut words = words.iter();
        while let Some(word) = words.next() {
            if word == "--" {
                // What follows would be arguments to sbatch, which has none for a directive.
                fates.push(refused(
                    "`--` ends sbatch's options; remove it and what follows",
                ));
                break;
            }
            match read_option(word, &mut words) {
                Ok((name, value)) => fates.push(self.apply_option(&name, value.as_deref())),
                Err(why) => {
                    // sbatch refuses the whole script at a word it cannot read; what
                    // follows on the line is not read as options either.
                    fates.push(Fate::Refused { reason: why });
                    break;
                }
            }
        }
        fates
    }

    fn apply_option(&mut self, name: &str, value: Option<&str>) -> Fate {
        if let Some((_, why)) = REFUSED.iter().find(|(refused, _)| *refused == name) {
            return refused(why);
        }
        let needs_value = |value: Option<&str>| {
            value
                .map(str::to_owned)
                .ok_or_else(|| format!("--{name} needs a value"))
        };
        let field = match name {
            "time" => Some(SpecField::WallTime),
            "partition" => Some(SpecField::Queue),
            "cpus-per-task" => Some(SpecField::Cpus),
            "mem" => Some(SpecField::Memory),
            "tmp" => Some(SpecField::Disk),
            "nodes" if value.is_some_and(is_count) => Some(SpecField::Nodes),
            "gpus" if value.is_some_and(is_count) => Some(SpecField::Gpus),
            "gres"
                if value
                    .and_then(|v| v.strip_prefix("gpu:"))
                    .is_some_and(is_count) =>
            {
                Some(SpecField::Gpus)
            }
            "job-name" => Some(SpecField::Name),
            "array" => Some(SpecField::Array),
            "chdir" => Some(SpecField::WorkingDir),
            _ => None,
        };
        if let Some(field) = field {
            return match needs_value(value) {
                Ok(value) => self.take(field, &value),
                Err(why) => refused(&why),
            };
        }
        match name {
            "export" => match needs_value(value) {
                Ok(value) => self.export(&value),
                Err(why) => refused(&why),
            },
            "ignore-pbs" => Fate::Ignored {
                reason: "batchbridge reads no #PBS lines for SLURM".into(),
            },
            _ => self.pass(name, value),
        }
    }

    /// Sets `field` from `value` unless the caller set it; a value the spec cannot hold is
    /// refused with the spec's own message.
    fn take(&mut self, field: SpecField, value: &str) -> Fate {
        if field == SpecField::WorkingDir {
            return self.chdir(value);
        }
        if self.explicit.fields.contains(&field) {
            return Fate::Overridden { field };
        }
        match set(&mut self.spec, field, value) {
            Ok(()) => Fate::Taken { field },
            Err(why) => Fate::Refused { reason: why },
        }
    }

    /// `--chdir`: the working directory when the caller set none; the one it set when it
    /// is the same; refused when it differs, since the script would run elsewhere than
    /// either says.
    fn chdir(&mut self, dir: &str) -> Fate {
        let field = SpecField::WorkingDir;
        if !dir.starts_with('/') {
            return refused(
                "sbatch reads a relative directory from where it runs, which for batchbridge \
                 is no directory of yours; write an absolute path",
            );
        }
        match &self.spec.working_dir {
            Some(set) if self.explicit.fields.contains(&field) && set == dir => {
                Fate::Overridden { field }
            }
            Some(set) if self.explicit.fields.contains(&field) => Fate::Refused {
                reason: format!(
                    "contradicts the working directory {set:?} given for the job; remove one"
                ),
            },
            _ => match set(&mut self.spec, field, dir) {
                Ok(()) => Fate::Taken { field },
                Err(why) => Fate::Refused { reason: why },
            },
        }
    }

    /// `--export`: `NAME=VALUE` entries go into the environment (where the caller set no
    /// such variable); `ALL` and bare names are what the job gets already (sbatch's
    /// default, the environment batchbridge's sbatch runs in); `NONE` is refused, since
    /// batchbridge's wrapper needs that environment.
    fn export(&mut self, value: &str) -> Fate {
        let field = SpecField::Environment;
        let entries: Vec<&str> = value.split(',').collect();
        if entries.contains(&"NONE") {
            return refused(
                "batchbridge's wrapper runs in the environment sbatch passes on; set the \
                 variables the job needs with NAME=VALUE (--env on the command line) instead",
            );
        }
        let pairs: Vec<(&str, &str)> = entries.iter().filter_map(|e| e.split_once('=')).collect();
        if pairs.is_empty() {
            return Fate::Ignored {
                reason: "the job gets the environment sbatch runs in already, as sbatch's \
                         default --export=ALL"
                    .into(),
            };
        }
        let mut trial = JobSpec::new(placeholder_key(), "n", "true");
        let mut took = false;
        for (name, val) in pairs {
            if self.explicit.environment.iter().any(|n| n == name) {
                continue;
            }
            trial.environment.insert(name.to_owned(), val.to_owned());
            took = true;
        }
        if let Err(err) = trial.validate() {
            return Fate::Refused {
                reason: without_key(err.message()),
            };
        }
        self.spec.environment.extend(trial.environment);
        match took {
            true => Fate::Taken { field },
            false => Fate::Overridden { field },
        }
    }

    /// Any other option: to sbatch as it is, unless the submit would refuse it.
    fn pass(&mut self, name: &str, value: Option<&str>) -> Fate {
        let option = match value {
            Some(value) => format!("--{name}={value}"),
            None => format!("--{name}"),
        };
        if let Err(err) = check_passthrough(&option) {
            return Fate::Refused {
                reason: err.message().to_owned(),
            };
        }
        self.spec
            .passthrough
            .entry(PASSTHROUGH_KEY.to_owned())
            .or_default()
            .push(option.clone());
        Fate::Passed {
            options: vec![option],
        }
    }
}

fn refused(why: &str) -> Fate {
    Fate::Refused { reason: why.into() }
}

fn is_count(value: &str) -> bool {
    !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit())
}

/// Sets `field` of `spec` from sbatch's text for it, checked as the spec checks it.
fn set(spec: &mut JobSpec, field: SpecField, value: &str) -> Result<(), String> {
    let message = |err: batchbridge_core::Error| err.message().to_owned();
    let count = |value: &str| -> Result<u32, String> {
        value
            .parse()
            .map_err(|_| format!("{value:?} is not a count"))
    };
    let mut trial = JobSpec::new(placeholder_key(), "n", "true");
    let r = &mut trial.resources;
    match field {
        SpecField::WallTime => r.wall_time = Some(parse_wall_time(value).map_err(message)?),
        SpecField::Memory | SpecField::Disk => {
            let size = parse_size(value).map_err(message)?;
            if size.as_u64() == 0 {
                return Err(
                    "sbatch reads 0 as all of a node's memory; ask for a size, or leave it out \
                     for the cluster's default"
                        .into(),
                );
            }
            match field {
                SpecField::Memory => r.memory = Some(size),
                _ => r.disk = Some(size),
            }
        }
        SpecField::Cpus => r.cpus = Some(count(value)?),
        SpecField::Nodes => r.nodes = Some(count(value)?),
        SpecField::Gpus => {
            r.gpus = Some(count(value.strip_prefix("gpu:").unwrap_or(value))?);
        }
        SpecField::Queue => trial.queue = Some(value.to_owned()),
        SpecField::Name => trial.name = value.to_owned(),
        SpecField::Array => trial.array = Some(parse_array(value).map_err(message)?),
        SpecField::WorkingDir => trial.working_dir = Some(value.to_owned()),
        _ => return Err(format!("{field} is not set from a directive")),
    }
    trial.validate().map_err(|err| without_key(err.message()))?;
    let r = trial.resources;
    match field {
        SpecField::WallTime => spec.resources.wall_time = r.wall_time,
        SpecField::Memory => spec.resources.memory = r.memory,
        SpecField::Disk => spec.resources.disk = r.disk,
        SpecField::Cpus => spec.resources.cpus = r.cpus,
        SpecField::Nodes => spec.resources.nodes = r.nodes,
        SpecField::Gpus => spec.resources.gpus = r.gpus,
        SpecField::Queue => spec.queue = trial.queue,
        SpecField::Name => spec.name = trial.name,
        SpecField::Array => spec.array = trial.array,
        _ => spec.working_dir = trial.working_dir,
    }
    Ok(())
}

/// The key of the spec a value is checked in alone, which no message shows.
fn placeholder_key() -> JobKey {
    JobKey::new("directive").expect("a valid key")
}

/// A validation message without its `job spec KEY: ` prefix, which names the placeholder.
fn without_key(message: &str) -> String {
    message
        .split_once(": ")
        .map_or(message, |(_, rest)| rest)
        .to_owned()
}

/// One option from `word`, and its value (from the rest of `word` or the next of `rest`,
/// as getopt reads them), by its long name.
fn read_option<'a>(
    word: &str,
    rest: &mut impl Iterator<Item = &'a String>,
) -> Result<(String, Option<String>), String> {
    if let Some(long) = word.strip_prefix("--") {
        let (written, value) = match long.split_once('=') {
            Some((name, value)) => (name, Some(value.to_owned())),
            None => (long, None),
        };
        let name = resolve(written)?;
        let value = match value {
            None if !NO_SEPARATE_VALUE.contains(&name) && LONG.contains(&name) => {
                rest.next().cloned()
            }
            value => value,
        };
        return Ok((name.to_owned(), value));
    }
    let mut letters = word.strip_prefix('-').unwrap_or_default().chars();
    let Some(letter) = letters.next() else {
        return Err(format!("{word:?} is not an option"));
    };
    let Some((_, long)) = SHORT.iter().find(|(short, _)| *short == letter) else {
        return Err(format!("-{letter} is not an sbatch option"));
    };
    let attached: String = letters.collect();
    let value = match (NO_SEPARATE_VALUE.contains(long), attached.is_empty()) {
        (true, true) => None,
        (true, false) => {
            return Err(format!(
                "{word:?} combines short options; write one per word"
            ));
        }
        (false, true) => rest.next().cloned(),
        (false, false) => Some(attached),
    };
    Ok(((*long).to_owned(), value))
}

/// The long option `written` (not empty) names: itself, or the one it abbreviates; an
/// unknown name is left to sbatch.
fn resolve(written: &str) -> Result<&str, String> {
    if let Some(exact) = LONG.iter().find(|long| **long == written) {
        return Ok(exact);
    }
    let mut candidates = LONG.iter().filter(|long| long.starts_with(written));
    match (candidates.next(), candidates.next()) {
        (Some(only), None) => Ok(only),
        (Some(one), Some(other)) => Err(format!(
            "--{written} is ambiguous to sbatch (--{one}, --{other}, …); write the option in full"
        )),
        (None, _) => Ok(written),
    }
}

/// A directive's options split into words as sbatch splits them (seen on SLURM 22.05 and
/// 24.11): on
/// whitespace; quotes (`'`, `"`) group and are removed, even mid-word (`a"b c"d` is `ab cd`);
/// inside them a backslash escapes the next character (`"a\"b"` is `a"b`); an unquoted `#`
/// begins a comment that runs to the end of the line, even inside a word (`-J a#b` names
/// the job `a`). A backslash outside quotes is refused: `-J x\ y` names the job `x y` on
/// SLURM 24.11, and 22.05 refuses the script (it keeps the backslash and finds `y`).
fn split_words(text: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut quote: Option<char> = None;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), '\\') => {
                let escaped = chars.next().ok_or("a backslash ends the line")?;
                word.get_or_insert_default().push(escaped);
            }
            (Some(_), c) => word.get_or_insert_default().push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                word.get_or_insert_default();
            }
            (None, '\\') => {
                return Err(
                    "a backslash outside quotes, which SLURM 22.05 keeps and 24.11 \
                            reads as escaping the next character; quote the value instead"
                        .into(),
                );
            }
            (None, c) if c.is_whitespace() => words.extend(word.take()),
            (None, '#') => break,
            (None, c) => word.get_or_insert_default().push(c),
        }
    }
    if let Some(q) = quote {
        return Err(format!("a {q} quote is not closed"));
    }
    words.extend(word);
    Ok(words)
}

/// One directive line of a script's header, found by [`header_directives`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct HeaderDirective<'a> {
    /// The line's number in the script, from 1.
    line: usize,
    /// The whole line, without its line ending.
    text: &'a str,
    /// What follows the prefix: the directive's options.
    options: &'a str,
}

/// The lines of `script`'s header that start with `#SBATCH` in their first
/// column, in order: the header being every line up to the first that is neither blank
/// nor a comment (its first character other than whitespace a `#`, which includes a
/// shebang and an indented `#SBATCH`), as sbatch reads it (seen on SLURM 22.05 and 24.11).
/// A directive after the first command is a plain comment to sbatch, and so it is here.
/// Whatever follows the prefix is the directive's options, even with no space between
/// (sbatch reads `#SBATCHX` as a directive whose first word is `X`, and refuses it).
fn header_directives(script: &str) -> Vec<HeaderDirective<'_>> {
    let mut found = Vec::new();
    for (index, text) in script.lines().enumerate() {
        if let Some(options) = text.strip_prefix(DIRECTIVE) {
            found.push(HeaderDirective {
                line: index + 1,
                text,
                options,
            });
        } else if !text.trim_start().starts_with('#') && !text.trim().is_empty() {
            break;
        }
    }
    found
}

#[cfg(test)]
mod tests;
