//! Who may read the endpoint: as the API server decides, the way
//! controller-runtime's secure metrics server and kube-rbac-proxy decide.
//!
//! A request for a protected path must carry `Authorization: Bearer
//! <token>`. The token is reviewed (TokenReview) and the user it names is
//! checked for `get` on the request's path as a non-resource URL
//! (SubjectAccessReview), so RBAC grants it with
//! `nonResourceURLs: ["/metrics"]` (scrapers) or `["/", "/locks/*"]`
//! (people reading the pages). Answers are cached ([`cache`]): a token for
//! a minute, an allowed path for five, a refusal for ten or thirty
//! seconds. `/healthz`, `/livez`, `/readyz` (and their aliases) stay open:
//! the kubelet probes them without a token and they say nothing about
//! locks.
//!
//! The token itself is never logged, never kept (the caches key on its
//! SHA-256), and never sent anywhere but to the API server's TokenReview.

pub mod cache;
mod call;
pub mod review;

use std::sync::Arc;
use std::time::Duration;

use hyper::header::HeaderValue;
use hyper::Method;
use sha2::{Digest, Sha256};
use tokio::sync::Semaphore;

use crate::health::{AuthResult, Health, Review};
use cache::{Cache, Found, Ttl};
use call::{CallError, ReviewLog};
pub use review::{
    AuthService, Failure, Identity, KubeReviewer, ReviewError, Reviewer, ServiceTarget, User,
};

/// Paths anyone may read: probes, which carry no token.
pub fn is_open(path: &str) -> bool {
    matches!(path, "/healthz" | "/livez" | "/live" | "/readyz" | "/ready")
}

/// A bearer token longer than this is refused without asking the API
/// server (kube-apiserver's own tokens are about 1 kB; an attacker's
/// megabyte must not become a megabyte POSTed to the API server).
pub const MAX_TOKEN_BYTES: usize = 16 * 1024;

/// Review calls in flight at once: a flood of unknown tokens costs the API
/// server at most this many concurrent reviews.
pub(crate) const MAX_REVIEWS_IN_FLIGHT: usize = 8;

/// How long a request waits for a review slot before it is answered 503.
const REVIEW_QUEUE_WAIT: Duration = Duration::from_secs(2);

/// The longest one review call may take. The call holds its slot until it
/// ends, whether or not its caller is still there.
const REVIEW_TIMEOUT: Duration = Duration::from_secs(5);

/// The one path an older positive answer may open while the API server
/// does not answer: the scrape that would report the outage. The pages
/// carry lock IDs and release commands and are never served on one.
const FALLBACK_PATH: &str = "/metrics";

/// Cache lifetimes (controller-runtime's filter: one minute for tokens,
/// five minutes for allowed and thirty seconds for denied decisions).
/// A positive answer may stand in for ten more minutes while the API server
/// does not answer, for [`FALLBACK_PATH`] only, so an API outage does not
/// also blind the scrapes that would report it; a refusal never stands in.
/// An identity enters the cache unproven and is promoted to the allowed
/// share once RBAC allows it a path (see [`cache`]).
const TOKEN_TTL: Ttl = Ttl::unproven(60, 600);
const REJECTED_TTL: Ttl = Ttl::refusal(10);
const ALLOWED_TTL: Ttl = Ttl::secs(300, 600);
const DENIED_TTL: Ttl = Ttl::refusal(30);

/// Answers held per share of each cache: allowed ones, identities not yet
/// allowed anything, refusals (see [`cache`]: neither of the last two can
/// push an allowed answer out).
pub(crate) const CACHE_CAPACITY: usize = 1024;

/// Why a request is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// 401: no usable bearer token, or the API server rejects it.
    Unauthenticated(&'static str),
    /// 403: the user may not `get` the path.
    Forbidden {
        /// The user the token belongs to.
        user: String,
        /// The path asked for.
        path: String,
    },
    /// 503 with `Retry-After: 5`: the API server did not answer a review
    /// (timeout, transport, 5xx, 429) and no older answer may stand in.
    Unavailable,
    /// 503 with `Retry-After: 1`: every review slot stayed taken for the
    /// whole queue wait (a flood of new tokens). No older answer stands
    /// in: a flood must not turn a revoked permission back on.
    Busy,
    /// 500: the API server refused the exporter's own review (401/403:
    /// the exporter lost its `create` rights, or another 4xx); waiting
    /// does not help, so no `Retry-After` and no older answer.
    ReviewRefused,
}

/// The policy in force on the endpoint.
#[derive(Clone)]
pub enum Guard {
    /// Everyone may read everything (`--auth=none`, the demo).
    Open,
    /// Bearer tokens reviewed by the API server.
    Kubernetes(Arc<Reviews>),
}

impl std::fmt::Debug for Guard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Guard::Open => f.write_str("Guard::Open"),
            Guard::Kubernetes(_) => f.write_str("Guard::Kubernetes"),
        }
    }
}

/// The review caches and the reviewer behind them.
pub struct Reviews {
    reviewer: Arc<dyn Reviewer>,
    tokens: Cache<[u8; 32], Identity>,
    access: Cache<[u8; 32], bool>,
    in_flight: Arc<Semaphore>,
    log: Arc<std::sync::Mutex<ReviewLog>>,
}

impl Guard {
    /// The Kubernetes policy over `reviewer`.
    pub fn kubernetes(reviewer: Arc<dyn Reviewer>) -> Guard {
        Guard::Kubernetes(Arc::new(Reviews {
            reviewer,
            tokens: Cache::new(CACHE_CAPACITY),
            access: Cache::new(CACHE_CAPACITY),
            in_flight: Arc::new(Semaphore::new(MAX_REVIEWS_IN_FLIGHT)),
            log: Arc::default(),
        }))
    }

    /// Decides one request; protected paths' decisions are counted in
    /// `health` (as are review calls, also those that end after the
    /// request was dropped).
    pub async fn check(
        &self,
        health: &Arc<Health>,
        method: &Method,
        path: &str,
        authorization: Option<&HeaderValue>,
    ) -> Result<(), Refusal> {
        let Guard::Kubernetes(reviews) = self else {
            return Ok(());
        };
        if is_open(path) {
            return Ok(());
        }
        let decision = match bearer(authorization) {
            Ok(token) => reviews.decide(health, token, &verb(method), path).await,
            Err(refusal) => Err(refusal),
        };
        health.on_auth(match &decision {
            Ok(()) => AuthResult::Allowed,
            Err(Refusal::Unauthenticated(_)) => AuthResult::Unauthenticated,
            Err(Refusal::Forbidden { .. }) => AuthResult::Forbidden,
            Err(Refusal::Unavailable | Refusal::Busy | Refusal::ReviewRefused) => {
                AuthResult::Unavailable
            }
        });
        decision
    }
}

/// The token of an `Authorization: Bearer <token>` header.
pub fn bearer(authorization: Option<&HeaderValue>) -> Result<&str, Refusal> {
    let value = authorization
        .ok_or(Refusal::Unauthenticated("a bearer token is required"))?
        .to_str()
        .map_err(|_| Refusal::Unauthenticated("the Authorization header is not text"))?;
    let (scheme, token) = value
        .trim()
        .split_once(' ')
        .ok_or(Refusal::Unauthenticated(
            "Authorization must be: Bearer <token>",
        ))?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(Refusal::Unauthenticated(
            "Authorization must be: Bearer <token>",
        ));
    }
    let token = token.trim();
    if token.is_empty() {
        return Err(Refusal::Unauthenticated("the bearer token is empty"));
    }
    if token.len() > MAX_TOKEN_BYTES {
        return Err(Refusal::Unauthenticated("the bearer token is too long"));
    }
    Ok(token)
}

/// The RBAC verb of a request, as the API server names it for
/// non-resource URLs (HEAD is a get).
pub fn verb(method: &Method) -> String {
    if method == Method::GET || method == Method::HEAD {
        "get".to_string()
    } else {
        method.as_str().to_ascii_lowercase()
    }
}

fn access_key(user: &User, verb: &str, path: &str) -> [u8; 32] {
    let mut h = Sha256::new();
    // Length-prefixed fields: no two different tuples hash the same input.
    let mut field = |s: &str| {
        h.update((s.len() as u64).to_le_bytes());
        h.update(s.as_bytes());
    };
    field(&user.name);
    field(&user.uid);
    field(&user.groups.len().to_string());
    for g in &user.groups {
        field(g);
    }
    for (k, vs) in &user.extra {
        field(k);
        field(&vs.len().to_string());
        for v in vs {
            field(v);
        }
    }
    field(verb);
    field(path);
    h.finalize().into()
}

impl From<CallError> for Refusal {
    fn from(err: CallError) -> Refusal {
        match err {
            CallError::Busy => Refusal::Busy,
            CallError::Failed(Failure::Unanswered) => Refusal::Unavailable,
            CallError::Failed(Failure::Refused) => Refusal::ReviewRefused,
        }
    }
}

impl Reviews {
    /// Whether the bearer of `token` may `verb` `path`: the API server's
    /// reviews, through the caches.
    async fn decide(
        &self,
        health: &Arc<Health>,
        token: &str,
        verb: &str,
        path: &str,
    ) -> Result<(), Refusal> {
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        // An older answer stands in only for the scrape, and only when the
        // API server did not answer: never for a full local queue or a
        // refusal of the exporter's own review.
        let may_fall_back = |err: &CallError| {
            path == FALLBACK_PATH && *err == CallError::Failed(Failure::Unanswered)
        };
        let identity = self
            .tokens
            .get(
                &key,
                |id| match id {
                    Identity::Authenticated(_) => TOKEN_TTL,
                    Identity::Rejected => REJECTED_TTL,
                },
                may_fall_back,
                || {
                    let (reviewer, token) = (self.reviewer.clone(), token.to_owned());
                    self.call(health, Review::Token, async move {
                        reviewer.token(&token).await
                    })
                },
            )
            .await?;
        let user = match identity.value() {
            Identity::Authenticated(u) => u.clone(),
            Identity::Rejected => {
                return Err(Refusal::Unauthenticated(
                    "the API server does not accept the token",
                ))
            }
        };
        let allowed = self
            .access
            .get(
                &access_key(&user, verb, path),
                |ok| if *ok { ALLOWED_TTL } else { DENIED_TTL },
                may_fall_back,
                || {
                    let reviewer = self.reviewer.clone();
                    let (user, verb, path) = (user.clone(), verb.to_owned(), path.to_owned());
                    self.call(health, Review::Access, async move {
                        reviewer.access(&user, &verb, &path).await
                    })
                },
            )
            .await?;
        if matches!(allowed, Found::Fallback(_)) || matches!(identity, Found::Fallback(_)) {
            tracing::debug!(
                path,
                "API server not answering reviews; a cached decision stands in"
            );
        }
        if *allowed.value() {
            // Only now may the identity displace another allowed one.
            self.tokens.promote(&key);
            Ok(())
        } else {
            Err(Refusal::Forbidden {
                user: user.name,
                path: path.to_string(),
            })
        }
    }
}

#[cfg(test)]
mod tests;
