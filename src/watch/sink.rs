//! Where a watch's results go: [`Sink`] hands trimmed objects to the index
//! (through [`Ingest`]) and every request's outcome to health, and says so
//! in the log, once per failure episode.
//!
//! Apart from the loop ([`super::list_watch`]) and [`super::follow`],
//! which both report through it, because what an operator reads is decided
//! here: which failure gets which hint (a CRD not installed, RBAC missing,
//! an API server that has just started, expired credentials), and that a
//! failure repeated within one episode is said only at debug level.

use std::time::Duration;

use kube::runtime::watcher;

use crate::health::{ErrorReason, Success, SyncMode};
use crate::index::{Index, IndexResource, Resource};
use crate::shared::Shared;
use crate::watch::ingest::Ingest;
use crate::watch::resources::Served;
use crate::watch::trim::Trimmed;
use crate::watch::Context;

/// The trimmed form of a watch object of item type `T`.
pub(super) type Item<T> = Trimmed<<Index as IndexResource<T>>::Key, T>;

/// `plural.group` as RBAC and kubectl name a resource (`pods` for the
/// core group).
fn rbac_name(resource: Resource) -> String {
    let spec = resource.spec();
    if spec.group.is_empty() {
        spec.plural.to_string()
    } else {
        format!("{}.{}", spec.plural, spec.group)
    }
}

/// How long after the API server came back a 403 may be its authorizer
/// still loading.
const JUST_RESTARTED: Duration = Duration::from_secs(30);

/// What the loop reports to: the index (through `ingest`) and health,
/// and what it reads of the watches' shared [`Context`].
pub(super) struct Sink<'a, T>
where
    Index: IndexResource<T>,
{
    pub(super) shared: &'a Shared,
    pub(super) ctx: &'a Context,
    pub(super) ingest: Ingest<T>,
}

impl<T> Sink<'_, T>
where
    Index: IndexResource<T>,
{
    /// A whole state of the scope was synced in `mode`: counted, and
    /// said at debug level.
    pub(super) fn synced(&self, mode: SyncMode) {
        let resource = self.ingest.resource();
        self.shared.health.on_sync_mode(resource, mode);
        tracing::debug!(
            resource = resource.as_str(),
            scope = self.ingest.namespace(),
            mode = mode.as_str(),
            "whole state synced"
        );
    }

    /// A request succeeded: health hears it, and a watch that was down
    /// says how long it was.
    pub(super) fn success(&self) {
        if let Success::Recovered(after) = self.shared.health.on_success(self.ingest.watch_id()) {
            self.log_recovered(after);
        }
    }

    fn log_recovered(&self, after: Duration) {
        let resource = self.ingest.resource();
        tracing::info!(
            resource = resource.as_str(),
            scope = self.ingest.namespace(),
            down_seconds = after.as_secs(),
            "watch recovered"
        );
    }

    /// A request (`what`: list or watch) failed for `reason`: counted by
    /// health; the first failure of an episode is a warning with the hint
    /// for its reason, a repeat is said at debug level.
    pub(super) fn failure(&self, reason: ErrorReason, what: &str, detail: &dyn std::fmt::Display) {
        let resource = self.ingest.resource();
        if !self.shared.health.on_error(self.ingest.watch_id(), reason) {
            tracing::debug!(resource = resource.as_str(), scope = self.ingest.namespace(), reason = reason.as_str(), error = %detail, "{what} failed again");
            return;
        }
        match reason {
            ErrorReason::NotFound => tracing::warn!(
                resource = resource.as_str(),
                scope = self.ingest.namespace(),
                "resource not served by the API server (CRD not installed?); retrying"
            ),
            // A kube-apiserver that has just started refuses for a few
            // seconds until its authorizer has loaded RBAC; say so only
            // when the server was unreachable a moment ago, else the
            // reader would look there instead of at the missing rule.
            ErrorReason::Forbidden if self.ctx.api.came_back_within(JUST_RESTARTED) => tracing::warn!(
                resource = resource.as_str(),
                scope = self.ingest.namespace(),
                reason = reason.as_str(),
                "access denied just after the API server came back (a kube-apiserver that just started refuses for a few seconds until its authorization cache is loaded); retrying"
            ),
            ErrorReason::Forbidden => tracing::warn!(
                resource = resource.as_str(),
                scope = self.ingest.namespace(),
                reason = reason.as_str(),
                error = %detail,
                "access denied: RBAC does not let this exporter's identity get, list and watch {} in {}; grant them (the chart's ClusterRole, or a Role in each watched namespace); retrying",
                rbac_name(resource),
                if self.ingest.namespace().is_empty() { "all namespaces" } else { self.ingest.namespace() }
            ),
            ErrorReason::Unauthorized => tracing::warn!(
                resource = resource.as_str(),
                scope = self.ingest.namespace(),
                reason = reason.as_str(),
                "the API server does not accept the exporter's credentials (401): the token expired or was revoked, or the kubeconfig is wrong; retrying (a token file is read again)"
            ),
            _ => tracing::warn!(
                resource = resource.as_str(),
                scope = self.ingest.namespace(),
                reason = reason.as_str(),
                error = %detail,
                "{what} failed; data of this resource is not current until it recovers; retrying with backoff"
            ),
        }
    }

    /// Hands one event of the scope to the index.
    pub(super) fn event(&mut self, ev: watcher::Event<Item<T>>) {
        self.ingest.event(self.shared, ev);
    }
}
