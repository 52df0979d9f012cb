//! What only shows on a terminal: the progress spinner, transfer bars and colours. In a pipe or a file
//! the tool prints plain text and no spinner, so scripts see only what they asked for.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use batchbridge_core::JobState;
use batchbridge_core::staging::{Direction, Progress, Transfer};
use console::Style;
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::exit::CliError;

/// A spinner on standard error with a message and the time elapsed, drawn only when
/// standard error is a terminal (indicatif hides it otherwise).
pub(crate) fn spinner(message: String) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template("{spinner} {msg} ({elapsed})") {
        bar.set_style(style);
    }
    bar.set_message(message);
    bar.enable_steady_tick(Duration::from_millis(120));
    bar
}

/// Progress bars on standard error, one per file a stage-in or stage-out moves, drawn only
/// when standard error is a terminal (indicatif hides them otherwise, as the spinner).
pub(crate) fn transfer_bars() -> Transfer {
    let bars = MultiProgress::with_draw_target(ProgressDrawTarget::stderr());
    let style = ProgressStyle::with_template(
        "{prefix} {wide_msg} {bytes}/{total_bytes} [{bar:20}] {bytes_per_sec}",
    )
    .map(|style| style.progress_chars("=> "))
    .ok();
    // One bar per transfer: the same name may go in and come out, or come out to two
    // places (two --out rules), and each has its own bar.
    let open: Mutex<HashMap<BarKey, ProgressBar>> = Mutex::default();
    Transfer::default().with_progress(move |progress| {
        let mut open = open.lock().unwrap_or_else(PoisonError::into_inner);
        let key = (
            progress.direction,
            progress.file.to_owned(),
            progress.local.map(Path::to_path_buf),
        );
        let bar = open.entry(key).or_insert_with(|| {
            let bar = bars.add(ProgressBar::new(progress.total));
            if let Some(style) = &style {
                bar.set_style(style.clone());
            }
            bar.set_prefix(match progress.direction {
                Direction::In => "in ",
                Direction::Out => "out",
            });
            bar.set_message(bar_label(progress));
            bar
        });
        bar.set_position(progress.done);
        if progress.done >= progress.total {
            bar.finish();
        }
    })
}

/// What tells a transfer apart from the others of one command.
type BarKey = (Direction, String, Option<PathBuf>);

/// A bar's label: the file's name in the job's working directory, and for a file fetched
/// elsewhere than under that same name here, where it goes.
fn bar_label(progress: &Progress<'_>) -> String {
    let local = progress.local.map(|l| l.strip_prefix(".").unwrap_or(l));
    match (progress.direction, local) {
        (Direction::Out, Some(local)) if local != Path::new(progress.file) => {
            format!("{} -> {}", progress.file, local.display())
        }
        _ => progress.file.to_owned(),
    }
}

/// A state's word, coloured when standard output is a terminal (and `NO_COLOR` is unset).
pub(crate) fn state_word(state: JobState) -> String {
    let style = match state {
        JobState::Succeeded => Style::new().green(),
        JobState::Failed => Style::new().red().bold(),
        JobState::Cancelled => Style::new().yellow(),
        JobState::Running => Style::new().cyan(),
        _ => Style::new(),
    };
    style.apply_to(format!("{state:?}")).to_string()
}

/// Prints an error and its hint on standard error, the word "error" red on a terminal.
pub(crate) fn print_error(err: &CliError) {
    let colour = console::colors_enabled_stderr();
    let red = Style::new().red().bold().force_styling(colour);
    eprintln!("{} {}", red.apply_to("error:"), err.message);
    if let Some(hint) = &err.hint {
        eprintln!(
            "{} {hint}",
            Style::new().bold().force_styling(colour).apply_to("hint:")
        );
    }
}

/// Whether standard input is a terminal a person can answer a question on.
pub(crate) fn can_ask() -> bool {
    use std::io::IsTerminal;
    std::io::stdin().is_terminal() && std::io::stderr().is_terminal()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bar_names_where_a_fetched_file_goes_when_not_under_its_own_name() {
        let label = |direction, file, local: Option<&str>| {
            bar_label(&Progress {
                direction,
                file,
                local: local.map(Path::new),
                done: 0,
                total: 1,
            })
        };
        for (direction, file, local, expected) in [
            (
                Direction::In,
                "data.csv",
                Some("/home/a/data.csv"),
                "data.csv",
            ),
            (Direction::In, "params.txt", None, "params.txt"),
            (
                Direction::Out,
                "results/a.csv",
                Some("./results/a.csv"),
                "results/a.csv",
            ),
            (
                Direction::Out,
                "results/a.csv",
                Some("results/a.csv"),
                "results/a.csv",
            ),
            (
                Direction::Out,
                "results/a.csv",
                Some("back/results/a.csv"),
                "results/a.csv -> back/results/a.csv",
            ),
            (
                Direction::Out,
                "a.csv",
                Some("/tmp/out/a.csv"),
                "a.csv -> /tmp/out/a.csv",
            ),
        ] {
            assert_eq!(label(direction, file, local), expected, "{file} {local:?}");
        }
    }
}
