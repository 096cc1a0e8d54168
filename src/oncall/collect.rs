//! The one-shot read of a cluster for `locks` and `explain`: every watched
//! resource listed once (the watchers' decoding and trimming), fed to an
//! [`Index`] through [`IndexResource::reset`], then the same live reads of
//! holder pods the verifier makes before a stale verdict. GET only.

use std::collections::{BTreeMap, HashMap};
use std::time::SystemTime;

use futures::StreamExt;
use kube::api::{Api, ListParams, PartialObjectMeta};
use kube::core::DynamicObject;
use kube::{Client, ResourceExt};

use crate::core::kind::Kind;
use crate::index::{Index, IndexResource, ObjectKey, ObjectRef, Resource};
use crate::watch::Served;
use crate::watch::{api_of, trim};

/// Pods read live at once.
const READS_IN_FLIGHT: usize = 8;
/// Page size of the lists.
const PAGE: u32 = 500;

/// What one read of the cluster found.
#[derive(Debug, Default)]
pub struct Snapshot {
    /// The index, fed with every list.
    pub index: Index,
    /// Lists that failed (and were skipped), in words.
    pub warnings: Vec<String>,
    /// Labels of every lock Lease, for the backend labels.
    pub lease_labels: HashMap<ObjectKey, BTreeMap<String, String>>,
    /// ForceUnlocked Events present per object (sum of occurrences).
    pub events_present: HashMap<ObjectRef, u64>,
}

/// A failed request, in words.
pub fn describe(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) if s.code == 403 => format!("403 forbidden ({})", s.message),
        kube::Error::Api(s) if s.code == 404 => format!("404 not found ({})", s.message),
        kube::Error::Api(s) => format!("{} {} ({})", s.code, s.reason, s.message),
        other => other.to_string(),
    }
}

async fn list_all<K>(
    api: &Api<K>,
    labels: Option<&str>,
    fields: Option<&str>,
) -> Result<Vec<K>, kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut params = ListParams::default().limit(PAGE);
    if let Some(l) = labels {
        params = params.labels(l);
    }
    if let Some(f) = fields {
        params = params.fields(f);
    }
    let mut items = Vec::new();
    loop {
        let page = api.list(&params).await?;
        items.extend(page.items);
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(items),
        }
    }
}

fn sel(resource: Resource) -> (Option<&'static str>, Option<&'static str>) {
    let s = resource.spec();
    (s.label_selector, s.field_selector)
}

/// Lists everything in `scope` (None: all namespaces) once and classifies
/// it. Fails only when the Leases cannot be listed.
pub async fn snapshot(client: &Client, scope: Option<&str>) -> Result<Snapshot, String> {
    let mut snap = Snapshot::default();
    let ns = scope.map(str::to_string);
    let now = SystemTime::now;

    for kind in Kind::ALL {
        let resource = match kind {
            Kind::TerraformCluster => Resource::TerraformClusters,
            Kind::TerraformMachine => Resource::TerraformMachines,
            Kind::TerraformMachinePool => Resource::TerraformMachinePools,
        };
        let version = resource
            .spec()
            .versions
            .first()
            .copied()
            .unwrap_or("v1alpha1");
        let api: Api<trim::TerraformObject> = api_of(client, scope, resource, version);
        match list_all(&api, None, None).await {
            Ok(items) => {
                let items = items
                    .iter()
                    .map(|o| trim::terraform_object(kind, o))
                    .filter_map(|(k, v)| v.map(|v| (k, v)))
                    .collect();
                snap.index.reset(&(kind, ns.clone()), items, now());
            }
            Err(e) => snap.warnings.push(format!(
                "cannot list {}: {}",
                resource.as_str(),
                describe(&e)
            )),
        }
    }

    let mut capi_error = None;
    for version in Resource::Clusters.spec().versions {
        let api: Api<trim::CapiClusterObject> = api_of(client, scope, Resource::Clusters, version);
        match list_all(&api, None, None).await {
            Ok(items) => {
                let items = items
                    .iter()
                    .map(trim::capi_cluster)
                    .filter_map(|(k, v)| v.map(|v| (k, v)))
                    .collect();
                snap.index.reset(&ns, items, now());
                capi_error = None;
                break;
            }
            Err(e) => capi_error = Some(describe(&e)),
        }
    }
    if let Some(e) = capi_error {
        snap.warnings.push(format!(
            "cannot list CAPI clusters ({e}); timeouts fall back to the namespace's TerraformCluster"
        ));
    }

    let plans = Resource::TerraformPlans;
    let version = plans.spec().versions.first().copied().unwrap_or("v1alpha1");
    let api: Api<trim::TerraformPlanObject> = api_of(client, scope, plans, version);
    match list_all(&api, None, None).await {
        Ok(items) => {
            let items = items
                .iter()
                .map(trim::terraform_plan)
                .filter_map(|(k, v)| v.map(|v| (k, v)))
                .collect();
            snap.index.reset(&ns, items, now());
        }
        Err(e) => snap.warnings.push(format!(
            "cannot list terraformplans ({}); a lock waiting for an approval is not named",
            describe(&e)
        )),
    }

    let (labels, _) = sel(Resource::Pods);
    let api: Api<trim::PodObject> = api_of(client, scope, Resource::Pods, "v1");
    match list_all(&api, labels, None).await {
        Ok(items) => {
            let items = items
                .iter()
                .map(trim::pod)
                .filter_map(|(k, v)| v.map(|v| (k, v)))
                .collect();
            snap.index.reset(&ns, items, now());
        }
        Err(e) => snap.warnings.push(format!(
            "cannot list pods: {}; holder pods are read one by one",
            describe(&e)
        )),
    }

    let (labels, _) = sel(Resource::Leases);
    let api: Api<trim::LeaseObject> = api_of(client, scope, Resource::Leases, "v1");
    let leases = list_all(&api, labels, None)
        .await
        .map_err(|e| format!("cannot list leases: {}", describe(&e)))?;
    let mut items = Vec::new();
    for obj in &leases {
        let (key, entry) = trim::lease(obj);
        if let Some(entry) = entry {
            snap.lease_labels.insert(
                key.clone(),
                obj.labels()
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            );
            items.push((key, entry));
        }
    }
    snap.index.reset(&ns, items, now());

    // Nodes (cluster-scoped): the lost-node evidence of own locks. Without
    // the right to list them, the pods' own evidence alone counts.
    let api: Api<trim::NodeObject> = api_of(client, None, Resource::Nodes, "v1");
    match list_all(&api, None, None).await {
        Ok(items) => {
            let items = items
                .iter()
                .map(trim::node)
                .filter_map(|(k, v)| v.map(|v| (k, v)))
                .collect();
            snap.index.reset(&None, items, now());
        }
        Err(e) => snap.warnings.push(format!(
            "cannot list nodes: {}; whether a runner's node is lost is judged from its pod alone",
            describe(&e)
        )),
    }

    let (_, fields) = sel(Resource::Events);
    let api: Api<trim::EventObject> = api_of(client, scope, Resource::Events, "v1");
    let events = match list_all(&api, None, fields).await {
        Err(kube::Error::Api(s)) if s.code == 400 => list_all(&api, None, None).await,
        other => other,
    };
    match events {
        Ok(items) => {
            let items: Vec<_> = items
                .iter()
                .map(trim::force_unlock_event)
                .filter_map(|(k, v)| v.map(|v| (k, v)))
                .collect();
            for (_, ev) in &items {
                *snap
                    .events_present
                    .entry(ObjectRef::new(&ev.namespace, &ev.kind, &ev.name))
                    .or_default() += ev.occurrences;
            }
            snap.index.reset(&ns, items, now());
        }
        Err(e) => snap.warnings.push(format!(
            "cannot list events: {}; no force-unlock history",
            describe(&e)
        )),
    }

    // The verifier's rule: a holder pod not seen live is read before its
    // lock is called stale.
    let pods = snap.index.pods_to_recheck();
    let reads: Vec<_> = futures::stream::iter(pods)
        .map(|pod| async move {
            let read = crate::pod_reads::read_pod(client, &pod.namespace, &pod.name).await;
            (pod, read)
        })
        .buffer_unordered(READS_IN_FLIGHT)
        .collect()
        .await;
    for (pod, read) in reads {
        snap.index.record_pod_read(pod, read, now());
    }
    Ok(snap)
}

/// Looks up the pinned image of an object: its applied-inputs Secret's
/// annotations (needs `get secrets`, which the exporter's RBAC does not
/// grant), else the object's `status.source`.
pub async fn pinned_image(
    client: &Client,
    namespace: &str,
    kind: Kind,
    name: &str,
) -> super::model::Lookup {
    use super::fix::{
        applied_secret_name, pinned_image as pin, IMAGE_ANNOTATION, IMAGE_DIGEST_ANNOTATION,
    };
    use super::model::Lookup;
    use super::shell::shq;
    let secret = applied_secret_name(kind, name);
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(client.clone(), namespace);
    let secret_problem = match secrets.get_metadata(&secret).await {
        Ok(PartialObjectMeta { metadata, .. }) => {
            let ann = metadata.annotations.unwrap_or_default();
            match ann
                .get(IMAGE_DIGEST_ANNOTATION)
                .and_then(|d| pin(ann.get(IMAGE_ANNOTATION).map(String::as_str), d))
            {
                Some(value) => {
                    return Lookup::Found {
                        value,
                        from: format!("Secret {secret}, annotation {IMAGE_DIGEST_ANNOTATION}"),
                    }
                }
                None => format!("Secret {secret} has no {IMAGE_DIGEST_ANNOTATION} annotation"),
            }
        }
        Err(e) => format!("cannot read Secret {secret}: {}", describe(&e)),
    };
    let resource = match kind {
        Kind::TerraformCluster => Resource::TerraformClusters,
        Kind::TerraformMachine => Resource::TerraformMachines,
        Kind::TerraformMachinePool => Resource::TerraformMachinePools,
    };
    let api: Api<DynamicObject> = api_of(client, Some(namespace), resource, "v1alpha1");
    let status_problem = match api.get(name).await {
        Ok(obj) => {
            let source = &obj.data["status"]["source"];
            match source["imageDigest"]
                .as_str()
                .and_then(|d| pin(source["image"].as_str(), d))
            {
                Some(value) => {
                    return Lookup::Found {
                        value,
                        from: format!("{kind} {name} status.source.imageDigest ({secret_problem})"),
                    }
                }
                None => format!("{kind} {name} has no status.source.imageDigest (no Job ran yet?)"),
            }
        }
        Err(e) => format!("cannot read {kind} {name}: {}", describe(&e)),
    };
    Lookup::Unreadable {
        why: format!("{secret_problem}; {status_problem}"),
        read_with: format!(
            "kubectl get secret -n {} {} -o jsonpath='{{.metadata.annotations.captf\\.io/image-digest}}'",
            shq(namespace),
            shq(&secret)
        ),
    }
}
