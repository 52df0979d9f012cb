//! The operator's HTTP endpoints, for Prometheus and the kubelet's probes:
//!
//! - `GET /metrics`: the [`Metrics`] in the Prometheus text format;
//! - `GET /healthz` (liveness): 200 while the process serves requests;
//! - `GET /readyz` (readiness): 200 once the operator has reached the Kubernetes API and
//!   either runs the controllers with their caches filled or stands by for the leader
//!   Lease; 503 with the reason before that.

use std::convert::Infallible;
use std::future::Future;
use std::sync::{Arc, PoisonError, RwLock};

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::header::CONTENT_TYPE;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use crate::metrics::Metrics;

/// Whether the operator is ready, and if not, why.
#[derive(Debug)]
pub struct Readiness {
    not_ready: RwLock<Option<String>>,
}

impl Default for Readiness {
    fn default() -> Self {
        Self {
            not_ready: RwLock::new(Some("starting".into())),
        }
    }
}

impl Readiness {
    /// Ready from now on.
    pub fn ready(&self) {
        *self
            .not_ready
            .write()
            .unwrap_or_else(PoisonError::into_inner) = None;
    }

    /// Not ready, for `reason`.
    pub fn not_ready(&self, reason: impl Into<String>) {
        *self
            .not_ready
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Some(reason.into());
    }

    /// Why the operator is not ready, or `None` when it is.
    pub fn reason(&self) -> Option<String> {
        self.not_ready
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// What the endpoints read.
#[derive(Debug, Clone)]
pub struct Endpoints {
    /// The metrics `/metrics` shows.
    pub metrics: Arc<Metrics>,
    /// The readiness `/readyz` shows.
    pub readiness: Arc<Readiness>,
}

const TEXT: &str = "text/plain; charset=utf-8";
/// The format `prometheus_client` writes (it ends with `# EOF`).
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

impl Endpoints {
    /// The answer to `method path`: status, content type and body.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use batchbridge_operator::endpoints::{Endpoints, Readiness};
    /// use batchbridge_operator::metrics::Metrics;
    /// use hyper::{Method, StatusCode};
    ///
    /// let endpoints = Endpoints { metrics: Arc::new(Metrics::new()), readiness: Arc::default() };
    /// assert_eq!(endpoints.answer(&Method::GET, "/readyz").0, StatusCode::SERVICE_UNAVAILABLE);
    /// endpoints.readiness.ready();
    /// assert_eq!(endpoints.answer(&Method::GET, "/readyz").0, StatusCode::OK);
    /// ```
    pub fn answer(&self, method: &Method, path: &str) -> (StatusCode, &'static str, String) {
        if method != Method::GET && method != Method::HEAD {
            return (
                StatusCode::METHOD_NOT_ALLOWED,
                TEXT,
                "only GET and HEAD\n".into(),
            );
        }
        match path {
            "/metrics" => (StatusCode::OK, OPENMETRICS, self.metrics.encode()),
            "/healthz" => (StatusCode::OK, TEXT, "ok\n".into()),
            "/readyz" => match self.readiness.reason() {
                None => (StatusCode::OK, TEXT, "ok\n".into()),
                Some(reason) => (
                    StatusCode::SERVICE_UNAVAILABLE,
                    TEXT,
                    format!("not ready: {reason}\n"),
                ),
            },
            _ => (
                StatusCode::NOT_FOUND,
                TEXT,
                "not found: try /metrics, /healthz or /readyz\n".into(),
            ),
        }
    }

    /// Serves the endpoints on `listener` until `shutdown` completes.
    pub async fn serve(self, listener: TcpListener, shutdown: impl Future<Output = ()>) {
        tokio::pin!(shutdown);
        loop {
            let stream = tokio::select! {
                () = &mut shutdown => return,
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => stream,
                    Err(err) => {
                        // Out of file descriptors, say: the next accept may work.
                        tracing::warn!(error = %err, "cannot accept a connection on the metrics port");
                        continue;
                    }
                },
            };
            let endpoints = self.clone();
            tokio::spawn(async move {
                let service = service_fn(move |request: Request<hyper::body::Incoming>| {
                    let (status, content_type, body) =
                        endpoints.answer(request.method(), request.uri().path());
                    let response = Response::builder()
                        .status(status)
                        .header(CONTENT_TYPE, content_type)
                        .body(Full::new(Bytes::from(body)));
                    async move { Ok::<_, Infallible>(response.unwrap_or_default()) }
                });
                if let Err(err) = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await
                {
                    tracing::debug!(error = %err, "metrics connection");
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_path_answers_what_a_probe_or_scraper_expects() {
        let endpoints = Endpoints {
            metrics: Arc::new(Metrics::new()),
            readiness: Arc::default(),
        };
        endpoints.metrics.set_leader(true);
        let get = |path| endpoints.answer(&Method::GET, path);
        let cases: [(&str, StatusCode, &str, &str); 5] = [
            ("/healthz", StatusCode::OK, TEXT, "ok\n"),
            (
                "/readyz",
                StatusCode::SERVICE_UNAVAILABLE,
                TEXT,
                "not ready: starting\n",
            ),
            (
                "/metrics",
                StatusCode::OK,
                OPENMETRICS,
                "batchbridge_leader 1",
            ),
            ("/nope", StatusCode::NOT_FOUND, TEXT, "not found"),
            (
                "/",
                StatusCode::NOT_FOUND,
                TEXT,
                "/metrics, /healthz or /readyz",
            ),
        ];
        for (path, status, content_type, body) in cases {
            let answer = get(path);
            assert_eq!((answer.0, answer.1), (status, content_type), "{path}");
            assert!(answer.2.contains(body), "{path}: {}", answer.2);
        }
        endpoints.readiness.ready();
        assert_eq!(get("/readyz").0, StatusCode::OK);
        endpoints.readiness.not_ready("waiting for the caches");
        assert_eq!(get("/readyz").2, "not ready: waiting for the caches\n");
        assert_eq!(
            endpoints.answer(&Method::POST, "/metrics").0,
            StatusCode::METHOD_NOT_ALLOWED
        );
    }
}
