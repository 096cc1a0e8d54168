//! Watchers: one list-then-watch loop per (resource, namespace), trimmed and
//! fed to the index.
//!
//! A failing request backs off and retries forever; its failure is reported
//! through `captf_lock_exporter_watch_up`, `watch_errors_total` and one log
//! line per episode, never by ending the process (see [`list_watch`]).

pub mod list_watch;
pub mod trim;

use std::sync::Arc;

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::Client;

use crate::core::kind::{Kind, API_GROUP, API_VERSION};
use crate::health::ErrorReason;
use crate::index::Resource;
use crate::runtime::{Ingest, Shared};
pub use list_watch::{reason_of, Exit, Selectors, Timing};

/// CAPI's API group; v1beta2 first, v1beta1 on older installs.
const CAPI_GROUP: &str = "cluster.x-k8s.io";
const CAPI_VERSIONS: [&str; 2] = ["v1beta2", "v1beta1"];

fn api_for<K>(client: &Client, ns: Option<&str>, ar: &ApiResource) -> Api<K>
where
    K: kube::Resource<DynamicType = ApiResource, Scope = kube::core::DynamicResourceScope>,
{
    match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, ar),
        None => Api::all_with(client.clone(), ar),
    }
}

fn typed_api<K>(
    client: &Client,
    ns: Option<&str>,
    group: &str,
    version: &str,
    kind: &str,
    plural: &str,
) -> Api<K>
where
    K: kube::Resource<DynamicType = ApiResource, Scope = kube::core::DynamicResourceScope>,
{
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let ar = ApiResource::from_gvk_with_plural(&gvk, plural);
    api_for(client, ns, &ar)
}

/// Spawns every watch for the namespaces in `scopes` (None: all namespaces)
/// and returns their tasks, named, for the supervisor.
pub fn spawn_all(
    client: Client,
    shared: Arc<Shared>,
    scopes: Vec<Option<String>>,
    timing: Timing,
) -> Vec<(String, tokio::task::JoinHandle<()>)> {
    let mut tasks = Vec::new();
    for scope in scopes {
        for resource in Resource::ALL {
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

async fn watch_resource(
    client: Client,
    shared: Arc<Shared>,
    resource: Resource,
    scope: Option<String>,
    timing: Timing,
) {
    let ns = scope.as_deref();
    let never = |_: &kube::Error| false;
    match resource {
        Resource::Leases => {
            let api: Api<trim::LeaseObject> =
                typed_api(&client, ns, "coordination.k8s.io", "v1", "Lease", "leases");
            let sel = Selectors {
                labels: Some(trim::LEASE_SELECTOR),
                fields: None,
            };
            let ingest = Ingest::new(&shared, resource, scope.clone());
            list_watch::run(&shared, ingest, api, sel, timing, trim::lease, never).await;
        }
        Resource::Pods => {
            let api: Api<trim::PodObject> = typed_api(&client, ns, "", "v1", "Pod", "pods");
            let sel = Selectors {
                labels: Some(trim::POD_SELECTOR),
                fields: None,
            };
            let ingest = Ingest::new(&shared, resource, scope.clone());
            list_watch::run(&shared, ingest, api, sel, timing, trim::pod, never).await;
        }
        Resource::TerraformClusters
        | Resource::TerraformMachines
        | Resource::TerraformMachinePools => {
            let kind = resource.kind().unwrap_or(Kind::TerraformMachine);
            let api: Api<DynamicObject> = typed_api(
                &client,
                ns,
                API_GROUP,
                API_VERSION,
                kind.as_str(),
                kind.plural(),
            );
            let ingest = Ingest::new(&shared, resource, scope.clone());
            let trim = move |o: &DynamicObject| trim::terraform_object(kind, o);
            list_watch::run(
                &shared,
                ingest,
                api,
                Selectors::default(),
                timing,
                trim,
                never,
            )
            .await;
        }
        Resource::Clusters => loop {
            // v1beta2 first; a 404 before the first list tries v1beta1.
            for version in CAPI_VERSIONS {
                let api: Api<DynamicObject> =
                    typed_api(&client, ns, CAPI_GROUP, version, "Cluster", "clusters");
                let ingest = Ingest::new(&shared, resource, scope.clone());
                let Exit::GaveUp(err) = list_watch::run(
                    &shared,
                    ingest,
                    api,
                    Selectors::default(),
                    timing,
                    trim::capi_cluster,
                    is_not_found,
                )
                .await;
                tracing::debug!(version, error = %err, "CAPI Cluster version not served; trying the next");
            }
            // Neither version is served: CAPI is not installed (yet).
            let id = shared
                .health
                .register(resource, scope.as_deref().unwrap_or(""));
            if shared.health.on_error(id, ErrorReason::NotFound) {
                tracing::warn!(
                    resource = resource.as_str(),
                    scope = scope.as_deref().unwrap_or(""),
                    "CAPI Clusters not served (v1beta2, v1beta1); timeouts fall back to the namespace's TerraformCluster; retrying"
                );
            }
            tokio::time::sleep(timing.backoff_max_config).await;
        },
        Resource::Events => {
            // Filter server side where the API server supports the field
            // selector; a 400 for it falls back to client-side filtering.
            let api: Api<DynamicObject> =
                typed_api(&client, ns, "events.k8s.io", "v1", "Event", "events");
            let sel = Selectors {
                labels: None,
                fields: Some(trim::EVENT_FIELD_SELECTOR),
            };
            let ingest = Ingest::new(&shared, resource, scope.clone());
            let Exit::GaveUp(_) = list_watch::run(
                &shared,
                ingest,
                api.clone(),
                sel,
                timing,
                trim::force_unlock_event,
                is_bad_request,
            )
            .await;
            tracing::info!(
                "the API server rejects the Event field selector; filtering Events client side"
            );
            let ingest = Ingest::new(&shared, resource, scope.clone());
            list_watch::run(
                &shared,
                ingest,
                api,
                Selectors::default(),
                timing,
                trim::force_unlock_event,
                never,
            )
            .await;
        }
    }
}
