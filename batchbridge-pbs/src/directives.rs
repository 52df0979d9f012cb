//! The `#PBS` lines of a job's script, read as `qsub` reads them and applied to its
//! [`JobSpec`] ([`apply_directives`]). qsub never sees the user's script as its job script
//! (batchbridge submits a generated one that runs it), so without this its directives
//! would be dropped without a word.
//!
//! The header is read by OpenPBS's rules (`qsub_sup.c`'s `get_script`, `make_argv`):
//!
//! - Directives are read until the first executable line: a line that is not blank and
//!   whose first non-blank character is not `#`. A line beginning with `:` or `#!` in its
//!   first column is not executable either.
//! - A directive is a line whose first non-blank characters are `#PBS` (the default
//!   prefix; qsub's `-C` on the command line could change it, and batchbridge never
//!   passes one). What follows is split into words as a shell would for plain words:
//!   blanks separate them, `'…'` and `"…"` quote, `\` escapes one character.
//! - A directive line ending in `\` goes on on the next line.
//! - The words are qsub's options as on its command line; any other word (a trailing
//!   comment is one) makes qsub refuse the script, and so it is refused here.
//!
//! Each option's fate is in the [`DirectiveReport`], one entry per spec field it sets, so
//! `-l select=2:ncpus=4` is two entries (nodes and cpus). The README's table lists every
//! option's fate and why.

use std::time::Duration;

use batchbridge_core::bytesize::ByteSize;
use batchbridge_core::directives::{DirectiveLine, DirectiveReport, Fate, SpecField};
use batchbridge_core::error::excerpt;
use batchbridge_core::spec::parse_array;
use batchbridge_core::{ArraySpec, JobSpec};

use crate::script::{NOT_PASSTHROUGH, PASSTHROUGH_KEY, WITH_VALUE};

/// qsub's default directive prefix.
const PREFIX: &str = "#PBS";
/// qsub's options that take no value (OpenPBS's `GETOPT_ARGS`, Linux build).
const FLAGS: &str = "fhIVXz";
/// `-W` attributes that change nothing batchbridge relies on: they go to qsub as written.
const SAFE_ATTRIBUTES: [&str; 8] = [
    "depend",
    "stagein",
    "stageout",
    "group_list",
    "umask",
    "run_count",
    "tolerate_node_failures",
    "release_nodes_on_stageout",
];
/// Host-level resources that belong in a select statement's chunk: batchbridge writes the
/// select statement from the spec, so one it has no field for cannot be added beside it.
const CHUNK_RESOURCES: [&str; 7] = [
    "mpiprocs",
    "ompthreads",
    "vmem",
    "host",
    "vnode",
    "arch",
    "nchunk",
];

/// `spec` with the `#PBS` directives of its script's header applied, and each one's fate.
/// A field `spec` has already (a name that is not empty) wins, as qsub's command line wins over
/// directives: the directive is Overridden. Among directives, the last one for a field wins,
/// as in qsub. Options batchbridge has no field for are added to
/// `spec.passthrough["pbs"]` when they change nothing it relies on; those that would move
/// the job's output, block, lose the job id or change the shell, and any line qsub itself
/// would refuse, are Refused (see [`DirectiveReport::check`]).
///
/// ```
/// use batchbridge_core::directives::{Fate, SpecField};
/// use batchbridge_core::{JobKey, JobSpec};
/// use batchbridge_pbs::directives::apply_directives;
///
/// let script = "#!/bin/bash\n#PBS -l select=1:ncpus=4:mem=2gb\n#PBS -l walltime=1:30:00\n\
///               #PBS -q workq\n#PBS -l place=pack\n#PBS -o out.txt\nmake\n";
/// let mut spec = JobSpec::new(JobKey::new("k")?, "build", script);
/// spec.queue = Some("express".into());
/// let (spec, report) = apply_directives(spec);
/// assert_eq!(spec.resources.cpus, Some(4));
/// assert_eq!(spec.resources.wall_time.map(|t| t.as_secs()), Some(5400));
/// assert_eq!(spec.queue.as_deref(), Some("express"));
/// assert_eq!(spec.passthrough["pbs"], ["-l place=pack"]);
/// let fates: Vec<&Fate> = report.lines.iter().map(|line| &line.fate).collect();
/// assert!(fates.contains(&&Fate::Overridden { field: SpecField::Queue }));
/// let err = report.check().unwrap_err();
/// assert!(err.message().starts_with("line 6: #PBS -o out.txt: "), "{err}");
/// # Ok::<(), batchbridge_core::Error>(())
/// ```
pub fn apply_directives(spec: JobSpec) -> (JobSpec, DirectiveReport) {
    let explicit = spec.clone();
    let mut applied = spec;
    let mut report = DirectiveReport::default();
    for directive in header_directives(&explicit.script) {
        let options = match options(directive.options()) {
            Ok(options) => options,
            Err(reason) => {
                report.push(DirectiveLine::new(
                    directive.line,
                    directive.text,
                    Fate::Refused { reason },
                ));
                continue;
            }
        };
        for option in options {
            let text = match &option.value {
                Some(value) => format!("{PREFIX} -{} {value}", option.letter),
                None => format!("{PREFIX} -{}", option.letter),
            };
            // A line of one option is named as written; one of several by that option.
            let text = if directive.single_option() {
                directive.text.clone()
            } else {
                text
            };
            for effect in effects(&option) {
                let fate = match effect {
                    Effect::Set(setting) => {
                        let field = setting.field();
                        if setting.is_explicit_in(&explicit) {
                            Fate::Overridden { field }
                        } else {
                            setting.apply(&mut applied);
                            Fate::Taken { field }
                        }
                    }
                    Effect::Pass(option) => {
                        applied
                            .passthrough
                            .entry(PASSTHROUGH_KEY.to_owned())
                            .or_default()
                            .push(option.clone());
                        Fate::Passed {
                            options: vec![option],
                        }
                    }
                    Effect::Ignore(reason) => Fate::Ignored { reason },
                    Effect::Refuse(reason) => Fate::Refused { reason },
                };
                report.push(DirectiveLine::new(directive.line, text.clone(), fate));
            }
        }
    }
    (applied, report)
}

/// One `#PBS` line (with the lines a trailing `\` joined to it).
#[derive(Debug, PartialEq, Eq)]
struct HeaderDirective {
    /// Its first line's number, from 1.
    line: usize,
    /// The line as written, continuations joined and their `\` removed.
    text: String,
}

impl HeaderDirective {
    /// What follows the prefix.
    fn options(&self) -> &str {
        self.text
            .trim_start()
            .strip_prefix(PREFIX)
            .unwrap_or_default()
    }

    /// Whether the line holds one option (or none): then the line names the option.
    fn single_option(&self) -> bool {
        options(self.options()).is_ok_and(|options| options.len() <= 1)
    }
}

/// The directives of `script`'s header, as qsub's `get_script` finds them.
fn header_directives(script: &str) -> Vec<HeaderDirective> {
    let mut found = Vec::new();
    let mut lines = script.lines().enumerate();
    while let Some((index, line)) = lines.next() {
        if line.trim_start().starts_with(PREFIX) {
            let mut text = line.to_owned();
            while let Some(cut) = continued(&text) {
                text.truncate(cut);
                match lines.next() {
                    Some((_, next)) => text.push_str(next),
                    None => break,
                }
            }
            found.push(HeaderDirective {
                line: index + 1,
                text,
            });
        } else if is_executable(line) {
            break;
        }
    }
    found
}

/// Where a directive line's trailing `\` is (blanks after it allowed), if it has one:
/// qsub joins the next line there (`pbs_extendable_line`).
fn continued(line: &str) -> Option<usize> {
    let end = line.trim_end();
    end.strip_suffix('\\').map(str::len)
}

/// OpenPBS's `pbs_isexecutable`: whether a line ends the header.
fn is_executable(line: &str) -> bool {
    if line.starts_with(':') || line.starts_with("#!") {
        return false;
    }
    let trimmed = line.trim_start();
    !trimmed.is_empty() && !trimmed.starts_with('#')
}

/// One option of a directive: its letter and value.
#[derive(Debug, Clone, PartialEq, Eq)]
struct QsubOption {
    letter: char,
    value: Option<String>,
}

/// A directive's options, read as qsub reads them (`make_argv`, then `getopt`), or why
/// qsub would refuse the line.
fn options(text: &str) -> Result<Vec<QsubOption>, String> {
    let words = words(text)?;
    let mut options = Vec::new();
    let mut words = words.into_iter();
    while let Some(word) = words.next() {
        let Some(letters) = word
            .strip_prefix('-')
            .filter(|l| !l.is_empty() && *l != "-")
        else {
            return Err(format!(
                "{:?} is not a qsub option, and qsub refuses a directive holding anything \
                 else (a comment after the options included)",
                excerpt(&word)
            ));
        };
        for (at, letter) in letters.char_indices() {
            if FLAGS.contains(letter) {
                options.push(QsubOption {
                    letter,
                    value: None,
                });
                continue;
            }
            if !WITH_VALUE.contains(letter) {
                return Err(format!("-{letter} is not a qsub option"));
            }
            let attached = &letters[at + letter.len_utf8()..];
            let value = if attached.is_empty() {
                words
                    .next()
                    .ok_or_else(|| format!("-{letter} lacks its value"))?
            } else {
                attached.to_owned()
            };
            options.push(QsubOption {
                letter,
                value: Some(value),
            });
            break;
        }
    }
    Ok(options)
}

/// `text` split into words as qsub's `make_argv` splits a directive.
fn words(text: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' | '\'' => {
                let current = word.get_or_insert_default();
                loop {
                    match chars.next() {
                        Some(q) if q == c => break,
                        Some(other) => current.push(other),
                        None => return Err(format!("its {c} is never closed")),
                    }
                }
            }
            '\\' => {
                let current = word.get_or_insert_default();
                current.extend(chars.next());
            }
            c if c.is_whitespace() => words.extend(word.take()),
            c => word.get_or_insert_default().push(c),
        }
    }
    words.extend(word);
    Ok(words)
}

/// A value for a spec field, from a directive.
#[derive(Debug, Clone, PartialEq)]
enum Setting {
    Name(String),
    Queue(String),
    Cpus(u32),
    Memory(ByteSize),
    Nodes(u32),
    Gpus(u32),
    WallTime(Duration),
    Array(ArraySpec),
    Environment(String, String),
}

impl Setting {
    fn field(&self) -> SpecField {
        match self {
            Self::Name(_) => SpecField::Name,
            Self::Queue(_) => SpecField::Queue,
            Self::Cpus(_) => SpecField::Cpus,
            Self::Memory(_) => SpecField::Memory,
            Self::Nodes(_) => SpecField::Nodes,
            Self::Gpus(_) => SpecField::Gpus,
            Self::WallTime(_) => SpecField::WallTime,
            Self::Array(_) => SpecField::Array,
            Self::Environment(..) => SpecField::Environment,
        }
    }

    /// Whether the spec as given sets this field (for the environment, this variable)
    /// itself; an empty name is unset (the caller fills in its default afterwards).
    fn is_explicit_in(&self, spec: &JobSpec) -> bool {
        let resources = &spec.resources;
        match self {
            Self::Name(_) => !spec.name.is_empty(),
            Self::Queue(_) => spec.queue.is_some(),
            Self::Cpus(_) => resources.cpus.is_some(),
            Self::Memory(_) => resources.memory.is_some(),
            Self::Nodes(_) => resources.nodes.is_some(),
            Self::Gpus(_) => resources.gpus.is_some(),
            Self::WallTime(_) => resources.wall_time.is_some(),
            Self::Array(_) => spec.array.is_some(),
            Self::Environment(name, _) => spec.environment.contains_key(name),
        }
    }

    fn apply(self, spec: &mut JobSpec) {
        let resources = &mut spec.resources;
        match self {
            Self::Name(name) => spec.name = name,
            Self::Queue(queue) => spec.queue = Some(queue),
            Self::Cpus(cpus) => resources.cpus = Some(cpus),
            Self::Memory(memory) => resources.memory = Some(memory),
            Self::Nodes(nodes) => resources.nodes = Some(nodes),
            Self::Gpus(gpus) => resources.gpus = Some(gpus),
            Self::WallTime(time) => resources.wall_time = Some(time),
            Self::Array(array) => spec.array = Some(array),
            Self::Environment(name, value) => {
                spec.environment.insert(name, value);
            }
        }
    }
}

/// What one option does, before the spec's own fields are weighed.
#[derive(Debug, Clone, PartialEq)]
enum Effect {
    Set(Setting),
    /// A passthrough entry, in the form `qsub_options` reads (`-l place=pack`).
    Pass(String),
    Ignore(String),
    Refuse(String),
}

/// What `option` does: one effect per field it sets, or one for the whole option.
fn effects(option: &QsubOption) -> Vec<Effect> {
    let letter = option.letter;
    let value = option.value.as_deref().unwrap_or_default();
    let pass = || match &option.value {
        Some(value) => Effect::Pass(format!("-{letter} {value}")),
        None => Effect::Pass(format!("-{letter}")),
    };
    let one = |effect| vec![effect];
    match letter {
        // Deferred start, account, checkpointing, hold, mail, priority, project, which
        // output files to delete: the job is tracked the same with them.
        'a' | 'A' | 'c' | 'h' | 'm' | 'M' | 'p' | 'P' | 'R' => one(pass()),
        'C' => one(Effect::Ignore(
            "a directive cannot change the directive prefix: only qsub's command line can".into(),
        )),
        'f' => one(Effect::Ignore(
            "batchbridge runs qsub in the foreground already".into(),
        )),
        'N' => one(Effect::Set(Setting::Name(value.to_owned()))),
        'q' if value.contains('@') => one(Effect::Refuse(
            "sends the job to another server, where batchbridge's qstat does not look; \
             name the queue alone"
                .into(),
        )),
        'q' => one(Effect::Set(Setting::Queue(value.to_owned()))),
        'r' if value == "y" => one(Effect::Ignore(
            "jobs are rerunnable already (PBS's default)".into(),
        )),
        'S' => one(shell(value)),
        'u' => one(Effect::Refuse(
            "runs the job as another user, who cannot write batchbridge's job directory".into(),
        )),
        'J' => one(array(value)),
        'l' => value.split(',').flat_map(resource).collect(),
        'v' => environment(value),
        'W' => one(attributes(value)),
        _ => one(Effect::Refuse(refusal(letter))),
    }
}

/// Why `letter` is refused: the passthrough list's reason, as no directive may do what
/// no passthrough option may.
fn refusal(letter: char) -> String {
    match NOT_PASSTHROUGH.iter().find(|(l, _)| *l == letter) {
        Some((_, why)) => format!("it {why}"),
        None => format!("-{letter} is not a qsub option"),
    }
}

/// `-S`: the shell that would run the script. batchbridge's job script runs the user's
/// script with bash, so a Bourne shell changes nothing and any other is refused.
fn shell(path: &str) -> Effect {
    let name = path.rsplit('/').next().unwrap_or_default();
    if matches!(name, "bash" | "sh") {
        Effect::Ignore("batchbridge runs the script with bash".into())
    } else {
        Effect::Refuse(format!(
            "asks for the shell {:?}, but batchbridge runs the script with bash",
            excerpt(path)
        ))
    }
}

/// `-J X-Y[:Z][%M]`, which reads as sbatch's `--array` does ([`parse_array`]): only a
/// range from 0 without a step keeps the script's `$PBS_ARRAY_INDEX` values.
fn array(value: &str) -> Effect {
    match parse_array(value) {
        Ok(array) => Effect::Set(Setting::Array(array)),
        Err(err) => Effect::Refuse(err.message().to_owned()),
    }
}

/// `-v NAME=value,…`: each variable is set in the spec's environment. A name alone would
/// take its value from qsub's environment, which a job submitted by batchbridge does not
/// have.
fn environment(list: &str) -> Vec<Effect> {
    variables(list)
        .into_iter()
        .map(|variable| match variable.split_once('=') {
            Some((name, value)) => {
                Effect::Set(Setting::Environment(name.to_owned(), value.to_owned()))
            }
            None => Effect::Refuse(format!(
                "{} takes its value from qsub's environment, which batchbridge does not \
                 pass on; write {0}=VALUE",
                excerpt(&variable)
            )),
        })
        .collect()
}

/// qsub's `-v` list split at its commas, a quoted value keeping its own.
fn variables(list: &str) -> Vec<String> {
    let mut variables = Vec::new();
    let mut current = String::new();
    let mut quote = None;
    for c in list.chars() {
        match (c, quote) {
            ('"' | '\'', None) => quote = Some(c),
            (c, Some(q)) if c == q => quote = None,
            (',', None) => variables.push(std::mem::take(&mut current)),
            (c, _) => current.push(c),
        }
    }
    variables.push(current);
    variables.retain(|variable| !variable.is_empty());
    variables
}

/// `-W attribute=value,…`: passed as written when every attribute is one that changes
/// nothing batchbridge relies on, else refused.
fn attributes(value: &str) -> Effect {
    for pair in value.split(',') {
        let name = pair.split_once('=').map_or(pair, |(name, _)| name).trim();
        let why = match name {
            name if SAFE_ATTRIBUTES.contains(&name) => continue,
            "block" => "makes qsub wait for the job to end".to_owned(),
            "interactive" => "makes an interactive job".to_owned(),
            "max_run_subjobs" => "limits the array's subjobs: write it as -J 0-N%M".to_owned(),
            "sandbox" => "moves where PBS keeps the job's files".to_owned(),
            name => format!(
                "sets the job attribute {:?}, which batchbridge sets itself or does not know \
                 to be safe",
                excerpt(name)
            ),
        };
        return Effect::Refuse(why);
    }
    Effect::Pass(format!("-W {value}"))
}

/// One `name=value` of a `-l` list.
fn resource(item: &str) -> Vec<Effect> {
    let Some((name, value)) = item.split_once('=') else {
        return vec![Effect::Refuse(format!(
            "{:?} is not a resource request: -l takes name=value",
            excerpt(item)
        ))];
    };
    let read =
        |setting: Result<Setting, String>| vec![setting.map_or_else(Effect::Refuse, Effect::Set)];
    match name {
        "walltime" => read(wall_time(value).map(Setting::WallTime)),
        "select" => select(value),
        "nodes" => nodes(value),
        "ncpus" => read(count(name, value).map(Setting::Cpus)),
        "ngpus" => read(count(name, value).map(Setting::Gpus)),
        "mem" => read(size(value).map(Setting::Memory)),
        name if CHUNK_RESOURCES.contains(&name) => vec![Effect::Refuse(chunk_refusal(name))],
        _ => vec![Effect::Pass(format!("-l {item}"))],
    }
}

fn chunk_refusal(name: &str) -> String {
    format!(
        "batchbridge writes the select statement from the spec (nodes, ncpus, mem, ngpus), \
         which has no place for {:?}",
        excerpt(name)
    )
}

/// `select=[N:]chunk`: one kind of chunk, of ncpus, mem and ngpus; N chunks are N nodes,
/// as batchbridge places them one per node.
fn select(value: &str) -> Vec<Effect> {
    if value.contains('+') {
        return vec![Effect::Refuse(
            "asks for several kinds of chunk; batchbridge asks for one (N nodes alike)".into(),
        )];
    }
    let mut parts = value.split(':').peekable();
    let mut effects = Vec::new();
    if let Some(first) = parts.peek()
        && !first.contains('=')
    {
        effects.push(count("select", first).map(Setting::Nodes));
        parts.next();
    }
    for part in parts {
        let (name, amount) = part.split_once('=').unwrap_or((part, ""));
        effects.push(match name {
            "ncpus" => count(name, amount).map(Setting::Cpus),
            "ngpus" => count(name, amount).map(Setting::Gpus),
            "mem" => size(amount).map(Setting::Memory),
            name => Err(chunk_refusal(name)),
        });
    }
    settings(effects)
}

/// `nodes=N[:ppn=C][:gpus=G]`, the older syntax OpenPBS still reads: N nodes of C cpus.
fn nodes(value: &str) -> Vec<Effect> {
    let mut parts = value.split(':');
    let mut effects = vec![
        count("nodes", parts.next().unwrap_or_default())
            .map(Setting::Nodes)
            .map_err(|_| {
                "names nodes rather than counting them; batchbridge asks for a number".to_owned()
            }),
    ];
    for part in parts {
        let (name, amount) = part.split_once('=').unwrap_or((part, ""));
        effects.push(match name {
            "ppn" => count(name, amount).map(Setting::Cpus),
            "gpus" => count(name, amount).map(Setting::Gpus),
            name => Err(format!(
                "the node property {:?} has no spec field",
                excerpt(name)
            )),
        });
    }
    settings(effects)
}

/// The settings of one resource, or one refusal for it all when any part is refused: a
/// part cannot be dropped without changing what the job asks for.
fn settings(parts: Vec<Result<Setting, String>>) -> Vec<Effect> {
    match parts.iter().find_map(|part| part.as_ref().err()) {
        Some(why) => vec![Effect::Refuse(why.clone())],
        None => parts.into_iter().flatten().map(Effect::Set).collect(),
    }
}

fn count(name: &str, value: &str) -> Result<u32, String> {
    value
        .parse()
        .map_err(|_| format!("{name}={:?} is not a count", excerpt(value)))
}

/// A PBS size (OpenPBS's `to_size`): a whole number, then `k`, `m`, `g`, `t` or `p` (any
/// case, powers of 1024) and an optional `b`; bytes without one. Sizes in words (`w`),
/// whose size is the machine's, are refused.
fn size(value: &str) -> Result<ByteSize, String> {
    let digits = value
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(value.len());
    let (number, unit) = value.split_at(digits);
    let unit = unit.to_ascii_lowercase();
    let multiplier = unit.strip_suffix('b').unwrap_or(&unit);
    let shift = match multiplier {
        "" => 0,
        "k" => 10,
        "m" => 20,
        "g" => 30,
        "t" => 40,
        "p" => 50,
        _ => {
            return Err(format!(
                "size {:?}: expected a number of bytes, or one with kb, mb, gb, tb or pb",
                excerpt(value)
            ));
        }
    };
    number
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(1 << shift))
        .map(ByteSize::b)
        .ok_or_else(|| format!("size {:?} is not a number of bytes", excerpt(value)))
}

/// A PBS duration: `[[HH:]MM:]SS[.fraction]`, e.g. `1:30:00`, `90:00`, `5400`.
fn wall_time(value: &str) -> Result<Duration, String> {
    let refused = || {
        format!(
            "walltime {:?}: expected [[HH:]MM:]SS, e.g. 1:30:00",
            excerpt(value)
        )
    };
    let fields: Vec<&str> = value.split(':').collect();
    if fields.len() > 3 {
        return Err(refused());
    }
    let (whole, last) = fields.split_at(fields.len() - 1);
    let mut seconds: u64 = 0;
    for field in whole {
        let n: u64 = field
            .bytes()
            .all(|b| b.is_ascii_digit())
            .then(|| field.parse().ok())
            .flatten()
            .ok_or_else(refused)?;
        seconds = seconds
            .checked_mul(60)
            .and_then(|s| s.checked_add(n))
            .ok_or_else(refused)?;
    }
    let last = last[0];
    if last.is_empty() || !last.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return Err(refused());
    }
    let last: f64 = last.parse().map_err(|_| refused())?;
    // `seconds` holds the whole minutes before the last field (0 when it stands alone).
    let time = Duration::try_from_secs_f64(seconds as f64 * 60.0 + last).map_err(|_| refused())?;
    if time.is_zero() {
        return Err(format!("walltime {:?} is no time at all", excerpt(value)));
    }
    Ok(time)
}

#[cfg(test)]
mod tests {
    use batchbridge_core::remote::SubmitDefaults;
    use batchbridge_core::{ErrorKind, JobKey};

    use super::*;
    use crate::script::qsub_options;

    fn spec(script: &str) -> JobSpec {
        JobSpec::new(JobKey::new("k").unwrap(), "job", script)
    }

    /// A fate in a few words: `taken Cpus`, `passed -l place=pack`, `ignored`,
    /// `refused: WHY`.
    fn short(fate: &Fate) -> String {
        match fate {
            Fate::Taken { field } => format!("taken {field:?}"),
            Fate::Overridden { field } => format!("overridden {field:?}"),
            Fate::Passed { options } => format!("passed {}", options.join(" ")),
            Fate::Ignored { .. } => "ignored".into(),
            Fate::Refused { reason } => format!("refused: {reason}"),
            _ => unreachable!("a fate this crate does not make: {fate:?}"),
        }
    }

    /// What the directives changed in a spec made by [`spec`], field by field.
    fn changes(spec: &JobSpec) -> String {
        let r = &spec.resources;
        let mut shown = Vec::new();
        if spec.name != "job" {
            shown.push(format!("name={}", spec.name));
        }
        shown.extend(spec.queue.as_ref().map(|q| format!("queue={q}")));
        shown.extend(r.nodes.map(|n| format!("nodes={n}")));
        shown.extend(r.cpus.map(|n| format!("cpus={n}")));
        shown.extend(r.memory.map(|m| format!("memory={}", m.as_u64())));
        shown.extend(r.gpus.map(|n| format!("gpus={n}")));
        shown.extend(r.wall_time.map(|t| format!("wall_time={t:?}")));
        shown.extend(spec.array.map(|a| match a.max_parallel {
            Some(max) => format!("array={}%{max}", a.count),
            None => format!("array={}", a.count),
        }));
        shown.extend(spec.environment.iter().map(|(k, v)| format!("env {k}={v}")));
        shown.extend(
            spec.passthrough
                .get(PASSTHROUGH_KEY)
                .into_iter()
                .flatten()
                .map(|o| format!("pass {o}")),
        );
        shown.join(", ")
    }

    /// Each line is the one directive of a script `#PBS LINE\necho hi\n`: the fates it
    /// gets (a refusal by a word of its reason) and what it changes in the spec. The
    /// expectations follow OpenPBS 23.06's qsub (qsub.c's `process_opts`, `to_size`) and
    /// its man page.
    #[test]
    fn every_option_has_its_fate() {
        let cases: &[(&str, &[&str], &str)] = &[
            // Resources with a spec field.
            (
                "-l walltime=1:30:00",
                &["taken WallTime"],
                "wall_time=5400s",
            ),
            ("-l walltime=90:00", &["taken WallTime"], "wall_time=5400s"),
            ("-l walltime=3600", &["taken WallTime"], "wall_time=3600s"),
            (
                "-l walltime=0:00:01.5",
                &["taken WallTime"],
                "wall_time=1.5s",
            ),
            ("-lwalltime=60", &["taken WallTime"], "wall_time=60s"),
            ("-l walltime=1:2:3:4", &["refused: walltime"], ""),
            ("-l walltime=1h", &["refused: walltime"], ""),
            ("-l walltime=0", &["refused: no time"], ""),
            (
                "-l select=2:ncpus=4:mem=2gb:ngpus=1",
                &["taken Nodes", "taken Cpus", "taken Memory", "taken Gpus"],
                "nodes=2, cpus=4, memory=2147483648, gpus=1",
            ),
            ("-l select=ncpus=8", &["taken Cpus"], "cpus=8"),
            ("-l select=2:ncpus=4:mpiprocs=4", &["refused: mpiprocs"], ""),
            (
                "-l select=1:ncpus=2+1:ncpus=4",
                &["refused: several kinds"],
                "",
            ),
            ("-l select=x:ncpus=2", &["refused: not a count"], ""),
            (
                "-l nodes=2:ppn=8",
                &["taken Nodes", "taken Cpus"],
                "nodes=2, cpus=8",
            ),
            (
                "-l nodes=1:ppn=4:gpus=2",
                &["taken Nodes", "taken Cpus", "taken Gpus"],
                "nodes=1, cpus=4, gpus=2",
            ),
            ("-l nodes=node01:ppn=8", &["refused: names nodes"], ""),
            ("-l nodes=2:ib", &["refused: node property"], ""),
            ("-l ncpus=4", &["taken Cpus"], "cpus=4"),
            ("-l ngpus=2", &["taken Gpus"], "gpus=2"),
            ("-l mem=100mb", &["taken Memory"], "memory=104857600"),
            ("-l mem=1GB", &["taken Memory"], "memory=1073741824"),
            ("-l mem=4g", &["taken Memory"], "memory=4294967296"),
            ("-l mem=512", &["taken Memory"], "memory=512"),
            ("-l mem=8mw", &["refused: size"], ""),
            ("-l mem=lots", &["refused: size"], ""),
            (
                "-l select=1:ncpus=2,walltime=10:00,place=pack",
                &[
                    "taken Nodes",
                    "taken Cpus",
                    "taken WallTime",
                    "passed -l place=pack",
                ],
                "nodes=1, cpus=2, wall_time=600s, pass -l place=pack",
            ),
            // Resources without one: passed, unless they belong in a chunk.
            (
                "-l place=scatter:excl",
                &["passed -l place=scatter:excl"],
                "pass -l place=scatter:excl",
            ),
            (
                "-l software=abaqus",
                &["passed -l software=abaqus"],
                "pass -l software=abaqus",
            ),
            ("-l vmem=1gb", &["refused: select statement"], ""),
            ("-l walltime", &["refused: name=value"], ""),
            // Queue, name, array, environment.
            ("-q workq", &["taken Queue"], "queue=workq"),
            ("-q workq@other.server", &["refused: another server"], ""),
            ("-N my_job", &["overridden Name"], ""),
            ("-J 0-9", &["taken Array"], "array=10"),
            ("-J 0-9%2", &["taken Array"], "array=10%2"),
            ("-J 0-9:1", &["taken Array"], "array=10"),
            ("-J 1-10", &["refused: 0-9 and use"], ""),
            ("-J 0-10:2", &["refused: numbered 0 to N-1"], ""),
            (
                "-v A=1,B=two",
                &["taken Environment", "taken Environment"],
                "env A=1, env B=two",
            ),
            (
                r#"-v "A='x,y'",B=2"#,
                &["taken Environment", "taken Environment"],
                "env A=x,y, env B=2",
            ),
            ("-v HOME", &["refused: VALUE"], ""),
            ("-V", &["refused: environment"], ""),
            // Passed as written: the job is tracked the same with them.
            ("-A physics", &["passed -A physics"], "pass -A physics"),
            ("-P proj", &["passed -P proj"], "pass -P proj"),
            (
                "-a 202612011200",
                &["passed -a 202612011200"],
                "pass -a 202612011200",
            ),
            ("-c n", &["passed -c n"], "pass -c n"),
            ("-h", &["passed -h"], "pass -h"),
            ("-m abe", &["passed -m abe"], "pass -m abe"),
            (
                "-M me@example.org",
                &["passed -M me@example.org"],
                "pass -M me@example.org",
            ),
            ("-p 10", &["passed -p 10"], "pass -p 10"),
            ("-R oe", &["passed -R oe"], "pass -R oe"),
            (
                "-W depend=afterok:12",
                &["passed -W depend=afterok:12"],
                "pass -W depend=afterok:12",
            ),
            (
                "-W depend=afterok:12,umask=022",
                &["passed -W depend=afterok:12,umask=022"],
                "pass -W depend=afterok:12,umask=022",
            ),
            (
                "-W group_list=lab",
                &["passed -W group_list=lab"],
                "pass -W group_list=lab",
            ),
            // Changing nothing here.
            ("-r y", &["ignored"], ""),
            ("-S /bin/bash", &["ignored"], ""),
            ("-S /bin/sh", &["ignored"], ""),
            ("-f", &["ignored"], ""),
            ("-C #MY", &["ignored"], ""),
            // Breaking what batchbridge relies on.
            ("-o /tmp/x", &["refused: output file"], ""),
            ("-e /tmp/x", &["refused: error file"], ""),
            ("-j oe", &["refused: joins the output"], ""),
            ("-k oe", &["refused: keeps the output"], ""),
            ("-I", &["refused: interactive"], ""),
            ("-X", &["refused: X11"], ""),
            ("-z", &["refused: job id"], ""),
            ("-r n", &["refused: rerunnability"], ""),
            ("-S /bin/tcsh", &["refused: shell"], ""),
            ("-u bob", &["refused: another user"], ""),
            ("-W block=true", &["refused: wait for the job"], ""),
            (
                "-W depend=afterok:1,block=true",
                &["refused: wait for the job"],
                "",
            ),
            ("-W interactive=true", &["refused: interactive"], ""),
            ("-W sandbox=PRIVATE", &["refused: files"], ""),
            ("-W max_run_subjobs=2", &["refused: -J 0-N%M"], ""),
            ("-W Output_Path=/tmp/x", &["refused: Output_Path"], ""),
            // Lines qsub itself refuses.
            (
                "-l walltime=1:00:00 # one hour",
                &["refused: not a qsub option"],
                "",
            ),
            ("-G", &["refused: not a qsub option"], ""),
            ("-q", &["refused: lacks its value"], ""),
            ("-N 'unclosed", &["refused: never closed"], ""),
            ("workq", &["refused: not a qsub option"], ""),
        ];
        for (line, fates, changed) in cases {
            let script = format!("{PREFIX} {line}\necho hi\n");
            let (applied, report) = apply_directives(spec(&script));
            let got: Vec<String> = report.lines.iter().map(|l| short(&l.fate)).collect();
            assert_eq!(got.len(), fates.len(), "{line}: {got:?}");
            for (got, expected) in got.iter().zip(*fates) {
                match expected.strip_prefix("refused: ") {
                    Some(words) => assert!(
                        got.starts_with("refused: ") && got.contains(words),
                        "{line}: {got}"
                    ),
                    None => assert_eq!(got, expected, "{line}"),
                }
            }
            for entry in &report.lines {
                assert_eq!(entry.line, 1, "{line}");
                assert_eq!(entry.text, script.lines().next().unwrap(), "{line}");
            }
            assert_eq!(changes(&applied), *changed, "{line}");
            // Whatever a directive passes, qsub_options takes.
            if report.check().is_ok() {
                qsub_options(&applied, &SubmitDefaults::default(), "/w/jobs/k").unwrap();
            } else {
                assert_eq!(report.check().unwrap_err().kind(), ErrorKind::InvalidInput);
            }
        }
    }

    /// Which lines qsub reads as directives, by OpenPBS's `get_script`,
    /// `pbs_isexecutable` and `pbs_ispbsdir`: (script, each directive's line number and
    /// text).
    #[test]
    fn the_header_is_read_as_qsub_reads_it() {
        let cases: &[(&str, &[(usize, &str)])] = &[
            ("", &[]),
            ("#!/bin/bash\n#PBS -q a\n", &[(2, "#PBS -q a")]),
            // Blank lines and comments, indented ones too, keep the header open.
            (
                "#!/bin/sh\n\n \t\n  # note\n#PBS -q a\n",
                &[(5, "#PBS -q a")],
            ),
            // Directives may be indented.
            (
                "  #PBS -q a\n\t#PBS -N b\n",
                &[(1, "  #PBS -q a"), (2, "\t#PBS -N b")],
            ),
            // A ':' in the first column is not a command; an indented one is.
            (": note\n#PBS -q a\n", &[(2, "#PBS -q a")]),
            (" : note\n#PBS -q a\n", &[]),
            // The first command closes the header.
            ("#PBS -q a\necho hi\n#PBS -N b\n", &[(1, "#PBS -q a")]),
            ("echo hi\n#PBS -q a\n", &[]),
            // Case matters; another scheduler's directives are comments.
            ("#pbs -q a\n#SBATCH -p b\n#PBS -N c\n", &[(3, "#PBS -N c")]),
            // A trailing '\' goes on on the next line.
            (
                "#PBS -l walltime=60 \\\n   -q a\necho\n",
                &[(1, "#PBS -l walltime=60    -q a")],
            ),
            ("#PBS -q a\\\n", &[(1, "#PBS -q a")]),
            // The prefix needs no blank after it (qsub compares its first characters).
            ("#PBSX\n", &[(1, "#PBSX")]),
            ("#!/bin/sh\r\n#PBS -q a\r\n", &[(2, "#PBS -q a")]),
        ];
        for (script, expected) in cases {
            let found: Vec<(usize, String)> = header_directives(script)
                .into_iter()
                .map(|d| (d.line, d.text))
                .collect();
            let expected: Vec<(usize, String)> =
                expected.iter().map(|(n, t)| (*n, t.to_string())).collect();
            assert_eq!(found, expected, "{script:?}");
        }
    }

    #[test]
    fn options_of_a_line_are_named_one_by_one() {
        let script = "#PBS -l walltime=1:00:00 -q workq\n#PBS -hq express\n#PBS\n";
        let (applied, report) = apply_directives(spec(script));
        let got: Vec<(usize, &str, String)> = report
            .lines
            .iter()
            .map(|l| (l.line, l.text.as_str(), short(&l.fate)))
            .collect();
        assert_eq!(
            got,
            [
                (1, "#PBS -l walltime=1:00:00", "taken WallTime".into()),
                (1, "#PBS -q workq", "taken Queue".into()),
                (2, "#PBS -h", "passed -h".into()),
                (2, "#PBS -q express", "taken Queue".into()),
            ]
        );
        // The last directive for a field wins, as in qsub.
        assert_eq!(applied.queue.as_deref(), Some("express"));
    }

    #[test]
    fn the_spec_own_fields_win() {
        let script = "#PBS -l select=1:ncpus=4\n#PBS -v A=1,B=2\n#PBS -J 0-3\n#PBS -q workq\n";
        let mut given = spec(script);
        given.resources.cpus = Some(2);
        given.environment.insert("A".into(), "0".into());
        given.array = Some(ArraySpec::new(2));
        given.queue = Some("express".into());
        let (applied, report) = apply_directives(given);
        let got: Vec<String> = report.lines.iter().map(|l| short(&l.fate)).collect();
        assert_eq!(
            got,
            [
                "taken Nodes",
                "overridden Cpus",
                "overridden Environment",
                "taken Environment",
                "overridden Array",
                "overridden Queue",
            ]
        );
        assert_eq!(
            changes(&applied),
            "queue=express, nodes=1, cpus=2, array=2, env A=0, env B=2"
        );
        report.check().unwrap();
        // A caller without a name of its own passes an empty one.
        let mut nameless = spec("#PBS -N my_job\n");
        nameless.name.clear();
        let (applied, report) = apply_directives(nameless);
        assert_eq!(short(&report.lines[0].fate), "taken Name");
        assert_eq!(applied.name, "my_job");
    }

    #[test]
    fn a_directive_account_wins_over_the_cluster_default() {
        let (applied, _) = apply_directives(spec("#PBS -A physics\n"));
        let mut defaults = SubmitDefaults::default();
        defaults.account = Some("default-lab".into());
        let options = qsub_options(&applied, &defaults, "/w/jobs/k").unwrap();
        let accounts: Vec<&String> = options
            .iter()
            .zip(options.iter().skip(1))
            .filter(|(option, _)| *option == "-A")
            .map(|(_, value)| value)
            .collect();
        assert_eq!(accounts, ["physics"]);
        let options = qsub_options(&spec("true"), &defaults, "/w/jobs/k").unwrap();
        assert!(options.contains(&"default-lab".to_owned()));
    }

    #[test]
    fn a_refusal_names_its_line() {
        let script = "#!/bin/bash\n#PBS -l walltime=10\n# output\n#PBS -o /tmp/x\nhostname\n";
        let (_, report) = apply_directives(spec(script));
        let err = report.check().unwrap_err();
        assert!(
            err.message()
                .starts_with("line 4: #PBS -o /tmp/x: it moves the job's output file"),
            "{err}"
        );
    }
}
