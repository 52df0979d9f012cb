//! A BatchCluster that logs in with a Kerberos keytab Secret (issue 29, point 4), against
//! the test bed's real kube-apiserver and its Kerberos realm (`tests/testbed/kdc.sh`: a KDC
//! whose tickets live 1 minute and a GSSAPI-only sshd on localhost:2234, on the SLURM login
//! node). The operator runs as a process of its own with the realm's krb5.conf as its
//! KRB5_CONFIG, as a pod would with the site's krb5.conf mounted.

// Helpers panic on purpose: anything unexpected is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use batchbridge_operator::crd::{BatchJobStatus, Phase};
use batchbridge_testbed::kdc_facts;
use common::Cluster;
use common::operator::{
    SshLogin, cluster_spec, create_cluster_with, create_job, http_get, put_secret, secret_of,
    status,
};
use common::process::{OperatorProcess, Proc, write_operator_kubeconfig};
use serde_json::json;

/// Files named like a Kerberos credential cache (`krb5cc…`) under `dir`, at any depth.
fn ticket_files(dir: &Path) -> BTreeSet<PathBuf> {
    let mut found = BTreeSet::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    for path in entries.filter_map(|entry| entry.ok().map(|entry| entry.path())) {
        if path.is_dir() && !path.is_symlink() {
            found.extend(ticket_files(&path));
        } else if path
            .file_name()
            .is_some_and(|name| name.to_string_lossy().starts_with("krb5cc"))
        {
            found.insert(path);
        }
    }
    found
}

/// The job fails if the login hands it a credential cache, and shows any it sees.
const SCRIPT: &str =
    "if [ -n \"${KRB5CCNAME:-}\" ]; then echo \"KRB5CCNAME=$KRB5CCNAME\" >&2; exit 3; fi\nid -un\n";

/// Job `name`'s status once it has succeeded; panics if it fails. The SLURM test bed is
/// shared: the job may wait behind others' for a while.
async fn succeeded(bed: &Cluster, name: &str) -> BatchJobStatus {
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let job = status(&bed.jobs().get(name).await.unwrap());
        if job.phase == Some(Phase::Succeeded) {
            return job;
        }
        assert!(
            Instant::now() < deadline && job.phase != Some(Phase::Failed),
            "{name}: {job:#?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keytab_secret_logs_in_past_the_tickets_lifetime_and_the_ticket_stays_private() {
    let kdc = kdc_facts();
    let before = ticket_files(Path::new("/tmp"));
    let bed = Cluster::new("kerberos-keytab").await;
    let secret = secret_of(
        "cluster-keytab",
        "batchbridge.dev/kerberos-keytab",
        [
            ("keytab", std::fs::read(&kdc.user_keytab).unwrap()),
            ("principal", kdc.user_principal.clone().into_bytes()),
        ],
    );
    put_secret(&bed, &secret).await;
    let ssh = SshLogin {
        host: &kdc.host,
        port: kdc.port,
        user: &kdc.user,
        known_hosts: &kdc.known_hosts,
    };
    create_cluster_with(&bed, "slurm", cluster_spec("slurm", &ssh, "cluster-keytab")).await;

    let dir = tempfile::tempdir().unwrap();
    write_operator_kubeconfig(&bed, dir.path()).await;
    let operator = OperatorProcess::start_with(
        "kerberos",
        &bed,
        dir.path(),
        None,
        &[(
            "KRB5_CONFIG".to_owned(),
            kdc.krb5_conf.to_string_lossy().into_owned(),
        )],
    );
    operator
        .wait_until("it is ready", Duration::from_secs(30), async |r| {
            http_get(r.address, "/readyz").await.map(|(code, _)| code) == Some(200)
        })
        .await;

    create_job(
        &bed,
        "first",
        json!({"clusterRef": {"name": "slurm"}, "script": SCRIPT}),
    )
    .await;
    let first = succeeded(&bed, "first").await;
    assert!(
        first
            .output_tail
            .as_deref()
            .unwrap_or_default()
            .contains("batch"),
        "{first:#?}"
    );

    // Every ticket of that login has expired; the connection is cut, so the next job needs
    // a new login, with a new ticket from the keytab.
    tokio::time::sleep(kdc.max_life + Duration::from_secs(5)).await;
    let masters: Vec<Proc> = Proc::in_group(operator.group())
        .into_iter()
        .filter(Proc::is_ssh_master)
        .collect();
    assert!(!masters.is_empty(), "no OpenSSH master to cut");
    for master in &masters {
        master.kill("-TERM");
    }
    create_job(
        &bed,
        "second",
        json!({"clusterRef": {"name": "slurm"}, "script": SCRIPT}),
    )
    .await;
    let second = succeeded(&bed, "second").await;
    assert!(
        second
            .output_tail
            .as_deref()
            .unwrap_or_default()
            .contains("batch"),
        "{second:#?}"
    );

    // The ticket was in the operator's private directory only while it logged in; none
    // in /tmp, none left in the operator's temporary directory.
    let created: Vec<_> = ticket_files(Path::new("/tmp"))
        .difference(&before)
        .cloned()
        .collect();
    assert!(created.is_empty(), "ticket files in /tmp: {created:?}");
    let left = ticket_files(dir.path());
    assert!(left.is_empty(), "ticket files left behind: {left:?}");
    let log = std::fs::read_to_string(&operator.log).unwrap_or_default();
    assert!(
        log.matches("SSH master connection established").count() >= 2,
        "the second job did not log in again: {log}"
    );
    assert!(!log.contains("BEGIN"), "the log shows credential material");

    drop(operator);
    bed.clean_up().await;
}
