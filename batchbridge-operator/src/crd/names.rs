//! The shapes of the names and addresses a tenant writes, checked twice: by the API server
//! (the CRDs carry these patterns) and by the operator before it uses one
//! ([`BatchClusterSpec::check_names`], [`BatchJobSpec::check_names`], built from the rules
//! here), for objects stored before the CRD checked them. A name that reaches a request
//! path or a command line must be one Kubernetes or ssh cannot misread:
//! `../other-namespace/secrets/x` would be a path, `login?x=1` a query, `-oProxyCommand=…`
//! an option.
//!
//! Also the names the operator derives from a BatchJob's ([`derived_name`]): a BatchJob
//! name may have 253 characters, so `NAME-output` may not fit, and a label value (63) never
//! holds every name; the objects a job owns are labelled with its UID instead
//! ([`JOB_UID_LABEL`]).
//!
//! [`BatchClusterSpec::check_names`]: super::BatchClusterSpec::check_names
//! [`BatchJobSpec::check_names`]: super::BatchJobSpec::check_names

/// A DNS subdomain (RFC 1123), what Kubernetes requires of most object names, Secrets,
/// ConfigMaps and custom resources among them: at most 253 lowercase letters, digits, '-'
/// and '.', each dot-separated part starting and ending with a letter or digit.
pub const DNS_SUBDOMAIN: &str =
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";
/// A DNS label (RFC 1123): at most 63 lowercase letters, digits and '-', starting and
/// ending with a letter or digit.
pub const DNS_LABEL: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";
/// An SSH host: a DNS name (letters, digits and '-' in dot-separated parts of at most 63,
/// each starting and ending with a letter or digit; an IPv4 address is one) or an IPv6
/// address (hex digits, ':' and '.'), never anything ssh could read as an option.
pub const HOST: &str = r"^([A-Za-z0-9]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?([.][A-Za-z0-9]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?)*[.]?|[0-9A-Fa-f.]*:[0-9A-Fa-f:.]*)$";
/// A login name as POSIX systems (and the usual `useradd` rules) allow it: letters, digits,
/// '.', '_' and '-', not starting with '-' (ssh would read an option); at most 64.
pub const USER: &str = r"^[A-Za-z0-9_.][A-Za-z0-9_.-]*$";

/// The label on the ConfigMap and log pod a BatchJob owns: the job's UID, which always fits
/// a label value (a name may not: 253 characters against 63). Select them with
/// `-l batchbridge.dev/job-uid=$(kubectl get batchjob NAME -o jsonpath='{.metadata.uid}')`.
pub const JOB_UID_LABEL: &str = "batchbridge.dev/job-uid";

/// The longest DNS subdomain, so the longest name of most objects.
pub const MAX_NAME: usize = 253;
/// How many hex digits of the name's hash a shortened derived name carries.
const HASH_DIGITS: usize = 16;

/// Whether `name` is a DNS subdomain ([`DNS_SUBDOMAIN`], at most 253 characters).
pub fn is_dns_subdomain(name: &str) -> bool {
    name.len() <= MAX_NAME
        && name
            .split('.')
            .all(|part| is_label_shaped(part, usize::MAX))
}

/// Whether `name` is a DNS label ([`DNS_LABEL`], at most 63 characters).
pub fn is_dns_label(name: &str) -> bool {
    is_label_shaped(name, 63)
}

/// Lowercase letters, digits and '-', starting and ending with a letter or digit, at most
/// `max` long.
fn is_label_shaped(part: &str, max: usize) -> bool {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    !part.is_empty()
        && part.len() <= max
        && part.chars().all(|c| alnum(c) || c == '-')
        && part.starts_with(alnum)
        && part.ends_with(alnum)
}

/// Whether `host` is a host name or address ssh takes as one ([`HOST`], at most 253).
pub fn is_host(host: &str) -> bool {
    if host.is_empty() || host.len() > MAX_NAME {
        return false;
    }
    if host.contains(':') {
        return host
            .chars()
            .all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.');
    }
    let alnum = |c: char| c.is_ascii_alphanumeric();
    host.strip_suffix('.')
        .unwrap_or(host)
        .split('.')
        .all(|part| {
            !part.is_empty()
                && part.len() <= 63
                && part.chars().all(|c| alnum(c) || c == '-')
                && part.starts_with(alnum)
                && part.ends_with(alnum)
        })
}

/// Whether `user` is a login name ([`USER`], at most 64).
pub fn is_user(user: &str) -> bool {
    !user.is_empty()
        && user.len() <= 64
        && !user.starts_with('-')
        && user
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

/// The name of an object derived from `name` (a DNS subdomain): `NAME-SUFFIX` when that fits
/// in 253 characters, else the start of `name`, '-', 16 hex digits of a hash of the whole
/// name, and `-SUFFIX`. Two names that differ get different derived names (the hash covers
/// the part cut off), and the same name always gets the same one, across operator versions
/// (FNV-1a, not the standard library's hasher, whose output may change).
///
/// ```
/// use batchbridge_operator::crd::names::derived_name;
///
/// assert_eq!(derived_name("hello", "output"), "hello-output");
/// let long = "a".repeat(250);
/// let derived = derived_name(&long, "output");
/// assert_eq!(derived.len(), 253);
/// assert!(derived.ends_with("-output"));
/// ```
pub fn derived_name(name: &str, suffix: &str) -> String {
    let whole = format!("{name}-{suffix}");
    if whole.len() <= MAX_NAME {
        return whole;
    }
    let room = MAX_NAME - suffix.len() - HASH_DIGITS - 2;
    // The cut must leave a valid subdomain: ASCII only, and no '-' or '.' before the '-'.
    let mut end = room.min(name.len());
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    let start = name[..end].trim_end_matches(['-', '.']);
    format!(
        "{start}-{:0width$x}-{suffix}",
        fnv1a(name),
        width = HASH_DIGITS
    )
}

/// The 64-bit FNV-1a hash of `text`.
fn fnv1a(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

pub(super) const SUBDOMAIN_RULE: &str = "a name is at most 253 lowercase letters, digits, '-' and '.', \
                              each '.'-separated part starting and ending with a letter or digit";
pub(super) const LABEL_RULE: &str = "a candidate's name is at most 63 lowercase letters, digits and '-', \
                          starting and ending with a letter or digit";
pub(super) const HOST_RULE: &str =
    "a host is a DNS name or an IPv4 or IPv6 address, and never starts with '-'";
pub(super) const USER_RULE: &str =
    "a user is at most 64 letters, digits, '.', '_' and '-', and never starts with '-'";

/// The message for `value` of `field` breaking `rule`, quoting at most 64 characters of it.
pub(super) fn refused(field: &str, value: &str, rule: &str) -> String {
    let shown: String = value.chars().take(64).collect();
    let more = if shown.len() < value.len() { "…" } else { "" };
    format!(
        "{field} {shown:?}{more} is not valid: {rule}; the API server refuses it now, so the \
         object was stored before the CRD checked it: correct the field"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{BatchClusterSpec, BatchJobSpec};

    #[test]
    fn names_are_checked_as_kubernetes_checks_them() {
        // (name, DNS subdomain, DNS label)
        let long_label = "a".repeat(63);
        let too_long_label = "a".repeat(64);
        let longest = format!(
            "{}.{}.{}.{}",
            "a".repeat(63),
            "b".repeat(63),
            "c".repeat(63),
            "d".repeat(61)
        );
        let too_long = format!("{longest}x");
        let cases: &[(&str, bool, bool)] = &[
            ("login", true, true),
            ("hpc-ssh-key", true, true),
            ("a", true, true),
            ("0", true, true),
            ("key.v2", true, false),
            (&long_label, true, true),
            (&too_long_label, true, false),
            (&longest, true, false),
            (&too_long, false, false),
            ("", false, false),
            ("../../acc-t2/secrets/t2-secret", false, false),
            ("login?x=1#frag", false, false),
            ("login/x", false, false),
            ("Login", false, false),
            ("-login", false, false),
            ("login-", false, false),
            ("a..b", false, false),
            (".a", false, false),
            ("a.", false, false),
            ("a.-b", false, false),
            ("a_b", false, false),
            ("lögin", false, false),
            ("a b", false, false),
            ("a\n", false, false),
            ("%2e%2e", false, false),
        ];
        for &(name, subdomain, label) in cases {
            assert_eq!(
                (is_dns_subdomain(name), is_dns_label(name)),
                (subdomain, label),
                "{name:?}"
            );
        }
    }

    #[test]
    fn hosts_and_users_never_look_like_options() {
        let hosts: &[(&str, bool)] = &[
            ("login.hpc.example.org", true),
            ("Login-1.Example.ORG", true),
            ("localhost", true),
            ("127.0.0.1", true),
            ("login.example.org.", true),
            ("::1", true),
            ("fe80::1", true),
            ("2001:db8::192.0.2.1", true),
            ("", false),
            ("-oProxyCommand=touch x", false),
            ("-p", false),
            ("login -oX", false),
            ("user@login", false),
            ("[::1]", false),
            ("login;id", false),
            ("a..b", false),
            ("-login.example.org", false),
            ("login-.example.org", false),
            ("fe80::1%eth0", false),
            ("løgin", false),
        ];
        for &(host, valid) in hosts {
            assert_eq!(is_host(host), valid, "host {host:?}");
        }
        assert!(!is_host(&"a".repeat(64)));
        assert!(!is_host(&format!("{}x", "a.".repeat(127))));
        let users: &[(&str, bool)] = &[
            ("alice", true),
            ("svc_batch.01", true),
            ("Alice-2", true),
            ("_apt", true),
            ("", false),
            ("-oProxyCommand=x", false),
            ("-l", false),
            ("alice bob", false),
            ("alice@example.org", false),
            ("root;id", false),
            ("ålice", false),
        ];
        for &(user, valid) in users {
            assert_eq!(is_user(user), valid, "user {user:?}");
        }
        assert!(is_user(&"u".repeat(64)));
        assert!(!is_user(&"u".repeat(65)));
    }

    #[test]
    fn derived_names_fit_for_every_name() {
        let at = |n: usize, c: char| c.to_string().repeat(n);
        // (name, suffix, derived name's length, keeps NAME-SUFFIX whole)
        let cases: Vec<(String, &str, usize, bool)> = vec![
            ("hello".into(), "output", 12, true),
            ("hello".into(), "log", 9, true),
            (at(246, 'a'), "output", 253, true),
            (at(247, 'a'), "output", 253, false),
            (at(249, 'a'), "log", 253, true),
            (at(250, 'a'), "log", 253, false),
            (at(253, 'a'), "output", 253, false),
            (at(253, 'a'), "log", 253, false),
            // Cut where a '-' or '.' would end the kept part: it is trimmed, the name shorter.
            (
                format!("{}-{}", at(228, 'a'), at(24, 'b')),
                "output",
                252,
                false,
            ),
            (
                format!("{}.{}", at(228, 'a'), at(24, 'b')),
                "output",
                252,
                false,
            ),
            (
                format!("{}--{}", at(227, 'a'), at(24, 'b')),
                "output",
                251,
                false,
            ),
        ];
        for (name, suffix, length, whole) in &cases {
            assert!(is_dns_subdomain(name), "{name}");
            let derived = derived_name(name, suffix);
            assert!(is_dns_subdomain(&derived), "{derived}");
            assert_eq!(derived.len(), *length, "{derived}");
            assert_eq!(derived == format!("{name}-{suffix}"), *whole, "{derived}");
            assert!(derived.ends_with(&format!("-{suffix}")));
            assert_eq!(
                derived,
                derived_name(name, suffix),
                "the same name, the same result"
            );
        }
        // Names that share their first 229 characters still get different derived names.
        let (a, b) = (format!("{}x", at(252, 'a')), format!("{}y", at(252, 'a')));
        assert_ne!(derived_name(&a, "output"), derived_name(&b, "output"));
        assert_eq!(
            derived_name(&at(253, 'a'), "output"),
            format!("{}-{:016x}-output", at(229, 'a'), fnv1a(&at(253, 'a')))
        );
        // FNV-1a's published test vectors: the hash is stable across versions.
        assert_eq!(fnv1a(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a("a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a("foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn refusals_name_the_field_and_the_rule_and_quote_little() {
        let cluster: BatchClusterSpec = serde_json::from_value(serde_json::json!({
            "scheduler": "slurm",
            "ssh": {"host": "login", "user": "alice"},
            "secretRef": {"name": "../../acc-t2/secrets/t2-secret"},
            "knownHosts": "login ssh-ed25519 AAAA",
        }))
        .unwrap_or_else(|err| panic!("{err}"));
        let message = cluster.check_names().err().unwrap_or_default();
        assert!(
            message.starts_with(
                "spec.secretRef.name \"../../acc-t2/secrets/t2-secret\" is not valid: a name is"
            ),
            "{message}"
        );
        let with = |field: &str, value: &str| {
            let mut spec = cluster.clone();
            spec.secret_ref = None;
            let ssh = spec.ssh.as_mut().map(|ssh| match field {
                "host" => &mut ssh.host,
                _ => &mut ssh.user,
            });
            if let Some(slot) = ssh {
                *slot = value.to_owned();
            }
            spec.check_names()
        };
        assert_eq!(with("host", "login"), Ok(()));
        assert!(with("host", "-oProxyCommand=x").is_err_and(|m| m.starts_with("spec.ssh.host")));
        assert!(with("user", "-l").is_err_and(|m| m.starts_with("spec.ssh.user")));
        let long = with("host", &"-".repeat(1000)).err().unwrap_or_default();
        assert!(long.len() < 400, "{long}");

        let job: BatchJobSpec = serde_json::from_value(serde_json::json!({
            "clusterRef": {"name": "login?x=1#frag"},
            "script": "true",
        }))
        .unwrap_or_else(|err| panic!("{err}"));
        assert!(
            job.check_names()
                .is_err_and(|m| m.starts_with("spec.clusterRef.name \"login?x=1#frag\""))
        );
        let placed: BatchJobSpec = serde_json::from_value(serde_json::json!({
            "placement": {"clusters": ["campus", "a.b"]},
            "script": "true",
        }))
        .unwrap_or_else(|err| panic!("{err}"));
        assert!(
            placed
                .check_names()
                .is_err_and(|m| m.starts_with("spec.placement.clusters \"a.b\""))
        );
    }
    #[test]
    fn jump_hosts_are_checked_like_the_login_node() {
        let with_hop = |host: &str, user: &str, secret: &str| {
            let spec: BatchClusterSpec = serde_json::from_value(serde_json::json!({
                "scheduler": "slurm",
                "ssh": {"host": "login", "user": "alice", "jumpHosts": [
                    {"host": "bastion", "user": "alice", "secretRef": {"name": "ok"},
                     "knownHosts": "bastion ssh-ed25519 AAAA"},
                    {"host": host, "user": user, "secretRef": {"name": secret},
                     "knownHosts": "x ssh-ed25519 AAAA"},
                ]},
                "secretRef": {"name": "login-key"},
                "knownHosts": "login ssh-ed25519 AAAA",
            }))
            .unwrap_or_else(|err| panic!("{err}"));
            spec.check_names()
        };
        assert_eq!(with_hop("gw.example.org", "bob", "gw-key"), Ok(()));
        let refused = [
            (
                with_hop("-oProxyCommand=x", "bob", "gw-key"),
                "spec.ssh.jumpHosts[1].host",
            ),
            (with_hop("gw", "-l", "gw-key"), "spec.ssh.jumpHosts[1].user"),
            (
                with_hop("gw", "bob", "../other/secrets/x"),
                "spec.ssh.jumpHosts[1].secretRef.name",
            ),
        ];
        for (result, field) in refused {
            assert!(
                result.as_ref().is_err_and(|m| m.starts_with(field)),
                "{field}: {result:?}"
            );
        }
    }
}
