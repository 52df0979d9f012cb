//! How many SSH connections the BatchClusters of one namespace may open: a token bucket
//! per namespace, shared by all its BatchClusters, checked before a command that would log
//! in a new connection.
//!
//! A command on an open connection costs nothing, and so does a reconnect of a shell that
//! has logged in before (its target is a real login node that took its credentials; an
//! outage there must not delay its recovery). Without a bound, each BatchCluster whose
//! login node does not answer is tried by its probe and its polls about 12 times a minute,
//! and a tenant with 40 of them makes the operator open 600 to 740 connections a minute to
//! addresses of its choosing (issue 27): a port scanner, and a load on the sites' sshd.
//! With it, a namespace opens at most [`BURST`] connections at once and one more every
//! [`REFILL`], however many BatchClusters it has; a command refused for that fails at once
//! as Unreachable (temporary), saying so, and is tried again later.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use batchbridge_core::shell::{
    Command, LineStream, Output, PipeInput, PipeOutput, Shell, SshShell,
};
use batchbridge_core::{Error, ErrorKind, Result};
use tokio::time::Instant;

/// The most connections a namespace opens at once: enough for every BatchCluster of a large
/// tenant to connect at the operator's start.
pub const BURST: u32 = 20;
/// How often a namespace may open one more connection once its burst is spent.
pub const REFILL: Duration = Duration::from_secs(5);

/// The connections one namespace may still open.
#[derive(Debug)]
pub struct ConnectBudget {
    state: Mutex<Bucket>,
}

#[derive(Debug)]
struct Bucket {
    tokens: u32,
    /// When the next token comes, while the bucket is not full.
    next: Instant,
}

impl Default for ConnectBudget {
    fn default() -> Self {
        Self {
            state: Mutex::new(Bucket {
                tokens: BURST,
                next: Instant::now() + REFILL,
            }),
        }
    }
}

impl ConnectBudget {
    /// Takes one connection from the budget, or says how long until one is free.
    pub fn take(&self) -> std::result::Result<(), Duration> {
        let now = Instant::now();
        let mut bucket = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if bucket.tokens < BURST && now >= bucket.next {
            let periods = now.duration_since(bucket.next).as_nanos() / REFILL.as_nanos() + 1;
            let added = u32::try_from(periods).unwrap_or(u32::MAX);
            bucket.tokens = bucket.tokens.saturating_add(added).min(BURST);
            bucket.next += REFILL * added.min(BURST);
            if bucket.next <= now {
                bucket.next = now + REFILL;
            }
        }
        if bucket.tokens == 0 {
            return Err(bucket.next.saturating_duration_since(now));
        }
        if bucket.tokens == BURST {
            // A full bucket gains nothing while full: the next token is a period after
            // this one is spent.
            bucket.next = now + REFILL;
        }
        bucket.tokens -= 1;
        Ok(())
    }
}

/// A shell whose new connections come out of its namespace's [`ConnectBudget`].
#[derive(Debug)]
pub struct BudgetedShell {
    inner: Arc<dyn Shell>,
    ssh: Arc<SshShell>,
    budget: Arc<ConnectBudget>,
}

impl BudgetedShell {
    /// `inner` (which runs its commands on `ssh`, perhaps through a decorator), opening new
    /// connections only while `budget` allows.
    pub fn new(inner: Arc<dyn Shell>, ssh: Arc<SshShell>, budget: Arc<ConnectBudget>) -> Self {
        Self { inner, ssh, budget }
    }

    fn admit(&self) -> Result<()> {
        // A shell that has logged in before (the only kind with an open connection) reaches
        // a real login node with working credentials: its reconnects after an outage are
        // not probes, and must not wait for a budget the outage's failed attempts spent.
        if self.ssh.connections_opened() > 0 {
            return Ok(());
        }
        self.budget.take().map_err(|wait| {
            Error::new(
                ErrorKind::Unreachable,
                format!(
                    "{}: not connecting: this namespace's BatchClusters may open {BURST} SSH \
                     connections at once and one more every {} s, and have opened them all; \
                     the next may be opened in {} s",
                    self.inner.host(),
                    REFILL.as_secs(),
                    wait.as_secs().max(1)
                ),
            )
        })
    }
}

#[async_trait]
impl Shell for BudgetedShell {
    fn host(&self) -> &str {
        self.inner.host()
    }

    async fn run(&self, command: &Command) -> Result<Output> {
        self.admit()?;
        self.inner.run(command).await
    }

    async fn stream(&self, command: &Command) -> Result<LineStream> {
        self.admit()?;
        self.inner.stream(command).await
    }

    async fn pipe(
        &self,
        command: &Command,
        input: Option<PipeInput>,
        output: Option<PipeOutput>,
    ) -> Result<Output> {
        self.admit()?;
        self.inner.pipe(command, input, output).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_namespace_opens_a_burst_then_one_connection_a_period() {
        let budget = ConnectBudget::default();
        for n in 0..BURST {
            assert_eq!(budget.take(), Ok(()), "connection {n} of the burst");
        }
        assert_eq!(budget.take(), Err(REFILL), "the burst is spent");
        tokio::time::advance(REFILL).await;
        assert_eq!(budget.take(), Ok(()), "one more after a period");
        assert_eq!(budget.take(), Err(REFILL));
        tokio::time::advance(REFILL * 3 + Duration::from_secs(1)).await;
        for n in 0..3 {
            assert_eq!(
                budget.take(),
                Ok(()),
                "three periods, three connections: {n}"
            );
        }
        assert_eq!(budget.take(), Err(REFILL - Duration::from_secs(1)));
        // A long quiet time fills the bucket, never beyond the burst.
        tokio::time::advance(REFILL * 1000).await;
        for _ in 0..BURST {
            assert_eq!(budget.take(), Ok(()));
        }
        assert!(budget.take().is_err());
    }

    /// Against a closed port (nothing listens on port 1 of this machine): the burst's
    /// connections are tried, and reach nothing; the next one is refused by the budget
    /// without a connection, saying so.
    #[tokio::test]
    async fn new_connections_beyond_the_budget_are_not_tried() {
        use batchbridge_core::shell::{HostKeys, SshAuth};
        let budget = Arc::new(ConnectBudget::default());
        let mut config = batchbridge_core::shell::SshConfig::new(
            "127.0.0.1",
            "nobody",
            SshAuth::Agent("/nonexistent/agent.socket".into()),
            HostKeys::Entries(String::new()),
        )
        .port(1);
        config.connect_attempts = 1;
        let ssh = Arc::new(SshShell::new(config).unwrap());
        let shell = BudgetedShell::new(ssh.clone(), ssh, budget);
        let command = Command::new("true");
        for _ in 0..BURST {
            let err = shell.run(&command).await.unwrap_err();
            assert!(err.message().contains("Connection refused"), "{err}");
        }
        let err = shell.run(&command).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unreachable);
        assert!(err.is_temporary());
        assert!(err.message().contains("not connecting"), "{err}");
    }
}
