//! A BatchCluster that logs in with an OpenSSH certificate (issue 29, point 3), against the
//! test bed's real kube-apiserver and its certificate login (`tests/testbed/ca.sh`: an sshd
//! on 127.0.0.1:2233 that accepts only certificates the test user CA signed, on the SLURM
//! login node). The operator runs in this process with a CredentialExpiring window of 40 s.

// Helpers panic on purpose: anything unexpected is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use batchbridge_core::shell::Certificate;
use batchbridge_operator::Operator;
use batchbridge_operator::crd::Phase;
use batchbridge_operator::reason::{ConditionType, Reason};
use batchbridge_operator::status::condition;
use batchbridge_testbed::ca_facts;
use common::Cluster;
use common::operator::{
    RunningOperator, SshLogin, cluster_spec, create_cluster_with, create_job, events_with,
    http_get, metric, put_secret, secret_of, status,
};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};
use serde_json::json;

/// The operator's CredentialExpiring window in these tests.
const WARNING: Duration = Duration::from_secs(40);
/// How many jobs run across the expiry and the rotation.
const JOBS: usize = 20;

/// A namespace with the certificate Secret and a SLURM BatchCluster `slurm` logging in to
/// the certificate login with it, and an operator (CredentialExpiring 40 s before the
/// expiry) serving its metrics on the returned address.
async fn set_up(test: &str, certificate: &str) -> (Cluster, RunningOperator, SocketAddr) {
    let bed = Cluster::new(test).await;
    let ca = ca_facts();
    let secret = secret_of(
        "cluster-certificate",
        "kubernetes.io/ssh-auth",
        [
            ("ssh-privatekey", std::fs::read(&ca.user_key).unwrap()),
            ("ssh-certificate", certificate.as_bytes().to_vec()),
        ],
    );
    put_secret(&bed, &secret).await;
    let ssh = SshLogin {
        host: &ca.host,
        port: ca.port,
        user: &ca.user,
        known_hosts: &ca.known_hosts,
    };
    let spec = cluster_spec("slurm", &ssh, "cluster-certificate");
    create_cluster_with(&bed, "slurm", spec).await;

    let client = bed.operator_client().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let operator = Operator::new(client.clone())
        .namespace(bed.namespace.clone())
        .image("batchbridge-operator:test")
        .credential_expiry_warning(WARNING)
        .endpoints(listener);
    let task = tokio::spawn(operator.run(async move {
        let _ = stopped.await;
    }));
    (bed, RunningOperator { client, stop, task }, address)
}

/// The BatchCluster's condition `type_` as (status, reason, message), once `check` holds
/// for it; panics after `patience`.
async fn cluster_condition(
    bed: &Cluster,
    type_: ConditionType,
    patience: Duration,
    check: impl Fn(&str, &str, &str) -> bool,
) -> (String, String, String) {
    let deadline = Instant::now() + patience;
    loop {
        let cluster = bed.clusters().get("slurm").await.unwrap();
        let status = cluster.status.unwrap_or_default();
        if let Some(c) = condition(&status.conditions, type_)
            && check(&c.status, &c.reason, &c.message)
        {
            return (c.status.clone(), c.reason.clone(), c.message.clone());
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for the BatchCluster's {type_}; status: {:#?}",
            status.conditions
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The expiry the operator's metrics show for the BatchCluster, in seconds since the epoch.
async fn expiry_metric(bed: &Cluster, address: SocketAddr) -> Option<f64> {
    let (_, text) = http_get(address, "/metrics").await?;
    metric(
        &text,
        &format!(
            "batchbridge_credential_expiry_timestamp_seconds{{batchjob_namespace=\"{}\",batchcluster=\"slurm\"}}",
            bed.namespace
        ),
    )
}

fn epoch_seconds(at: SystemTime) -> f64 {
    at.duration_since(UNIX_EPOCH).unwrap().as_secs() as f64
}

/// The issue's scenario: a 1-minute certificate expires while 20 jobs run, and the test
/// rotates the Secret to a fresh 1-day one as an outside issuer would. No job fails; the
/// condition says CredentialExpiring before the expiry, CredentialExpired after it, and
/// True after the rotation; the metric follows the certificate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_expiring_under_running_jobs_is_rotated_and_no_job_fails() {
    let ca = ca_facts();
    let short = ca.issue("+1m");
    let expiry = Certificate::parse(&short).unwrap().valid_before().unwrap();
    let (bed, operator, address) = set_up("certificate-rotation", &short).await;
    for n in 0..JOBS {
        create_job(
            &bed,
            &format!("job-{n:02}"),
            json!({"clusterRef": {"name": "slurm"}, "script": "sleep 40\necho done\n"}),
        )
        .await;
    }

    let (_, reason, message) = cluster_condition(
        &bed,
        ConditionType::CredentialValid,
        Duration::from_secs(60),
        |_, reason, _| reason != Reason::CredentialValid.as_str(),
    )
    .await;
    assert_eq!(reason, Reason::CredentialExpiring.as_str(), "{message}");
    assert!(
        SystemTime::now() < expiry,
        "CredentialExpiring came only after the expiry"
    );
    let expiry_text = humantime::format_rfc3339_seconds(expiry).to_string();
    assert!(message.contains(&expiry_text), "{message}");
    let credential = bed
        .clusters()
        .get("slurm")
        .await
        .unwrap()
        .status
        .unwrap()
        .credential
        .unwrap();
    assert_eq!(
        credential.expires_at.map(|t| t.0.as_second()),
        Some(epoch_seconds(expiry) as i64)
    );
    assert_eq!(
        expiry_metric(&bed, address).await,
        Some(epoch_seconds(expiry))
    );

    // The certificate expires while jobs run on the connection it opened.
    let (_, _, message) = cluster_condition(
        &bed,
        ConditionType::CredentialValid,
        expiry.duration_since(SystemTime::now()).unwrap_or_default() + Duration::from_secs(30),
        |_, reason, _| reason == Reason::CredentialExpired.as_str(),
    )
    .await;
    assert!(message.contains(&expiry_text), "{message}");
    let mut running = 0;
    for n in 0..JOBS {
        let job = status(&bed.jobs().get(&format!("job-{n:02}")).await.unwrap());
        assert_ne!(job.phase, Some(Phase::Failed), "job-{n:02}: {job:#?}");
        running += usize::from(job.phase != Some(Phase::Succeeded));
    }
    assert!(
        running > 0,
        "every job had ended before the certificate expired"
    );

    // The outside issuer's rotation: a fresh certificate in the same Secret.
    let fresh = ca.issue("+1d");
    let fresh_expiry = Certificate::parse(&fresh).unwrap().valid_before().unwrap();
    let secrets = Api::<Secret>::namespaced(bed.client.clone(), &bed.namespace);
    let mut secret = secrets.get("cluster-certificate").await.unwrap();
    secret
        .data
        .as_mut()
        .unwrap()
        .insert("ssh-certificate".into(), ByteString(fresh.into_bytes()));
    secrets
        .replace("cluster-certificate", &PostParams::default(), &secret)
        .await
        .unwrap();
    let (_, reason, message) = cluster_condition(
        &bed,
        ConditionType::CredentialValid,
        Duration::from_secs(90),
        |status, _, _| status == "True",
    )
    .await;
    assert_eq!(reason, Reason::CredentialValid.as_str(), "{message}");
    assert_eq!(
        expiry_metric(&bed, address).await,
        Some(epoch_seconds(fresh_expiry))
    );

    let deadline = Instant::now() + Duration::from_secs(240);
    for n in 0..JOBS {
        let name = format!("job-{n:02}");
        loop {
            let job = status(&bed.jobs().get(&name).await.unwrap());
            assert_ne!(job.phase, Some(Phase::Failed), "{name}: {job:#?}");
            if job.phase == Some(Phase::Succeeded) {
                assert_eq!(job.attempts, 1, "{name}");
                break;
            }
            assert!(Instant::now() < deadline, "{name} did not finish: {job:#?}");
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    let reasons: Vec<String> = events_with(
        &bed,
        "slurm",
        &["CredentialExpiring", "CredentialExpired", "CredentialValid"],
    )
    .await
    .into_iter()
    .map(|(r, _)| r)
    .collect();
    for reason in [
        Reason::CredentialExpiring,
        Reason::CredentialExpired,
        Reason::CredentialValid,
    ] {
        assert!(
            reasons.iter().any(|r| r == reason.as_str()),
            "no {reason} Event in {reasons:?}"
        );
    }
    operator.stop().await;
    bed.clean_up().await;
}

/// An expired certificate is not even offered: the BatchCluster and the jobs say so with
/// its expiry time, and the jobs wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_certificate_is_refused_with_its_expiry_time() {
    let ca = ca_facts();
    let expired = std::fs::read_to_string(&ca.expired_certificate).unwrap();
    let expiry = Certificate::parse(&expired).unwrap().expires_at_text();
    let (bed, operator, address) = set_up("certificate-expired", &expired).await;
    create_job(
        &bed,
        "waits",
        json!({"clusterRef": {"name": "slurm"}, "script": "echo never\n"}),
    )
    .await;

    let (status_, _, message) = cluster_condition(
        &bed,
        ConditionType::CredentialValid,
        Duration::from_secs(60),
        |_, reason, _| reason == Reason::CredentialExpired.as_str(),
    )
    .await;
    assert_eq!(status_, "False");
    assert!(
        message.contains(&format!("expired at {expiry}")),
        "{message}"
    );
    let (_, _, message) = cluster_condition(
        &bed,
        ConditionType::Reachable,
        Duration::from_secs(60),
        |_, reason, _| reason == Reason::CredentialExpired.as_str(),
    )
    .await;
    assert!(
        message.contains(&format!("expired at {expiry}")),
        "{message}"
    );
    assert!(expiry_metric(&bed, address).await.is_some());

    let job = common::operator::wait_for(&bed, "waits", "ClusterReady=False", |s| {
        condition(&s.conditions, ConditionType::ClusterReady)
            .is_some_and(|c| c.reason == Reason::CredentialExpired.as_str())
    })
    .await;
    let job = status(&job);
    assert_eq!(job.phase, Some(Phase::Pending), "{job:#?}");
    let ready = condition(&job.conditions, ConditionType::ClusterReady).unwrap();
    assert!(
        ready.message.contains(&format!("expired at {expiry}")),
        "{}",
        ready.message
    );
    operator.stop().await;
    bed.clean_up().await;
}
