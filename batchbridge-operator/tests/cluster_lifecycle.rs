//! A BatchCluster's connection lives exactly as long as the BatchCluster: deleting it
//! closes its SSH master at once, a BatchCluster re-created under the same name gets a
//! connection of its own, and refused credentials are not tried again every few minutes.
//!
//! Against the test bed's real kube-apiserver and SLURM's sshd. One test in its own binary:
//! it counts this process's SSH masters, which no other test may start meanwhile.

// Test helpers panic on purpose: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use batchbridge_operator::crd::Phase;
use batchbridge_testbed::login;
use common::Cluster;
use common::operator::{
    PATIENCE, RunningOperator, SshLogin, cluster_spec, create_cluster_with, create_job,
    create_secret, put_secret, secret_of, status, wait_for_phase, wait_for_unreachable,
};
use kube::api::DeleteParams;
use serde_json::json;

/// This process's OpenSSH masters (`ssh -N -M …`): one per live connection.
fn ssh_masters() -> usize {
    let me = std::process::id().to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|entry| {
            let dir = entry.ok()?.path();
            let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
            // `pid (comm) state ppid …`: the command name may hold spaces, the rest not.
            let ppid = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .nth(1)?
                .to_owned();
            let cmdline = std::fs::read(dir.join("cmdline")).ok()?;
            let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
            let is_master = args.first()?.ends_with(b"ssh") && args.contains(&&b"-M"[..]);
            (ppid == me && is_master).then_some(())
        })
        .count()
}

async fn until(what: &str, check: impl Fn() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn create_slurm_cluster(bed: &Cluster, name: &str, work_dir: &str, user: &str, secret: &str) {
    let login = login("ssh");
    let ssh = SshLogin {
        user,
        ..SshLogin::from(&login)
    };
    let mut spec = cluster_spec("slurm", &ssh, secret);
    spec["workDir"] = json!(work_dir);
    create_cluster_with(bed, name, spec).await;
}

/// Runs a job on BatchCluster `cluster` that prints its own script's path, which lies in
/// the cluster's work directory; returns what it printed.
async fn script_path_on(bed: &Cluster, job: &str, cluster: &str) -> String {
    create_job(
        bed,
        job,
        json!({"clusterRef": {"name": cluster}, "script": "echo \"$0\""}),
    )
    .await;
    let done = wait_for_phase(bed, job, Phase::Succeeded).await;
    status(&done).output_tail.unwrap_or_default()
}

async fn delete_job(bed: &Cluster, job: &str) {
    bed.jobs()
        .delete(job, &DeleteParams::default())
        .await
        .unwrap();
    let deadline = Instant::now() + PATIENCE;
    while bed.jobs().get_opt(job).await.unwrap().is_some() {
        assert!(Instant::now() < deadline, "{job} was not removed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// How many times the SLURM test bed's sshd saw a login as `user`, who exists nowhere. The
/// log is on this machine (the test bed's sshd runs here).
fn logins_as(user: &str) -> usize {
    let log = std::fs::read_to_string("/var/lib/batchbridge-testbed/ssh/sshd.log").unwrap();
    let wanted = format!("Invalid user {user} from");
    log.lines().filter(|line| line.contains(&wanted)).count()
}

#[tokio::test]
async fn a_batch_clusters_connection_lives_exactly_as_long_as_it() {
    let bed = Cluster::new("lifecycle").await;
    let operator = RunningOperator::start(&bed, &bed.operator_client().await);
    create_secret(&bed, "cluster-key", &login("ssh")).await;
    let first_dir = format!(".batchbridge-move-a-{}", bed.namespace);
    let second_dir = format!(".batchbridge-move-b-{}", bed.namespace);

    create_slurm_cluster(&bed, "c-move", &first_dir, "batch", "cluster-key").await;
    let printed = script_path_on(&bed, "first", "c-move").await;
    assert!(printed.contains(&first_dir), "{printed}");
    assert_eq!(ssh_masters(), 1, "one connection to c-move");

    // Deleting the BatchCluster closes its connection at once.
    delete_job(&bed, "first").await;
    bed.clusters()
        .delete("c-move", &DeleteParams::default())
        .await
        .unwrap();
    until("c-move's SSH master to end", || ssh_masters() == 0).await;

    // Re-created under the same name with another work directory, it is another cluster.
    create_slurm_cluster(&bed, "c-move", &second_dir, "batch", "cluster-key").await;
    let printed = script_path_on(&bed, "second", "c-move").await;
    assert!(
        printed.contains(&second_dir) && !printed.contains(&first_dir),
        "the job ran in the deleted BatchCluster's work directory: {printed}"
    );
    delete_job(&bed, "second").await;
    bed.clusters()
        .delete("c-move", &DeleteParams::default())
        .await
        .unwrap();
    until("the second c-move's SSH master to end", || {
        ssh_masters() == 0
    })
    .await;

    // Refused credentials: one login, then a wait that the condition names, with no new
    // login while it lasts, though the cluster is probed every 15 s and polled every 1 s.
    let user = format!("nobody{}", std::process::id());
    let secret = secret_of(
        "wrong-password",
        "kubernetes.io/basic-auth",
        [("password", b"not-the-password".to_vec())],
    );
    put_secret(&bed, &secret).await;
    create_slurm_cluster(&bed, "c-locked", &first_dir, &user, "wrong-password").await;
    let message = wait_for_unreachable(&bed, "c-locked").await.message;
    assert!(message.contains("no new login for"), "{message}");
    let logins = logins_as(&user);
    assert_eq!(logins, 1, "one refused login so far");
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert_eq!(logins_as(&user), 1, "logged in again within the wait");

    operator.stop().await;
}
