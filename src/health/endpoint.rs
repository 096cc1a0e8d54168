//! Counters of the admin endpoint's own security: what the authentication
//! and authorization of each protected request decided, the review calls
//! that decision cost the API server, and certificate reloads. Closed label
//! sets, every series present at 0.

use std::fmt::{self, Write as _};

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};

use super::{value, Health};

/// What happened to one request for a protected path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AuthResult {
    /// Authenticated and allowed.
    Allowed,
    /// No bearer token, or the API server does not accept it: 401.
    Unauthenticated,
    /// Authenticated, but RBAC does not allow `get` on the path: 403.
    Forbidden,
    /// The API server could not be asked and nothing usable was cached: 503.
    Unavailable,
}

impl AuthResult {
    /// Every result, in label order.
    pub const ALL: [AuthResult; 4] = [
        AuthResult::Allowed,
        AuthResult::Unauthenticated,
        AuthResult::Forbidden,
        AuthResult::Unavailable,
    ];

    /// The `result` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            AuthResult::Allowed => "allowed",
            AuthResult::Unauthenticated => "unauthenticated",
            AuthResult::Forbidden => "forbidden",
            AuthResult::Unavailable => "unavailable",
        }
    }
}

/// Which review the API server was asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Review {
    /// `authentication.k8s.io/v1` TokenReview.
    Token,
    /// `authorization.k8s.io/v1` SubjectAccessReview.
    Access,
}

impl Review {
    /// Every review, in label order.
    pub const ALL: [Review; 2] = [Review::Token, Review::Access];

    /// The `review` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Review::Token => "token",
            Review::Access => "access",
        }
    }
}

/// How a review call or a certificate reload ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// It was answered (whatever the answer) / the new certificate is served.
    Ok,
    /// It failed; the previous answer or certificate stays in use if any.
    Error,
}

impl Outcome {
    /// Both outcomes, in label order.
    pub const ALL: [Outcome; 2] = [Outcome::Ok, Outcome::Error];

    /// The `result` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Error => "error",
        }
    }
}

macro_rules! label_value {
    ($($t:ty),*) => {$(
        impl EncodeLabelValue for $t {
            fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> fmt::Result {
                encoder.write_str(self.as_str())
            }
        }
    )*};
}
label_value!(AuthResult, Review, Outcome);

/// `{result}` of `http_auth_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct AuthLabels {
    pub(super) result: AuthResult,
}

/// `{review, result}` of `auth_reviews_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ReviewLabels {
    pub(super) review: Review,
    pub(super) result: Outcome,
}

/// `{result}` of `tls_reloads_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct OutcomeLabels {
    pub(super) result: Outcome,
}

impl Health {
    /// Counts the decision on one request for a protected path.
    pub fn on_auth(&self, result: AuthResult) {
        self.counters
            .auth
            .get_or_create(&AuthLabels { result })
            .inc();
        self.moved();
    }

    /// Counts one review call to the API server (a cache miss).
    pub fn on_review(&self, review: Review, result: Outcome) {
        self.counters
            .reviews
            .get_or_create(&ReviewLabels { review, result })
            .inc();
        self.moved();
    }

    /// Counts one certificate reload (files that changed).
    pub fn on_tls_reload(&self, result: Outcome) {
        self.counters
            .tls_reloads
            .get_or_create(&OutcomeLabels { result })
            .inc();
        self.moved();
    }

    /// Decisions counted so far for `result`.
    pub fn auth(&self, result: AuthResult) -> u64 {
        value(&self.counters.auth, &AuthLabels { result })
    }

    /// Review calls counted so far.
    pub fn reviews(&self, review: Review, result: Outcome) -> u64 {
        value(&self.counters.reviews, &ReviewLabels { review, result })
    }
}
