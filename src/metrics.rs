//! `/metrics`: metric families generated from the index at scrape time.
//!
//! Nothing here talks to the API server. Label sets are closed: classes,
//! resources, reasons and results are fixed enums, and every value taken
//! from lock-info is capped when it enters the index.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::SystemTime;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use crate::core::classify::{is_overdue, HolderClass};
use crate::health::{ErrorReason, ReadResult};
use crate::index::unix_seconds;
use crate::index::{ForceUnlocks, Resource};
use crate::runtime::Shared;

/// Content type of the OpenMetrics text format.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// Content type of the Prometheus 0.0.4 text format.
pub const PROMETHEUS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Exposition formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// OpenMetrics 1.0 text (the default).
    OpenMetrics,
    /// Prometheus text 0.0.4.
    Prometheus,
}

impl Format {
    /// Picks the format from an Accept header: OpenMetrics unless the
    /// client asks for text/plain without offering OpenMetrics.
    pub fn negotiate(accept: Option<&str>) -> Format {
        match accept {
            Some(a) if !a.contains("application/openmetrics-text") && a.contains("text/plain") => {
                Format::Prometheus
            }
            _ => Format::OpenMetrics,
        }
    }

    /// The response content type.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => OPENMETRICS_CONTENT_TYPE,
            Format::Prometheus => PROMETHEUS_CONTENT_TYPE,
        }
    }
}

/// Renders every metric family in `format`.
pub fn render(shared: &Arc<Shared>, format: Format) -> Result<String, std::fmt::Error> {
    render_at(shared, format, SystemTime::now())
}

/// Renders every metric family in `format` with ages computed at `now`, so
/// that tests get a deterministic exposition.
pub fn render_at(
    shared: &Arc<Shared>,
    format: Format,
    now: SystemTime,
) -> Result<String, std::fmt::Error> {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(LockCollector {
        shared: shared.clone(),
        now,
    }));
    let mut out = String::with_capacity(64 * 1024);
    match format {
        Format::OpenMetrics => prometheus_client::encoding::text::encode(&mut out, &registry)?,
        Format::Prometheus => {
            prometheus_client::encoding::prometheus_text::encode(&mut out, &registry)?
        }
    }
    Ok(out)
}

#[derive(Debug)]
struct LockCollector {
    shared: Arc<Shared>,
    now: SystemTime,
}

/// One held lock, as rendered.
struct LockRow {
    ns: String,
    kind: &'static str,
    name: String,
    class: HolderClass,
    operation: String,
    holder: String,
    lock_id: String,
    version: String,
    age: f64,
    age_source: &'static str,
    created: Option<f64>,
    overdue: bool,
}

/// One force-unlock counter, as rendered.
struct FuRow {
    ns: String,
    kind: String,
    name: String,
    fu: ForceUnlocks,
}

struct Snapshot {
    locks: Vec<LockRow>,
    objects: Vec<ObjectRow>,
    force_unlocks: Vec<FuRow>,
    per_class: [(HolderClass, u64); 5],
}

/// One object, as rendered.
struct ObjectRow {
    ns: String,
    kind: &'static str,
    name: String,
    held: bool,
    timeout: i64,
    deadline: i64,
}

fn gauge<L: EncodeLabelSet>(
    enc: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    rows: impl Iterator<Item = (L, f64)>,
) -> Result<(), std::fmt::Error> {
    let mut m = enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (labels, v) in rows {
        m.encode_family(&labels)?.encode_gauge(&v)?;
    }
    Ok(())
}

fn counter<L: EncodeLabelSet>(
    enc: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    rows: impl Iterator<Item = (L, u64)>,
) -> Result<(), std::fmt::Error> {
    let mut m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (labels, v) in rows {
        m.encode_family(&labels)?
            .encode_counter::<prometheus_client::encoding::NoLabelSet, _, u64>(&v, None)?;
    }
    Ok(())
}

fn lock_labels(r: &LockRow) -> [(&str, &str); 3] {
    [
        ("namespace", r.ns.as_str()),
        ("kind", r.kind),
        ("name", r.name.as_str()),
    ]
}

fn fu_labels(r: &FuRow) -> [(&str, &str); 3] {
    [
        ("namespace", r.ns.as_str()),
        ("kind", r.kind.as_str()),
        ("name", r.name.as_str()),
    ]
}

fn object_labels(r: &ObjectRow) -> [(&str, &str); 3] {
    [
        ("namespace", r.ns.as_str()),
        ("kind", r.kind),
        ("name", r.name.as_str()),
    ]
}

impl Collector for LockCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let now = self.now;
        let Snapshot {
            locks,
            objects,
            force_unlocks,
            per_class,
        } = self.snapshot(now);

        let held = &locks;

        gauge(
            &mut enc,
            "captf_state_lock_info",
            "A held state lock and its holder (1 while held).",
            held.iter().map(|r| {
                let [ns, kind, name] = lock_labels(r);
                let labels = [
                    ns,
                    kind,
                    name,
                    ("class", r.class.as_str()),
                    ("operation", r.operation.as_str()),
                    ("holder", r.holder.as_str()),
                    ("lock_id", r.lock_id.as_str()),
                    ("version", r.version.as_str()),
                ];
                (labels, 1.0)
            }),
        )?;
        gauge(
            &mut enc,
            "captf_state_lock_age_seconds",
            "Age of a held state lock: now minus lock-info Created, else since first observed.",
            held.iter().map(|r| {
                let [ns, kind, name] = lock_labels(r);
                let labels = [
                    ns,
                    kind,
                    name,
                    ("class", r.class.as_str()),
                    ("age_source", r.age_source),
                ];
                (labels, r.age)
            }),
        )?;
        gauge(
            &mut enc,
            "captf_state_lock_created_timestamp_seconds",
            "lock-info Created of a held state lock, as Unix time.",
            held.iter()
                .filter_map(|r| r.created.map(|c| (lock_labels(r), c))),
        )?;
        gauge(
            &mut enc,
            "captf_state_lock_overdue",
            "1 when a foreign or unknown lock is older than the effective lockTimeoutSeconds.",
            held.iter().map(|r| {
                let [ns, kind, name] = lock_labels(r);
                let labels = [ns, kind, name, ("class", r.class.as_str())];
                (labels, if r.overdue { 1.0 } else { 0.0 })
            }),
        )?;

        gauge(
            &mut enc,
            "captf_state_lock_held",
            "1 while the object's state lock is held, else 0.",
            objects
                .iter()
                .map(|r| (object_labels(r), if r.held { 1.0 } else { 0.0 })),
        )?;
        gauge(
            &mut enc,
            "captf_state_lock_timeout_seconds",
            "Effective lockTimeoutSeconds of the object's Jobs.",
            objects.iter().map(|r| (object_labels(r), r.timeout as f64)),
        )?;
        gauge(
            &mut enc,
            "captf_state_lock_deadline_seconds",
            "Effective activeDeadlineSeconds of the object's Jobs.",
            objects
                .iter()
                .map(|r| (object_labels(r), r.deadline as f64)),
        )?;
        // Every known object has a counter from the start (at 0), so the
        // first force-unlock is an increase Prometheus can see.
        counter(
            &mut enc,
            "captf_state_lock_force_unlocks",
            "Force-unlocks of the object's state lock, counted from ForceUnlocked Events since this exporter started.",
            force_unlocks.iter().map(|r| (fu_labels(r), r.fu.total)),
        )?;
        gauge(
            &mut enc,
            "captf_state_lock_last_force_unlock_timestamp_seconds",
            "When a ForceUnlocked Event about the object was last seen (Unix time).",
            force_unlocks
                .iter()
                .filter_map(|r| r.fu.last_seen.map(|t| (fu_labels(r), t))),
        )?;

        gauge(
            &mut enc,
            "captf_state_locks_held",
            "Held state locks per holder class.",
            per_class
                .iter()
                .map(|(c, n)| (vec![("class", c.as_str())], *n as f64)),
        )?;
        let version = self.shared.version;
        gauge(
            &mut enc,
            "captf_lock_exporter_build_info",
            "Build information (always 1).",
            std::iter::once((vec![("version", version)], 1.0)),
        )?;

        let health = &self.shared.health;
        let watched: Vec<Resource> = Resource::ALL
            .into_iter()
            .filter(|r| health.is_watched(*r))
            .collect();
        gauge(
            &mut enc,
            "captf_lock_exporter_watch_up",
            "1 while every watch of the resource has listed once and its last request succeeded.",
            watched.iter().map(|r| {
                (
                    vec![("resource", r.as_str())],
                    if health.watch_up(*r) { 1.0 } else { 0.0 },
                )
            }),
        )?;
        gauge(
            &mut enc,
            "captf_lock_exporter_watch_last_success_timestamp_seconds",
            "Unix time of the last successful request (list, watch start, event or bookmark) of the resource, oldest across namespaces: how old its data may be.",
            watched.iter().filter_map(|r| {
                health
                    .last_success(*r)
                    .map(|t| (vec![("resource", r.as_str())], unix_seconds(t)))
            }),
        )?;
        counter(
            &mut enc,
            "captf_lock_exporter_watch_events",
            "Watch events received per resource.",
            watched
                .iter()
                .map(|r| (vec![("resource", r.as_str())], health.events(*r))),
        )?;
        let errs: Vec<(Resource, ErrorReason)> = watched
            .iter()
            .flat_map(|r| ErrorReason::ALL.map(|e| (*r, e)))
            .collect();
        counter(
            &mut enc,
            "captf_lock_exporter_watch_errors",
            "Watch errors per resource and reason.",
            errs.iter().map(|(r, e)| {
                (
                    vec![("resource", r.as_str()), ("reason", e.as_str())],
                    health.errors(*r, *e),
                )
            }),
        )?;
        counter(
            &mut enc,
            "captf_lock_exporter_pod_reads",
            "Live reads of holder pods per result.",
            ReadResult::ALL
                .iter()
                .map(|r| (vec![("result", r.as_str())], health.pod_reads(*r))),
        )?;
        Ok(())
    }
}

impl LockCollector {
    /// Copies what the scrape needs under one short read lock.
    fn snapshot(&self, now: SystemTime) -> Snapshot {
        let ix = match self.shared.index.read() {
            Ok(ix) => ix,
            Err(poisoned) => poisoned.into_inner(),
        };
        let mut locks = Vec::new();
        let mut objects = Vec::new();
        ix.for_each_lock(|v| {
            let held = v.lease.is_held();
            objects.push(ObjectRow {
                ns: v.namespace.to_string(),
                kind: v.kind,
                name: v.name.to_string(),
                held,
                timeout: v.effective.lock_timeout_seconds,
                deadline: v.effective.active_deadline_seconds,
            });
            let (Some(class), Some((age, source))) = (v.lease.class, v.lease.age(now)) else {
                return;
            };
            let info = v.lease.info.as_ref();
            locks.push(LockRow {
                ns: v.namespace.to_string(),
                kind: v.kind,
                name: v.name.to_string(),
                class,
                operation: info.map(|i| i.operation.clone()).unwrap_or_default(),
                holder: v.lease.holder_label().to_string(),
                lock_id: v.lease.lock_id().to_string(),
                version: info.map(|i| i.version.clone()).unwrap_or_default(),
                age,
                age_source: source.as_str(),
                created: v.lease.created_seconds(),
                overdue: is_overdue(class, age, v.effective.lock_timeout_seconds),
            });
        });
        ix.for_each_unlocked_object(|ns, obj, eff| {
            objects.push(ObjectRow {
                ns: ns.to_string(),
                kind: obj.kind.as_str(),
                name: obj.name.clone(),
                held: false,
                timeout: eff.lock_timeout_seconds,
                deadline: eff.active_deadline_seconds,
            });
        });
        let per_class = ix.held_per_class();
        let mut force_unlocks: Vec<FuRow> = objects
            .iter()
            .map(|o| FuRow {
                ns: o.ns.clone(),
                kind: o.kind.to_string(),
                name: o.name.clone(),
                fu: ix.force_unlocks_of(&o.ns, o.kind, &o.name),
            })
            .collect();
        let known: HashSet<(&str, &str, &str)> = objects
            .iter()
            .map(|o| (o.ns.as_str(), o.kind, o.name.as_str()))
            .collect();
        ix.for_each_force_unlock(|ns, kind, name, fu| {
            if !known.contains(&(ns, kind, name)) {
                force_unlocks.push(FuRow {
                    ns: ns.to_string(),
                    kind: kind.to_string(),
                    name: name.to_string(),
                    fu,
                });
            }
        });
        drop(known);
        drop(ix);
        force_unlocks.sort_by(|a, b| (&a.ns, &a.kind, &a.name).cmp(&(&b.ns, &b.kind, &b.name)));
        // Stable output order helps diffing and humans; cheap next to I/O.
        locks.sort_by(|a, b| (&a.ns, a.kind, &a.name).cmp(&(&b.ns, b.kind, &b.name)));
        objects.sort_by(|a, b| (&a.ns, a.kind, &a.name).cmp(&(&b.ns, b.kind, &b.name)));
        Snapshot {
            locks,
            objects,
            force_unlocks,
            per_class,
        }
    }
}

/// A short HTML status page for `/`.
pub fn status_page(shared: &Shared) -> String {
    let (per_class, sizes) = match shared.index.read() {
        Ok(ix) => (ix.held_per_class(), ix.sizes()),
        Err(p) => {
            let ix = p.into_inner();
            (ix.held_per_class(), ix.sizes())
        }
    };
    let mut rows = String::new();
    for (c, n) in per_class {
        let _ = write!(rows, "<tr><td>{}</td><td>{}</td></tr>", c.as_str(), n);
    }
    let mut watches = String::new();
    for r in Resource::ALL
        .into_iter()
        .filter(|r| shared.health.is_watched(*r))
    {
        let state = if shared.health.watch_up(r) {
            "up"
        } else {
            "down: data may be stale (see /readyz and the log)"
        };
        let _ = write!(
            watches,
            "<tr><td>{}</td><td>{}</td></tr>",
            r.as_str(),
            state
        );
    }
    format!(
        "<!doctype html><html><head><title>captf-lock-exporter</title></head><body>\
         <h1>captf-lock-exporter {}</h1>\
         <p>Read-only exporter of CAPTF state locks. Endpoints: \
         <a href=\"/metrics\">/metrics</a>, <a href=\"/healthz\">/healthz</a>, <a href=\"/readyz\">/readyz</a>.</p>\
         <p>Ready: {}. Lock Leases: {}, objects: {}, runner pods cached: {}.</p>\
         <table><tr><th>class</th><th>held locks</th></tr>{}</table>\
         <table><tr><th>watch</th><th>state</th></tr>{}</table></body></html>\n",
        shared.version,
        shared.health.ready(),
        sizes.0,
        sizes.1,
        sizes.2,
        rows,
        watches
    )
}
