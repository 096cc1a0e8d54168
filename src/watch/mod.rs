//! Watchers: one list-then-watch loop per (resource, namespace), trimmed and
//! fed to the index.
//!
//! A failing request backs off and retries forever; its failure is reported
//! through `captf_lock_exporter_watch_up`, `watch_errors_total` and one log
//! line per episode, never by ending the process (see [`list_watch`]).
//! Where each resource is served comes from the resource table
//! ([`Resource::spec`]).

mod encoding;
mod follow;
pub mod ingest;
pub mod list_watch;
pub mod proto;
mod request;
mod sink;
pub mod slim;
mod state;
mod timing;
pub mod trim;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use kube::api::{Api, ApiResource, GroupVersionKind};
use kube::Client;

use crate::core::kind::Kind;
use crate::health::ErrorReason;
use crate::index::{Index, IndexResource, Resource};
use crate::shared::Shared;
use ingest::Ingest;
pub use list_watch::Exit;
pub use request::{reason_of, Selectors};
pub use timing::Timing;

pub use encoding::Wire;
pub use follow::INITIAL_EVENTS_END;

/// Whether the API server streams watch-lists, learned once per process
/// and shared by every watch: all start with a streaming watch-list, and
/// the first sign that the server does not stream one (it refuses the
/// parameters, or answers an ordinary watch) makes every watch list in
/// pages from then on, as client-go falls back to a list.
#[derive(Debug)]
pub struct WatchList {
    paged: AtomicBool,
}

impl Default for WatchList {
    fn default() -> Self {
        WatchList {
            paged: AtomicBool::new(false),
        }
    }
}

impl WatchList {
    /// True while whole states come from streaming watch-lists.
    pub fn streams(&self) -> bool {
        !self.paged.load(Ordering::Relaxed)
    }

    /// Lists in pages from the start (`--watch-list=false`).
    pub fn disable(&self) {
        self.paged.store(true, Ordering::Relaxed);
    }

    /// The server does not stream watch-lists (`why`, seen on a watch of
    /// `resource`): every watch lists in pages from now on; said once.
    pub fn fall_back(&self, resource: Resource, why: &str) {
        if !self.paged.swap(true, Ordering::Relaxed) {
            tracing::info!(
                resource = resource.as_str(),
                reason = why,
                "the API server does not stream watch-lists; every watch lists in pages of 500 instead"
            );
        }
    }
}

/// The API of `resource` at `version`, in `ns` or across all namespaces.
pub fn api_of<K>(client: &Client, ns: Option<&str>, resource: Resource, version: &str) -> Api<K>
where
    K: kube::Resource<DynamicType = ApiResource, Scope = kube::core::DynamicResourceScope>,
{
    let spec = resource.spec();
    let gvk = GroupVersionKind::gvk(spec.group, version, spec.kind);
    let ar = ApiResource::from_gvk_with_plural(&gvk, spec.plural);
    match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    }
}

fn selectors(resource: Resource, with_fields: bool) -> Selectors {
    let spec = resource.spec();
    Selectors {
        labels: spec.label_selector,
        fields: spec.field_selector.filter(|_| with_fields),
    }
}

/// Spawns every watch for the namespaces in `scopes` (None: all namespaces)
/// and returns their tasks, named, for the supervisor.
pub fn spawn_all(
    client: Client,
    shared: Arc<Shared>,
    scopes: Vec<Option<String>>,
    timing: Timing,
) -> Vec<(String, tokio::task::JoinHandle<()>)> {
    spawn_watches(client, shared, scopes, &Resource::ALL, timing)
}

/// Spawns the watches of `resources` only (`--skip-resources` leaves the
/// others out) for the namespaces in `scopes`. A resource left out is never
/// registered with [`Shared::health`], so it has no `watch_up` series, no
/// error counters and no say in readiness.
pub fn spawn_watches(
    client: Client,
    shared: Arc<Shared>,
    scopes: Vec<Option<String>>,
    resources: &[Resource],
    timing: Timing,
) -> Vec<(String, tokio::task::JoinHandle<()>)> {
    let mut tasks = Vec::new();
    for scope in scopes {
        for &resource in resources {
            shared
                .health
                .register(resource, scope.as_deref().unwrap_or(""));
            let name = match &scope {
                Some(ns) => format!("watch {} in {ns}", resource.as_str()),
                None => format!("watch {}", resource.as_str()),
            };
            let client = client.clone();
            let shared = shared.clone();
            let scope = scope.clone();
            let task = tokio::spawn(async move {
                watch_resource(client, shared, resource, scope, timing).await
            });
            tasks.push((name, task));
        }
    }
    tasks
}

fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

fn is_bad_request(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 400)
}

fn never(_: &kube::Error) -> bool {
    false
}

/// Watches one resource of a single-version group with its table selectors.
async fn watch_simple<K, T, F>(
    client: &Client,
    shared: &Shared,
    resource: Resource,
    ns: Option<String>,
    scope: <Index as IndexResource<T>>::Scope,
    timing: Timing,
    trim: F,
) where
    K: kube::Resource<DynamicType = ApiResource, Scope = kube::core::DynamicResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + proto::Protobuf
        + std::fmt::Debug
        + Send
        + 'static,
    Index: IndexResource<T>,
    F: Fn(&K) -> trim::Trimmed<<Index as IndexResource<T>>::Key, T>,
{
    let version = resource.spec().versions.first().copied().unwrap_or("v1");
    let api: Api<K> = api_of(client, ns.as_deref(), resource, version);
    let ingest = Ingest::new(shared, resource, ns, scope);
    let sel = selectors(resource, true);
    list_watch::run(shared, ingest, api, sel, timing, trim, never).await;
}

async fn watch_resource(
    client: Client,
    shared: Arc<Shared>,
    resource: Resource,
    ns: Option<String>,
    timing: Timing,
) {
    let s = &shared;
    match resource {
        Resource::Leases => {
            let scope = ns.clone();
            watch_simple::<trim::LeaseObject, _, _>(
                &client,
                s,
                resource,
                ns,
                scope,
                timing,
                trim::lease,
            )
            .await
        }
        Resource::Pods => {
            let scope = ns.clone();
            watch_simple::<trim::PodObject, _, _>(
                &client,
                s,
                resource,
                ns,
                scope,
                timing,
                trim::pod,
            )
            .await
        }
        Resource::TerraformClusters
        | Resource::TerraformMachines
        | Resource::TerraformMachinePools => {
            let kind = resource.kind().unwrap_or(Kind::TerraformMachine);
            let scope = (kind, ns.clone());
            let trim = move |o: &trim::TerraformObject| trim::terraform_object(kind, o);
            watch_simple(&client, s, resource, ns, scope, timing, trim).await
        }
        Resource::TerraformPlans => {
            let scope = ns.clone();
            watch_simple::<trim::TerraformPlanObject, _, _>(
                &client,
                s,
                resource,
                ns,
                scope,
                timing,
                trim::terraform_plan,
            )
            .await
        }
        Resource::Clusters => loop {
            // The first version the server lists is watched; a 404 before
            // the first list tries the next.
            for version in resource.spec().versions {
                let api: Api<trim::CapiClusterObject> =
                    api_of(&client, ns.as_deref(), resource, version);
                let ingest = Ingest::new(s, resource, ns.clone(), ns.clone());
                let sel = selectors(resource, true);
                let Exit::GaveUp(err) = list_watch::run(
                    s,
                    ingest,
                    api,
                    sel,
                    timing,
                    trim::capi_cluster,
                    is_not_found,
                )
                .await;
                tracing::debug!(version, error = %err, "CAPI Cluster version not served; trying the next");
            }
            // No version is served: CAPI is not installed (yet).
            let id = s.health.register(resource, ns.as_deref().unwrap_or(""));
            if s.health.on_error(id, ErrorReason::NotFound) {
                tracing::warn!(
                    resource = resource.as_str(),
                    namespace = ns.as_deref().unwrap_or(""),
                    "CAPI Clusters not served (v1beta2, v1beta1); timeouts fall back to the namespace's TerraformCluster; retrying"
                );
            }
            tokio::time::sleep(timing.backoff_max_config).await;
        },
        Resource::Events => {
            // Filter server side where the API server supports the field
            // selector; a 400 for it falls back to client-side filtering.
            let api: Api<trim::EventObject> = api_of(&client, ns.as_deref(), resource, "v1");
            let ingest = Ingest::new(s, resource, ns.clone(), ns.clone());
            let sel = selectors(resource, true);
            let trim = trim::force_unlock_event;
            let Exit::GaveUp(_) =
                list_watch::run(s, ingest, api.clone(), sel, timing, trim, is_bad_request).await;
            tracing::info!(
                "the API server rejects the Event field selector; filtering Events client side"
            );
            let ingest = Ingest::new(s, resource, ns.clone(), ns);
            let sel = selectors(resource, false);
            list_watch::run(s, ingest, api, sel, timing, trim, never).await;
        }
    }
}
