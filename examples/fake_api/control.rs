//! The control endpoints (not Kubernetes): request counts, the fleet's
//! description, and the changes a test or bench makes to the fleet.

use std::sync::atomic::Ordering;

use bytes::{Bytes, BytesMut};
use captf_lock_exporter::core::kind::Kind;
use captf_lock_exporter::core::suffix::{lock_lease_name, state_suffix};
use captf_lock_exporter::index::Resource;
use hyper::{Response, StatusCode};
use serde_json::{json, Value};

use crate::*;

impl Store {
    pub(crate) fn count(&self, verb: &str, what: &str) {
        if let Ok(mut s) = self.stats.lock() {
            *s.entry((verb.to_owned(), what.to_owned())).or_default() += 1;
        }
    }

    pub(crate) fn stats(&self) -> Value {
        let mut by_verb: serde_json::Map<String, Value> = serde_json::Map::new();
        let mut total = 0;
        let mut list_starts = serde_json::Map::new();
        let mut not_found = serde_json::Map::new();
        if let Ok(s) = self.stats.lock() {
            for ((verb, what), n) in s.iter() {
                match verb.as_str() {
                    "list_start" => {
                        list_starts.insert(what.clone(), json!(n));
                        continue;
                    }
                    "get_not_found" => {
                        not_found.insert(what.clone(), json!(n));
                        continue;
                    }
                    _ => {}
                }
                total += n;
                let e = by_verb.entry(verb.clone()).or_insert_with(|| json!({}));
                e[what] = json!(n);
            }
        }
        json!({
            "requests": by_verb,
            "total": total,
            "list_starts": list_starts,
            "get_not_found": not_found,
            "watches_open": self.watches_open.load(Ordering::Relaxed),
            "watches_ended_gone": self.watches_gone.load(Ordering::Relaxed),
            "watches_ended_timeout": self.watches_timed_out.load(Ordering::Relaxed),
            "resource_version": self.rv.load(Ordering::Relaxed),
        })
    }

    pub(crate) fn info(&self) -> Value {
        let mut counts = serde_json::Map::new();
        let mut bytes = serde_json::Map::new();
        for (r, t) in &self.tables {
            if let Ok(t) = t.read() {
                counts.insert(r.as_str().into(), json!(t.items.len()));
                bytes.insert(
                    r.as_str().into(),
                    json!(t.items.iter().map(|i| i.json.len()).sum::<usize>()),
                );
            }
        }
        json!({
            "objects": self.fleet.objects,
            "clusters": self.fleet.clusters,
            "namespaces": self.fleet.namespaces,
            "captf_status": self.fleet.captf_status,
            "page_size": self.page_size,
            "items": counts,
            "bytes": bytes,
            "held": self.held,
        })
    }

    /// Rebuilds item `key` of `resource` with `edit` applied to its
    /// generator, and delivers it as MODIFIED.
    pub(crate) fn change(
        &self,
        resource: Resource,
        key: &str,
        edit: impl FnOnce(Gen) -> Option<Gen>,
    ) -> Response<Body> {
        let Some((ns, name)) = key.split_once('/') else {
            return status(400, "BadRequest", "expected <namespace>/<name>");
        };
        let Some(Ok(mut t)) = self.tables.get(&resource).map(|t| t.write()) else {
            return status(500, "InternalError", "no table");
        };
        let Some(&k) = t.by_key.get(&(ns.to_owned(), name.to_owned())) else {
            return status(404, "NotFound", &format!("{key} not found"));
        };
        let Some(generator) = edit(t.items[k].generator.clone()) else {
            return status(409, "Conflict", &format!("{key} cannot change that way"));
        };
        let rv = self.rv.fetch_add(1, Ordering::SeqCst) + 1;
        let Some((_, _, obj)) = generator.render(&self.fleet, rv) else {
            return status(409, "Conflict", "not changeable");
        };
        let json = Bytes::from(serde_json::to_vec(&obj).unwrap_or_default());
        t.items[k].json = json.clone();
        t.items[k].generator = generator;
        Store::deliver(&mut t, "MODIFIED", rv, ns, &json);
        json_reply(StatusCode::OK, &json!({"resourceVersion": rv.to_string()}))
    }

    /// Adds the object `generator` gives to `resource`, delivered as ADDED.
    pub(crate) fn add(&self, resource: Resource, generator: Gen) -> Response<Body> {
        let Some(Ok(mut t)) = self.tables.get(&resource).map(|t| t.write()) else {
            return status(500, "InternalError", "no table");
        };
        let rv = self.rv.fetch_add(1, Ordering::SeqCst) + 1;
        let Some((ns, name, obj)) = generator.render(&self.fleet, rv) else {
            return status(409, "Conflict", "not creatable");
        };
        let key = (ns.clone(), name.clone());
        if t.by_key.contains_key(&key) {
            return status(409, "AlreadyExists", &format!("{ns}/{name} already exists"));
        }
        let json = Bytes::from(serde_json::to_vec(&obj).unwrap_or_default());
        t.push((ns.clone(), name.clone(), obj), generator);
        Store::deliver(&mut t, "ADDED", rv, &ns, &json);
        json_reply(
            StatusCode::OK,
            &json!({"resourceVersion": rv.to_string(), "key": format!("{ns}/{name}")}),
        )
    }

    /// Deletes item `key` of `resource` (it stays as a tombstone), delivered
    /// as DELETED with the object at the deletion's resourceVersion.
    pub(crate) fn delete(&self, resource: Resource, key: &str) -> Response<Body> {
        let Some((ns, name)) = key.split_once('/') else {
            return status(400, "BadRequest", "expected <namespace>/<name>");
        };
        let Some(Ok(mut t)) = self.tables.get(&resource).map(|t| t.write()) else {
            return status(500, "InternalError", "no table");
        };
        let Some(k) = t.by_key.remove(&(ns.to_owned(), name.to_owned())) else {
            return status(404, "NotFound", &format!("{key} not found"));
        };
        let rv = self.rv.fetch_add(1, Ordering::SeqCst) + 1;
        let json = match t.items[k].generator.render(&self.fleet, rv) {
            Some((_, _, obj)) => Bytes::from(serde_json::to_vec(&obj).unwrap_or_default()),
            None => t.items[k].json.clone(),
        };
        t.items[k].deleted = true;
        t.items[k].json = Bytes::new();
        Store::deliver(&mut t, "DELETED", rv, ns, &json);
        json_reply(StatusCode::OK, &json!({"resourceVersion": rv.to_string()}))
    }

    /// Records a change at `rv` in the table's history and sends it to the
    /// open watches. The pre-assembled pages are dropped (later lists
    /// assemble each page when asked).
    pub(crate) fn deliver(t: &mut Table, kind: &str, rv: u64, ns: &str, json: &[u8]) {
        let mut line = BytesMut::with_capacity(json.len() + 32);
        line.extend_from_slice(format!("{{\"type\":\"{kind}\",\"object\":").as_bytes());
        line.extend_from_slice(json);
        line.extend_from_slice(b"}\n");
        let change = Change {
            rv,
            ns: ns.to_owned(),
            line: line.freeze(),
        };
        t.rv = rv;
        t.history.push(change.clone());
        t.pages.clear();
        let _ = t.tx.send(change);
    }

    /// The live Terraform objects with their lock Lease and lock state, and
    /// the live pods (`GET /_objects`, for the soak driver).
    pub(crate) fn objects(&self) -> Value {
        let f = &self.fleet;
        let mut objects = Vec::new();
        let mut pods = Vec::new();
        if let Some(Ok(t)) = self.tables.get(&Resource::Leases).map(|t| t.read()) {
            for it in t.items.iter().filter(|it| !it.deleted) {
                let Gen::Lease { i, held } = &it.generator else {
                    continue;
                };
                let o = f.obj(*i);
                let lease = lock_lease_name(&state_suffix(&o.namespace, o.kind, &o.name));
                let (who, id) = match held {
                    None => (None, None),
                    Some(Lock::Fleet(h)) => {
                        let w = who(&o, *i, *h);
                        (Some(w.clone()), Some(uid(&format!("{lease}/{w}"))))
                    }
                    Some(Lock::Custom { id, who, .. }) => (Some(who.clone()), Some(id.clone())),
                };
                objects.push(json!({
                    "i": i, "namespace": o.namespace, "kind": o.kind.as_str(), "name": o.name,
                    "lease": format!("{}/{lease}", o.namespace), "held": held.is_some(),
                    "who": who, "lock_id": id,
                }));
            }
        }
        if let Some(Ok(t)) = self.tables.get(&Resource::Pods).map(|t| t.read()) {
            for it in t.items.iter().filter(|it| !it.deleted) {
                if let Gen::Pod {
                    i,
                    history,
                    attempt,
                    phase,
                } = &it.generator
                {
                    let o = f.obj(*i);
                    let name = if *history {
                        history_pod(&o)
                    } else {
                        runner_pod(&o, *attempt)
                    };
                    pods.push(json!({"i": i, "pod": format!("{}/{name}", o.namespace),
                        "history": history, "attempt": attempt, "phase": phase}));
                }
            }
        }
        json!({"objects": objects, "pods": pods})
    }

    /// The Terraform resource of object `i` (created objects are machines).
    pub(crate) fn terraform_resource(&self, i: usize) -> Resource {
        match self.fleet.obj(i).kind {
            Kind::TerraformCluster => Resource::TerraformClusters,
            Kind::TerraformMachine => Resource::TerraformMachines,
            Kind::TerraformMachinePool => Resource::TerraformMachinePools,
        }
    }
}
