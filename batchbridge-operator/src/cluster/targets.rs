//! Which login nodes BatchClusters may make the operator connect to: the administrator's
//! allowlist of hosts, networks and ports.
//!
//! A BatchCluster's `ssh.host` and `ssh.port` are a tenant's words, and the operator
//! connects from inside the Kubernetes cluster: without a list, a tenant can point it at
//! the API server, etcd, a metadata service or any internal address, and read what the
//! connection attempt found in the `Reachable` condition. With a list, a target not on it is
//! refused before any connection is made, with a message that tells nothing about the
//! target, so nothing about the network leaks.
//!
//! ```
//! use batchbridge_operator::cluster::targets::SshTargets;
//!
//! let targets: SshTargets = "login.hpc.example.org, *.lab.example.org:22, 10.20.0.0/16:22-2222"
//!     .parse()
//!     .unwrap();
//! assert!(targets.allows("login.hpc.example.org", 2222));
//! assert!(targets.allows("Node1.Lab.Example.org", 22));
//! assert!(!targets.allows("lab.example.org", 22));
//! assert!(targets.allows("10.20.3.4", 2222));
//! assert!(!targets.allows("10.20.3.4", 6443));
//! assert!(!targets.allows("kubernetes.default.svc", 443));
//! assert!(SshTargets::any().allows("anything", 1));
//! ```

use std::fmt;
use std::net::IpAddr;
use std::ops::RangeInclusive;
use std::str::FromStr;

use ipnet::IpNet;

/// The login nodes the operator may connect to; [`SshTargets::any`] allows every one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SshTargets {
    /// Empty: every target is allowed.
    rules: Vec<Rule>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Rule {
    host: HostPattern,
    ports: RangeInclusive<u16>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum HostPattern {
    /// This name, in any case.
    Name(String),
    /// Any name under this domain, kept with its leading dot (`*.example.org`:
    /// `a.example.org`, not `example.org`).
    Under(String),
    /// An address literal in this network. A name is never resolved to match one: the
    /// address ssh connects to could differ from the one checked (DNS can answer anew).
    Network(IpNet),
}

/// Why an allowlist could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("allowed SSH target {entry:?}: {problem}")]
pub struct TargetsError {
    entry: String,
    problem: &'static str,
}

impl SshTargets {
    /// Every target allowed: the default, for a single-tenant installation.
    pub fn any() -> Self {
        Self::default()
    }

    /// Whether the list allows every target.
    pub fn allows_any(&self) -> bool {
        self.rules.is_empty()
    }

    /// Whether a BatchCluster may connect to `host` (a name or an address literal, IPv6
    /// with or without brackets) on `port`.
    pub fn allows(&self, host: &str, port: u16) -> bool {
        if self.rules.is_empty() {
            return true;
        }
        let bare = host.strip_prefix('[').and_then(|h| h.strip_suffix(']'));
        let address = bare
            .unwrap_or(host)
            .parse::<IpAddr>()
            .ok()
            .map(|ip| ip.to_canonical());
        let name = host.trim_end_matches('.').to_ascii_lowercase();
        self.rules.iter().any(|rule| {
            rule.ports.contains(&port)
                && match (&rule.host, address) {
                    (HostPattern::Network(net), Some(ip)) => net.contains(&ip),
                    (HostPattern::Network(_), None) => false,
                    (HostPattern::Name(allowed), _) => name == *allowed,
                    (HostPattern::Under(domain), _) => name
                        .strip_suffix(domain.as_str())
                        .is_some_and(|subdomain| !subdomain.is_empty()),
                }
        })
    }
}

impl FromStr for SshTargets {
    type Err = TargetsError;

    /// Reads a comma-separated list of `HOST[:PORTS]`: HOST a name, `*.DOMAIN`, an address
    /// or a network (`10.0.0.0/8`; IPv6 in brackets when ports follow: `[fd00::/8]:22`);
    /// PORTS one port or a range `22-2222`, every port when absent. Blank: every target.
    fn from_str(list: &str) -> Result<Self, Self::Err> {
        let rules = list
            .split(',')
            .map(str::trim)
            .filter(|entry| !entry.is_empty())
            .map(|entry| {
                parse_rule(entry).map_err(|problem| TargetsError {
                    entry: entry.to_owned(),
                    problem,
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(Self { rules })
    }
}

impl fmt::Display for SshTargets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.rules.is_empty() {
            return f.write_str("any");
        }
        for (i, rule) in self.rules.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            match &rule.host {
                HostPattern::Name(name) => write!(f, "{name}")?,
                HostPattern::Under(domain) => write!(f, "*{domain}")?,
                HostPattern::Network(net) => write!(f, "[{net}]")?,
            }
            match (*rule.ports.start(), *rule.ports.end()) {
                (0, u16::MAX) => {}
                (start, end) if start == end => write!(f, ":{start}")?,
                (start, end) => write!(f, ":{start}-{end}")?,
            }
        }
        Ok(())
    }
}

fn parse_rule(entry: &str) -> Result<Rule, &'static str> {
    let (host, ports) = match entry.strip_prefix('[') {
        Some(rest) => {
            let (host, after) = rest.split_once(']').ok_or("a '[' without its ']'")?;
            match after {
                "" => (host, None),
                _ => (
                    host,
                    Some(after.strip_prefix(':').ok_or("expected ':' after ']'")?),
                ),
            }
        }
        // More than one ':' is an IPv6 address or network without ports.
        None if entry.matches(':').count() > 1 => (entry, None),
        None => match entry.split_once(':') {
            Some((host, ports)) => (host, Some(ports)),
            None => (entry, None),
        },
    };
    let ports = match ports {
        None => 0..=u16::MAX,
        Some(ports) => {
            let port = |p: &str| p.trim().parse::<u16>().map_err(|_| "a port is 0 to 65535");
            let (start, end) = match ports.split_once('-') {
                Some((start, end)) => (port(start)?, port(end)?),
                None => (port(ports)?, port(ports)?),
            };
            if start > end {
                return Err("a port range goes from low to high");
            }
            start..=end
        }
    };
    let host = host.trim().trim_end_matches('.').to_ascii_lowercase();
    let pattern = if let Ok(net) = host.parse::<IpNet>() {
        HostPattern::Network(net.trunc())
    } else if let Ok(ip) = host.parse::<IpAddr>() {
        HostPattern::Network(IpNet::from(ip.to_canonical()))
    } else if let Some(domain) = host.strip_prefix('*') {
        if !domain.starts_with('.') || !is_host_name(&domain[1..]) {
            return Err("a wildcard is '*.' followed by a domain name");
        }
        HostPattern::Under(domain.to_owned())
    } else if is_host_name(&host) {
        HostPattern::Name(host)
    } else {
        return Err("not a host name, address or network");
    };
    Ok(Rule {
        host: pattern,
        ports,
    })
}

/// Letters, digits, '-' and '.', in labels of 1 to 63 characters not starting or ending
/// with '-'.
fn is_host_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_list_allows() {
        let list = "login.hpc.example.org, *.lab.example.org:22, 10.20.0.0/16:22-2222, \
                    [fd00::/8]:22, 192.0.2.7:2222, 2001:db8::1";
        let targets: SshTargets = list.parse().unwrap();
        #[rustfmt::skip]
        let table: &[(&str, u16, bool)] = &[
            ("login.hpc.example.org", 22, true),
            ("login.hpc.example.org", 2222, true),
            ("LOGIN.hpc.example.org.", 22, true),
            ("login2.hpc.example.org", 22, false),
            ("evil-login.hpc.example.org.attacker.net", 22, false),
            ("a.lab.example.org", 22, true),
            ("a.b.lab.example.org", 22, true),
            ("a.lab.example.org", 2222, false),
            ("lab.example.org", 22, false),
            ("xlab.example.org", 22, false),
            ("10.20.255.1", 2222, true),
            ("10.20.255.1", 6443, false),
            ("10.21.0.1", 22, false),
            // Another spelling of an address is refused, not resolved.
            ("::ffff:10.20.0.1", 22, true),
            ("10.20.1", 22, false),
            ("0x0a140001", 22, false),
            ("fd12::1", 22, true),
            ("[fd12::1]", 22, true),
            ("fd12::1", 2222, false),
            ("192.0.2.7", 2222, true),
            ("192.0.2.7", 22, false),
            ("2001:db8::1", 6443, true),
            ("127.0.0.1", 22, false),
            ("kubernetes.default.svc", 443, false),
            ("", 22, false),
        ];
        for (host, port, allowed) in table {
            assert_eq!(targets.allows(host, *port), *allowed, "{host}:{port}");
        }
    }

    #[test]
    fn blank_allows_any_and_says_so() {
        for blank in ["", " ", ",", " , "] {
            let targets: SshTargets = blank.parse().unwrap();
            assert!(targets.allows_any(), "{blank:?}");
            assert!(targets.allows("169.254.169.254", 80));
            assert_eq!(targets.to_string(), "any");
        }
    }

    #[test]
    fn a_list_reads_back_as_written() {
        let targets: SshTargets = "Login.Example.org, *.lab.org:22, 10.0.0.1/8:1-2"
            .parse()
            .unwrap();
        assert_eq!(
            targets.to_string(),
            "login.example.org, *.lab.org:22, [10.0.0.0/8]:1-2"
        );
    }

    #[test]
    fn malformed_entries_are_named() {
        #[rustfmt::skip]
        let table: &[(&str, &str)] = &[
            ("login:ssh", "a port is 0 to 65535"),
            ("login:70000", "a port is 0 to 65535"),
            ("login:30-20", "a port range goes from low to high"),
            ("[fd00::/8", "a '[' without its ']'"),
            ("[fd00::/8]22", "expected ':' after ']'"),
            ("*lab.org", "a wildcard is '*.' followed by a domain name"),
            ("a.*.org", "not a host name, address or network"),
            ("-oProxyCommand=x", "not a host name, address or network"),
            ("10.0.0.0/33", "not a host name, address or network"),
        ];
        for (entry, problem) in table {
            let err = entry.parse::<SshTargets>().unwrap_err();
            assert_eq!(
                err.to_string(),
                format!("allowed SSH target {entry:?}: {problem}"),
            );
        }
    }
}
