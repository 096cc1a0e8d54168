//! The store: every object serialised once, list pages pre-assembled, changes
//! kept per resource and broadcast to open watches.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Mutex, RwLock};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use captf_lock_exporter::core::kind::Kind;
use captf_lock_exporter::index::Resource;
use captf_lock_exporter::watch::Served;
use serde_json::{json, Value};
use tokio::sync::broadcast;

use crate::*;

/// How to rebuild an item after a change.
#[derive(Clone, Debug)]
pub(crate) enum Gen {
    Lease {
        i: usize,
        held: Option<Lock>,
    },
    Pod {
        i: usize,
        history: bool,
        attempt: i32,
        phase: &'static str,
    },
    Terraform {
        i: usize,
        edit: TfEdit,
    },
    /// A lock Lease by name, not one of the fleet's (`/_change/lease-add`).
    NamedLease {
        namespace: String,
        name: String,
        held: Option<Lock>,
    },
    Other,
}

impl Gen {
    /// The object this generator gives at resourceVersion `rv`.
    pub(crate) fn render(&self, f: &Fleet, rv: u64) -> Option<(String, String, Value)> {
        Some(match self {
            Gen::Lease { i, held } => lease_json(f, *i, held.as_ref(), rv),
            Gen::Pod {
                i,
                history,
                attempt,
                phase,
            } => pod_json(f, *i, *history, *attempt, phase, rv),
            Gen::Terraform { i, edit } => terraform_json(f, *i, edit, rv),
            Gen::NamedLease {
                namespace,
                name,
                held,
            } => named_lease_json(f, namespace, name, held.as_ref(), rv),
            Gen::Other => return None,
        })
    }
}

pub(crate) struct Item {
    pub(crate) ns: String,
    pub(crate) json: Bytes,
    pub(crate) generator: Gen,
    /// Deleted (a tombstone: indices, and so continue tokens, stay put).
    pub(crate) deleted: bool,
}

/// A change as delivered on watches.
#[derive(Clone)]
pub(crate) struct Change {
    pub(crate) rv: u64,
    pub(crate) ns: String,
    pub(crate) line: Bytes,
}

pub(crate) struct Table {
    pub(crate) resource: Resource,
    pub(crate) items: Vec<Item>,
    pub(crate) by_key: HashMap<(String, String), usize>,
    /// resourceVersion of this table's last change (the list's).
    pub(crate) rv: u64,
    pub(crate) history: Vec<Change>,
    /// Assembled all-namespace pages by (offset, limit).
    pub(crate) pages: HashMap<(usize, usize), Bytes>,
    pub(crate) tx: broadcast::Sender<Change>,
}

impl Table {
    pub(crate) fn new(resource: Resource, rv: u64) -> Table {
        Table {
            resource,
            items: Vec::new(),
            by_key: HashMap::new(),
            rv,
            history: Vec::new(),
            pages: HashMap::new(),
            tx: broadcast::channel(4096).0,
        }
    }

    pub(crate) fn push(&mut self, (ns, name, obj): (String, String, Value), generator: Gen) {
        let json = Bytes::from(serde_json::to_vec(&obj).unwrap_or_default());
        self.by_key.insert((ns.clone(), name), self.items.len());
        self.items.push(Item {
            ns,
            json,
            generator,
            deleted: false,
        });
    }

    pub(crate) fn api_version(&self) -> String {
        let spec = self.resource.spec();
        let version = spec.versions.first().copied().unwrap_or("v1");
        if spec.group.is_empty() {
            version.to_owned()
        } else {
            format!("{}/{version}", spec.group)
        }
    }

    /// One list page: up to `limit` live items in `ns` from raw index
    /// `offset` on, as of the list's resourceVersion `rv`. The continue token
    /// is `<rv>:<raw index>` (deleted items stay as tombstones, so an index
    /// keeps its place); every page of a list carries the first page's
    /// resourceVersion, from which the watch then replays what changed.
    pub(crate) fn page(&self, ns: Option<&str>, offset: usize, limit: usize, rv: u64) -> Bytes {
        let keep = |it: &Item| !it.deleted && ns.is_none_or(|n| it.ns == n);
        let want = if limit == 0 { usize::MAX } else { limit };
        let mut selected: Vec<&Item> = Vec::new();
        let mut end = offset;
        for (k, it) in self.items.iter().enumerate().skip(offset) {
            if selected.len() == want {
                break;
            }
            end = k + 1;
            if keep(it) {
                selected.push(it);
            }
        }
        let remaining = self.items.iter().skip(end).filter(|it| keep(it)).count();
        let cont = if limit != 0 && remaining > 0 {
            format!(",\"continue\":\"{rv}:{end}\",\"remainingItemCount\":{remaining}")
        } else {
            String::new()
        };
        let head = format!(
            "{{\"kind\":\"{}List\",\"apiVersion\":\"{}\",\"metadata\":{{\"resourceVersion\":\"{rv}\"{cont}}},\"items\":[",
            self.resource.spec().kind,
            self.api_version(),
        );
        let size = head.len() + selected.iter().map(|i| i.json.len() + 1).sum::<usize>() + 2;
        let mut out = BytesMut::with_capacity(size);
        out.extend_from_slice(head.as_bytes());
        for (k, it) in selected.iter().enumerate() {
            if k > 0 {
                out.extend_from_slice(b",");
            }
            out.extend_from_slice(&it.json);
        }
        out.extend_from_slice(b"]}");
        out.freeze()
    }

    /// Pre-assembles the all-namespace pages of the current items: valid
    /// until the next change, which drops them (later lists assemble each
    /// page when asked).
    pub(crate) fn assemble_pages(&mut self, limit: usize) {
        let mut offset = 0;
        loop {
            let page = self.page(None, offset, limit, self.rv);
            self.pages.insert((offset, limit), page);
            offset += limit;
            if offset >= self.items.len() {
                break;
            }
        }
    }

    pub(crate) fn bookmark(&self) -> Bytes {
        Bytes::from(format!(
            "{{\"type\":\"BOOKMARK\",\"object\":{{\"kind\":\"{}\",\"apiVersion\":\"{}\",\"metadata\":{{\"resourceVersion\":\"{}\"}}}}}}\n",
            self.resource.spec().kind,
            self.api_version(),
            self.rv
        ))
    }
}

pub(crate) struct Store {
    pub(crate) fleet: Fleet,
    pub(crate) rv: AtomicU64,
    pub(crate) tables: HashMap<Resource, RwLock<Table>>,
    pub(crate) stats: Mutex<HashMap<(String, String), u64>>,
    pub(crate) watches_open: AtomicU64,
    pub(crate) static_body: RwLock<Bytes>,
    pub(crate) bookmark_every: Duration,
    pub(crate) page_size: usize,
    pub(crate) held: Vec<Value>,
    /// `/_change/gone`: every open watch ends with an ERROR 410 event.
    pub(crate) gone: broadcast::Sender<()>,
    /// Watches ended by `/_change/gone` (or a lagging subscriber), and at
    /// their `timeoutSeconds`.
    pub(crate) watches_gone: AtomicU64,
    pub(crate) watches_timed_out: AtomicU64,
}

pub(crate) fn build(fleet: Fleet, page_size: usize, bookmark_every: Duration) -> Store {
    let mut rv = 1000_u64;
    let mut next = || {
        rv += 1;
        rv
    };
    let mut tables: HashMap<Resource, Table> = Resource::ALL
        .into_iter()
        .map(|r| (r, Table::new(r, 0)))
        .collect();
    let mut held = Vec::new();
    for i in 0..fleet.objects {
        let o = fleet.obj(i);
        let lock = o.held.map(Lock::Fleet);
        let lease = lease_json(&fleet, i, lock.as_ref(), next());
        let resource = match o.kind {
            Kind::TerraformCluster => Resource::TerraformClusters,
            Kind::TerraformMachine => Resource::TerraformMachines,
            Kind::TerraformMachinePool => Resource::TerraformMachinePools,
        };
        if let Some(holder) = o.held {
            held.push(json!({
                "lease": format!("{}/{}", lease.0, lease.1),
                "namespace": o.namespace,
                "kind": o.kind.as_str(),
                "name": o.name,
                "holder": holder.as_str(),
                "pod": (holder != Holder::Workstation).then(|| format!("{}/{}", o.namespace, runner_pod(&o, 1))),
            }));
        }
        if let Some(t) = tables.get_mut(&Resource::Leases) {
            t.push(lease, Gen::Lease { i, held: lock });
        }
        let edit = TfEdit::initial(&fleet, i);
        let tf = terraform_json(&fleet, i, &edit, next());
        if let Some(t) = tables.get_mut(&resource) {
            t.push(tf, Gen::Terraform { i, edit });
        }
        if let Some(t) = tables.get_mut(&Resource::Pods) {
            if o.held == Some(Holder::OwnAlive) {
                t.push(
                    pod_json(&fleet, i, false, 1, "Running", next()),
                    Gen::Pod {
                        i,
                        history: false,
                        attempt: 1,
                        phase: "Running",
                    },
                );
            }
            if fleet.has_history_pod(i) {
                t.push(
                    pod_json(&fleet, i, true, 1, "Succeeded", next()),
                    Gen::Pod {
                        i,
                        history: true,
                        attempt: 1,
                        phase: "Succeeded",
                    },
                );
            }
        }
    }
    for c in 0..fleet.clusters {
        let obj = capi_cluster_json(&fleet, c, next());
        if let Some(t) = tables.get_mut(&Resource::Clusters) {
            t.push(obj, Gen::Other);
        }
    }
    for e in 0..fleet.events() {
        let obj = event_json(&fleet, e, next());
        if let Some(t) = tables.get_mut(&Resource::Events) {
            t.push(obj, Gen::Other);
        }
    }
    let last = next();
    let tables = tables
        .into_iter()
        .map(|(r, mut t)| {
            t.rv = last;
            t.assemble_pages(page_size);
            (r, RwLock::new(t))
        })
        .collect();
    Store {
        fleet,
        rv: AtomicU64::new(last),
        tables,
        stats: Mutex::new(HashMap::new()),
        watches_open: AtomicU64::new(0),
        static_body: RwLock::new(Bytes::new()),
        bookmark_every,
        page_size,
        held,
        gone: broadcast::channel(16).0,
        watches_gone: AtomicU64::new(0),
        watches_timed_out: AtomicU64::new(0),
    }
}
