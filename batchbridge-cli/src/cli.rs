//! The command line: every command, flag and help text.

use std::path::PathBuf;

use batchbridge_core::JobState;
use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::output::Tail;

const AFTER_HELP: &str = "\
Examples:
  batchbridge run hello.sh          run here, print output, exit with its code
  batchbridge -c hpc submit --cpus 4 --mem 8GiB --time 2h train.sh
  batchbridge status                every job this tool submitted
  batchbridge logs -f hpc:4242      follow a running job's output
  batchbridge cancel hpc:4242
  batchbridge clusters              check that every cluster answers
  batchbridge login site            log in once (password, one-time password)

Jobs are named CLUSTER:ID as `submit` prints them; a bare ID is looked up among
the jobs this tool submitted, then taken to be on the --cluster (or default)
cluster.

Config (~/.config/batchbridge/config.toml; the `local` cluster needs none):
  default_cluster = \"hpc\"
  [clusters.hpc]
  scheduler = \"slurm\"                 # slurm, htcondor, pbs or local
  host = \"login.hpc.example\"
  port = 22                           # default 22
  user = \"alice\"                      # default $USER
  # default: the ssh-agent at $SSH_AUTH_SOCK, else ~/.ssh/id_{ed25519,ecdsa,rsa}
  key_file = \"~/.ssh/id_ed25519\"
  known_hosts = \"~/.ssh/known_hosts\"  # default; unknown host keys are refused
  # default .batchbridge/SCHEDULER in the login directory
  work_dir = \"/scratch/alice/bb\"
  partition = \"short\"                 # slurm, and pbs's queue
  account = \"proj-17\"                 # slurm and pbs
  max_queued = 100                    # wait past 100 jobs in the scheduler
  [clusters.site]
  scheduler = \"pbs\"
  # a Host of your ~/.ssh/config: its HostName, Port, User, IdentityFile,
  # CertificateFile, ProxyJump... apply as for `ssh site`; host keys stay strict
  ssh_alias = \"site\"
  # ssh_config = \"~/.ssh/config\"      # default: the files `ssh` reads
  login = \"interactive\"               # password, one-time password: commands
  login_persist = \"8h\"                # need `batchbridge login site` first

Exit codes:
  0    done; for run and wait: the job succeeded
  N    run and wait: the job's own exit code (128+S when signal S killed it)
  1    a job failed (without a code of its own) or was cancelled
  2    usage error: a flag or value was refused; nothing was sent
  66   no such job: neither its scheduler nor its job directory knows it
  69   a cluster is unreachable or its scheduler did not answer
  70   any other failure (the scheduler refused, I/O)
  75   wait --timeout passed; the job goes on
  77   SSH refused: unknown or changed host key, key not accepted, or no
       `batchbridge login` open for a cluster that needs one
  78   the config file is wrong
  130  interrupted";

/// batchbridge: run batch jobs on SLURM, HTCondor, PBS or this machine with one set of commands.
#[derive(Debug, Parser)]
#[command(
    name = "batchbridge",
    version,
    after_help = "`batchbridge --help` shows examples, the config file and the exit codes.",
    after_long_help = AFTER_HELP
)]
pub(crate) struct Cli {
    /// The cluster to use (default: the config's default_cluster, else `local`).
    #[arg(short, long, global = true, env = "BATCHBRIDGE_CLUSTER")]
    pub(crate) cluster: Option<String>,

    /// The config file.
    #[arg(long, global = true, env = "BATCHBRIDGE_CONFIG")]
    pub(crate) config: Option<PathBuf>,

    /// How listings are printed.
    #[arg(short, long, global = true, value_enum, default_value_t = Format::Table)]
    pub(crate) output: Format,

    /// Say more on stderr: -v the library's warnings and connections, -vv also every
    /// command run on a cluster (never a credential). RUST_LOG, when set, decides instead.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub(crate) verbose: u8,

    #[command(subcommand)]
    pub(crate) command: Command,
}

/// How listings are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Format {
    /// Aligned columns for people.
    Table,
    /// JSON for scripts.
    Json,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Submit a script and print the job's CLUSTER:ID.
    #[command(after_help = "Examples:\n  batchbridge submit job.sh\n  \
        echo 'hostname' | batchbridge submit --name host -\n  \
        batchbridge -c hpc submit --array 10%2 --env INPUT=/data/x sweep.sh\n  \
        batchbridge -c hpc submit --dry-run job.sh")]
    Submit {
        #[command(flatten)]
        job: JobArgs,
        /// Wait until the job ends, then exit with its exit code.
        #[arg(long, conflicts_with = "follow")]
        wait: bool,
        /// Print the job's output as it runs, then exit with its exit code (as `run`).
        #[arg(long)]
        follow: bool,
        /// Submit nothing: print what became of each of the script's directive lines
        /// (#SBATCH, #PBS) and the spec a submit would send, connecting to nothing; exit 2
        /// if a directive line is refused.
        #[arg(long, conflicts_with_all = ["wait", "follow"])]
        dry_run: bool,
    },
    /// Submit a script, print its output live, exit with its exit code.
    #[command(after_help = "Examples:\n  batchbridge run hello.sh\n  \
        batchbridge -c hpc run --cpus 8 --time 30m --cancel-on-interrupt build.sh\n  \
        batchbridge run --in data.csv --out 'results/*' analyse.sh")]
    Run {
        #[command(flatten)]
        job: JobArgs,
        /// On Ctrl-C, cancel the job without asking.
        #[arg(long)]
        cancel_on_interrupt: bool,
    },
    /// Show jobs: those named, or every job this tool submitted (on --cluster, when given).
    #[command(
        after_help = "Examples:\n  batchbridge -c hpc status --state running,queued\n  \
        batchbridge status --state failed --since 1d\n  \
        batchbridge status --since 2026-11-26T09:00:00"
    )]
    Status {
        /// Jobs as CLUSTER:ID or ID.
        jobs: Vec<String>,
        /// Only jobs in these states (comma-separated; `active` is queued, held, running or
        /// suspended; `ended` is succeeded, failed or cancelled).
        #[arg(long, value_enum, value_delimiter = ',', value_name = "STATE")]
        state: Vec<StateFilter>,
        /// Only jobs submitted since then: a time ago (90m, 2h, 1d) or a UTC time
        /// (2026-11-26T09:00:00). Jobs named that this tool did not submit have no time and
        /// are shown.
        #[arg(long, value_parser = since, value_name = "WHEN")]
        since: Option<std::time::SystemTime>,
    },
    /// Wait until jobs end; exit with the job's code (one job) or 1 if any failed.
    Wait {
        /// Jobs as CLUSTER:ID or ID.
        #[arg(required = true)]
        jobs: Vec<String>,
        /// Give up after this long (e.g. 90s, 2h); the jobs go on.
        #[arg(long, value_parser = humantime::parse_duration)]
        timeout: Option<std::time::Duration>,
    },
    /// Print a job's output.
    Logs {
        /// The job as CLUSTER:ID or ID.
        job: String,
        /// Only the last N lines of each stream, or its last bytes with a unit (5KiB, 512B).
        #[arg(long, value_name = "N|SIZE", value_parser = tail)]
        tail: Option<Tail>,
        /// Keep printing as the job writes, until it ends.
        #[arg(short, long)]
        follow: bool,
        /// Only this task of an array job (default: every task, each under a
        /// `==> task N <==` line).
        #[arg(long)]
        task: Option<u32>,
    },
    /// Fetch files an ended job left in its working directory.
    #[command(after_help = "Examples:\n  batchbridge get hpc:1234 'results/*'\n  \
        batchbridge get 1234 output.csv ./back")]
    Get {
        /// The job as CLUSTER:ID or ID.
        job: String,
        /// A path or glob relative to the job's working directory (a directory is fetched
        /// whole).
        pattern: String,
        /// Where the files go, each under its path in the working directory (default: the
        /// current directory).
        dir: Option<PathBuf>,
    },
    /// Cancel jobs (an ended job is left as it is, and said to have ended).
    Cancel {
        /// Jobs as CLUSTER:ID or ID.
        #[arg(required = true)]
        jobs: Vec<String>,
    },
    /// Check every cluster (or the --cluster given): reachable, scheduler version, accounting,
    /// and whether a `login` is open.
    Clusters,
    /// Log in once at this terminal (password, one-time password); later commands reuse it.
    ///
    /// The connection is an OpenSSH master: commands go through it without a prompt or a new
    /// login until it has been unused for --persist, or `logout` closes it.
    #[command(after_help = "Examples:\n  batchbridge login site\n  \
        batchbridge login --persist 2h site\n  batchbridge logout site")]
    Login {
        /// The cluster (default: --cluster, else the config's default_cluster).
        name: Option<String>,
        /// Close the login once it has been unused this long (default: the cluster's
        /// login_persist, else 8h).
        #[arg(long, value_parser = humantime::parse_duration, value_name = "DURATION")]
        persist: Option<std::time::Duration>,
    },
    /// Close a cluster's login.
    Logout {
        /// The cluster (default: --cluster, else the config's default_cluster).
        name: Option<String>,
    },
    /// Remove ended jobs' files on their clusters and drop them from the record.
    Forget {
        /// Jobs as CLUSTER:ID or ID.
        #[arg(required_unless_present = "ended", conflicts_with = "ended")]
        jobs: Vec<String>,
        /// Every ended job in the record.
        #[arg(long)]
        ended: bool,
    },
    /// Print a completion script: `batchbridge completions bash > /etc/bash_completion.d/batchbridge`.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff), for packagers: `batchbridge man > batchbridge.1`.
    /// Hidden: `--help` is the user's manual, and the page is made from it.
    #[command(hide = true)]
    Man {
        /// Write batchbridge.1 and a page per command (batchbridge-submit.1, ...) into this
        /// directory instead.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
}

/// A state `status --state` shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum StateFilter {
    Queued,
    Held,
    Running,
    Suspended,
    Succeeded,
    Failed,
    Cancelled,
    Unknown,
    /// Queued, held, running or suspended.
    Active,
    /// Succeeded, failed or cancelled.
    Ended,
}

impl StateFilter {
    pub(crate) fn admits(self, state: JobState) -> bool {
        match self {
            Self::Queued => state == JobState::Queued,
            Self::Held => state == JobState::Held,
            Self::Running => state == JobState::Running,
            Self::Suspended => state == JobState::Suspended,
            Self::Succeeded => state == JobState::Succeeded,
            Self::Failed => state == JobState::Failed,
            Self::Cancelled => state == JobState::Cancelled,
            Self::Unknown => state == JobState::Unknown,
            Self::Active => state.is_active(),
            Self::Ended => state.is_terminal(),
        }
    }
}

/// What to run and with what.
#[derive(Debug, Args)]
pub(crate) struct JobArgs {
    /// The script to run, or `-` to read it from standard input.
    pub(crate) script: String,
    /// The job's name (default: the script's file name without extension).
    #[arg(long)]
    pub(crate) name: Option<String>,
    /// A key naming this submission: submitting the same key again returns the same job.
    #[arg(long)]
    pub(crate) key: Option<String>,
    /// CPUs per task.
    #[arg(long)]
    pub(crate) cpus: Option<u32>,
    /// Memory per task, as sbatch reads it: 4000 (MiB), 512M, 4G, 4GB or 4GiB (all binary).
    #[arg(long, value_name = "SIZE")]
    pub(crate) mem: Option<String>,
    /// Wall-time limit, as sbatch reads it (90 minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM,
    /// D-HH:MM:SS) or as 2h, 90m, 1h 30m.
    #[arg(long, value_parser = wall_time)]
    pub(crate) time: Option<std::time::Duration>,
    /// GPUs per task.
    #[arg(long)]
    pub(crate) gpus: Option<u32>,
    /// An array of N tasks, at most M at once: N, 0-LAST (N = LAST+1, as sbatch), each with
    /// an optional %M. Each task's index, 0 to N-1, is in $BATCHBRIDGE_TASK_INDEX; other
    /// ranges and steps are refused with the arithmetic that gives their numbers.
    #[arg(long, value_name = "N[%M]")]
    pub(crate) array: Option<String>,
    /// An environment variable for the job, passed verbatim (repeatable).
    #[arg(long = "env", value_name = "NAME=VALUE")]
    pub(crate) env: Vec<String>,
    /// The partition (SLURM) or queue.
    #[arg(long)]
    pub(crate) partition: Option<String>,
    /// A local file or directory sent to the job's working directory before the submit, as
    /// DEST (default: its own name) there (repeatable). The job is submitted only when every
    /// input arrived whole (size and SHA-256 checked on the cluster).
    #[arg(long = "in", value_name = "PATH[:DEST]")]
    pub(crate) inputs: Vec<String>,
    /// Files the job leaves in its working directory, a path or a glob (quote it), fetched
    /// after it ended into LOCALDIR (default: the current directory) under their paths
    /// there (repeatable). `run` and `submit --wait` fetch them before they exit; later,
    /// `batchbridge get` does.
    #[arg(long = "out", value_name = "PATTERN[:LOCALDIR]")]
    pub(crate) outputs: Vec<String>,
    /// Start only after this job of the same cluster has ended so (repeatable; all must
    /// hold): JOB or ok:JOB once it succeeded, notok:JOB once it failed or was cancelled,
    /// any:JOB once it ended. JOB is an ID or CLUSTER:ID. If it can no longer hold, the job
    /// is never submitted (exit 1). On a scheduler without dependencies of its own
    /// (HTCondor, local) this command holds the job until then: keep it running.
    #[arg(long, value_name = "[ok:|notok:|any:]JOB")]
    pub(crate) after: Vec<String>,
}

/// `--time`, by core's parser, whose message says every accepted form.
fn wall_time(text: &str) -> Result<std::time::Duration, String> {
    batchbridge_core::spec::parse_wall_time(text).map_err(|err| err.message().to_owned())
}

/// `--since`: a time ago, by humantime (`2h`), or a UTC time by humantime's RFC 3339 reader,
/// which also takes a space for the `T` and leaves out the zone.
fn since(text: &str) -> Result<std::time::SystemTime, String> {
    if let Ok(ago) = humantime::parse_duration(text) {
        return std::time::SystemTime::now()
            .checked_sub(ago)
            .ok_or_else(|| format!("{text:?} ago is before any time this machine can name"));
    }
    humantime::parse_rfc3339_weak(text).map_err(|_| {
        format!(
            "expected a time ago (90m, 2h, 1d) or a UTC time (2026-11-26T09:00:00), not {text:?}"
        )
    })
}

/// `logs --tail`: a number of lines, or a size with a unit as core's `parse_size` reads it.
fn tail(text: &str) -> Result<Tail, String> {
    if text.contains(|c: char| c.is_ascii_alphabetic()) {
        return batchbridge_core::spec::parse_size(text)
            .map(|size| Tail::Bytes(size.as_u64()))
            .map_err(|err| err.message().to_owned());
    }
    text.trim().parse().map(Tail::Lines).map_err(|_| {
        format!("expected a number of lines (20) or a size (5KiB, 512B), not {text:?}")
    })
}
