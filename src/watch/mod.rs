//! Watchers: kube-runtime watch streams, trimmed and fed to the index.
//!
//! Each (resource, namespace) pair has its own task. A failing stream backs
//! off and retries forever; its failure is reported through
//! `captf_lock_exporter_watch_up` and `watch_errors_total`, never by ending
//! the process.

pub mod trim;

use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::{watcher, WatchStreamExt};
use kube::Client;

use crate::core::kind::{Kind, API_GROUP, API_VERSION};
use crate::health::ErrorReason;
use crate::index::{Change, Resource};
use crate::runtime::{Ingest, Shared};

/// CAPI's API group; v1beta2 first, v1beta1 on older installs.
const CAPI_GROUP: &str = "cluster.x-k8s.io";
const CAPI_VERSIONS: [&str; 2] = ["v1beta2", "v1beta1"];

/// Maps a watch error to its closed-set reason.
pub fn reason_of(err: &watcher::Error) -> ErrorReason {
    let client_err = match err {
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => e,
        watcher::Error::WatchError(status) => return ErrorReason::from_status(status.code),
        watcher::Error::NoResourceVersion => return ErrorReason::Decode,
    };
    match client_err {
        kube::Error::Api(status) => ErrorReason::from_status(status.code),
        kube::Error::SerdeError(_)
        | kube::Error::FromUtf8(_)
        | kube::Error::LinesCodecMaxLineLengthExceeded => ErrorReason::Decode,
        kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_) => {
            ErrorReason::Transport
        }
        _ => ErrorReason::Other,
    }
}

/// Drives one trimmed watch stream into the index until it ends, or until
/// `stop_on_not_found` and the first error before any sync is a 404.
/// Returns true when it stopped on that 404.
pub async fn drive<S>(
    shared: &Shared,
    mut ingest: Ingest,
    resource: Resource,
    stream: S,
    stop_on_not_found: bool,
) -> bool
where
    S: Stream<Item = Result<watcher::Event<Change>, watcher::Error>>,
{
    futures::pin_mut!(stream);
    let mut synced = false;
    while let Some(item) = stream.next().await {
        match item {
            Ok(ev) => {
                synced |= matches!(ev, watcher::Event::InitDone);
                ingest.event(shared, ev);
            }
            Err(err) => {
                let reason = reason_of(&err);
                if shared.health.on_error(resource, ingest.scope(), reason) {
                    match reason {
                        ErrorReason::NotFound => tracing::warn!(
                            resource = resource.as_str(),
                            scope = ingest.scope(),
                            "resource not served by the API server (CRD not installed?); retrying"
                        ),
                        ErrorReason::Forbidden => tracing::warn!(
                            resource = resource.as_str(),
                            scope = ingest.scope(),
                            "access forbidden (RBAC needs get/list/watch); retrying"
                        ),
                        _ => tracing::warn!(
                            resource = resource.as_str(),
                            scope = ingest.scope(),
                            reason = reason.as_str(),
                            error = %err,
                            "watch failed; retrying with backoff"
                        ),
                    }
                }
                if stop_on_not_found && !synced && reason == ErrorReason::NotFound {
                    return true;
                }
            }
        }
    }
    false
}

/// Like [`drive`], but returns true when the API server rejects the field
/// selector (400 before the first sync) so the caller can retry without it.
async fn drive_events<S>(shared: &Shared, ingest: Ingest, stream: S, with_selector: bool) -> bool
where
    S: Stream<Item = Result<watcher::Event<Change>, watcher::Error>>,
{
    let resource = Resource::Events;
    let stream = stream.take_while(|item| {
        let bad_selector = with_selector
            && matches!(item, Err(watcher::Error::InitialListFailed(kube::Error::Api(s))) if s.code == 400);
        futures::future::ready(!bad_selector)
    });
    drive(shared, ingest, resource, stream, false).await;
    with_selector
}

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

fn trimmed<K, F>(
    api: Api<K>,
    cfg: watcher::Config,
    trim: F,
) -> impl Stream<Item = Result<watcher::Event<Change>, watcher::Error>>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    F: Fn(&K) -> Change + Send + 'static,
{
    watcher(api, cfg)
        .default_backoff()
        .map(move |r| r.map(|ev| map_event(ev, &trim)))
}

fn map_event<K>(ev: watcher::Event<K>, trim: &impl Fn(&K) -> Change) -> watcher::Event<Change> {
    match ev {
        watcher::Event::Apply(o) => watcher::Event::Apply(trim(&o)),
        watcher::Event::Delete(o) => watcher::Event::Delete(trim(&o)),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitApply(o) => watcher::Event::InitApply(trim(&o)),
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

/// Spawns every watch for the namespaces in `scopes` (None: all namespaces).
pub fn spawn_all(client: Client, shared: Arc<Shared>, scopes: Vec<Option<String>>) {
    for scope in scopes {
        for resource in Resource::ALL {
            shared
                .health
                .register(resource, scope.as_deref().unwrap_or(""));
            let client = client.clone();
            let shared = shared.clone();
            let scope = scope.clone();
            tokio::spawn(async move { watch_resource(client, shared, resource, scope).await });
        }
    }
}

async fn watch_resource(
    client: Client,
    shared: Arc<Shared>,
    resource: Resource,
    scope: Option<String>,
) {
    let ns = scope.as_deref();
    loop {
        let ingest = Ingest::new(resource, scope.clone());
        match resource {
            Resource::Leases => {
                let api: Api<trim::LeaseObject> =
                    typed_api(&client, ns, "coordination.k8s.io", "v1", "Lease", "leases");
                let cfg = watcher::Config::default().labels(trim::LEASE_SELECTOR);
                drive(
                    &shared,
                    ingest,
                    resource,
                    trimmed(api, cfg, trim::lease),
                    false,
                )
                .await;
            }
            Resource::Pods => {
                let api: Api<trim::PodObject> = typed_api(&client, ns, "", "v1", "Pod", "pods");
                let cfg = watcher::Config::default().labels(trim::POD_SELECTOR);
                drive(
                    &shared,
                    ingest,
                    resource,
                    trimmed(api, cfg, trim::pod),
                    false,
                )
                .await;
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
                let stream = trimmed(api, watcher::Config::default(), move |o| {
                    trim::terraform_object(kind, o)
                });
                drive(&shared, ingest, resource, stream, false).await;
            }
            Resource::Clusters => {
                for version in CAPI_VERSIONS {
                    let api: Api<DynamicObject> =
                        typed_api(&client, ns, CAPI_GROUP, version, "Cluster", "clusters");
                    let stream = trimmed(api, watcher::Config::default(), trim::capi_cluster);
                    let ingest = Ingest::new(resource, scope.clone());
                    if drive(&shared, ingest, resource, stream, true).await {
                        tracing::debug!(
                            version,
                            "CAPI Cluster version not served; trying the next"
                        );
                        continue;
                    }
                }
                // Neither version is served: CAPI is not installed (yet).
                tokio::time::sleep(Duration::from_secs(30)).await;
            }
            Resource::Events => {
                // Filter server side where the API server supports the field
                // selector; a 400 for it falls back to client-side filtering.
                let mut selector = Some(trim::EVENT_FIELD_SELECTOR);
                loop {
                    let api: Api<DynamicObject> =
                        typed_api(&client, ns, "events.k8s.io", "v1", "Event", "events");
                    let mut cfg = watcher::Config::default();
                    if let Some(sel) = selector {
                        cfg = cfg.fields(sel);
                    }
                    let stream = trimmed(api, cfg, trim::force_unlock_event);
                    let ingest = Ingest::new(resource, scope.clone());
                    let rejected = drive_events(&shared, ingest, stream, selector.is_some()).await;
                    if rejected {
                        tracing::info!("the API server rejects the Event field selector; filtering Events client side");
                        selector = None;
                        continue;
                    }
                    break;
                }
            }
        }
        // A watch stream only ends on shutdown; if it ever does, restart it.
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
