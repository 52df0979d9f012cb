//! What became of the scheduler directives in a job's script (`#SBATCH`, `#PBS` lines).
//!
//! Users arrive with scripts that carry their options as directive lines in the script's
//! header. The backends here hand the scheduler a generated wrapper and the user's script
//! as a file beside it, so the scheduler never reads those lines itself: each backend
//! reads them on the client instead ([`BatchBackend::apply_directives`]) and says, line by
//! line, what it did with each one in a [`DirectiveReport`]:
//!
//! - [`Fate::Taken`]: the line set a [`JobSpec`](crate::JobSpec) field ([`SpecField`]).
//! - [`Fate::Overridden`]: the spec had that field already; explicit fields and command-line
//!   flags win over directives, as `sbatch`'s command line wins over `#SBATCH`.
//! - [`Fate::Passed`]: the line goes to the scheduler as native options
//!   ([`JobSpec::passthrough`](crate::JobSpec::passthrough)).
//! - [`Fate::Ignored`]: the line changes nothing here, and the report says why.
//! - [`Fate::Refused`]: the line would break what batchbridge relies on (where output goes,
//!   how the job is tracked) or cannot be read; [`DirectiveReport::check`] turns any such
//!   line into an [`InvalidInput`](crate::ErrorKind::InvalidInput) error naming it, so a
//!   script is never submitted silently different from what it says.
//!
//! Applying directives is a step of its own, before `submit`: `submit` runs the spec it is
//! given, directives or not, so a caller that wants them (the CLI, the operator) applies
//! them, shows the report, calls [`DirectiveReport::check`], and submits the spec it got.
//!
//! [`BatchBackend::apply_directives`]: crate::BatchBackend::apply_directives

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The [`JobSpec`](crate::JobSpec) field a directive sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub enum SpecField {
    /// [`JobSpec::name`](crate::JobSpec::name).
    Name,
    /// [`JobSpec::queue`](crate::JobSpec::queue).
    Queue,
    /// [`Resources::cpus`](crate::Resources::cpus).
    Cpus,
    /// [`Resources::memory`](crate::Resources::memory).
    Memory,
    /// [`Resources::disk`](crate::Resources::disk).
    Disk,
    /// [`Resources::wall_time`](crate::Resources::wall_time).
    WallTime,
    /// [`Resources::nodes`](crate::Resources::nodes).
    Nodes,
    /// [`Resources::gpus`](crate::Resources::gpus).
    Gpus,
    /// [`JobSpec::array`](crate::JobSpec::array).
    Array,
    /// [`JobSpec::environment`](crate::JobSpec::environment).
    Environment,
    /// [`JobSpec::working_dir`](crate::JobSpec::working_dir).
    WorkingDir,
}

impl fmt::Display for SpecField {
    /// The field's path in a spec as [`JobSpec::validate`](crate::JobSpec::validate)'s messages name it
    /// (`resources.wallTime`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Name => "name",
            Self::Queue => "queue",
            Self::Cpus => "resources.cpus",
            Self::Memory => "resources.memory",
            Self::Disk => "resources.disk",
            Self::WallTime => "resources.wallTime",
            Self::Nodes => "resources.nodes",
            Self::Gpus => "resources.gpus",
            Self::Array => "array",
            Self::Environment => "environment",
            Self::WorkingDir => "workingDir",
        })
    }
}

/// What became of one directive line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "fate")]
#[non_exhaustive]
pub enum Fate {
    /// It set this field of the spec.
    Taken {
        /// The field it set.
        field: SpecField,
    },
    /// The spec had this field already (an explicit field, a command-line flag), which
    /// wins; the directive's value was dropped.
    Overridden {
        /// The field it would have set.
        field: SpecField,
    },
    /// It goes to the scheduler as these native options, in
    /// [`JobSpec::passthrough`](crate::JobSpec::passthrough) under the backend's name.
    Passed {
        /// The options added, each one argument.
        options: Vec<String>,
    },
    /// It changes nothing for a job run here.
    Ignored {
        /// Why it changes nothing.
        reason: String,
    },
    /// It was not applied, and the spec must not be submitted: see
    /// [`DirectiveReport::check`].
    Refused {
        /// Why, for the user: what it would break, or what is wrong with its value.
        reason: String,
    },
}

impl fmt::Display for Fate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Taken { field } => write!(f, "taken into {field}"),
            Self::Overridden { field } => write!(f, "overridden: {field} was set already"),
            Self::Passed { options } => write!(f, "passed to the scheduler as {options:?}"),
            Self::Ignored { reason } => write!(f, "ignored: {reason}"),
            Self::Refused { reason } => write!(f, "refused: {reason}"),
        }
    }
}

/// One directive line of a script and its [`Fate`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct DirectiveLine {
    /// The line's number in the script, from 1.
    pub line: usize,
    /// The line as written.
    pub text: String,
    /// What became of it.
    pub fate: Fate,
}

impl DirectiveLine {
    /// The line numbered `line` (from 1), reading `text`, with its fate.
    pub fn new(line: usize, text: impl Into<String>, fate: Fate) -> Self {
        Self {
            line,
            text: text.into(),
            fate,
        }
    }
}

impl fmt::Display for DirectiveLine {
    /// `line 4: #SBATCH --output=x: refused: …`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}: {}", self.line, self.text, self.fate)
    }
}

/// Every directive line of a script, in script order, with its fate.
///
/// ```
/// use batchbridge_core::directives::{DirectiveLine, DirectiveReport, Fate, SpecField};
/// use batchbridge_core::ErrorKind;
///
/// let mut report = DirectiveReport::default();
/// report.push(DirectiveLine::new(2, "#SBATCH --time=10", Fate::Taken { field: SpecField::WallTime }));
/// report.check()?;
///
/// let refused = Fate::Refused { reason: "batchbridge keeps the job's output".into() };
/// report.push(DirectiveLine::new(3, "#SBATCH --output=out.txt", refused));
/// let err = report.check().unwrap_err();
/// assert_eq!(err.kind(), ErrorKind::InvalidInput);
/// assert!(err.message().starts_with("line 3: #SBATCH --output=out.txt: "), "{err}");
/// assert_eq!(report.refused().count(), 1);
/// # Ok::<(), batchbridge_core::Error>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct DirectiveReport {
    /// The lines, in script order.
    pub lines: Vec<DirectiveLine>,
}

impl DirectiveReport {
    /// Adds one line's fate.
    pub fn push(&mut self, line: DirectiveLine) {
        self.lines.push(line);
    }

    /// Whether the script had no directive lines.
    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    /// The refused lines.
    pub fn refused(&self) -> impl Iterator<Item = &DirectiveLine> {
        self.lines
            .iter()
            .filter(|line| matches!(line.fate, Fate::Refused { .. }))
    }

    /// Ok when no line was refused; else an [`InvalidInput`](crate::ErrorKind::InvalidInput)
    /// error naming every refused line and why (`line 4: #SBATCH --output=x: …`), which a
    /// caller must stop at: the spec it got lacks what those lines asked for.
    pub fn check(&self) -> Result<()> {
        let refused: Vec<String> = self
            .lines
            .iter()
            .filter_map(|line| match &line.fate {
                Fate::Refused { reason } => {
                    Some(format!("line {}: {}: {reason}", line.line, line.text))
                }
                _ => None,
            })
            .collect();
        match refused.is_empty() {
            true => Ok(()),
            false => Err(Error::invalid_input(refused.join("; "))),
        }
    }
}

impl fmt::Display for DirectiveReport {
    /// One line per directive, as [`DirectiveLine`] shows it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for line in &self.lines {
            writeln!(f, "{line}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_without_refusals_checks_and_one_with_names_every_refused_line() {
        let mut report = DirectiveReport::default();
        assert!(report.is_empty());
        report.push(DirectiveLine::new(
            1,
            "#SBATCH -p a",
            Fate::Overridden {
                field: SpecField::Queue,
            },
        ));
        report.check().unwrap();
        for line in [4, 9] {
            report.push(DirectiveLine::new(
                line,
                format!("#SBATCH -o {line}"),
                Fate::Refused {
                    reason: "no".into(),
                },
            ));
        }
        let err = report.check().unwrap_err();
        assert_eq!(
            err.message(),
            "line 4: #SBATCH -o 4: no; line 9: #SBATCH -o 9: no"
        );
        assert_eq!(
            report.to_string(),
            "line 1: #SBATCH -p a: overridden: queue was set already\n\
             line 4: #SBATCH -o 4: refused: no\nline 9: #SBATCH -o 9: refused: no\n"
        );
    }
}
