//! BatchClusters reached through jump hosts (`spec.ssh.jumpHosts`), against the test bed's
//! two bastions (`tests/testbed/bastion.sh`) in front of the SLURM login, with the real
//! kube-apiserver: a BatchJob runs through both hops (hop 1 with a key Secret, hop 2 with a
//! password one) and its log pod follows it the same way; a wrong host key on the second hop
//! is a condition that names that hop.

// Helpers panic on purpose: anything unexpected is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use batchbridge_operator::crd::Phase;
use batchbridge_testbed::{BastionHop, Login, bastion_hops, login};
use common::Cluster;
use common::operator::*;
use serde_json::{Value, json};

/// The spec of a BatchCluster for the SLURM login through `hops`, each with the Secret
/// `jump-N-key` (from 1) and the known hosts in `known_hosts` (the hop's own by default).
fn cluster_through(login: &Login, hops: &[(BastionHop, std::path::PathBuf)]) -> Value {
    let jump_hosts: Vec<Value> = hops
        .iter()
        .enumerate()
        .map(|(index, (hop, known_hosts))| {
            json!({
                "host": hop.host, "port": hop.port, "user": hop.user,
                "secretRef": {"name": format!("jump-{}-key", index + 1)},
                "knownHosts": std::fs::read_to_string(known_hosts).unwrap(),
            })
        })
        .collect();
    let mut spec = cluster_spec("slurm", &SshLogin::from(login), "cluster-key");
    spec["ssh"]["jumpHosts"] = json!(jump_hosts);
    spec
}

/// The log pod of job `name` run here as its container would: its environment, and each
/// Secret where the pod mounts it (the cluster's, then each hop's beside it).
async fn log_pod_through_hops(
    bed: &Cluster,
    name: &str,
    login: &Login,
    hops: &[BastionHop],
) -> String {
    let env = log_pod_env(bed, name).await;
    let mounts = tempfile::tempdir().unwrap();
    let credentials = mounts.path().join("credentials");
    std::fs::create_dir(&credentials).unwrap();
    std::fs::copy(&login.private_key, credentials.join("ssh-privatekey")).unwrap();
    for (number, hop) in (1..).zip(hops) {
        let dir = mounts.path().join(format!("jump-host-{number}"));
        std::fs::create_dir(&dir).unwrap();
        match &hop.password {
            Some(password) => std::fs::write(dir.join("password"), password).unwrap(),
            None => {
                std::fs::copy(&hop.key, dir.join("ssh-privatekey")).unwrap();
            }
        }
    }
    fetch_output(&env, &credentials).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batchjob_runs_through_two_jump_hosts_and_a_wrong_hop_key_is_named() {
    let bed = Cluster::new("jump-hosts").await;
    let login = login("ssh");
    let hops = bastion_hops();
    create_secret(&bed, "cluster-key", &login).await;
    let hop_1_login = Login {
        private_key: hops[0].key.clone(),
        ..login.clone()
    };
    create_secret(&bed, "jump-1-key", &hop_1_login).await;
    let password = hops[1].password.clone().expect("hop 2 takes a password");
    let password = secret_of(
        "jump-2-key",
        "kubernetes.io/basic-auth",
        [("password", password.into_bytes())],
    );
    put_secret(&bed, &password).await;
    let right: Vec<_> = hops
        .iter()
        .map(|hop| (hop.clone(), hop.known_hosts.clone()))
        .collect();
    create_cluster_with(&bed, "bastioned", cluster_through(&login, &right)).await;
    let mut wrong = right.clone();
    wrong[1].1 = hops[1].wrong_known_hosts.clone();
    create_cluster_with(&bed, "impostor-hop", cluster_through(&login, &wrong)).await;
    let operator = RunningOperator::start(&bed, &bed.operator_client().await);

    create_job(
        &bed,
        "through",
        json!({
            "clusterRef": {"name": "bastioned"},
            "script": "echo \"through the bastions to $(hostname)\"\n",
            "outputPolicy": {"logPod": true},
        }),
    )
    .await;
    create_job(
        &bed,
        "careful",
        json!({"clusterRef": {"name": "impostor-hop"}, "script": "echo never\n"}),
    )
    .await;

    let through = status(&wait_for_phase(&bed, "through", Phase::Succeeded).await);
    assert_eq!((through.exit_code, through.attempts), (Some(0), 1));
    let through =
        status(&wait_for(&bed, "through", "the output", |s| s.output_tail.is_some()).await);
    assert!(
        through
            .output_tail
            .as_ref()
            .is_some_and(|tail| tail.contains("through the bastions to ")),
        "{through:?}"
    );
    let printed = log_pod_through_hops(&bed, "through-log", &login, &hops).await;
    assert!(printed.contains("through the bastions to "), "{printed}");

    // The second hop presents a key its knownHosts does not hold: nothing is submitted,
    // and the job and the cluster say which hop and how to see its key.
    let hop2 = format!("jump host 2 (127.0.0.1:{})", hops[1].port);
    let keyscan = format!("`ssh-keyscan -p {} 127.0.0.1`", hops[1].port);
    let careful = status(
        &wait_for(&bed, "careful", "a HostKeyMismatch condition", |s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == "ClusterReady" && c.reason == "HostKeyMismatch")
        })
        .await,
    );
    assert_eq!(
        (careful.phase, careful.job_id.as_deref()),
        (Some(Phase::Pending), None)
    );
    let ready = careful
        .conditions
        .iter()
        .find(|c| c.type_ == "ClusterReady")
        .unwrap();
    assert!(ready.message.contains(&hop2), "{ready:?}");
    assert!(ready.message.contains(&keyscan), "{ready:?}");
    let reachable = wait_for_unreachable(&bed, "impostor-hop").await;
    assert_eq!(reachable.reason, "HostKeyMismatch", "{reachable:?}");
    assert!(reachable.message.contains(&hop2), "{reachable:?}");
    assert!(reachable.message.contains(&keyscan), "{reachable:?}");
    eprintln!("a wrong host key on hop 2: {}", reachable.message);

    operator.stop().await;
    bed.clean_up().await;
}
