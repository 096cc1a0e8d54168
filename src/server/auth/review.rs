//! The two questions the admin endpoint asks the API server: who is this
//! bearer token (TokenReview), and may that user `get` this path
//! (SubjectAccessReview on a non-resource URL, or with `--auth-service`,
//! on a subresource of the exporter's Service: [`access_spec`]). They are
//! the only requests
//! of the exporter that are not get, list or watch; they create nothing
//! that is stored (the API server answers a review and keeps nothing).

use std::collections::BTreeMap;

use futures::future::BoxFuture;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};

/// The user a token belongs to, as the API server reports it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct User {
    /// `user.username`.
    pub name: String,
    /// `user.uid`.
    pub uid: String,
    /// `user.groups`.
    pub groups: Vec<String>,
    /// `user.extra` (scopes, the pod a ServiceAccount token is bound to...).
    pub extra: BTreeMap<String, Vec<String>>,
}

/// What a TokenReview said.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Identity {
    /// The token is valid for this user.
    Authenticated(User),
    /// The API server does not accept the token.
    Rejected,
}

/// Why a review got no usable answer; it decides whether an older answer
/// may stand in (see [`super::Guard`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// The API server did not answer: no answer in time, a transport
    /// error, a 5xx, or 429 (it is overloaded). Waiting may help.
    Unanswered,
    /// The API server answered and refused the review itself: 401 or 403
    /// (the exporter lost its own right to create reviews), or another
    /// 4xx. Waiting does not help; only the exporter's setup does.
    Refused,
}

/// A review the API server did not answer, or refused.
#[derive(Debug, thiserror::Error)]
#[error("{review} failed: {message}")]
pub struct ReviewError {
    /// Which review.
    pub review: &'static str,
    /// Unanswered or refused.
    pub kind: Failure,
    /// What went wrong (never contains the token).
    pub message: String,
}

/// A review's answer, once the API server (or the tests' fake) gives it.
pub type Answer<'a, T> = BoxFuture<'a, Result<T, ReviewError>>;

/// Asks the API server; the tests' fake answers from a table.
pub trait Reviewer: Send + Sync {
    /// Who holds `token`.
    fn token<'a>(&'a self, token: &'a str) -> Answer<'a, Identity>;
    /// Whether `user` may `verb` the non-resource URL `path`.
    fn access<'a>(&'a self, user: &'a User, verb: &'a str, path: &'a str) -> Answer<'a, bool>;
}

/// The Service whose subresources stand for the paths
/// (`--auth-service <namespace>/<name>`), as kube-rbac-proxy's
/// `resourceAttributes` do: `get` on `services/metrics` of it opens
/// `/metrics`, `get` on `services/pages` opens `/` and `/locks/...`.
/// RBAC then grants a path per namespace and per Service (a Role with
/// `resourceNames`), not to everyone allowed a non-resource URL of that
/// name cluster-wide.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceTarget {
    /// The Service's namespace.
    pub namespace: String,
    /// The Service's name.
    pub name: String,
}

/// `--auth-service`: the Service whose subresources stand for the paths,
/// or none (the non-resource paths).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuthService(pub Option<ServiceTarget>);

impl AuthService {
    /// `<namespace>/<name>`, both DNS-1123 labels (what a namespace and a
    /// Service name are); empty: none.
    pub fn parse(s: &str) -> Result<AuthService, String> {
        let s = s.trim();
        if s.is_empty() {
            return Ok(AuthService(None));
        }
        let label = |v: &str| {
            !v.is_empty()
                && v.len() <= 63
                && v.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !v.starts_with('-')
                && !v.ends_with('-')
        };
        match s.split_once('/') {
            Some((ns, name)) if label(ns) && label(name) => Ok(AuthService(Some(ServiceTarget {
                namespace: ns.into(),
                name: name.into(),
            }))),
            _ => Err(format!(
                "{s:?}: expected <namespace>/<service>, each a DNS label (lowercase letters, digits, '-')"
            )),
        }
    }
}

/// The subresource of [`ServiceTarget`] a path stands for: `metrics` for
/// `/metrics`, `pages` for everything else the guard checks (`/`,
/// `/locks/...`; any other path is answered 404 once allowed).
pub fn subresource_of(path: &str) -> &'static str {
    if path == "/metrics" {
        "metrics"
    } else {
        "pages"
    }
}

/// The SubjectAccessReview asking whether `user` may `verb` `path`: on the
/// non-resource URL, or with `service` on its subresource for the path.
pub fn access_spec(
    user: &User,
    verb: &str,
    path: &str,
    service: Option<&ServiceTarget>,
) -> SubjectAccessReviewSpec {
    let (non_resource, resource) = match service {
        None => (
            Some(NonResourceAttributes {
                path: Some(path.to_string()),
                verb: Some(verb.to_string()),
            }),
            None,
        ),
        Some(s) => (
            None,
            Some(ResourceAttributes {
                namespace: Some(s.namespace.clone()),
                verb: Some(verb.to_string()),
                group: Some(String::new()),
                version: Some("v1".into()),
                resource: Some("services".into()),
                subresource: Some(subresource_of(path).into()),
                name: Some(s.name.clone()),
                ..ResourceAttributes::default()
            }),
        ),
    };
    SubjectAccessReviewSpec {
        user: Some(user.name.clone()),
        uid: (!user.uid.is_empty()).then(|| user.uid.clone()),
        groups: Some(user.groups.clone()),
        extra: (!user.extra.is_empty()).then(|| user.extra.clone()),
        non_resource_attributes: non_resource,
        resource_attributes: resource,
    }
}

/// [`Reviewer`] over the exporter's own client. The guard bounds each
/// call in time; this only asks.
#[derive(Clone)]
pub struct KubeReviewer {
    client: kube::Client,
    audiences: Vec<String>,
    service: Option<ServiceTarget>,
}

impl KubeReviewer {
    /// Reviews through `client`, for the API server's own audiences.
    pub fn new(client: kube::Client) -> Self {
        KubeReviewer {
            client,
            audiences: Vec::new(),
            service: None,
        }
    }

    /// Asks about `service`'s subresources instead of the non-resource
    /// paths ([`access_spec`]); None: the paths.
    pub fn with_service(mut self, service: Option<ServiceTarget>) -> Self {
        self.service = service;
        self
    }

    /// Accepts only tokens issued for one of `audiences` (TokenReview
    /// `spec.audiences`; empty: the API server's own audiences).
    pub fn with_audiences(mut self, audiences: Vec<String>) -> Self {
        self.audiences = audiences;
        self
    }

    async fn create<K>(&self, review: &'static str, object: &K) -> Result<K, ReviewError>
    where
        K: kube::Resource<Scope = k8s_openapi::ClusterResourceScope>
            + Clone
            + serde::Serialize
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
        K::DynamicType: Default,
    {
        let api: Api<K> = Api::all(self.client.clone());
        api.create(&PostParams::default(), object)
            .await
            .map_err(|err| ReviewError {
                review,
                kind: failure(&err),
                message: describe(&err),
            })
    }

    /// Whether an authenticated answer is for this exporter: with
    /// audiences asked for, the answer must name one of them. An answer
    /// naming none means the API server's own audience (the TokenReview
    /// API's rule), which is not one asked for.
    fn for_us(&self, answered: Option<&Vec<String>>) -> bool {
        self.audiences.is_empty()
            || answered.is_some_and(|got| got.iter().any(|a| self.audiences.contains(a)))
    }
}

/// Whether an error means the API server did not answer (worth waiting
/// for) or refused the review (the exporter's setup is wrong).
fn failure(err: &kube::Error) -> Failure {
    match err {
        kube::Error::Api(status) if status.code == 429 || status.code >= 500 => Failure::Unanswered,
        kube::Error::Api(_) => Failure::Refused,
        _ => Failure::Unanswered,
    }
}

/// An error of a review call in words that name the fix where there is one.
fn describe(err: &kube::Error) -> String {
    match err {
        kube::Error::Api(status) if status.code == 403 => format!(
            "the exporter may not create it ({}); its ClusterRole needs create on tokenreviews (authentication.k8s.io) and subjectaccessreviews (authorization.k8s.io)",
            status.message
        ),
        kube::Error::Api(status) => format!("{} {}", status.code, status.message),
        other => other.to_string(),
    }
}

impl Reviewer for KubeReviewer {
    fn token<'a>(&'a self, token: &'a str) -> Answer<'a, Identity> {
        Box::pin(async move {
            let review = TokenReview {
                spec: TokenReviewSpec {
                    token: token.to_string(),
                    audiences: (!self.audiences.is_empty()).then(|| self.audiences.clone()),
                },
                ..Default::default()
            };
            let answer = self.create("TokenReview", &review).await?;
            let status = answer.status.unwrap_or_default();
            if status.authenticated != Some(true) || !self.for_us(status.audiences.as_ref()) {
                return Ok(Identity::Rejected);
            }
            let user = status.user.unwrap_or_default();
            Ok(Identity::Authenticated(User {
                name: user.username.unwrap_or_default(),
                uid: user.uid.unwrap_or_default(),
                groups: user.groups.unwrap_or_default(),
                extra: user.extra.unwrap_or_default(),
            }))
        })
    }

    fn access<'a>(&'a self, user: &'a User, verb: &'a str, path: &'a str) -> Answer<'a, bool> {
        Box::pin(async move {
            let review = SubjectAccessReview {
                spec: access_spec(user, verb, path, self.service.as_ref()),
                ..Default::default()
            };
            let answer = self.create("SubjectAccessReview", &review).await?;
            Ok(answer
                .status
                .is_some_and(|s| s.allowed && !s.denied.unwrap_or(false)))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_review_asks_about_the_path_or_the_services_subresource() {
        let user = User {
            name: "system:serviceaccount:monitoring:prometheus".into(),
            groups: vec!["system:serviceaccounts".into()],
            ..User::default()
        };
        let plain = access_spec(&user, "get", "/metrics", None);
        assert_eq!(
            plain.non_resource_attributes,
            Some(NonResourceAttributes {
                path: Some("/metrics".into()),
                verb: Some("get".into()),
            })
        );
        assert_eq!(plain.resource_attributes, None);
        let svc = ServiceTarget {
            namespace: "captf-system".into(),
            name: "captf-lock-exporter".into(),
        };
        for (path, sub) in [
            ("/metrics", "metrics"),
            ("/", "pages"),
            ("/locks/team-a/TerraformMachine/web", "pages"),
        ] {
            let spec = access_spec(&user, "get", path, Some(&svc));
            assert_eq!(spec.non_resource_attributes, None, "{path}");
            let r = spec.resource_attributes.unwrap_or_default();
            assert_eq!(
                (
                    r.namespace.as_deref(),
                    r.group.as_deref(),
                    r.resource.as_deref(),
                    r.subresource.as_deref(),
                    r.name.as_deref(),
                    r.verb.as_deref()
                ),
                (
                    Some("captf-system"),
                    Some(""),
                    Some("services"),
                    Some(sub),
                    Some("captf-lock-exporter"),
                    Some("get")
                ),
                "{path}"
            );
            assert_eq!(spec.user.as_deref(), Some(user.name.as_str()));
        }
    }

    #[test]
    fn the_service_flag_takes_namespace_and_name() {
        assert_eq!(AuthService::parse(" "), Ok(AuthService(None)));
        assert_eq!(
            AuthService::parse("captf-system/captf-lock-exporter"),
            Ok(AuthService(Some(ServiceTarget {
                namespace: "captf-system".into(),
                name: "captf-lock-exporter".into()
            })))
        );
        for bad in [
            "svc", "/svc", "ns/", "Ns/svc", "ns/svc/x", "ns/-svc", "ns/s_c",
        ] {
            assert!(AuthService::parse(bad).is_err(), "{bad}");
        }
    }
}
