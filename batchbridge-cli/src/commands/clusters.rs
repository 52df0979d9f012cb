//! `clusters`: whether each cluster answers, its scheduler's version and accounting.

use serde::Serialize;

use super::context::Context;
use crate::cli::Format;
use crate::config::Scheduler;
use crate::exit::{CliError, CliResult};
use crate::table;

/// One cluster's check, as the table shows it and `-o json` serialises it.
#[derive(Debug, Serialize)]
struct Check {
    name: String,
    /// None for a cluster whose config could not be used.
    scheduler: Option<Scheduler>,
    /// `user@host:port`, `ALIAS (ssh_config)` or `this machine`.
    target: Option<String>,
    /// Whether its commands go through an open `batchbridge login`; None for this machine
    /// and a cluster whose config could not be used.
    logged_in: Option<bool>,
    ok: bool,
    version: Option<String>,
    /// Whether the scheduler keeps ended jobs' records; None when it did not answer.
    accounting: Option<bool>,
    error: Option<String>,
    hint: Option<String>,
    /// The exit code of the problem, when there is one.
    exit: Option<u8>,
}

impl Check {
    fn failed(mut self, err: CliError) -> Self {
        self.ok = false;
        self.exit = Some(err.exit as u8);
        self.error = Some(err.message);
        self.hint = err.hint;
        self
    }
}

/// `clusters`: every cluster, or the one `-c` names; returns the worst problem's code.
pub(super) async fn clusters(context: &mut Context) -> CliResult<u8> {
    let names = match context.chosen.clone() {
        Some(chosen) => vec![context.cluster(&chosen)?.name],
        None => context.clusters.names(),
    };
    let mut checks = Vec::new();
    for name in names {
        let mut check = Check {
            name: name.clone(),
            scheduler: None,
            target: None,
            logged_in: None,
            ok: true,
            version: None,
            accounting: None,
            error: None,
            hint: None,
            exit: None,
        };
        let cluster = match context.cluster(&name) {
            Ok(cluster) => cluster,
            Err(err) => {
                checks.push(check.failed(err));
                continue;
            }
        };
        check.scheduler = Some(cluster.scheduler);
        check.target = Some(cluster.target());
        check.logged_in = cluster.logged_in;
        check = match cluster.backend.version().await {
            Ok(version) => Check {
                version: Some(version),
                // Asked after the version: SLURM's probe learns it then, and what a cluster
                // that did not answer has is unknown.
                accounting: Some(cluster.backend.capabilities().accounting),
                ..check
            },
            Err(err) => check.failed(cluster.explain(err)),
        };
        checks.push(check);
    }
    let worst = checks.iter().filter_map(|check| check.exit).max();
    match context.format {
        Format::Json => println!("{}", serde_json::to_string(&checks)?),
        Format::Table => print_table(&checks),
    }
    Ok(worst.unwrap_or(0))
}

/// The checks as a table, each failed one's error and hint on lines of their own below it.
fn print_table(checks: &[Check]) {
    let header = [
        "CLUSTER",
        "STATE",
        "SCHEDULER",
        "TARGET",
        "VERSION",
        "ACCOUNTING",
    ];
    let rows: Vec<[String; 6]> = checks
        .iter()
        .map(|check| {
            let state = if check.ok {
                console::style("ok").green().to_string()
            } else {
                console::style("FAILED").red().bold().to_string()
            };
            let accounting = match check.accounting {
                Some(true) => "accounting",
                Some(false) => "no accounting",
                None => "",
            };
            [
                check.name.clone(),
                state,
                check
                    .scheduler
                    .map(Scheduler::word)
                    .unwrap_or_default()
                    .to_owned(),
                match (&check.target, check.logged_in) {
                    (Some(target), Some(true)) => format!("{target}, logged in"),
                    (target, _) => target.clone().unwrap_or_default(),
                },
                check.version.clone().unwrap_or_default(),
                accounting.to_owned(),
            ]
        })
        .collect();
    let mut lines = table::lines(header, &rows).into_iter();
    if let Some(header) = lines.next() {
        println!("{header}");
    }
    for (line, check) in lines.zip(checks) {
        println!("{line}");
        if let Some(error) = &check.error {
            println!("  error: {error}");
        }
        if let Some(hint) = &check.hint {
            println!("  hint: {hint}");
        }
    }
}
