//! Index tests with synthetic objects: no cluster, no runtime. This module
//! holds the builders and the typed-input adapter; the tests live in one
//! file per concern.

mod changed;
mod classes;
mod counters;
mod disagreements;
mod node_lost;
mod review;
mod timeouts;

use std::time::{Duration, SystemTime};

use super::*;
use captf_core::classify::HolderClass;
use captf_core::kind::Kind;
use captf_core::lockinfo::LockInfo;
use captf_core::suffix::lock_lease_name;
use captf_core::suffix::state_suffix;
use captf_core::timeouts::Effective;
use captf_core::timeouts::{ClusterPolicies, InfraRef, JobsPolicy};

const NS: &str = "ns1";

/// A watched object as the tests write it: one enum for every resource, so
/// a test reads as a sequence of cluster changes. [`feed`] checks that
/// each entry matches its resource and calls the typed index input.
#[derive(Clone, Debug)]
enum Entry {
    Lease(LockLease),
    Object(TfObject),
    Capi(CapiCluster),
    Pod(PodState),
    ForceUnlock(ForceUnlockEvent),
    Plan(PlanEntry),
}

#[derive(Clone, Debug)]
struct Change {
    key: (String, String),
    entry: Option<Entry>,
}

fn split<T>(resource: Resource, c: Change, pick: fn(Entry) -> Option<T>) -> (ObjectKey, Option<T>) {
    let key = ObjectKey::new(c.key.0, c.key.1);
    let item = c
        .entry
        .map(|e| pick(e).unwrap_or_else(|| panic!("entry does not belong to {resource:?}")));
    (key, item)
}

fn typed<T>(
    ix: &mut Index,
    key: <Index as IndexResource<T>>::Key,
    item: Option<T>,
    now: SystemTime,
) -> Effects
where
    Index: IndexResource<T>,
{
    match item {
        Some(item) => ix.apply(key, item, now),
        None => IndexResource::<T>::delete(ix, key, now),
    }
}

/// Applies one change of `resource` through the typed inputs.
fn feed(ix: &mut Index, resource: Resource, c: Change, now: SystemTime) -> Effects {
    match resource {
        Resource::Leases => {
            let (k, i) = split(resource, c, |e| match e {
                Entry::Lease(l) => Some(l),
                _ => None,
            });
            typed(ix, k, i, now)
        }
        Resource::Pods => {
            let (k, i) = split(resource, c, |e| match e {
                Entry::Pod(p) => Some(p),
                _ => None,
            });
            typed(ix, k, i, now)
        }
        Resource::Clusters => {
            let (k, i) = split(resource, c, |e| match e {
                Entry::Capi(x) => Some(x),
                _ => None,
            });
            typed(ix, k, i, now)
        }
        Resource::Events => {
            let (k, i) = split(resource, c, |e| match e {
                Entry::ForceUnlock(x) => Some(x),
                _ => None,
            });
            typed(ix, k, i, now)
        }
        Resource::TerraformPlans => {
            let (k, i) = split(resource, c, |e| match e {
                Entry::Plan(x) => Some(x),
                _ => None,
            });
            typed(ix, k, i, now)
        }
        _ => {
            let kind = resource.kind().expect("a Terraform* resource");
            let (k, i) = split(resource, c, |e| match e {
                Entry::Object(o) => Some(o),
                _ => None,
            });
            typed(ix, (kind, k), i, now)
        }
    }
}

/// Changes at `t0()`, the time most tests need, in one call.
trait AtT0 {
    fn feed(&mut self, resource: Resource, c: Change) -> Effects;
    fn relist(&mut self, resource: Resource, namespace: Option<&str>, cs: Vec<Change>) -> Effects;
}

impl AtT0 for Index {
    fn feed(&mut self, resource: Resource, c: Change) -> Effects {
        feed(self, resource, c, t0())
    }
    fn relist(&mut self, resource: Resource, namespace: Option<&str>, cs: Vec<Change>) -> Effects {
        relist(self, resource, namespace, cs, t0())
    }
}

/// The end of a (re)list of `resource` in `namespace` through `reset`.
fn relist(
    ix: &mut Index,
    resource: Resource,
    namespace: Option<&str>,
    changes: Vec<Change>,
    now: SystemTime,
) -> Effects {
    let scope = namespace.map(str::to_string);
    fn items<T>(
        resource: Resource,
        changes: Vec<Change>,
        pick: fn(Entry) -> Option<T>,
    ) -> Vec<(ObjectKey, T)> {
        changes
            .into_iter()
            .filter_map(|c| {
                let (k, i) = split(resource, c, pick);
                i.map(|i| (k, i))
            })
            .collect()
    }
    match resource {
        Resource::Leases => {
            let v = items(resource, changes, |e| match e {
                Entry::Lease(l) => Some(l),
                _ => None,
            });
            ix.reset(&scope, v, now)
        }
        Resource::Pods => {
            let v = items(resource, changes, |e| match e {
                Entry::Pod(p) => Some(p),
                _ => None,
            });
            ix.reset(&scope, v, now)
        }
        Resource::Clusters => {
            let v = items(resource, changes, |e| match e {
                Entry::Capi(x) => Some(x),
                _ => None,
            });
            ix.reset(&scope, v, now)
        }
        Resource::Events => {
            let v = items(resource, changes, |e| match e {
                Entry::ForceUnlock(x) => Some(x),
                _ => None,
            });
            ix.reset(&scope, v, now)
        }
        Resource::TerraformPlans => {
            let v = items(resource, changes, |e| match e {
                Entry::Plan(x) => Some(x),
                _ => None,
            });
            ix.reset(&scope, v, now)
        }
        _ => {
            let kind = resource.kind().expect("a Terraform* resource");
            let v = items(resource, changes, |e| match e {
                Entry::Object(o) => Some(o),
                _ => None,
            })
            .into_iter()
            .map(|(k, o)| ((kind, k), o))
            .collect();
            ix.reset(&(kind, scope), v, now)
        }
    }
}

fn t0() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)
}

fn info(who: &str) -> LockInfo {
    crate::fixtures::lock_info(who)
}

fn lease_change(kind: Kind, name: &str, held: Option<LockInfo>) -> Change {
    let suffix = state_suffix(NS, kind, name);
    let holder = if held.is_some() {
        "lock-1".to_string()
    } else {
        String::new()
    };
    let entry = LockLease::new(
        NS.into(),
        suffix.clone(),
        Some(kind.as_str()),
        Some(name.into()),
        holder,
        Ok(held),
    );
    Change {
        key: (NS.into(), lock_lease_name(&suffix)),
        entry: Some(Entry::Lease(entry)),
    }
}

fn object(
    kind: Kind,
    name: &str,
    label: Option<&str>,
    jobs: Option<JobsPolicy>,
    cluster: Option<ClusterPolicies>,
) -> Change {
    let obj = TfObject {
        cluster_label: label.map(Into::into),
        jobs,
        cluster,
        ..TfObject::new(kind, name)
    };
    Change {
        key: (NS.into(), name.into()),
        entry: Some(Entry::Object(obj)),
    }
}

/// A TerraformMachine with its own `spec.jobs.lockTimeoutSeconds`.
fn machine_with_lock_timeout(name: &str, seconds: i64) -> Change {
    let jobs = JobsPolicy {
        lock_timeout_seconds: Some(seconds),
        active_deadline_seconds: None,
    };
    object(Kind::TerraformMachine, name, None, Some(jobs), None)
}

fn pod(name: &str, finished: bool) -> Change {
    Change {
        key: (NS.into(), name.into()),
        entry: Some(Entry::Pod(PodState::new(finished))),
    }
}

fn gone(name: &str) -> Change {
    Change {
        key: (NS.into(), name.into()),
        entry: None,
    }
}

/// The class of the lock of (kind, name), via the public render path.
fn class_of(ix: &Index, kind: Kind, name: &str) -> Option<HolderClass> {
    let mut out = None;
    ix.for_each_lock(|v| {
        if v.object.kind == kind.as_str() && v.object.name == name {
            out = v.state.class;
        }
    });
    out
}

fn effective_of(ix: &Index, kind: Kind, name: &str) -> Option<Effective> {
    let mut out = None;
    ix.for_each_lock(|v| {
        if v.object.kind == kind.as_str() && v.object.name == name {
            out = Some(v.object.effective);
        }
    });
    ix.for_each_unlocked_object(|v| {
        if v.kind == kind.as_str() && v.name == name {
            out = Some(v.effective);
        }
    });
    out
}

const WEB_POD: &str = "captf-m-web-apply-a1-abc123-x7k2p";

fn web_locked_by_own_pod(pod_finished: Option<bool>) -> (Index, Effects) {
    let mut ix = Index::new();
    let m = Kind::TerraformMachine;
    ix.feed(
        Resource::TerraformMachines,
        object(m, "web", None, None, None),
    );
    if let Some(f) = pod_finished {
        ix.feed(Resource::Pods, pod(WEB_POD, f));
    }
    let fx = ix.feed(
        Resource::Leases,
        lease_change(m, "web", Some(info(&format!("@{WEB_POD}")))),
    );
    (ix, fx)
}

/// A held lock Lease of any suffix and owner labels, held by `who`.
fn raw_lease(suffix: &str, kind: Option<&str>, name: Option<&str>, who: &str) -> Change {
    let (key, l) = crate::fixtures::held_lease(NS, suffix, kind, name, who);
    Change {
        key: (key.namespace, key.name),
        entry: Some(Entry::Lease(l)),
    }
}

/// A held lock of (kind, name) with its own lock ID and holder.
fn lease_with_id(kind: Kind, name: &str, id: &str, who: &str) -> Change {
    let mut c = lease_change(kind, name, Some(info(who)));
    if let Some(Entry::Lease(l)) = &mut c.entry {
        l.holder_identity = id.into();
        if let Some(i) = &mut l.info {
            i.id = id.into();
        }
    }
    c
}
