//! From a BatchCluster and its Secret to an SSH configuration: pure, so every malformed
//! input has a table test and a message that says what to fix.

use std::time::Duration;

use batchbridge_core::shell::{
    Certificate, HostKeys, JumpHost, KerberosKeytab, Keytab, Password, SshAuth, SshConfig,
};
use k8s_openapi::api::core::v1::Secret;

use crate::crd::{BatchClusterSpec, SshJumpHost};
use crate::reason::{ClusterProblem, Reason};

/// The Secret type holding an SSH private key under [`SSH_PRIVATE_KEY`].
pub const SSH_AUTH_TYPE: &str = "kubernetes.io/ssh-auth";
/// The Secret type holding a password under [`PASSWORD`].
pub const BASIC_AUTH_TYPE: &str = "kubernetes.io/basic-auth";
/// The key of an ssh-auth Secret's private key.
pub const SSH_PRIVATE_KEY: &str = "ssh-privatekey";
/// The key of a basic-auth Secret's password.
pub const PASSWORD: &str = "password";
/// The key of an ssh-auth Secret's OpenSSH certificate of its private key, when the login
/// node trusts a user CA (optional).
pub const SSH_CERTIFICATE: &str = "ssh-certificate";
/// The Secret type holding a Kerberos keytab under [`KEYTAB`] and its principal under
/// [`PRINCIPAL`]: the login gets a ticket from it and uses GSSAPI.
pub const KEYTAB_TYPE: &str = "batchbridge.dev/kerberos-keytab";
/// The key of a keytab Secret's keytab, the bytes `kadmin ktadd` or `ktutil` write.
pub const KEYTAB: &str = "keytab";
/// The key of a keytab Secret's principal, e.g. `alice@HPC.EXAMPLE`.
pub const PRINCIPAL: &str = "principal";

/// The SSH configuration to reach `spec`'s login node with the credential in `secret`, and
/// through its jump hosts with theirs in `hop_secrets`, one per `spec.ssh.jumpHosts` in
/// order (all already read from the cluster's namespace; `None` when one does not exist).
pub fn ssh_config(
    namespace: &str,
    spec: &BatchClusterSpec,
    secret: Option<&Secret>,
    hop_secrets: &[Option<Secret>],
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
    for (index, hop) in endpoint.jump_hosts.iter().enumerate() {
        let secret = hop_secrets.get(index).and_then(Option::as_ref);
        config = config.jump_host(jump_host(namespace, index, hop, secret)?);
    }
    Ok(config)
}

/// Hop `index` of `spec.ssh.jumpHosts` with the key in `secret`.
fn jump_host(
    namespace: &str,
    index: usize,
    hop: &SshJumpHost,
    secret: Option<&Secret>,
) -> Result<JumpHost, ClusterProblem> {
    let field = format!("spec.ssh.jumpHosts[{index}]");
    if hop.known_hosts.trim().is_empty() {
        return Err(problem(
            Reason::SpecInvalid,
            format!("{field}.knownHosts is required: every hop's host key is verified"),
        ));
    }
    let name = &hop.secret_ref.name;
    let secret = secret.ok_or_else(|| {
        problem(
            Reason::SecretNotFound,
            format!("Secret {name:?} of {field} not found in namespace {namespace:?}"),
        )
    })?;
    Ok(JumpHost::new(
        &hop.host,
        &hop.user,
        auth(name, secret)?,
        HostKeys::Entries(hop.known_hosts.clone()),
    )
    .port(hop.port))
}

fn auth(name: &str, secret: &Secret) -> Result<SshAuth, ClusterProblem> {
    let malformed =
        |what: String| problem(Reason::SecretMalformed, format!("Secret {name:?}: {what}"));
    let bytes = |key: &str| -> Result<Vec<u8>, ClusterProblem> {
        secret
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
            .ok_or_else(|| malformed(format!("has no key {key:?}")))
    };
    let value = |key: &str| -> Result<String, ClusterProblem> {
        let bytes = bytes(key)?;
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
            if !has(secret, SSH_CERTIFICATE) {
                return Ok(SshAuth::Key(Password::new(key)));
            }
            let certificate = value(SSH_CERTIFICATE)?;
            // Read now, so that what is not a certificate is the Secret's fault, said so.
            Certificate::parse(&certificate)
                .map_err(|err| malformed(format!("{SSH_CERTIFICATE:?}: {}", err.message())))?;
            Ok(SshAuth::CertifiedKey {
                key: Password::new(key),
                certificate,
            })
        }
        Some(BASIC_AUTH_TYPE) => Ok(SshAuth::Password(Password::new(value(PASSWORD)?))),
        Some(KEYTAB_TYPE) => {
            let principal = value(PRINCIPAL)?.trim().to_owned();
            let keytab = bytes(KEYTAB)?;
            // MIT and Heimdal keytabs begin with the format's version, 5 then 1 or 2.
            if !matches!(keytab.as_slice(), [5, 1 | 2, ..]) {
                return Err(malformed(format!(
                    "{KEYTAB:?} does not hold a keytab (the file kadmin's ktadd or ktutil \
                     writes, base64-encoded under data)"
                )));
            }
            Ok(SshAuth::Keytab(KerberosKeytab::new(
                principal,
                Keytab::Contents(keytab),
            )))
        }
        other => Err(malformed(format!(
            "its type is {:?}; use {SSH_AUTH_TYPE} (key {SSH_PRIVATE_KEY}), {BASIC_AUTH_TYPE} \
             (key {PASSWORD}) or {KEYTAB_TYPE} (keys {KEYTAB} and {PRINCIPAL})",
            other.unwrap_or("Opaque")
        ))),
    }
}

/// The SSH certificate `secret` holds under [`SSH_CERTIFICATE`], when it holds a readable
/// one (one it cannot read makes [`ssh_config`] refuse the Secret as malformed).
pub fn certificate(secret: &Secret) -> Option<Certificate> {
    let text = secret
        .data
        .as_ref()
        .and_then(|data| data.get(SSH_CERTIFICATE))
        .and_then(|bytes| std::str::from_utf8(&bytes.0).ok())
        .or_else(|| {
            secret
                .string_data
                .as_ref()
                .and_then(|data| data.get(SSH_CERTIFICATE))
                .map(String::as_str)
        })?;
    Certificate::parse(text).ok()
}

/// Whether `secret` has `key`, in data or stringData.
fn has(secret: &Secret, key: &str) -> bool {
    secret
        .data
        .as_ref()
        .is_some_and(|data| data.contains_key(key))
        || secret
            .string_data
            .as_ref()
            .is_some_and(|data| data.contains_key(key))
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
            &[],
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
    fn a_key_secret_with_a_certificate_gives_a_certified_key_login() {
        use crate::controller::credential::tests::CERTIFICATE;
        let with = |certificate: &str| {
            secret(
                Some(SSH_AUTH_TYPE),
                &[
                    (SSH_PRIVATE_KEY, KEY.as_bytes()),
                    (SSH_CERTIFICATE, certificate.as_bytes()),
                ],
            )
        };
        let good = with(CERTIFICATE);
        let config =
            ssh_config("research", &spec(), Some(&good), &[]).unwrap_or_else(|p| panic!("{p:?}"));
        assert_eq!(
            config.auth,
            SshAuth::CertifiedKey {
                key: Password::new(format!("{KEY}\n")),
                certificate: CERTIFICATE.to_owned(),
            }
        );
        assert_eq!(
            certificate(&good).map(|c| c.key_id().to_owned()).as_deref(),
            Some("alice")
        );

        let bad = with("ssh-ed25519 AAAA not a certificate");
        let problem = ssh_config("research", &spec(), Some(&bad), &[]).unwrap_err();
        assert_eq!(problem.reason, Reason::SecretMalformed);
        assert!(
            problem
                .message
                .starts_with("Secret \"hpc-key\": \"ssh-certificate\": not an OpenSSH certificate"),
            "{}",
            problem.message
        );
        assert_eq!(certificate(&bad), None);
    }

    #[test]
    fn a_keytab_secret_gives_a_kerberos_login_and_what_is_no_keytab_is_named() {
        let keytab = b"\x05\x02\x00\x00\x00\x40";
        let config = ssh_config(
            "research",
            &spec(),
            Some(&secret(
                Some(KEYTAB_TYPE),
                &[(KEYTAB, keytab), (PRINCIPAL, b"alice@HPC.EXAMPLE\n")],
            )),
            &[],
        )
        .unwrap_or_else(|p| panic!("{p:?}"));
        assert_eq!(
            config.auth,
            SshAuth::Keytab(KerberosKeytab::new(
                "alice@HPC.EXAMPLE",
                Keytab::Contents(keytab.to_vec()),
            ))
        );
        for (data, message) in [
            (
                &[(KEYTAB, &b"alice:hunter2"[..]), (PRINCIPAL, b"alice@HPC")][..],
                "Secret \"hpc-key\": \"keytab\" does not hold a keytab",
            ),
            (
                &[(KEYTAB, &keytab[..])][..],
                "Secret \"hpc-key\": has no key \"principal\"",
            ),
        ] {
            let secret = secret(Some(KEYTAB_TYPE), data);
            let problem = ssh_config("research", &spec(), Some(&secret), &[]).unwrap_err();
            assert_eq!(problem.reason, Reason::SecretMalformed);
            assert!(problem.message.starts_with(message), "{}", problem.message);
        }
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
            &[],
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
            let problem = ssh_config("research", &spec, secret.as_ref(), &[]).expect_err(message);
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

    fn key_secret() -> Secret {
        secret(Some(SSH_AUTH_TYPE), &[(SSH_PRIVATE_KEY, KEY.as_bytes())])
    }

    /// `spec()` through two hops with the Secrets `bastion-key` and `gateway-key`.
    fn spec_with_hops() -> BatchClusterSpec {
        let mut spec = spec();
        spec.ssh.as_mut().unwrap().jump_hosts = serde_json::from_value(serde_json::json!([
            {"host": "bastion.example.org", "user": "alice",
             "secretRef": {"name": "bastion-key"},
             "knownHosts": "bastion.example.org ssh-ed25519 AAAAB"},
            {"host": "gateway.hpc.internal", "port": 2201, "user": "gw",
             "secretRef": {"name": "gateway-key"},
             "knownHosts": "[gateway.hpc.internal]:2201 ssh-ed25519 AAAAG"},
        ]))
        .unwrap_or_else(|err| panic!("{err}"));
        spec
    }

    #[test]
    fn each_jump_host_gets_its_own_key_and_known_hosts_in_order() {
        let gateway_key = KEY.replace("AAAAA", "GGGGG");
        let hop_secrets = [
            Some(key_secret()),
            Some(secret(
                Some(SSH_AUTH_TYPE),
                &[(SSH_PRIVATE_KEY, gateway_key.as_bytes())],
            )),
        ];
        let config = ssh_config(
            "research",
            &spec_with_hops(),
            Some(&key_secret()),
            &hop_secrets,
        )
        .unwrap_or_else(|p| panic!("{p:?}"));
        assert_eq!(config.target(), "alice@login.hpc.example.org:2222");
        let hops: Vec<_> = config
            .jump_hosts
            .iter()
            .map(|hop| (hop.address(), hop.user.as_str(), &hop.auth, &hop.host_keys))
            .collect();
        assert_eq!(
            hops,
            [
                (
                    "bastion.example.org:22".to_owned(),
                    "alice",
                    &SshAuth::Key(Password::new(format!("{KEY}\n"))),
                    &HostKeys::Entries("bastion.example.org ssh-ed25519 AAAAB".into()),
                ),
                (
                    "gateway.hpc.internal:2201".to_owned(),
                    "gw",
                    &SshAuth::Key(Password::new(format!("{gateway_key}\n"))),
                    &HostKeys::Entries("[gateway.hpc.internal]:2201 ssh-ed25519 AAAAG".into()),
                ),
            ]
        );
    }

    #[test]
    fn a_basic_auth_secret_gives_a_hop_a_password() {
        let password = secret(Some(BASIC_AUTH_TYPE), &[(PASSWORD, b"hunter2")]);
        let config = ssh_config(
            "research",
            &spec_with_hops(),
            Some(&key_secret()),
            &[Some(password), Some(key_secret())],
        )
        .unwrap_or_else(|p| panic!("{p:?}"));
        assert_eq!(
            config.jump_hosts[0].auth,
            SshAuth::Password(Password::new("hunter2"))
        );
    }

    #[test]
    fn jump_host_problems_name_the_hop_and_what_to_fix() {
        let opaque = secret(Some("Opaque"), &[(PASSWORD, b"hunter2")]);
        let no_hosts = {
            let mut spec = spec_with_hops();
            spec.ssh.as_mut().unwrap().jump_hosts[1].known_hosts = " ".into();
            spec
        };
        let cases: Vec<(BatchClusterSpec, Vec<Option<Secret>>, Reason, &str)> = vec![
            (
                spec_with_hops(),
                vec![Some(key_secret()), None],
                Reason::SecretNotFound,
                "Secret \"gateway-key\" of spec.ssh.jumpHosts[1] not found in namespace \"research\"",
            ),
            (
                spec_with_hops(),
                vec![Some(opaque), Some(key_secret())],
                Reason::SecretMalformed,
                "Secret \"bastion-key\": its type is \"Opaque\"",
            ),
            (
                spec_with_hops(),
                vec![Some(key_secret()), Some(secret(Some(SSH_AUTH_TYPE), &[]))],
                Reason::SecretMalformed,
                "Secret \"gateway-key\": has no key \"ssh-privatekey\"",
            ),
            (
                no_hosts,
                vec![Some(key_secret()), Some(key_secret())],
                Reason::SpecInvalid,
                "spec.ssh.jumpHosts[1].knownHosts is required",
            ),
        ];
        for (spec, hop_secrets, reason, message) in cases {
            let problem = ssh_config("research", &spec, Some(&key_secret()), &hop_secrets)
                .expect_err(message);
            assert_eq!(problem.reason, reason, "{problem:?}");
            assert!(
                problem.message.contains(message),
                "{problem:?} lacks {message:?}"
            );
            assert!(!problem.message.contains("hunter2"), "{problem:?}");
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
            ssh_config("research", &spec(), Some(&secret), &[]).unwrap_or_else(|p| panic!("{p:?}"));
        assert_eq!(config.auth, SshAuth::Password(Password::new("s3cret")));
    }
}
