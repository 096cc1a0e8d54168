//! The changes CAPTF and tenants make to Terraform objects besides their
//! locks, for the bench's churn phases (tools/bench/churn_phases.py):
//!
//! - `POST /_change/tc-job?tc=<ns>/<name>&op=start|end|toggle`: a Job of
//!   the object starts (`status.activeJob` set: `{name, operation,
//!   attempt, startTime}`) or ends (`status.activeJob` cleared and the
//!   `StateReadable` condition written again, as CAPTF's reconcile does
//!   after each Job: True `StateRead`, or False `StateLocked` with the
//!   fallback message while something other than its runner holds the
//!   lock); 409 when it cannot change that way;
//! - `POST /_change/tc-label?tc=<ns>/<name>[&cluster=<value>]`: sets its
//!   `cluster.x-k8s.io/cluster-name` label (without `cluster`: flips it
//!   between the fleet's value and `<value>-moved`), as a tenant may;
//! - `POST /_change/lease-add?lease=<ns>/<name>[&id=<lock ID>&who=<Who>]`:
//!   a lock Lease of that name (`tfstate=true`, owner kind
//!   TerraformMachine, no owner name, no object), held when `id` and `who`
//!   are given; `/_change/release` and `/_change/lock` then work on it.
//!
//! `tc` may name a TerraformMachine too (`kind=TerraformMachine`).
//!
//! With `--captf-status` every Terraform object starts with the status CAPTF
//! would have written: `StateReadable` agreeing with its lock, and
//! `status.activeJob` set where a runner pod of the object is Running.

use std::collections::HashMap;

use captf_lock_exporter::core::jobname::{job_name, Op};
use captf_lock_exporter::core::suffix::{lock_lease_name, state_suffix};
use captf_lock_exporter::index::Resource;
use chrono::Utc;
use hyper::Response;
use serde_json::{json, Value};

use crate::*;

/// What CAPTF (or a tenant) changed on a Terraform object; the fleet's
/// generator gives the rest.
#[derive(Clone, Debug, Default)]
pub(crate) struct TfEdit {
    /// `status.activeJob`: the attempt and start (Unix s) of the Job running.
    pub(crate) job: Option<(i32, i64)>,
    /// Jobs started so far (the next one's attempt is one more).
    pub(crate) jobs: i32,
    /// The `StateReadable` condition as last written.
    pub(crate) readable: Option<Readable>,
    /// The `cluster.x-k8s.io/cluster-name` label, when changed.
    pub(crate) cluster_label: Option<String>,
}

/// CAPTF's `StateReadable` condition.
#[derive(Clone, Debug)]
pub(crate) struct Readable {
    /// The ID of a lock held by something other than the object's runner
    /// (False `StateLocked`); None: True `StateRead`.
    pub(crate) foreign_lock: Option<String>,
    /// lastTransitionTime (Unix s).
    pub(crate) at: i64,
}

/// Whether CAPTF would call `lock` held by something other than the
/// object's own runner.
fn foreign(lock: &Lock) -> bool {
    match lock {
        Lock::Fleet(holder) => *holder == Holder::Workstation,
        Lock::Custom { who, .. } => !who.starts_with("@captf-"),
    }
}

impl TfEdit {
    /// Object `i` as the fleet starts it: nothing written, or with
    /// `--captf-status` what CAPTF would have written.
    pub(crate) fn initial(f: &Fleet, i: usize) -> TfEdit {
        if !f.captf_status || i >= f.objects {
            return TfEdit::default();
        }
        let o = f.obj(i);
        let lock = o.held.map(Lock::Fleet);
        let at = f.started - 86_400 - (i as i64 % 86_400);
        TfEdit {
            // The live runner pod's start (pod_json's).
            job: (o.held == Some(Holder::OwnAlive))
                .then(|| (1, f.started - 600 - (i as i64 % 3000))),
            jobs: 1,
            readable: Some(Readable {
                foreign_lock: lock.filter(foreign).map(|l| lock_id_of(f, i, &l)),
                at: at + 10,
            }),
            cluster_label: None,
        }
    }

    /// Writes `status.activeJob` and the `StateReadable` condition into
    /// the object's `status`.
    pub(crate) fn apply_status(&self, o: &Obj, status: &mut Value) {
        if let Some((attempt, start)) = self.job {
            status["activeJob"] = json!({
                "name": job_name(o.kind.short(), &o.name, Op::Drift, attempt, "abc123"),
                "operation": "drift",
                "attempt": attempt,
                "startTime": ts(start),
            });
        }
        if let (Some(r), Some(conditions)) = (&self.readable, status["conditions"].as_array_mut()) {
            let mut c = json!({"type": "StateReadable", "lastTransitionTime": ts(r.at), "observedGeneration": 3});
            match &r.foreign_lock {
                None => {
                    c["status"] = json!("True");
                    c["reason"] = json!("StateRead");
                    c["message"] = json!("");
                }
                Some(id) => {
                    c["status"] = json!("False");
                    c["reason"] = json!("StateLocked");
                    c["message"] = json!(format!(
                        "The state lock {id} is held by something other than this object's runner"
                    ));
                }
            }
            conditions.push(c);
        }
    }
}

/// `g` with its lock set to `lock`; None when it is a Lease already so
/// (held stays held, free stays free) or not a Lease.
pub(crate) fn with_lock(g: Gen, lock: Option<Lock>) -> Option<Gen> {
    match g {
        Gen::Lease { i, held } if held.is_some() != lock.is_some() => {
            Some(Gen::Lease { i, held: lock })
        }
        Gen::NamedLease {
            namespace,
            name,
            held,
        } if held.is_some() != lock.is_some() => Some(Gen::NamedLease {
            namespace,
            name,
            held: lock,
        }),
        _ => None,
    }
}

impl Store {
    /// The churn endpoints; None for any other path.
    pub(crate) fn churn(&self, path: &str, q: &HashMap<String, String>) -> Option<Response<Body>> {
        let tc = || q.get("tc").cloned().unwrap_or_default();
        let resource = match q.get("kind").map(String::as_str) {
            Some("TerraformMachine") => Resource::TerraformMachines,
            _ => Resource::TerraformClusters,
        };
        Some(match path {
            "/_change/tc-job" => {
                let key = tc();
                let op = q.get("op").map_or("toggle", String::as_str).to_owned();
                if !matches!(op.as_str(), "start" | "end" | "toggle") {
                    return Some(status(400, "BadRequest", &format!("op {op}?")));
                }
                let foreign_lock = self.foreign_lock_of(resource, &key);
                let now = Utc::now().timestamp();
                self.change(resource, &key, |g| {
                    let Gen::Terraform { i, mut edit } = g else {
                        return None;
                    };
                    match (op.as_str(), edit.job) {
                        ("start" | "toggle", None) => {
                            edit.jobs += 1;
                            edit.job = Some((edit.jobs, now));
                        }
                        ("end" | "toggle", Some(_)) => {
                            edit.job = None;
                            edit.readable = Some(Readable {
                                foreign_lock,
                                at: now,
                            });
                        }
                        _ => return None,
                    }
                    Some(Gen::Terraform { i, edit })
                })
            }
            "/_change/tc-label" => {
                let key = tc();
                let to = q.get("cluster").cloned();
                let fleet = self.fleet;
                self.change(resource, &key, |g| {
                    let Gen::Terraform { i, mut edit } = g else {
                        return None;
                    };
                    let own = fleet.obj(i).cluster;
                    edit.cluster_label = match to {
                        Some(v) if v == own => None,
                        Some(v) => Some(v),
                        None if edit.cluster_label.is_some() => None,
                        None => Some(format!("{own}-moved")),
                    };
                    Some(Gen::Terraform { i, edit })
                })
            }
            "/_change/lease-add" => {
                let key = q.get("lease").cloned().unwrap_or_default();
                let Some((ns, name)) = key.split_once('/') else {
                    return Some(status(
                        400,
                        "BadRequest",
                        "expected lease=<namespace>/<name>",
                    ));
                };
                let held = match (q.get("id"), q.get("who")) {
                    (Some(id), Some(who)) => Some(Lock::Custom {
                        id: id.clone(),
                        who: who.clone(),
                        created: Utc::now().timestamp(),
                    }),
                    _ => None,
                };
                self.add(
                    Resource::Leases,
                    Gen::NamedLease {
                        namespace: ns.to_owned(),
                        name: name.to_owned(),
                        held,
                    },
                )
            }
            _ => return None,
        })
    }

    /// The ID of the lock on the object `key` of `resource` when something
    /// other than its runner holds it (CAPTF's `StateLocked`).
    fn foreign_lock_of(&self, resource: Resource, key: &str) -> Option<String> {
        let (ns, name) = key.split_once('/')?;
        let i = {
            let t = self.tables.get(&resource)?.read().ok()?;
            match t
                .items
                .get(*t.by_key.get(&(ns.to_owned(), name.to_owned()))?)?
                .generator
            {
                Gen::Terraform { i, .. } => i,
                _ => return None,
            }
        };
        let o = self.fleet.obj(i);
        let lease = lock_lease_name(&state_suffix(&o.namespace, o.kind, &o.name));
        let t = self.tables.get(&Resource::Leases)?.read().ok()?;
        let item = t.items.get(*t.by_key.get(&(o.namespace.clone(), lease))?)?;
        match &item.generator {
            Gen::Lease {
                held: Some(lock), ..
            } if foreign(lock) => Some(lock_id_of(&self.fleet, i, lock)),
            _ => None,
        }
    }
}
