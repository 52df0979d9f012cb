//! An S3-compatible object store as the operator sees it: presigned URLs for the job (the
//! bytes never pass through the operator), and the two requests the operator makes itself,
//! listing a prefix (an input's, at most [`MAX_PREFIX_OBJECTS`] keys, or a glob or
//! directory output's, at most [`MAX_OUTPUT_PREFIX_OBJECTS`], to count what arrived) and
//! asking whether an output arrived (HEAD).

use std::time::{Duration, SystemTime};

use http_body_util::{BodyExt as _, Empty, Limited};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use rusty_s3::actions::ListObjectsV2;
use rusty_s3::{Bucket, Credentials, S3Action as _, UrlStyle};

use super::post_policy::{PolicyTerms, PostForm};
use crate::crd::ObjectLocation;

/// The most objects an input's prefix may hold.
pub const MAX_PREFIX_OBJECTS: usize = 1000;

/// The most objects the operator lists under a glob or directory output's prefix to count
/// what the attempt wrote: the 1000 one output may send, beside what earlier attempts or
/// other writers left there.
pub const MAX_OUTPUT_PREFIX_OBJECTS: usize = 10_000;

/// How long a presigned URL stays valid: the most SigV4 allows. A job that starts (or ends)
/// later than this finds its URLs expired; its transfers fail and say so.
pub const URL_VALIDITY: Duration = Duration::from_secs(7 * 24 * 3600);

/// The most bytes of a listing the operator reads (1000 keys of 1 KiB and their XML).
const MAX_LISTING_BYTES: usize = 4 << 20;

/// How long one request to the store may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// A bucket with the tenant's credentials.
#[derive(Debug, Clone)]
pub struct Store {
    bucket: Bucket,
    credentials: Credentials,
}

/// An object as a listing shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// Its key.
    pub key: String,
    /// Its size in bytes.
    pub size: u64,
    /// When it was last written, if the store said.
    pub modified: Option<SystemTime>,
}

/// Why the store could not be used, in words for the job's status.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct StoreError(pub String);

type HttpClient = Client<hyper_rustls::HttpsConnector<HttpConnector>, Empty<Bytes>>;

impl Store {
    /// The bucket of `location`, signed for with `access_key` and `secret_key`.
    pub fn new(
        location: &ObjectLocation,
        access_key: &str,
        secret_key: &str,
    ) -> Result<Self, StoreError> {
        let endpoint = url::Url::parse(&location.endpoint)
            .map_err(|err| StoreError(format!("endpoint {:?}: {err}", location.endpoint)))?;
        let region = location
            .region
            .clone()
            .unwrap_or_else(|| "us-east-1".into());
        let bucket = Bucket::new(endpoint, UrlStyle::Path, location.bucket.clone(), region)
            .map_err(|err| StoreError(format!("bucket {:?}: {err}", location.bucket)))?;
        Ok(Self {
            bucket,
            credentials: Credentials::new(access_key, secret_key),
        })
    }

    /// A URL the job GETs `key` from.
    pub fn get_url(&self, key: &str) -> String {
        self.bucket
            .get_object(Some(&self.credentials), key)
            .sign(URL_VALIDITY)
            .into()
    }

    /// A URL the job PUTs `key` to.
    pub fn put_url(&self, key: &str) -> String {
        self.bucket
            .put_object(Some(&self.credentials), key)
            .sign(URL_VALIDITY)
            .into()
    }

    /// A form the job posts any number of objects with, each under `prefix` and at most
    /// `max_object_bytes`, valid for [`URL_VALIDITY`].
    pub fn post_form(&self, prefix: &str, max_object_bytes: u64) -> PostForm {
        let now = SystemTime::now();
        PostForm::sign(&PolicyTerms {
            url: self.bucket.base_url().as_str(),
            bucket: self.bucket.name(),
            prefix,
            max_object_bytes,
            now,
            expires: now + URL_VALIDITY,
            region: self.bucket.region(),
            access_key: self.credentials.key(),
            secret_key: self.credentials.secret(),
        })
    }

    /// The objects under `prefix`, refused beyond `most`.
    pub async fn list(&self, prefix: &str, most: usize) -> Result<Vec<Listed>, StoreError> {
        let client = http_client()?;
        let mut keys: Vec<Listed> = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut action = ListObjectsV2::new(&self.bucket, Some(&self.credentials));
            action.with_prefix(prefix);
            if let Some(token) = &token {
                action.with_continuation_token(token.as_str());
            }
            let url = action.sign(REQUEST_TIMEOUT * 2);
            let (status, _, body) = request(&client, hyper::Method::GET, url.as_str()).await?;
            if !status.is_success() {
                return Err(StoreError(format!(
                    "listing {prefix:?} in bucket {:?}: the store answered {status}",
                    self.bucket.name()
                )));
            }
            let text = String::from_utf8_lossy(&body);
            let page = ListObjectsV2::parse_response(&text).map_err(|err| {
                StoreError(format!("listing {prefix:?}: not an S3 listing ({err})"))
            })?;
            keys.extend(page.contents.into_iter().map(|object| {
                Listed {
                    modified: object
                        .last_modified
                        .as_deref()
                        .and_then(|at| humantime::parse_rfc3339_weak(at).ok()),
                    key: object.key,
                    size: object.size.unwrap_or_default(),
                }
            }));
            if keys.len() > most {
                return Err(StoreError(format!(
                    "prefix {prefix:?} holds more than {most} objects"
                )));
            }
            match page.next_continuation_token {
                Some(next) => token = Some(next),
                None => return Ok(keys),
            }
        }
    }

    /// When `key` was last written (now, if the store does not say), if it exists.
    pub async fn modified(&self, key: &str) -> Result<Option<SystemTime>, StoreError> {
        let client = http_client()?;
        let url = self
            .bucket
            .head_object(Some(&self.credentials), key)
            .sign(REQUEST_TIMEOUT * 2);
        let (status, headers, _) = request(&client, hyper::Method::HEAD, url.as_str()).await?;
        match status {
            status if status.is_success() => Ok(Some(
                headers
                    .get(hyper::header::LAST_MODIFIED)
                    .and_then(|value| value.to_str().ok())
                    .and_then(httpdate)
                    // A store that does not say when counts as having it now.
                    .unwrap_or_else(SystemTime::now),
            )),
            hyper::StatusCode::NOT_FOUND => Ok(None),
            status => Err(StoreError(format!(
                "asking for {key:?}: the store answered {status}"
            ))),
        }
    }
}

fn http_client() -> Result<HttpClient, StoreError> {
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_native_roots()
        .map_err(|err| StoreError(format!("no CA certificates to check the store: {err}")))?
        .https_or_http()
        .enable_http1()
        .build();
    Ok(Client::builder(TokioExecutor::new()).build(connector))
}

/// A request with an empty body; its answer's status, headers and at most
/// [`MAX_LISTING_BYTES`] of its body.
async fn request(
    client: &HttpClient,
    method: hyper::Method,
    url: &str,
) -> Result<(hyper::StatusCode, hyper::HeaderMap, Bytes), StoreError> {
    let request = hyper::Request::builder()
        .method(method)
        .uri(url)
        .body(Empty::new())
        .map_err(|err| StoreError(err.to_string()))?;
    let answer = async {
        let response = client
            .request(request)
            .await
            .map_err(|err| StoreError(format!("the store: {err}")))?;
        let status = response.status();
        let headers = response.headers().clone();
        let body = Limited::new(response.into_body(), MAX_LISTING_BYTES)
            .collect()
            .await
            .map_err(|err| StoreError(format!("the store's answer: {err}")))?
            .to_bytes();
        Ok((status, headers, body))
    };
    tokio::time::timeout(REQUEST_TIMEOUT, answer)
        .await
        .map_err(|_| StoreError(format!("no answer from the store in {REQUEST_TIMEOUT:?}")))?
}

/// An HTTP date (RFC 7231's IMF-fixdate, the one S3 sends) as a time.
fn httpdate(text: &str) -> Option<SystemTime> {
    humantime::parse_rfc3339(&imf_to_rfc3339(text)?).ok()
}

/// "Tue, 15 Nov 1994 08:12:31 GMT" as "1994-11-15T08:12:31Z".
fn imf_to_rfc3339(text: &str) -> Option<String> {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let mut words = text.split_whitespace().skip(1);
    let day: u8 = words.next()?.parse().ok()?;
    let month_name = words.next()?;
    let month = MONTHS.iter().position(|month| *month == month_name)? + 1;
    let year: u16 = words.next()?.parse().ok()?;
    let clock = words.next()?;
    (words.next()? == "GMT").then(|| format!("{year:04}-{month:02}-{day:02}T{clock}Z"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn location() -> ObjectLocation {
        ObjectLocation {
            endpoint: "http://127.0.0.1:18333".into(),
            region: None,
            bucket: "results".into(),
            key: Some("a/b.txt".into()),
            prefix: None,
            credentials_secret: crate::crd::SecretName { name: "s3".into() },
        }
    }

    #[test]
    fn urls_are_path_style_signed_and_carry_no_secret() {
        let store = Store::new(&location(), "AKID", "very-secret").unwrap();
        let get = store.get_url("a/b c.txt");
        assert!(
            get.starts_with("http://127.0.0.1:18333/results/a/b%20c.txt?"),
            "{get}"
        );
        assert!(get.contains("X-Amz-Credential=AKID%2F"), "{get}");
        assert!(get.contains("X-Amz-Expires=604800"), "{get}");
        assert!(get.contains("X-Amz-Signature="), "{get}");
        assert!(!get.contains("very-secret"), "{get}");
        assert_ne!(store.put_url("a/b c.txt"), get);
    }

    #[test]
    fn endpoints_that_are_no_http_urls_are_refused() {
        for endpoint in ["ftp://h", "not a url", "file:///etc"] {
            let location = ObjectLocation {
                endpoint: endpoint.into(),
                ..location()
            };
            assert!(Store::new(&location, "a", "b").is_err(), "{endpoint}");
        }
    }

    #[test]
    fn http_dates_are_read() {
        let cases = [
            (
                "Tue, 15 Nov 1994 08:12:31 GMT",
                Some("1994-11-15T08:12:31Z"),
            ),
            (
                "Thu, 26 Nov 2026 10:35:40 GMT",
                Some("2026-11-26T10:35:40Z"),
            ),
            ("Thu, 26 Foo 2026 10:35:40 GMT", None),
            ("yesterday", None),
        ];
        for (text, expected) in cases {
            assert_eq!(imf_to_rfc3339(text).as_deref(), expected, "{text}");
        }
        assert!(httpdate("Tue, 15 Nov 1994 08:12:31 GMT").is_some());
    }
}
