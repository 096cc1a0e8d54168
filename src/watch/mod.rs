//! Watchers: one list-then-watch loop per (resource, namespace), trimmed and
//! fed to the index.
//!
//! A failing request backs off and retries forever; its failure is reported
//! through `captf_lock_exporter_watch_up`, `watch_errors_total` and one log
//! line per episode, never by ending the process (see `list_watch`).
//! Where each resource is served comes from the resource table
//! ([`resources`]); what the watches share besides the index (the API
//! link, watch-list support, the wire format) is their [`Context`].

mod encoding;
mod follow;
pub mod ingest;
mod list_watch;
mod lock_id;
pub mod proto;
mod request;
pub mod resources;
mod sink;
pub mod slim;
mod state;
mod timing;
pub mod trim;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use kube::api::{Api, ApiResource, GroupVersionKind};
use kube::Client;

use crate::client::ApiLink;
use crate::core::kind::Kind;
use crate::health::ErrorReason;
use crate::index::{Index, IndexResource, Resource};
use crate::shared::Shared;
use ingest::Ingest;
pub use list_watch::Exit;
pub use request::reason_of;
pub use resources::{ResourceSpec, Selectors, Served};
use sink::Sink;
pub use timing::Timing;

pub use encoding::Wire;
pub use follow::INITIAL_EVENTS_END;

/// What every watch shares besides the index, made once by `main`: what
/// the API server's answers taught about the connection (Retry-After, a
/// pool to drop after a timeout), whether it streams watch-lists, and
/// whether watches of built-in kinds ask for protobuf.
#[derive(Debug, Default)]
pub struct Context {
    /// The connection's state, shared with the client and pod reads.
    pub api: Arc<ApiLink>,
    /// Whether whole states come from streaming watch-lists.
    pub watch_list: WatchList,
    /// Whether watches of built-in kinds ask for protobuf.
    pub wire: Wire,
}

/// Whether the API server streams watch-lists, learned once per process
/// and shared by every watch: all start with a streaming watch-list, and
/// the first definitive sign that the server does not stream one (it
/// refuses the parameters, or answers an ordinary watch) makes every watch
/// list in pages from then on. A watch-list cut short (an early end,
/// silence) is no such sign: that sync alone is paged, as client-go's
/// reflector lists after any failed watch-list and streams the next time.
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

/// The watches of `resources` (`--skip-resources` leaves the others out)
/// for the namespaces in `scopes` (None: all namespaces), named, for the
/// caller to start (under the supervisor). Each resource watched is
/// registered with [`Shared::health`] here; one left out has no
/// `watch_up` series, no error counters and no say in readiness.
pub fn watches(
    client: Client,
    shared: Arc<Shared>,
    ctx: Arc<Context>,
    scopes: Vec<Option<String>>,
    resources: &[Resource],
    timing: Timing,
) -> Vec<(
    String,
    impl std::future::Future<Output = ()> + Send + 'static,
)> {
    let mut tasks = Vec::new();
    let scopes_of = |resource: Resource| match resource.cluster_scoped() {
        true => vec![None],
        false => scopes.clone(),
    };
    for &resource in resources {
        for scope in scopes_of(resource) {
            shared
                .health
                .register(resource, scope.as_deref().unwrap_or(""));
            let name = match &scope {
                Some(ns) => format!("watch {} in {ns}", resource.as_str()),
                None => format!("watch {}", resource.as_str()),
            };
            let w = Watcher {
                client: client.clone(),
                shared: shared.clone(),
                ctx: ctx.clone(),
                timing,
            };
            tasks.push((name, watch_resource(w, resource, scope.clone())));
        }
    }
    tasks
}

/// What one watch task holds.
struct Watcher {
    client: Client,
    shared: Arc<Shared>,
    ctx: Arc<Context>,
    timing: Timing,
}

impl Watcher {
    /// Lists and watches `api` with `ingest` until `give_up` accepts an
    /// error before the first sync.
    async fn run<K, T, F>(
        &self,
        ingest: Ingest<T>,
        api: Api<K>,
        selectors: Selectors,
        trim: F,
        give_up: impl Fn(&kube::Error) -> bool,
    ) -> Exit
    where
        K: kube::Resource + Clone + serde::de::DeserializeOwned + proto::Protobuf,
        K: std::fmt::Debug + Send + 'static,
        Index: IndexResource<T>,
        F: Fn(&K) -> sink::Item<T>,
    {
        let sink = Sink {
            shared: &self.shared,
            ctx: &self.ctx,
            ingest,
        };
        list_watch::run(sink, api, selectors, self.timing, trim, give_up).await
    }
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
    w: &Watcher,
    resource: Resource,
    ns: Option<String>,
    scope: <Index as IndexResource<T>>::Scope,
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
    let spec = resource.spec();
    let version = spec.versions.first().copied().unwrap_or("v1");
    let api: Api<K> = api_of(&w.client, ns.as_deref(), resource, version);
    let ingest = Ingest::new(&w.shared, resource, ns, scope);
    w.run(ingest, api, spec.selectors(true), trim, never).await;
}

async fn watch_resource(w: Watcher, resource: Resource, ns: Option<String>) {
    let s = &w.shared;
    let spec = resource.spec();
    match resource {
        Resource::Leases => {
            let scope = ns.clone();
            watch_simple::<trim::LeaseObject, _, _>(&w, resource, ns, scope, trim::lease).await
        }
        Resource::Pods => {
            let scope = ns.clone();
            watch_simple::<trim::PodObject, _, _>(&w, resource, ns, scope, trim::pod).await
        }
        Resource::Nodes => {
            // Cluster-scoped: one watch, whatever the namespace scopes.
            watch_simple::<trim::NodeObject, _, _>(&w, resource, None, None, trim::node).await
        }
        Resource::TerraformClusters
        | Resource::TerraformMachines
        | Resource::TerraformMachinePools => {
            let kind = resource.kind().unwrap_or(Kind::TerraformMachine);
            let scope = (kind, ns.clone());
            let trim = move |o: &trim::TerraformObject| trim::terraform_object(kind, o);
            watch_simple(&w, resource, ns, scope, trim).await
        }
        Resource::TerraformPlans => {
            let scope = ns.clone();
            let trim = trim::terraform_plan;
            watch_simple::<trim::TerraformPlanObject, _, _>(&w, resource, ns, scope, trim).await
        }
        Resource::Clusters => loop {
            // The first version the server lists is watched; a 404 before
            // the first list tries the next.
            for version in spec.versions {
                let api: Api<trim::CapiClusterObject> =
                    api_of(&w.client, ns.as_deref(), resource, version);
                let ingest = Ingest::new(s, resource, ns.clone(), ns.clone());
                let sel = spec.selectors(true);
                let Exit::GaveUp(err) = w
                    .run(ingest, api, sel, trim::capi_cluster, is_not_found)
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
            tokio::time::sleep(w.timing.backoff_max_config).await;
        },
        Resource::Events => {
            // Filter server side where the API server supports the field
            // selector; a 400 for it falls back to client-side filtering.
            let api: Api<trim::EventObject> = api_of(&w.client, ns.as_deref(), resource, "v1");
            let ingest = Ingest::new(s, resource, ns.clone(), ns.clone());
            let trim = trim::force_unlock_event;
            let sel = spec.selectors(true);
            let Exit::GaveUp(_) = w.run(ingest, api.clone(), sel, trim, is_bad_request).await;
            tracing::info!(
                "the API server rejects the Event field selector; filtering Events client side"
            );
            let ingest = Ingest::new(s, resource, ns.clone(), ns);
            w.run(ingest, api, spec.selectors(false), trim, never).await;
        }
    }
}
