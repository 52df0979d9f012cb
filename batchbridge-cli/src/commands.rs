//! What each command does.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use batchbridge_core::{
    ArraySpec, ErrorKind, JobId, JobKey, JobSpec, JobState, JobStatus, OutputRequest, TaskCounts,
    Tracker,
};
use clap::CommandFactory;
use serde_json::json;
use tokio::task::JoinSet;

use crate::cli::{Cli, Command, Format, JobArgs, StateFilter};
use crate::config::{Cluster, Clusters, Scheduler};
use crate::exit::{CliError, CliResult, Exit, job_exit_code};
use crate::output::{PrintedOutput, Tail};
use crate::record::{Entry, Record};
use crate::terminal;

/// Runs the command line's command; `Ok` holds the exit code.
pub(crate) async fn run(cli: Cli) -> CliResult<u8> {
    if let Command::Completions { shell } = cli.command {
        let mut command = Cli::command();
        // clap_complete panics on a failed write; a reader that stops early (`| head`) is
        // no failure of ours.
        let mut script = Vec::new();
        clap_complete::generate(shell, &mut command, "batchbridge", &mut script);
        let mut stdout = std::io::stdout().lock();
        return match stdout.write_all(&script).and_then(|()| stdout.flush()) {
            Err(err) if err.kind() != std::io::ErrorKind::BrokenPipe => Err(err.into()),
            _ => Ok(Exit::Success as u8),
        };
    }
    let mut context = Context::new(&cli)?;
    // run and submit --follow ask what to do on Ctrl-C themselves. Elsewhere Ctrl-C ends the
    // command here rather than killing the process, so that the clusters' SSH shells are
    // dropped: their masters stopped and private directories (with the control socket)
    // removed, which a process killed by SIGINT leaves behind.
    if matches!(
        cli.command,
        Command::Run { .. } | Command::Submit { follow: true, .. }
    ) {
        return dispatch(&mut context, cli.command).await;
    }
    tokio::select! {
        done = dispatch(&mut context, cli.command) => done,
        _ = tokio::signal::ctrl_c() => Ok(Exit::Interrupted as u8),
    }
}

/// Does what `command` asks.
async fn dispatch(context: &mut Context, command: Command) -> CliResult<u8> {
    match command {
        Command::Submit { job, wait, follow } => {
            let submitted = context.submit(job).await?;
            if follow {
                return context.follow_run(&submitted, false).await;
            }
            context.print_submitted(&submitted.entry);
            if wait {
                let Submitted {
                    cluster, entry, id, ..
                } = submitted;
                let statuses = context
                    .wait(vec![(cluster, id, entry.reference())], None)
                    .await?;
                return Ok(statuses
                    .first()
                    .map_or(Exit::Success as u8, |(_, status)| job_exit_code(status)));
            }
            Ok(Exit::Success as u8)
        }
        Command::Run {
            job,
            cancel_on_interrupt,
        } => {
            let submitted = context.submit(job).await?;
            context.follow_run(&submitted, cancel_on_interrupt).await
        }
        Command::Status { jobs, state, since } => context.status(&jobs, &state, since).await,
        Command::Wait { jobs, timeout } => {
            let jobs = context.resolve_all(&jobs)?;
            let statuses = context.wait(jobs, timeout).await?;
            context.print_statuses(&statuses)?;
            Ok(match &statuses[..] {
                [(_, only)] => job_exit_code(only),
                all if all.iter().all(|(_, s)| s.state == JobState::Succeeded) => 0,
                _ => Exit::JobFailed as u8,
            })
        }
        Command::Logs {
            job,
            tail,
            follow,
            task,
        } => context.logs(&job, tail, follow, task).await,
        Command::Cancel { jobs } => context.cancel(&jobs).await,
        Command::Clusters => context.check_clusters().await,
        Command::Forget { jobs, ended } => context.forget(&jobs, ended).await,
        Command::Completions { .. } => unreachable!("handled above"),
    }
}

/// How many jobs `forget` removes at once: within the sshd's default ten sessions a
/// connection, with room for the status queries of the same invocation.
const REMOVALS_AT_ONCE: usize = 8;

/// A job named on the command line: its cluster, id and how to print it.
type Resolved = (Cluster, JobId, String);

/// A job this invocation submitted.
struct Submitted {
    cluster: Cluster,
    entry: Entry,
    id: JobId,
    /// Its task count, when it is an array.
    tasks: Option<u32>,
}

struct Context {
    clusters: Clusters,
    record: Record,
    chosen: Option<String>,
    format: Format,
    opened: BTreeMap<String, Cluster>,
}

impl Context {
    fn new(cli: &Cli) -> CliResult<Self> {
        let dirs = directories::ProjectDirs::from("", "", "batchbridge").ok_or_else(|| {
            CliError::config("no home directory: set HOME so the tool can find its config")
        })?;
        let state_dir = dirs
            .state_dir()
            .unwrap_or_else(|| dirs.data_local_dir())
            .to_path_buf();
        let (config, explicit) = match &cli.config {
            Some(path) => (path.clone(), true),
            None => (dirs.config_dir().join("config.toml"), false),
        };
        Ok(Self {
            clusters: Clusters::load(&config, explicit, &state_dir)?,
            record: Record::new(&state_dir),
            chosen: cli.cluster.clone(),
            format: cli.output,
            opened: BTreeMap::new(),
        })
    }

    fn cluster(&mut self, name: &str) -> CliResult<Cluster> {
        if let Some(cluster) = self.opened.get(name) {
            return Ok(cluster.clone());
        }
        let cluster = self.clusters.open(name)?;
        self.opened.insert(name.to_owned(), cluster.clone());
        Ok(cluster)
    }

    fn chosen_cluster(&self) -> String {
        self.chosen
            .clone()
            .unwrap_or_else(|| self.clusters.default_name().to_owned())
    }

    /// `CLUSTER:ID`, or a bare `ID`: the cluster of the record's one job with that id, else
    /// the chosen cluster.
    fn resolve(&mut self, reference: &str, entries: &[Entry]) -> CliResult<Resolved> {
        let (cluster, id) = match reference.split_once(':') {
            Some((cluster, id)) => (cluster.to_owned(), id.to_owned()),
            None => {
                let matches: Vec<&Entry> = entries
                    .iter()
                    .filter(|e| e.id == reference)
                    .filter(|e| self.chosen.as_ref().is_none_or(|c| *c == e.cluster))
                    .collect();
                match &matches[..] {
                    [one] => (one.cluster.clone(), one.id.clone()),
                    [] => (self.chosen_cluster(), reference.to_owned()),
                    several => {
                        let names: Vec<String> = several.iter().map(|e| e.reference()).collect();
                        return Err(CliError::usage(format!(
                            "job {reference} is ambiguous: {}",
                            names.join(", ")
                        ))
                        .with_hint("name it as CLUSTER:ID"));
                    }
                }
            }
        };
        if id.is_empty()
            || id.len() > 64
            || id.contains(|c: char| c.is_whitespace() || c.is_control())
        {
            return Err(CliError::usage(format!(
                "job {:?}: an id is 1 to 64 characters without whitespace",
                batchbridge_core::spec::truncate_for_message(reference)
            )));
        }
        let cluster = self.cluster(&cluster)?;
        let reference = format!("{}:{id}", cluster.name);
        Ok((cluster, JobId::from(id), reference))
    }

    fn resolve_all(&mut self, references: &[String]) -> CliResult<Vec<Resolved>> {
        let entries = self.record.entries()?;
        references
            .iter()
            .map(|reference| self.resolve(reference, &entries))
            .collect()
    }

    async fn submit(&mut self, job: JobArgs) -> CliResult<Submitted> {
        let spec = job_spec(job)?;
        let cluster = self.cluster(&self.chosen_cluster())?;
        let id = cluster
            .backend
            .submit(&spec)
            .await
            .map_err(|err| cluster.explain(err))?;
        let entry = Entry::new(&cluster.name, id.as_str(), spec.key.as_str(), &spec.name);
        let known = self.record.entries()?.iter().any(|e| {
            (e.cluster.as_str(), e.id.as_str()) == (entry.cluster.as_str(), entry.id.as_str())
        });
        if !known && let Err(err) = self.record.add(&entry) {
            // The job runs all the same: say which it is rather than lose it.
            terminal::print_error(&CliError {
                message: format!(
                    "{} was submitted but not recorded: {}",
                    entry.reference(),
                    err.message
                ),
                ..err
            });
        }
        Ok(Submitted {
            cluster,
            entry,
            id,
            tasks: spec.array.map(|array| array.count),
        })
    }

    fn print_submitted(&self, entry: &Entry) {
        match self.format {
            Format::Table => println!("{}", entry.reference()),
            Format::Json => println!(
                "{}",
                json!({
                    "job": entry.reference(), "cluster": entry.cluster, "id": entry.id,
                    "key": entry.key, "name": entry.name,
                })
            ),
        }
    }

    /// Prints the job's output as it runs (an array's tasks under `==> task N <==`
    /// headings) and returns its exit code; on Ctrl-C, cancels it when asked to (or when
    /// the person at the terminal says so).
    async fn follow_run(&self, job: &Submitted, cancel_on_interrupt: bool) -> CliResult<u8> {
        let Submitted {
            cluster,
            entry,
            id,
            tasks,
        } = job;
        let tracker = tracker(cluster)?;
        let spinner = terminal::spinner(format!("{} Queued", entry.reference()));
        let mut changes = tracker.changes();
        let shown = spinner.clone();
        let reference = entry.reference();
        let watching = tokio::spawn(async move {
            while let Some((_, status)) = changes.recv().await {
                if matches!(status.state, JobState::Queued | JobState::Held) {
                    shown.set_message(format!("{reference} {}", waiting(&status)));
                } else {
                    shown.finish_and_clear();
                }
            }
        });
        let following = PrintedOutput::new(id.clone(), *tasks, 0).follow(
            &tracker,
            poll_interval(cluster),
            |print| spinner.suspend(print),
        );
        let outcome = tokio::select! {
            status = following => Some(status),
            _ = tokio::signal::ctrl_c() => None,
        };
        watching.abort();
        spinner.finish_and_clear();
        match outcome {
            Some(status) => {
                let status = status.map_err(|err| cluster.explain(err))?;
                if status.state != JobState::Succeeded {
                    eprintln!("{}: {}", entry.reference(), describe_end(&status));
                }
                Ok(job_exit_code(&status))
            }
            None => {
                interrupted(cluster, entry, id, cancel_on_interrupt).await?;
                Ok(Exit::Interrupted as u8)
            }
        }
    }

    /// Waits for every job, each reported as it ends, within `timeout` overall.
    async fn wait(
        &mut self,
        jobs: Vec<Resolved>,
        timeout: Option<Duration>,
    ) -> CliResult<Vec<(String, JobStatus)>> {
        let deadline = timeout.map(|t| Instant::now() + t);
        for (cluster, id, reference) in &jobs {
            let status = cluster
                .backend
                .status_of(id)
                .await
                .map_err(|err| cluster.explain(err))?;
            if let Some(err) = unknown_job(cluster, id, reference, &status).await {
                return Err(err);
            }
        }
        let mut trackers: BTreeMap<String, Tracker> = BTreeMap::new();
        let mut ended = Vec::new();
        for (cluster, id, reference) in jobs {
            let tracker = match trackers.get(&cluster.name) {
                Some(tracker) => tracker,
                None => trackers
                    .entry(cluster.name.clone())
                    .or_insert(tracker(&cluster)?),
            };
            let spinner = terminal::spinner(format!("{reference} waiting"));
            let mut left = deadline.map_or(Duration::MAX, |d| {
                d.saturating_duration_since(Instant::now())
            });
            // What is left of a --timeout of whole seconds, as whole seconds: the message of
            // a wait that times out names it, and "2s" reads better than "1.999821303s".
            if timeout.is_some_and(|t| t.subsec_nanos() == 0) {
                left = Duration::from_secs(
                    left.as_secs() + u64::from(left.subsec_nanos() >= 500_000_000),
                );
            }
            let status = tracker
                .wait_with(&id, left, |status| {
                    spinner.set_message(format!("{reference} {}", waiting(status)));
                })
                .await;
            spinner.finish_and_clear();
            ended.push((reference, status.map_err(|err| cluster.explain(err))?));
        }
        Ok(ended)
    }

    /// Prints jobs that ended, with the name and key the record has for each.
    fn print_statuses(&self, statuses: &[(String, JobStatus)]) -> CliResult<()> {
        let entries = self.record.entries()?;
        let rows: Vec<Row> = statuses
            .iter()
            .map(|(reference, status)| {
                let entry = entries.iter().find(|e| e.reference() == *reference);
                Row {
                    job: reference.clone(),
                    name: entry.map(|e| e.name.clone()).unwrap_or_default(),
                    key: entry.map(|e| e.key.clone()).unwrap_or_default(),
                    status: Ok(status.clone()),
                }
            })
            .collect();
        self.print_rows(&rows);
        Ok(())
    }

    /// One batched status query per cluster; without jobs named, every recorded job on the
    /// chosen cluster (every cluster when none was chosen).
    async fn status(
        &mut self,
        references: &[String],
        states: &[StateFilter],
        since: Option<SystemTime>,
    ) -> CliResult<u8> {
        let entries = self.record.entries()?;
        if let Some(chosen) = self.chosen.clone() {
            self.cluster(&chosen)?;
        }
        let submitted_since = |entry: &Entry| {
            since.is_none_or(|since| UNIX_EPOCH + Duration::from_secs(entry.submitted_at) >= since)
        };
        let jobs: Vec<(Resolved, Option<Entry>)> = if references.is_empty() {
            let mut jobs = Vec::new();
            let chosen = self.chosen.clone();
            let listed = entries.iter().filter(|entry| {
                chosen.as_ref().is_none_or(|c| *c == entry.cluster) && submitted_since(entry)
            });
            for entry in listed {
                let cluster = self.cluster(&entry.cluster)?;
                let reference = entry.reference();
                jobs.push((
                    (cluster, JobId::from(entry.id.as_str()), reference),
                    Some(entry.clone()),
                ));
            }
            jobs
        } else {
            let mut jobs = Vec::new();
            for reference in references {
                let resolved = self.resolve(reference, &entries)?;
                let entry = entries
                    .iter()
                    .find(|e| e.reference() == resolved.2)
                    .cloned();
                if entry.as_ref().is_none_or(submitted_since) {
                    jobs.push((resolved, entry));
                }
            }
            jobs
        };
        let mut by_cluster: BTreeMap<String, (Cluster, Vec<JobId>)> = BTreeMap::new();
        for ((cluster, id, _), _) in &jobs {
            by_cluster
                .entry(cluster.name.clone())
                .or_insert_with(|| (cluster.clone(), Vec::new()))
                .1
                .push(id.clone());
        }
        let mut answers = BTreeMap::new();
        let mut worst = 0;
        for (name, (cluster, ids)) in by_cluster {
            let answer = cluster
                .backend
                .status(&ids)
                .await
                .map_err(|err| cluster.explain(err));
            if let Err(err) = &answer {
                worst = worst.max(err.exit as u8);
                terminal::print_error(err);
            }
            answers.insert(name, answer);
        }
        let mut rows = Vec::new();
        for ((cluster, id, reference), entry) in jobs {
            let mut status = match &answers[&cluster.name] {
                Ok(statuses) => Ok(statuses
                    .get(&id)
                    .cloned()
                    .unwrap_or_else(|| JobStatus::unknown("not in the scheduler's answer"))),
                // Printed once above; a table row of each of the cluster's jobs only points
                // there, while JSON, whose readers see no stderr, keeps it whole.
                Err(err) => Err(match self.format {
                    Format::Table => {
                        format!("{} did not answer: see the error above", cluster.name)
                    }
                    Format::Json => err.message.clone(),
                }),
            };
            if let Ok(known) = &status
                && let Some(err) = unknown_job(&cluster, &id, &reference, known).await
            {
                worst = worst.max(err.exit as u8);
                status = Err(err.message);
            }
            // A job whose status is an error may be in any state: it stays in sight.
            if let Ok(known) = &status
                && !states.is_empty()
                && !states.iter().any(|filter| filter.admits(known.state))
            {
                continue;
            }
            rows.push(Row {
                job: reference,
                name: entry.as_ref().map(|e| e.name.clone()).unwrap_or_default(),
                key: entry.map(|e| e.key).unwrap_or_default(),
                status,
            });
        }
        self.print_rows(&rows);
        Ok(worst)
    }

    fn print_rows(&self, rows: &[Row]) {
        match self.format {
            Format::Json => {
                let list: Vec<serde_json::Value> = rows.iter().map(Row::to_json).collect();
                println!("{}", serde_json::Value::Array(list));
            }
            Format::Table => {
                let cells: Vec<[String; 5]> = rows.iter().map(Row::cells).collect();
                let widths: Vec<usize> = (0..5)
                    .map(|column| {
                        cells
                            .iter()
                            .map(|row| row[column].len())
                            .chain([HEADER[column].len()])
                            .max()
                            .unwrap_or(0)
                    })
                    .collect();
                let line = |row: &[String; 5], state: String| {
                    let mut out = String::new();
                    for (column, cell) in row.iter().enumerate() {
                        let cell = if column == 2 {
                            state.clone()
                        } else {
                            format!("{cell:<w$}", w = widths[column])
                        };
                        out.push_str(&cell);
                        out.push_str("  ");
                    }
                    out.trim_end().to_owned()
                };
                let header: [String; 5] = HEADER.map(str::to_owned);
                println!(
                    "{}",
                    line(&header, format!("{:<w$}", HEADER[2], w = widths[2]))
                );
                for (row, cells) in rows.iter().zip(&cells) {
                    let state = match &row.status {
                        Ok(status) => terminal::state_word(status.state, widths[2]),
                        Err(_) => format!("{:<w$}", "error", w = widths[2]),
                    };
                    println!("{}", line(cells, state));
                }
            }
        }
    }

    /// Prints a job's output: one task's when `task` names it, else the job's, or every
    /// task's under `==> task N <==` headings when the job is an array.
    async fn logs(
        &mut self,
        reference: &str,
        tail: Option<Tail>,
        follow: bool,
        task: Option<u32>,
    ) -> CliResult<u8> {
        let entries = self.record.entries()?;
        let (cluster, id, reference) = self.resolve(reference, &entries)?;
        let explain = |err| cluster.explain(err);
        let status = cluster.backend.status_of(&id).await.map_err(explain)?;
        if let Some(err) = unknown_job(&cluster, &id, &reference, &status).await {
            return Err(err);
        }
        let array = match task {
            Some(_) => None,
            None => status.tasks.as_ref().map(|counts| counts.total),
        };
        if matches!(status.state, JobState::Queued | JobState::Held) && status.tasks.is_none() {
            // Nothing to print yet; silence would read as a job that printed nothing.
            eprintln!("{reference} has not started: {}", waiting(&status));
        }
        let mut output = PrintedOutput::new(id.clone(), array, task.unwrap_or(0));
        let backend = cluster.backend.as_ref();
        if let Some(tail) = tail {
            output.tail(backend, tail).await.map_err(explain)?;
        }
        if follow {
            let tracker = tracker(&cluster)?;
            let status = output
                .follow(&tracker, poll_interval(&cluster), |print| print())
                .await
                .map_err(explain)?;
            if status.state != JobState::Succeeded {
                eprintln!("{reference}: {}", describe_end(&status));
            }
            return Ok(job_exit_code(&status));
        }
        if tail.is_none() {
            output.written(backend).await.map_err(explain)?;
        }
        Ok(Exit::Success as u8)
    }

    async fn cancel(&mut self, references: &[String]) -> CliResult<u8> {
        let mut worst = 0;
        for (cluster, id, reference) in self.resolve_all(references)? {
            let cancelled = async {
                let status = cluster
                    .backend
                    .status_of(&id)
                    .await
                    .map_err(|err| cluster.explain(err))?;
                if let Some(err) = unknown_job(&cluster, &id, &reference, &status).await {
                    return Err(err);
                }
                if status.state.is_terminal() {
                    return Ok(format!(
                        "{reference} had already ended ({}); nothing to cancel",
                        describe_end(&status)
                    ));
                }
                cluster
                    .backend
                    .cancel(&id)
                    .await
                    .map_err(|err| cluster.explain(err))?;
                Ok(format!("cancelled {reference}"))
            };
            match cancelled.await {
                Ok(said) => println!("{said}"),
                Err(err) => {
                    worst = worst.max(err.exit as u8);
                    terminal::print_error(&err);
                }
            }
        }
        Ok(worst)
    }

    async fn check_clusters(&mut self) -> CliResult<u8> {
        let mut worst = 0;
        let mut checks = Vec::new();
        let names = match self.chosen.clone() {
            Some(chosen) => vec![self.cluster(&chosen)?.name],
            None => self.clusters.names(),
        };
        for name in names {
            let check = match self.cluster(&name) {
                Ok(cluster) => {
                    let version = cluster
                        .backend
                        .version()
                        .await
                        .map_err(|err| cluster.explain(err));
                    // Asked after the version: SLURM's probe learns it then, and what a
                    // cluster that did not answer has is unknown.
                    let accounting = version
                        .is_ok()
                        .then(|| cluster.backend.capabilities().accounting);
                    json!({
                        "name": name,
                        "scheduler": format!("{:?}", cluster.scheduler).to_lowercase(),
                        "target": cluster.target(),
                        "ok": version.is_ok(),
                        "version": version.as_ref().ok(),
                        "accounting": accounting,
                        "error": version.as_ref().err().map(|e| e.message.clone()),
                        "hint": version.as_ref().err().and_then(|e| e.hint.clone()),
                        "exit": version.as_ref().err().map(|e| e.exit as u8),
                    })
                }
                Err(err) => json!({
                    "name": name, "ok": false, "error": err.message, "hint": err.hint,
                    "exit": err.exit as u8,
                }),
            };
            if let Some(code) = check["exit"].as_u64() {
                worst = worst.max(u8::try_from(code).unwrap_or(u8::MAX));
            }
            checks.push(check);
        }
        if self.format == Format::Json {
            println!("{}", serde_json::Value::Array(checks));
            return Ok(worst);
        }
        let header = format!(
            "{:<16} {:<6} {:<9} {:<28} {:<40} ACCOUNTING",
            "CLUSTER", "STATE", "SCHEDULER", "TARGET", "VERSION"
        );
        println!("{header}");
        for check in &checks {
            let text = |field: &str| check[field].as_str().unwrap_or("").to_owned();
            let ok = check["ok"].as_bool() == Some(true);
            // Padded before it is styled: escape codes have no width on a terminal.
            let state = if ok {
                console::style(format!("{:<6}", "ok")).green().to_string()
            } else {
                console::style("FAILED").red().bold().to_string()
            };
            let accounting = match check["accounting"].as_bool() {
                Some(true) => "accounting",
                Some(false) => "no accounting",
                None => "",
            };
            let line = format!(
                "{:<16} {state} {:<9} {:<28} {:<40} {accounting}",
                text("name"),
                text("scheduler"),
                text("target"),
                text("version")
            );
            println!("{}", line.trim_end());
            if let Some(error) = check["error"].as_str() {
                println!("  error: {error}");
            }
            if let Some(hint) = check["hint"].as_str() {
                println!("  hint: {hint}");
            }
        }
        Ok(worst)
    }

    async fn forget(&mut self, references: &[String], all_ended: bool) -> CliResult<u8> {
        let entries = self.record.entries()?;
        let chosen: Vec<Entry> = if all_ended {
            entries.clone()
        } else {
            let mut chosen = Vec::new();
            for reference in references {
                let (_, _, reference) = self.resolve(reference, &entries)?;
                let entry = entries
                    .iter()
                    .find(|e| e.reference() == reference)
                    .ok_or_else(|| {
                        CliError::usage(format!("{reference} is not in this tool's record of jobs"))
                            .with_hint("`batchbridge status` lists the jobs it knows")
                    })?;
                chosen.push(entry.clone());
            }
            chosen
        };
        let mut worst = 0;
        let mut by_cluster: BTreeMap<String, (Cluster, Vec<Entry>)> = BTreeMap::new();
        for entry in chosen {
            let cluster = self.cluster(&entry.cluster)?;
            by_cluster
                .entry(cluster.name.clone())
                .or_insert_with(|| (cluster, Vec::new()))
                .1
                .push(entry);
        }
        // A removal costs a few round trips on its cluster; several at once over the
        // shell's multiplexed connection, each printed as it is done, keep a long list from
        // taking minutes in silence.
        let mut removals = JoinSet::new();
        for (cluster, entries) in by_cluster.into_values() {
            let ids: Vec<JobId> = entries.iter().map(|e| JobId::from(e.id.as_str())).collect();
            let statuses = match cluster.backend.status(&ids).await {
                Ok(statuses) => statuses,
                Err(err) => {
                    let err = cluster.explain(err);
                    worst = worst.max(err.exit as u8);
                    terminal::print_error(&err);
                    continue;
                }
            };
            for (entry, id) in entries.into_iter().zip(ids) {
                if statuses.get(&id).is_some_and(|s| s.state.is_active()) {
                    if !all_ended {
                        worst = worst.max(Exit::Failure as u8);
                        terminal::print_error(
                            &CliError::new(
                                Exit::Failure,
                                format!("{} is still active", entry.reference()),
                            )
                            .with_hint(format!(
                                "cancel it first: batchbridge cancel {}",
                                entry.reference()
                            )),
                        );
                    }
                    continue;
                }
                while removals.len() >= REMOVALS_AT_ONCE {
                    if let Some(done) = removals.join_next().await {
                        worst = worst.max(self.forgotten(done)?);
                    }
                }
                let cluster = cluster.clone();
                removals.spawn(async move {
                    let removed = match JobKey::new(entry.key.as_str()) {
                        Ok(key) => cluster.backend.cleanup(&key).await,
                        Err(err) => Err(err),
                    };
                    let removed = removed.map_err(|err| cluster.explain(err));
                    (entry, removed)
                });
            }
        }
        while let Some(done) = removals.join_next().await {
            worst = worst.max(self.forgotten(done)?);
        }
        Ok(worst)
    }

    /// Drops a job whose files were removed from the record and says so; returns the exit
    /// code of a removal that failed.
    fn forgotten(
        &self,
        done: Result<(Entry, CliResult<()>), tokio::task::JoinError>,
    ) -> CliResult<u8> {
        let (entry, removed) =
            done.map_err(|err| CliError::new(Exit::Failure, format!("a removal failed: {err}")))?;
        match removed {
            Ok(()) => {
                let reference = entry.reference();
                self.record.remove(|e| e.reference() == reference)?;
                println!("forgot {reference}");
                Ok(0)
            }
            Err(err) => {
                terminal::print_error(&err);
                Ok(err.exit as u8)
            }
        }
    }
}

const HEADER: [&str; 5] = ["JOB", "NAME", "STATE", "EXIT", "TASKS/REASON"];

/// One line of `status` or `wait`.
struct Row {
    job: String,
    name: String,
    key: String,
    status: Result<JobStatus, String>,
}

impl Row {
    fn cells(&self) -> [String; 5] {
        match &self.status {
            Ok(status) => {
                let exit = match (status.exit_code, status.signal) {
                    (Some(code), _) => code.to_string(),
                    (None, Some(signal)) => format!("signal {signal}"),
                    (None, None) => String::new(),
                };
                let detail = status
                    .tasks
                    .as_ref()
                    .map(describe_tasks)
                    .or_else(|| status.reason.clone())
                    .unwrap_or_default();
                [
                    self.job.clone(),
                    self.name.clone(),
                    format!("{:?}", status.state),
                    exit,
                    detail,
                ]
            }
            Err(err) => [
                self.job.clone(),
                self.name.clone(),
                "error".into(),
                String::new(),
                err.clone(),
            ],
        }
    }

    fn to_json(&self) -> serde_json::Value {
        let (cluster, id) = self.job.split_once(':').unwrap_or(("", &self.job));
        let mut value = json!({"job": self.job, "cluster": cluster, "id": id, "name": self.name, "key": self.key});
        match &self.status {
            Ok(status) => value["status"] = json!(status),
            Err(err) => value["error"] = json!(err),
        }
        value
    }
}

/// `3 tasks: 2 succeeded, 1 running`, leaving out what none are.
fn describe_tasks(tasks: &TaskCounts) -> String {
    let parts = [
        (tasks.succeeded, "succeeded"),
        (tasks.running, "running"),
        (tasks.pending, "pending"),
        (tasks.failed, "failed"),
        (tasks.cancelled, "cancelled"),
    ];
    let counts: Vec<String> = parts
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, what)| format!("{n} {what}"))
        .collect();
    format!("{} tasks: {}", tasks.total, counts.join(", "))
}

/// A job's state while it is waited for, with the scheduler's reason when it has one
/// (`Queued: Resources`): why a job has not started is what the person watching wants.
fn waiting(status: &JobStatus) -> String {
    match &status.reason {
        Some(reason) if !status.state.is_terminal() => format!("{:?}: {reason}", status.state),
        _ => format!("{:?}", status.state),
    }
}

/// How a job that did not succeed ended, for standard error.
fn describe_end(status: &JobStatus) -> String {
    let mut text = format!("{:?}", status.state);
    if let Some(code) = status.exit_code {
        text.push_str(&format!(", exit code {code}"));
    }
    if let Some(signal) = status.signal {
        text.push_str(&format!(", signal {signal}"));
    }
    if let Some(reason) = &status.reason {
        text.push_str(&format!(": {reason}"));
    }
    text
}

/// The error for a job whose scheduler answered `status` Unknown and whose job directory
/// does not exist either; None for a job either knows. The scheduler alone cannot tell:
/// SLURM and PBS forget a finished job within minutes, while its directory still holds its
/// end.
async fn unknown_job(
    cluster: &Cluster,
    id: &JobId,
    reference: &str,
    status: &JobStatus,
) -> Option<CliError> {
    if status.state != JobState::Unknown {
        return None;
    }
    match cluster
        .backend
        .fetch_output(id, &OutputRequest::tail(1))
        .await
    {
        Err(err) if matches!(err.kind(), ErrorKind::NotFound | ErrorKind::InvalidInput) => {
            // The scheduler's own words ("not submitted through this work directory") would
            // be wrong for a job whose files `forget` removed.
            let why = match err.kind() {
                ErrorKind::NotFound => format!(
                    "{} does not know it and no job directory holds it: a wrong id, or a \
                     job whose files were removed (batchbridge forget)",
                    match cluster.scheduler {
                        Scheduler::Slurm => "SLURM",
                        Scheduler::Htcondor => "HTCondor",
                        Scheduler::Pbs => "PBS",
                        Scheduler::Local => "this machine",
                    }
                ),
                _ => err.message().to_owned(),
            };
            Some(
                CliError::new(Exit::UnknownJob, format!("no such job {reference}: {why}"))
                    .with_hint("`batchbridge status` lists the jobs this tool submitted"),
            )
        }
        _ => None,
    }
}

/// How often a cluster is asked: the local one is cheap, a remote one costs a round trip.
fn poll_interval(cluster: &Cluster) -> Duration {
    match cluster.scheduler {
        Scheduler::Local => Duration::from_millis(200),
        Scheduler::Slurm | Scheduler::Htcondor | Scheduler::Pbs => Duration::from_secs(2),
    }
}

fn tracker(cluster: &Cluster) -> CliResult<Tracker> {
    Tracker::new(cluster.backend.clone(), poll_interval(cluster))
        .map_err(|err| cluster.explain(err))
}

/// Ctrl-C during `run`: cancel the job if asked to, or ask the person at the terminal.
async fn interrupted(cluster: &Cluster, entry: &Entry, id: &JobId, cancel: bool) -> CliResult<()> {
    let reference = entry.reference();
    let cancel =
        cancel || (terminal::can_ask() && ask(&format!("cancel {reference}? [y/N] ")).await);
    if cancel {
        cluster
            .backend
            .cancel(id)
            .await
            .map_err(|err| cluster.explain(err))?;
        eprintln!("cancelled {reference}");
    } else {
        eprintln!(
            "{reference} goes on: `batchbridge logs -f {reference}` follows it, \
             `batchbridge cancel {reference}` cancels it"
        );
    }
    Ok(())
}

/// Asks a yes/no question on the terminal; another Ctrl-C or end of input is "no".
async fn ask(question: &str) -> bool {
    eprint!("\n{question}");
    let answer = tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).map(|_| line)
    });
    tokio::select! {
        answer = answer => matches!(answer, Ok(Ok(line)) if line.trim().eq_ignore_ascii_case("y") || line.trim().eq_ignore_ascii_case("yes")),
        _ = tokio::signal::ctrl_c() => false,
    }
}

/// The spec the flags describe, checked before anything is sent.
fn job_spec(job: JobArgs) -> CliResult<JobSpec> {
    let (script, default_name) = if job.script == "-" {
        let mut script = String::new();
        std::io::stdin()
            .read_to_string(&mut script)
            .map_err(|err| {
                CliError::usage(format!("cannot read the script from standard input: {err}"))
            })?;
        (script, "stdin".to_owned())
    } else {
        let path = PathBuf::from(&job.script);
        let script = std::fs::read_to_string(&path).map_err(|err| {
            CliError::usage(format!("cannot read the script {}: {err}", path.display()))
        })?;
        (script, name_from(&path))
    };
    let name = job.name.unwrap_or(default_name);
    let key = match job.key {
        Some(key) => key,
        None => fresh_key(&name),
    };
    let mut spec = JobSpec::new(JobKey::new(key)?, name, script);
    spec.resources.cpus = job.cpus;
    spec.resources.gpus = job.gpus;
    spec.resources.wall_time = job.time;
    if let Some(mem) = job.mem {
        spec.resources.memory = Some(
            batchbridge_core::spec::parse_size(&mem)
                .map_err(|err| CliError::usage(format!("--mem: {}", err.message())))?,
        );
    }
    if let Some(array) = job.array {
        spec.array = Some(parse_array(&array)?);
    }
    for pair in job.env {
        let (name, value) = pair.split_once('=').ok_or_else(|| {
            CliError::usage(format!(
                "--env {:?}: expected NAME=VALUE",
                batchbridge_core::spec::truncate_for_message(&pair)
            ))
        })?;
        spec.environment.insert(name.to_owned(), value.to_owned());
    }
    spec.queue = job.partition;
    spec.validate()
        .map_err(|err| CliError::usage(in_flags(err.message(), spec.key.as_str())))?;
    Ok(spec)
}

/// Core's validation names the spec's fields (`job spec KEY: array.count: …`); the person
/// at the terminal typed flags, and never saw the key the tool made up.
fn in_flags(message: &str, key: &str) -> String {
    const FLAGS: [(&str, &str); 9] = [
        ("resources.cpus", "--cpus"),
        ("resources.gpus", "--gpus"),
        ("resources.memory", "--mem"),
        ("resources.wallTime", "--time"),
        ("array.count", "--array (its task count)"),
        ("array.maxParallel", "--array (its %M)"),
        ("queue ", "--partition "),
        ("environment ", "--env "),
        ("name ", "--name "),
    ];
    let message = message
        .strip_prefix(&format!("job spec {key}: "))
        .unwrap_or(message);
    let problems: Vec<String> = message
        .split("; ")
        .map(|problem| {
            FLAGS
                .iter()
                .find_map(|(field, flag)| {
                    problem
                        .strip_prefix(field)
                        .map(|rest| format!("{flag}{rest}"))
                })
                .unwrap_or_else(|| problem.to_owned())
        })
        .collect();
    problems.join("; ")
}

/// `N`, `0-LAST` (sbatch's range from 0, the same N = LAST + 1 tasks), each with an optional
/// `%M`. Core's arrays number their tasks 0 to N-1, so a range from elsewhere, a step or a
/// list would run tasks under other numbers than sbatch's: refused, saying how to get them
/// from `$BATCHBRIDGE_TASK_INDEX`.
fn parse_array(text: &str) -> CliResult<ArraySpec> {
    let refused = |why: String| CliError::usage(format!("--array {text:?}: {why}"));
    let expected = || {
        refused(
            "expected N, 0-LAST or either with %M (at most M at once), e.g. 10, 0-9, 10%2"
                .to_owned(),
        )
    };
    let number = |field: &str| -> CliResult<u32> {
        if field.is_empty() || !field.bytes().all(|b| b.is_ascii_digit()) {
            return Err(expected());
        }
        field.parse().map_err(|_| expected())
    };
    let (tasks, parallel) = match text.split_once('%') {
        Some((tasks, parallel)) => (tasks, Some(number(parallel)?)),
        None => (text, None),
    };
    let count = match tasks.split_once('-') {
        None if tasks.contains([',', ':']) => {
            return Err(refused(
                "lists and steps are not supported: tasks are numbered 0 to N-1 in \
                 $BATCHBRIDGE_TASK_INDEX; compute yours from it, e.g. --array 5 with \
                 $((BATCHBRIDGE_TASK_INDEX * 2)) for 0,2,4,6,8"
                    .to_owned(),
            ));
        }
        None => number(tasks)?,
        Some((first, rest)) => {
            let (last, step) = match rest.split_once(':') {
                Some((last, step)) => (last, Some(number(step)?)),
                None => (rest, None),
            };
            let (first, last) = (number(first)?, number(last)?);
            if last < first {
                return Err(expected());
            }
            let step = step.unwrap_or(1).max(1);
            let count = (last - first) / step + 1;
            if first != 0 || step != 1 {
                let mut index = "BATCHBRIDGE_TASK_INDEX".to_owned();
                if step != 1 {
                    index = format!("{index} * {step}");
                }
                if first != 0 {
                    index = format!("{index} + {first}");
                }
                return Err(refused(format!(
                    "tasks are numbered 0 to N-1 in $BATCHBRIDGE_TASK_INDEX; ranges from \
                     0 without a step are supported (0-{}); for these {count} tasks write \
                     --array {count}{} and use $(({index})) in the script",
                    count - 1,
                    parallel.map(|p| format!("%{p}")).unwrap_or_default(),
                )));
            }
            count
        }
    };
    let mut array = ArraySpec::new(count);
    if let Some(parallel) = parallel {
        array = array.with_max_parallel(parallel);
    }
    Ok(array)
}

/// A job name from a script's file name: its stem with every character a name cannot hold
/// made `-`.
fn name_from(path: &Path) -> String {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let name: String = stem
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '-'
            }
        })
        .take(batchbridge_core::MAX_NAME_LEN)
        .collect();
    let name = name.trim_start_matches(['.', '_', '-']).to_owned();
    if name.is_empty() {
        "job".to_owned()
    } else {
        name
    }
}

/// A key no other submission has: the name, the time in nanoseconds and this process.
fn fresh_key(name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_nanos());
    let prefix: String = name.chars().take(32).collect();
    format!("{prefix}-{nanos}-{}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrays_are_n_or_a_range_from_0() {
        let parsed = |text: &str| parse_array(text).ok().map(|a| (a.count, a.max_parallel));
        assert_eq!(parsed("3"), Some((3, None)));
        assert_eq!(parsed("10%2"), Some((10, Some(2))));
        assert_eq!(parsed("0-9"), Some((10, None)));
        assert_eq!(parsed("0-0"), Some((1, None)));
        assert_eq!(parsed("0-9%3"), Some((10, Some(3))));
        assert_eq!(parsed("0-9:1"), Some((10, None)));
        for bad in [
            "",
            "%2",
            "3%",
            "x",
            "3%$(touch x)",
            "-1",
            "1-5",
            "0-9:2",
            "1,3,5",
            "5-1",
            "0-",
            "0-x",
            "0-9:",
            "1-5%2",
            "99999999999",
        ] {
            assert_eq!(parsed(bad), None, "{bad:?}");
        }
        let said = |text: &str| parse_array(text).unwrap_err().message;
        assert!(
            said("1-5").contains("--array 5 and use $((BATCHBRIDGE_TASK_INDEX + 1))"),
            "{}",
            said("1-5")
        );
        assert!(
            said("0-9:2").contains("--array 5 and use $((BATCHBRIDGE_TASK_INDEX * 2))"),
            "{}",
            said("0-9:2")
        );
        assert!(
            said("3-11:4%2").contains("--array 3%2 and use $((BATCHBRIDGE_TASK_INDEX * 4 + 3))"),
            "{}",
            said("3-11:4%2")
        );
    }

    #[test]
    fn names_from_file_names_are_valid_names() {
        let cases = [
            ("hello.sh", "hello"),
            ("/a/b/my job $(x).sh", "my-job---x-"),
            (".hidden", "hidden"),
            ("--", "job"),
        ];
        for (path, name) in cases {
            assert_eq!(name_from(Path::new(path)), name, "{path}");
        }
    }
}
