//! What only shows on a terminal: the progress spinner, transfer bars and colours. In a pipe or a file
//! the tool prints plain text and no spinner, so scripts see only what they asked for.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use batchbridge_core::JobState;
use batchbridge_core::staging::{Direction, Transfer};
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
        "{prefix} {wide_msg} {bytes}/{total_bytes} [{bar:30}] {bytes_per_sec}",
    )
    .map(|style| style.progress_chars("=> "))
    .ok();
    let open: Mutex<HashMap<String, ProgressBar>> = Mutex::default();
    Transfer::default().with_progress(move |progress| {
        let mut open = open.lock().unwrap_or_else(PoisonError::into_inner);
        let bar = open.entry(progress.file.to_owned()).or_insert_with(|| {
            let bar = bars.add(ProgressBar::new(progress.total));
            if let Some(style) = &style {
                bar.set_style(style.clone());
            }
            bar.set_prefix(match progress.direction {
                Direction::In => "in ",
                Direction::Out => "out",
            });
            bar.set_message(progress.file.to_owned());
            bar
        });
        bar.set_position(progress.done);
        if progress.done >= progress.total {
            bar.finish();
        }
    })
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
