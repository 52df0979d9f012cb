//! From a BatchCluster and its Secret to an SSH configuration: pure, so every malformed
//! input has a table test and a message that says what to fix.

use std::time::Duration;

use batchbridge_core::shell::{HostKeys, Password, SshAuth, SshConfig};
use k8s_openapi::api::core::v1::Secret;

use crate::crd::BatchClusterSpec;
use crate::reason::{ClusterProblem, Reason};

/// The Secret type holding an SSH private key under [`SSH_PRIVATE_KEY`].
pub const SSH_AUTH_TYPE: &str = "kubernetes.io/ssh-auth";
/// The Secret type holding a password under [`PASSWORD`].
pub const BASIC_AUTH_TYPE: &str = "kubernetes.io/basic-auth";
/// The key of an ssh-auth Secret's private key.
pub const SSH_PRIVATE_KEY: &str = "ssh-privatekey";
/// The key of a basic-auth Secret's password.
pub const PASSWORD: &str = "password";

/// The SSH configuration to reach `spec`'s login node with the credential in `secret`
/// (already read from the cluster's namespace; `None` when it does not exist).
pub fn ssh_config(
    namespace: &str,
    spec: &BatchClusterSpec,
    secret: Option<&Secret>,
) -> Result<SshConfig, ClusterProblem> {
    let endpoint = spec.ssh.as_ref().ok_or_else(|| {
        problem(
            Reason::SpecInvalid,
            format!("spec.ssh is required for a {} cluster", spec.scheduler),
        )
    })?;
    let secret_name = spec
        .secret_ref
        .as_ref()
        .map(|r| r.name.as_str())
        .ok_or_else(|| {
            problem(
                Reason::SpecInvalid,
                "spec.secretRef is required with spec.ssh",
            )
        })?;
    let known_hosts = spec
        .known_hosts
        .as_deref()
        .filter(|hosts| !hosts.trim().is_empty())
        .ok_or_else(|| {
            problem(
                Reason::SpecInvalid,
                "spec.knownHosts is required with spec.ssh",
            )
        })?;
    let secret = secret.ok_or_else(|| {
        problem(
            Reason::SecretNotFound,
            format!("Secret {secret_name:?} not found in namespace {namespace:?}"),
        )
    })?;
    let auth = auth(secret_name, secret)?;
    let mut config = SshConfig::new(
        &endpoint.host,
        &endpoint.user,
        auth,
        HostKeys::Entries(known_hosts.to_owned()),
    )
    .port(endpoint.port);
    config.connect_timeout = Duration::from_secs(10);
    Ok(config)
}

fn auth(name: &str, secret: &Secret) -> Result<SshAuth, ClusterProblem> {
    let malformed =
        |what: String| problem(Reason::SecretMalformed, format!("Secret {name:?}: {what}"));
    let value = |key: &str| -> Result<String, ClusterProblem> {
        let bytes = secret
            .data
            .as_ref()
            .and_then(|data| data.get(key))
            .map(|bytes| bytes.0.clone())
            .or_else(|| {
                secret
                    .string_data
                    .as_ref()
                    .and_then(|data| data.get(key))
                    .map(|text| text.clone().into_bytes())
            })
            .ok_or_else(|| malformed(format!("has no key {key:?}")))?;
        let text = String::from_utf8(bytes)
            .map_err(|_| malformed(format!("the value of {key:?} is not UTF-8 text")))?;
        if text.trim().is_empty() {
            return Err(malformed(format!("the value of {key:?} is empty")));
        }
        Ok(text)
    };
    match secret.type_.as_deref() {
        Some(SSH_AUTH_TYPE) => {
            let key = value(SSH_PRIVATE_KEY)?;
            if !key.contains("PRIVATE KEY-----") {
                return Err(malformed(format!(
                    "{SSH_PRIVATE_KEY:?} does not hold a private key in OpenSSH or PEM form"
                )));
            }
            // OpenSSH refuses a key file without its final newline.
            let key = if key.ends_with('\n') { key } else { key + "\n" };
            Ok(SshAuth::Key(Password::new(key)))
        }
        Some(BASIC_AUTH_TYPE) => Ok(SshAuth::Password(Password::new(value(PASSWORD)?))),
        other => Err(malformed(format!(
            "its type is {:?}; use {SSH_AUTH_TYPE} (key {SSH_PRIVATE_KEY}) or {BASIC_AUTH_TYPE} \
             (key {PASSWORD})",
            other.unwrap_or("Opaque")
        ))),
    }
}

fn problem(reason: Reason, message: impl Into<String>) -> ClusterProblem {
    ClusterProblem {
        reason,
        message: message.into(),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::ByteString;

    use super::*;

    const KEY: &str = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----";

    fn spec() -> BatchClusterSpec {
        serde_json::from_value(serde_json::json!({
            "scheduler": "slurm",
            "ssh": {"host": "login.hpc.example.org", "port": 2222, "user": "alice"},
            "secretRef": {"name": "hpc-key"},
            "knownHosts": "[login.hpc.example.org]:2222 ssh-ed25519 AAAAC3Nza",
        }))
        .unwrap_or_else(|err| panic!("{err}"))
    }

    fn secret(type_: Option<&str>, data: &[(&str, &[u8])]) -> Secret {
        Secret {
            type_: type_.map(str::to_owned),
            data: Some(
                data.iter()
                    .map(|(k, v)| ((*k).to_owned(), ByteString(v.to_vec())))
                    .collect::<BTreeMap<_, _>>(),
            ),
            ..Secret::default()
        }
    }

    #[test]
    fn a_key_secret_gives_a_key_login_with_the_cluster_host_keys() {
        let config = ssh_config(
            "research",
            &spec(),
            Some(&secret(
                Some(SSH_AUTH_TYPE),
                &[(SSH_PRIVATE_KEY, KEY.as_bytes())],
            )),
        )
        .unwrap_or_else(|p| panic!("{p:?}"));
        assert_eq!(config.target(), "alice@login.hpc.example.org:2222");
        assert_eq!(config.auth, SshAuth::Key(Password::new(format!("{KEY}\n"))));
        assert_eq!(
            config.host_keys,
            HostKeys::Entries("[login.hpc.example.org]:2222 ssh-ed25519 AAAAC3Nza".into())
        );
        assert!(
            !config.accept_new_host_keys,
            "host keys are always verified"
        );
    }

    #[test]
    fn a_basic_auth_secret_gives_a_password_login() {
        let config = ssh_config(
            "research",
            &spec(),
            Some(&secret(
                Some(BASIC_AUTH_TYPE),
                &[("username", b"ignored"), (PASSWORD, b"hunter2")],
            )),
        )
        .unwrap_or_else(|p| panic!("{p:?}"));
        assert_eq!(config.auth, SshAuth::Password(Password::new("hunter2")));
        assert_eq!(config.user, "alice", "the login is spec.ssh.user");
    }

    #[test]
    fn problems_name_what_to_fix() {
        let no_ssh = {
            let mut spec = spec();
            spec.ssh = None;
            spec
        };
        let no_hosts = {
            let mut spec = spec();
            spec.known_hosts = Some("  ".into());
            spec
        };
        let key = |data: &[(&str, &[u8])]| Some(secret(Some(SSH_AUTH_TYPE), data));
        let cases: Vec<(BatchClusterSpec, Option<Secret>, Reason, &str)> = vec![
            (
                spec(),
                None,
                Reason::SecretNotFound,
                "Secret \"hpc-key\" not found in namespace \"research\"",
            ),
            (
                no_ssh,
                key(&[(SSH_PRIVATE_KEY, KEY.as_bytes())]),
                Reason::SpecInvalid,
                "spec.ssh is required for a slurm cluster",
            ),
            (
                no_hosts,
                key(&[(SSH_PRIVATE_KEY, KEY.as_bytes())]),
                Reason::SpecInvalid,
                "spec.knownHosts is required",
            ),
            (
                spec(),
                key(&[]),
                Reason::SecretMalformed,
                "has no key \"ssh-privatekey\"",
            ),
            (
                spec(),
                key(&[(SSH_PRIVATE_KEY, b"")]),
                Reason::SecretMalformed,
                "is empty",
            ),
            (
                spec(),
                key(&[(SSH_PRIVATE_KEY, b"\xff\xfe")]),
                Reason::SecretMalformed,
                "is not UTF-8",
            ),
            (
                spec(),
                key(&[(SSH_PRIVATE_KEY, b"ssh-ed25519 AAAA public key by mistake")]),
                Reason::SecretMalformed,
                "does not hold a private key",
            ),
            (
                spec(),
                Some(secret(Some(BASIC_AUTH_TYPE), &[("username", b"alice")])),
                Reason::SecretMalformed,
                "has no key \"password\"",
            ),
            (
                spec(),
                Some(secret(Some("Opaque"), &[(SSH_PRIVATE_KEY, KEY.as_bytes())])),
                Reason::SecretMalformed,
                "its type is \"Opaque\"; use kubernetes.io/ssh-auth",
            ),
            (
                spec(),
                Some(secret(None, &[])),
                Reason::SecretMalformed,
                "its type is \"Opaque\"",
            ),
        ];
        for (spec, secret, reason, message) in cases {
            let problem = ssh_config("research", &spec, secret.as_ref()).expect_err(message);
            assert_eq!(problem.reason, reason, "{problem:?}");
            assert!(
                problem.message.contains(message),
                "{problem:?} lacks {message:?}"
            );
            assert!(
                !problem.message.contains("b3BlbnNzaC1rZXkt"),
                "no key material in {problem:?}"
            );
        }
    }

    #[test]
    fn string_data_counts_too() {
        let secret = Secret {
            type_: Some(BASIC_AUTH_TYPE.into()),
            string_data: Some(BTreeMap::from([(PASSWORD.to_owned(), "s3cret".to_owned())])),
            ..Secret::default()
        };
        let config =
            ssh_config("research", &spec(), Some(&secret)).unwrap_or_else(|p| panic!("{p:?}"));
        assert_eq!(config.auth, SshAuth::Password(Password::new("s3cret")));
    }
}
