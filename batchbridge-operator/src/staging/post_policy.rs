//! An S3 POST policy (SigV4 "browser upload"): one signature that lets whoever holds it send
//! any number of objects whose keys start with a prefix, each at most a size, until an
//! expiry. The job sends a directory's or a glob's files with it, whose names nobody knows
//! when the operator signs; the store itself refuses a key outside the prefix or an object
//! too large. rusty-s3 signs requests and URLs, not policies, so the few lines are here.

use std::time::SystemTime;

use hmac::{Hmac, Mac as _};
use sha2::Sha256;

/// The form fields a job posts, beside `key` and `file`, to `url`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostForm {
    /// Where to post: the bucket's URL.
    pub url: String,
    /// Every key starts with this.
    pub prefix: String,
    /// The policy, base64-encoded JSON (the `policy` field).
    pub policy: String,
    /// `x-amz-credential`: the access key and the signing scope.
    pub credential: String,
    /// `x-amz-date`, such as 20261126T170349Z.
    pub date: String,
    /// `x-amz-signature`: hex HMAC-SHA256 of the policy with the SigV4 signing key.
    pub signature: String,
}

/// What a policy allows, and who signs it.
#[derive(Debug, Clone, Copy)]
pub struct PolicyTerms<'a> {
    /// The bucket's URL the form is posted to.
    pub url: &'a str,
    /// The bucket.
    pub bucket: &'a str,
    /// The prefix every key starts with.
    pub prefix: &'a str,
    /// The most bytes of one object.
    pub max_object_bytes: u64,
    /// When it is signed.
    pub now: SystemTime,
    /// When it expires.
    pub expires: SystemTime,
    /// The region the credentials sign for.
    pub region: &'a str,
    /// The access key id.
    pub access_key: &'a str,
    /// The secret access key (used to sign, never in the form).
    pub secret_key: &'a str,
}

impl PostForm {
    /// The form of `terms`, signed.
    ///
    /// ```
    /// use std::time::{Duration, SystemTime};
    /// use batchbridge_operator::staging::{PolicyTerms, PostForm};
    ///
    /// let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_796_000_000);
    /// let form = PostForm::sign(&PolicyTerms {
    ///     url: "http://store:9000/bucket/",
    ///     bucket: "bucket",
    ///     prefix: "run-1/results/",
    ///     max_object_bytes: 1 << 30,
    ///     now,
    ///     expires: now + Duration::from_secs(3600),
    ///     region: "us-east-1",
    ///     access_key: "AKID",
    ///     secret_key: "secret",
    /// });
    /// assert_eq!(form.credential, "AKID/20261130/us-east-1/s3/aws4_request");
    /// assert_eq!(form.date, "20261130T005320Z");
    /// assert_eq!(form.signature.len(), 64);
    /// assert!(!form.policy.contains("secret"));
    /// ```
    pub fn sign(terms: &PolicyTerms<'_>) -> Self {
        // 2026-11-30T00:53:20Z: the SigV4 date is its digits.
        let now = humantime::format_rfc3339_seconds(terms.now).to_string();
        let date: String = now.chars().filter(|c| !matches!(c, '-' | ':')).collect();
        let day = &date[..8];
        let credential = format!(
            "{}/{day}/{}/s3/aws4_request",
            terms.access_key, terms.region
        );
        let document = serde_json::json!({
            "expiration": humantime::format_rfc3339_millis(terms.expires).to_string(),
            "conditions": [
                {"bucket": terms.bucket},
                ["starts-with", "$key", terms.prefix],
                ["content-length-range", 0, terms.max_object_bytes],
                {"x-amz-algorithm": "AWS4-HMAC-SHA256"},
                {"x-amz-credential": credential},
                {"x-amz-date": date},
            ],
        });
        let policy = base64_encode(document.to_string().as_bytes());
        let signature = signature(terms.secret_key, day, terms.region, &policy);
        Self {
            url: terms.url.to_owned(),
            prefix: terms.prefix.to_owned(),
            policy,
            credential,
            date,
            signature,
        }
    }
}

/// SigV4's signature of a POST policy: the signing key of `day` (YYYYMMDD), `region` and
/// s3, applied to the base64 policy itself (there is no canonical request).
fn signature(secret_key: &str, day: &str, region: &str, policy: &str) -> String {
    let key = [day, region, "s3", "aws4_request"]
        .iter()
        .fold(format!("AWS4{secret_key}").into_bytes(), |key, part| {
            hmac_sha256(&key, part.as_bytes())
        });
    hmac_sha256(&key, policy.as_bytes())
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

fn hmac_sha256(key: &[u8], data: &[u8]) -> Vec<u8> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes a key of any length");
    mac.update(data);
    mac.finalize().into_bytes().to_vec()
}

fn base64_encode(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// The vector was computed independently of this code, with Python's hmac and hashlib
    /// (the same steps as AWS's "Calculating a signature" for POST), for AWS's documented
    /// example credentials.
    #[test]
    fn the_signature_is_sigv4s_of_the_policy() {
        let policy = "eyJleHBpcmF0aW9uIjoiMjAxNS0xMi0zMFQxMjowMDowMC4wMDBaIn0=";
        assert_eq!(
            signature(
                "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
                "20151229",
                "us-east-1",
                policy
            ),
            "6177f37480a703088dfd86e641c14a716a167304797a98fad5384106dc6f6061"
        );
    }

    #[test]
    fn the_policy_binds_bucket_prefix_size_expiry_and_credential() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_796_000_000);
        let form = PostForm::sign(&PolicyTerms {
            url: "http://h/b/",
            bucket: "b",
            prefix: "p/\"q",
            max_object_bytes: 5,
            now,
            expires: now + Duration::from_secs(60),
            region: "eu-west-1",
            access_key: "AK",
            secret_key: "SK",
        });
        use base64::Engine as _;
        let document: serde_json::Value = serde_json::from_slice(
            &base64::engine::general_purpose::STANDARD
                .decode(&form.policy)
                .unwrap(),
        )
        .unwrap();
        assert_eq!(
            document,
            serde_json::json!({
                "expiration": "2026-11-30T00:54:20.000Z",
                "conditions": [
                    {"bucket": "b"},
                    ["starts-with", "$key", "p/\"q"],
                    ["content-length-range", 0, 5],
                    {"x-amz-algorithm": "AWS4-HMAC-SHA256"},
                    {"x-amz-credential": "AK/20261130/eu-west-1/s3/aws4_request"},
                    {"x-amz-date": "20261130T005320Z"},
                ],
            })
        );
        assert_eq!(
            form.signature,
            signature("SK", "20261130", "eu-west-1", &form.policy)
        );
    }
}
