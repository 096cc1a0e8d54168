//! The HTTP stack under kube's `Client`, built for the network a real
//! cluster has (docs/contract.md section 8.4). client-go is the bar:
//!
//! - **Dead connections are found.** HTTP/2 where the server offers it
//!   (kube-apiserver does, over TLS): one connection, pinged after 30 s of
//!   silence and dropped when no pong comes within 15 s, so a half-open
//!   connection (a load balancer failed over, a NAT entry expired) is gone
//!   within 45 s. TCP keepalive on every connection as well.
//! - **A timed-out request drops the pool** ([`ApiLink::reset_connections`]):
//!   the next request dials instead of queueing on a connection that never
//!   answers.
//! - **Retry-After is honoured**: a 429 or 503 that carries one is noted in
//!   the [`ApiLink`]; the watchers and the verifier wait that long (capped
//!   at [`link::MAX_RETRY_AFTER`]).
//! - **Token files are read as client-go reads them** ([`token`]): trimmed,
//!   read again when the file changes or the server answers 401.
//!
//! Everything else (client certificates, exec credential plugins, static
//! tokens, impersonation headers, the CA) comes from kube's own config
//! layers, unchanged.

pub mod link;
pub mod token;

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use kube::client::{Body, ConfigExt};
use tower::{BoxError, Service, ServiceBuilder};

pub use link::ApiLink;
use token::{TokenError, TokenFile};

/// Connection settings (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tuning {
    /// Longest a new connection may take, TCP connect and TLS handshake
    /// together: a server that accepts connections but never answers (a
    /// hung API server behind a load balancer) fails the dial, not the
    /// request's whole time limit.
    pub connect_timeout: Duration,
    /// Idle time before the first TCP keepalive probe.
    pub tcp_keepalive: Duration,
    /// Time between TCP keepalive probes.
    pub tcp_keepalive_interval: Duration,
    /// Unanswered probes before the kernel drops the connection.
    pub tcp_keepalive_retries: u32,
    /// Silence on an HTTP/2 connection before it is pinged (client-go: 30 s).
    pub h2_ping_interval: Duration,
    /// How long a ping may go unanswered (client-go: 15 s).
    pub h2_ping_timeout: Duration,
}

impl Tuning {
    /// Production values: a silent connection is found within 45 s.
    pub const DEFAULT: Tuning = Tuning {
        connect_timeout: Duration::from_secs(5),
        tcp_keepalive: Duration::from_secs(15),
        tcp_keepalive_interval: Duration::from_secs(5),
        tcp_keepalive_retries: 3,
        h2_ping_interval: Duration::from_secs(30),
        h2_ping_timeout: Duration::from_secs(15),
    };
}

/// Why the client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// TLS settings (CA, client certificate) are unusable.
    #[error("TLS settings: {0}")]
    Tls(#[source] kube::Error),
    /// The credentials are unusable (exec plugin, auth provider).
    #[error("credentials: {0}")]
    Auth(#[source] kube::Error),
    /// The token file is unusable.
    #[error(transparent)]
    Token(#[from] TokenError),
    /// Extra headers (impersonation) are unusable.
    #[error("headers: {0}")]
    Headers(#[source] kube::Error),
    /// The TLS server name override is not a valid name.
    #[error("tls-server-name {0:?} is not a valid server name")]
    ServerName(String),
}

type Connector = hyper_timeout::TimeoutConnector<hyper_rustls::HttpsConnector<HttpConnector>>;
type Pool = hyper_util::client::legacy::Client<Connector, Body>;

/// Builds kube's `Client` on this module's HTTP stack.
pub fn build(
    mut config: kube::Config,
    link: Arc<ApiLink>,
    tuning: Tuning,
) -> Result<kube::Client, ClientError> {
    // The client's own 429/503/504 retries would hide failures from
    // watch_up and the error counters: the watchers retry themselves.
    config.default_retry = false;
    // A token file is ours to read (trimmed, re-read); a static token, when
    // both are set, wins as in client-go.
    let token_file = match (&config.auth_info.token, config.auth_info.token_file.take()) {
        (None, Some(path)) => Some(Arc::new(TokenFile::open(path.into())?)),
        _ => None,
    };
    let auth = config.auth_layer().map_err(ClientError::Auth)?;
    let headers = config.extra_headers_layer().map_err(ClientError::Headers)?;
    let connector = connector(&config, tuning)?;
    let make = move || -> Pool {
        hyper_util::client::legacy::Builder::new(TokioExecutor::new())
            .timer(TokioTimer::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(Duration::from_secs(90))
            .http2_keep_alive_interval(tuning.h2_ping_interval)
            .http2_keep_alive_timeout(tuning.h2_ping_timeout)
            .http2_keep_alive_while_idle(true)
            .build(connector.clone())
    };
    let pooled = Pooled {
        current: Arc::new(RwLock::new(make())),
    };
    let swap = pooled.current.clone();
    link.set_reset(Box::new(move || {
        let fresh = make();
        match swap.write() {
            Ok(mut c) => *c = fresh,
            Err(poisoned) => *poisoned.into_inner() = fresh,
        }
    }));
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(auth)
        .layer(headers)
        .service(Observed {
            inner: pooled,
            link,
            token: token_file,
        });
    Ok(kube::Client::new(service, config.default_namespace))
}

/// Wraps any service (the scripted API of the tests) in the layers that
/// read answers: Retry-After and 401.
pub fn observe<S>(inner: S, link: Arc<ApiLink>) -> Observed<S> {
    Observed {
        inner,
        link,
        token: None,
    }
}

/// `captf-lock-exporter/<version> (<os>/<arch>)`, client-go's form.
pub fn user_agent() -> http::HeaderValue {
    let ua = format!(
        "captf-lock-exporter/{} ({}/{})",
        env!("CARGO_PKG_VERSION"),
        std::env::consts::OS,
        std::env::consts::ARCH
    );
    http::HeaderValue::from_str(&ua)
        .unwrap_or_else(|_| http::HeaderValue::from_static("captf-lock-exporter"))
}

fn connector(config: &kube::Config, tuning: Tuning) -> Result<Connector, ClientError> {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_keepalive(Some(tuning.tcp_keepalive));
    http.set_keepalive_interval(Some(tuning.tcp_keepalive_interval));
    http.set_keepalive_retries(Some(tuning.tcp_keepalive_retries));
    let tls = config.rustls_client_config().map_err(ClientError::Tls)?;
    let builder = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http();
    let builder = match &config.tls_server_name {
        Some(name) => {
            let server = rustls_pki_types::ServerName::try_from(name.clone())
                .map_err(|_| ClientError::ServerName(name.clone()))?;
            builder.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(server))
        }
        None => builder,
    };
    // h2 and http/1.1 offered by ALPN; plain http stays HTTP/1.1.
    let https = builder.enable_all_versions().wrap_connector(http);
    let mut timed = hyper_timeout::TimeoutConnector::new(https);
    timed.set_connect_timeout(Some(tuning.connect_timeout));
    Ok(timed)
}

/// The connection pool, replaceable as a whole (see
/// [`ApiLink::reset_connections`]): requests take the current pool; a
/// replaced one lives on only in the requests still using it.
#[derive(Clone)]
struct Pooled {
    current: Arc<RwLock<Pool>>,
}

impl Service<Request<Body>> for Pooled {
    type Response = Response<hyper::body::Incoming>;
    type Error = hyper_util::client::legacy::Error;
    type Future = hyper_util::client::legacy::ResponseFuture;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // The legacy client is always ready; readiness is per connection.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        let pool = match self.current.read() {
            Ok(p) => p.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        };
        pool.request(req)
    }
}

/// Reads each answer for what the connection must learn from it, and puts
/// the token file's token on each request.
#[derive(Clone)]
pub struct Observed<S> {
    inner: S,
    link: Arc<ApiLink>,
    token: Option<Arc<TokenFile>>,
}

impl<S, B> Service<Request<Body>> for Observed<S>
where
    S: Service<Request<Body>, Response = Response<B>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    type Response = Response<B>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Response<B>, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, mut req: Request<Body>) -> Self::Future {
        // As client-go does, so that an audit log or an API Priority and
        // Fairness rule can tell the exporter from other clients.
        req.headers_mut()
            .entry(http::header::USER_AGENT)
            .or_insert_with(user_agent);
        if let Some(token) = &self.token {
            match token.header() {
                Ok(h) => {
                    req.headers_mut().insert(http::header::AUTHORIZATION, h);
                }
                Err(e) => return Box::pin(async move { Err(BoxError::from(e)) }),
            }
        }
        let fut = self.inner.call(req);
        let (link, token) = (self.link.clone(), self.token.clone());
        Box::pin(async move {
            let resp = match fut.await {
                Ok(r) => r,
                Err(e) => {
                    link.note_unreachable();
                    return Err(e.into());
                }
            };
            link.note_reached();
            link.note_version(resp.version());
            let status = resp.status().as_u16();
            match status {
                429 | 503 => {
                    let wait = resp
                        .headers()
                        .get(http::header::RETRY_AFTER)
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| {
                            link::parse_retry_after(
                                v,
                                crate::index::unix_seconds(std::time::SystemTime::now()),
                            )
                        });
                    if let Some(wait) = wait {
                        link.note_retry_after(status, wait);
                    }
                }
                401 => {
                    if let Some(t) = &token {
                        t.refused();
                    }
                    link.note_answer();
                }
                _ => link.note_answer(),
            }
            Ok(resp)
        })
    }
}
