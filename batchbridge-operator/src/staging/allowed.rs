//! The object stores the operator may reach: its administrator's allowlist of endpoints.
//!
//! A BatchJob names its object store's endpoint, and the operator itself sends requests
//! there (a prefix's listing, an output's HEAD) from inside the Kubernetes network. Without
//! an allowlist a tenant could point those at the API server, a cloud's metadata service
//! (169.254.169.254) or any internal address: server-side request forgery. So an endpoint
//! is used only if its origin (scheme, host, port) is one the administrator listed, and
//! nothing is listed by default: object storage is off until configured (SECURITY.md).

use std::fmt;
use std::str::FromStr;

use url::{Origin, Url};

use super::Refused;

/// The object store endpoints BatchJobs may name, compared by origin: scheme, host (names
/// lower-cased, IP addresses in their canonical form) and port (the scheme's when absent).
/// Empty, the default, allows none.
///
/// ```
/// use batchbridge_operator::staging::AllowedStores;
///
/// let allowed: AllowedStores = "https://s3.eu-west-1.amazonaws.com, http://10.0.0.5:9000"
///     .parse()
///     .unwrap();
/// assert!(allowed.check("https://S3.eu-west-1.amazonaws.com:443/").is_ok());
/// assert!(allowed.check("http://169.254.169.254").is_err());
/// assert!(AllowedStores::default().check("http://10.0.0.5:9000").is_err());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowedStores(Vec<Origin>);

/// Why an allowlist entry cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("object store endpoint {entry:?}: {problem}")]
pub struct BadEndpoint {
    entry: String,
    problem: String,
}

impl AllowedStores {
    /// Whether any endpoint is allowed at all.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether a BatchJob may name `endpoint`; if not, why, in words for its status.
    pub fn check(&self, endpoint: &str) -> Result<(), Refused> {
        let origin = origin(endpoint).map_err(|bad| Refused(bad.to_string()))?;
        if self.0.contains(&origin) {
            return Ok(());
        }
        Err(Refused(if self.0.is_empty() {
            format!(
                "object store endpoint {endpoint:?} is not allowed: this operator may reach no \
                 object store until its administrator lists some (chart value \
                 objectStores.allowedEndpoints, ALLOWED_OBJECT_STORES)"
            )
        } else {
            format!(
                "object store endpoint {endpoint:?} is not allowed: this operator may reach \
                 only {self} (chart value objectStores.allowedEndpoints)"
            )
        }))
    }
}

/// The origin of an endpoint URL: http or https, a host, maybe a port, nothing else. A user
/// name or password is refused outright rather than ignored: `http://allowed@evil/` is a
/// request to `evil`, and whoever reads the spec would believe otherwise.
fn origin(endpoint: &str) -> Result<Origin, BadEndpoint> {
    let bad = |problem: &str| BadEndpoint {
        entry: endpoint.to_owned(),
        problem: problem.to_owned(),
    };
    let url = Url::parse(endpoint.trim()).map_err(|err| bad(&err.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(bad("not an http or https URL"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(bad("a user name or password in an endpoint is not allowed"));
    }
    if url.path() != "/" || url.query().is_some() || url.fragment().is_some() {
        return Err(bad("an endpoint has no path, query or fragment"));
    }
    if url.host().is_none() {
        return Err(bad("no host"));
    }
    Ok(url.origin())
}

impl FromStr for AllowedStores {
    type Err = BadEndpoint;

    /// Comma-separated endpoint URLs; blank allows none.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let mut origins = Vec::new();
        for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let origin = origin(entry)?;
            if !origins.contains(&origin) {
                origins.push(origin);
            }
        }
        Ok(Self(origins))
    }
}

impl fmt::Display for AllowedStores {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let origins: Vec<String> = self.0.iter().map(Origin::ascii_serialization).collect();
        f.write_str(&origins.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_listed_origins_pass() {
        let allowed: AllowedStores =
            "http://127.0.0.1:18333, https://s3.example.org, http://[fd00::5]:9000"
                .parse()
                .unwrap();
        let cases = [
            ("http://127.0.0.1:18333", true),
            ("http://127.0.0.1:18333/", true),
            // The same address written another way is the same origin.
            ("http://0x7f.0.0.1:18333", true),
            ("http://127.1:18333", true),
            ("https://S3.Example.ORG", true),
            ("https://s3.example.org:443/", true),
            ("http://[fd00:0::5]:9000", true),
            // Another port, scheme or host.
            ("http://127.0.0.1:8080", false),
            ("https://127.0.0.1:18333", false),
            ("http://s3.example.org", false),
            ("https://s3.example.org:8443", false),
            ("https://s3.example.org.evil.net", false),
            ("https://evil.net/s3.example.org", false),
            // Names are not resolved: localhost is not 127.0.0.1.
            ("http://localhost:18333", false),
            ("http://[::ffff:127.0.0.1]:18333", false),
            ("http://[::1]:18333", false),
            ("http://169.254.169.254", false),
            ("http://169.254.169.254/latest/meta-data/", false),
            ("http://10.96.0.1:443", false),
            ("https://kubernetes.default.svc", false),
            // User information, even naming an allowed host, is refused.
            ("http://127.0.0.1:18333@evil.net/", false),
            ("http://user:pass@127.0.0.1:18333", false),
            ("https://s3.example.org@169.254.169.254", false),
            ("http://evil.net#@127.0.0.1:18333", false),
            ("http://evil.net?@127.0.0.1:18333", false),
            // Other schemes, paths, nonsense.
            ("ftp://127.0.0.1:18333", false),
            ("file:///etc/passwd", false),
            ("http://127.0.0.1:18333/bucket", false),
            ("127.0.0.1:18333", false),
            ("", false),
        ];
        for (endpoint, expected) in cases {
            let got = allowed.check(endpoint);
            assert_eq!(got.is_ok(), expected, "{endpoint:?}: {got:?}");
        }
    }

    #[test]
    fn nothing_is_allowed_by_default_and_the_refusal_says_how_to_change_it() {
        for allowed in [
            AllowedStores::default(),
            "".parse().unwrap(),
            " , ".parse().unwrap(),
        ] {
            assert!(allowed.is_empty());
            let refused = allowed.check("http://127.0.0.1:18333").unwrap_err();
            assert!(
                refused.0.contains("objectStores.allowedEndpoints"),
                "{refused}"
            );
        }
        let allowed: AllowedStores = "http://a.example:9000".parse().unwrap();
        let refused = allowed.check("http://b.example:9000").unwrap_err();
        assert!(
            refused.0.contains("only http://a.example:9000"),
            "{refused}"
        );
    }

    #[test]
    fn the_allowlist_refuses_entries_that_are_no_endpoint() {
        for entry in [
            "s3.example.org",
            "ftp://s3.example.org",
            "http://user@s3.example.org",
            "http://s3.example.org/bucket",
            "http://s3.example.org?x=1",
            "http://",
        ] {
            assert!(entry.parse::<AllowedStores>().is_err(), "{entry}");
        }
        let allowed: AllowedStores = "https://s3.example.org:443, https://s3.example.org"
            .parse()
            .unwrap();
        assert_eq!(allowed.to_string(), "https://s3.example.org");
    }
}
