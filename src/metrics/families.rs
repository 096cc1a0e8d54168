//! Every family `/metrics` computes at scrape time, declared once: name,
//! help, type and label names are a [`Family`] constant, and the encoding
//! functions below only supply label values (in the declared order) and
//! samples, one function per group of families.

use std::fmt;
use std::marker::PhantomData;

use prometheus_client::encoding::{DescriptorEncoder, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;

use super::snapshot::{FuRow, LockRow, ObjectRow};
use crate::core::classify::HolderClass;
use crate::health::Health;
use crate::index::{unix_seconds, Resource};

/// A metric type and the sample it carries.
trait Type {
    /// The sample.
    type Value;
    /// The type as the exposition names it.
    const TYPE: MetricType;
    /// The type as docs/metrics.md names it.
    const NAME: &'static str;
    /// What the exposition appends to the family name in a series name.
    const SUFFIX: &'static str;
    /// Writes one sample.
    fn encode(value: &Self::Value, m: MetricEncoder<'_>) -> fmt::Result;
}

/// A gauge: any float.
struct Gauge;
/// A counter: a count since the exporter started.
struct Counter;

impl Type for Gauge {
    type Value = f64;
    const TYPE: MetricType = MetricType::Gauge;
    const NAME: &'static str = "gauge";
    const SUFFIX: &'static str = "";
    fn encode(value: &f64, mut m: MetricEncoder<'_>) -> fmt::Result {
        m.encode_gauge(value)
    }
}

impl Type for Counter {
    type Value = u64;
    const TYPE: MetricType = MetricType::Counter;
    const NAME: &'static str = "counter";
    const SUFFIX: &'static str = "_total";
    fn encode(value: &u64, mut m: MetricEncoder<'_>) -> fmt::Result {
        m.encode_counter::<NoLabelSet, _, u64>(value, None)
    }
}

/// One metric family: everything the exposition says of it but its series.
/// The name is without the `_total` a counter gets when encoded.
struct Family<T, const N: usize> {
    name: &'static str,
    help: &'static str,
    labels: [&'static str; N],
    kind: PhantomData<T>,
}

impl<T: Type, const N: usize> Family<T, N> {
    /// Writes the family with one series per row; a family without rows
    /// still gets its HELP and TYPE lines.
    fn encode<'a>(
        &self,
        enc: &mut DescriptorEncoder<'_>,
        rows: impl IntoIterator<Item = ([&'a str; N], T::Value)>,
    ) -> fmt::Result {
        let mut m = enc.encode_descriptor(self.name, self.help, None, T::TYPE)?;
        for (values, sample) in rows {
            let labels: [(&str, &str); N] = std::array::from_fn(|i| (self.labels[i], values[i]));
            T::encode(&sample, m.encode_family(&labels)?)?;
        }
        Ok(())
    }

    fn doc(&self, group: &'static str) -> FamilyDoc {
        FamilyDoc {
            group,
            name: format!("{}{}", self.name, T::SUFFIX),
            kind: T::NAME,
            labels: self.labels.to_vec(),
            help: self.help,
        }
    }
}

/// One family as docs/metrics.md lists it (tests/docs_generated.rs
/// renders the page from [`family_docs`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FamilyDoc {
    /// The heading it is listed under.
    pub group: &'static str,
    /// The series name (a counter's with `_total`).
    pub name: String,
    /// `gauge` or `counter`.
    pub kind: &'static str,
    /// Label names, in exposition order.
    pub labels: Vec<&'static str>,
    /// The HELP text.
    pub help: &'static str,
}

/// Every family declared in this file, in exposition order. The
/// self-metric counters of [`Health::register_counters`] are not among
/// them; the docs test reads those from their encoding.
pub fn family_docs() -> Vec<FamilyDoc> {
    const LOCK: &str = "Per held lock";
    const OBJECT: &str = "Per known object";
    const OVERVIEW: &str = "Overview";
    const SELF: &str = "The exporter itself";
    vec![
        LOCK_INFO.doc(LOCK),
        LOCK_ACQUIRED.doc(LOCK),
        LOCK_AGE.doc(LOCK),
        LOCK_CREATED.doc(LOCK),
        LOCK_OVERDUE.doc(LOCK),
        HELD.doc(OBJECT),
        TIMEOUT.doc(OBJECT),
        DEADLINE.doc(OBJECT),
        CAPTF_CONDITION.doc(OBJECT),
        VERDICT_MISMATCH.doc(OBJECT),
        JOB_ACTIVE.doc(OBJECT),
        PLAN_PENDING.doc(OBJECT),
        FORCE_UNLOCKS.doc(OBJECT),
        LAST_FORCE_UNLOCK.doc(OBJECT),
        HELD_PER_CLASS.doc(OVERVIEW),
        BUILD_INFO.doc(SELF),
        WATCH_UP.doc(SELF),
        WATCH_LAST_SUCCESS.doc(SELF),
    ]
}

// 7.1 Per held lock.

const LOCK_INFO: Family<Gauge, 8> = Family {
    name: "captf_state_lock_info",
    help: "A held state lock and its holder (1 while held).",
    labels: [
        "namespace",
        "kind",
        "name",
        "class",
        "operation",
        "holder",
        "lock_id",
        "version",
    ],
    kind: PhantomData,
};
const LOCK_ACQUIRED: Family<Gauge, 5> = Family {
    name: "captf_state_lock_acquired_timestamp_seconds",
    help: "When a held state lock was taken, as Unix time: lock-info Created, else when this exporter first saw it held (age_source).",
    labels: ["namespace", "kind", "name", "class", "age_source"],
    kind: PhantomData,
};
const LOCK_AGE: Family<Gauge, 5> = Family {
    name: "captf_state_lock_age_seconds",
    help: "Age of a held state lock: now minus lock-info Created, else since first observed (only with --export-lock-age).",
    labels: ["namespace", "kind", "name", "class", "age_source"],
    kind: PhantomData,
};
const LOCK_CREATED: Family<Gauge, 3> = Family {
    name: "captf_state_lock_created_timestamp_seconds",
    help: "lock-info Created of a held state lock, as Unix time.",
    labels: ["namespace", "kind", "name"],
    kind: PhantomData,
};
const LOCK_OVERDUE: Family<Gauge, 4> = Family {
    name: "captf_state_lock_overdue",
    help: "1 when a foreign or unknown lock is older than the effective lockTimeoutSeconds.",
    labels: ["namespace", "kind", "name", "class"],
    kind: PhantomData,
};

// 7.2 Per known object.

const HELD: Family<Gauge, 3> = Family {
    name: "captf_state_lock_held",
    help: "1 while the object's state lock is held, else 0.",
    labels: ["namespace", "kind", "name"],
    kind: PhantomData,
};
const TIMEOUT: Family<Gauge, 3> = Family {
    name: "captf_state_lock_timeout_seconds",
    help: "Effective lockTimeoutSeconds of the object's Jobs.",
    labels: ["namespace", "kind", "name"],
    kind: PhantomData,
};
const DEADLINE: Family<Gauge, 3> = Family {
    name: "captf_state_lock_deadline_seconds",
    help: "Effective activeDeadlineSeconds of the object's Jobs.",
    labels: ["namespace", "kind", "name"],
    kind: PhantomData,
};
const FORCE_UNLOCKS: Family<Counter, 3> = Family {
    name: "captf_state_lock_force_unlocks",
    help: "Force-unlocks of the object's state lock, counted from ForceUnlocked Events since this exporter started.",
    labels: ["namespace", "kind", "name"],
    kind: PhantomData,
};
const LAST_FORCE_UNLOCK: Family<Gauge, 3> = Family {
    name: "captf_state_lock_last_force_unlock_timestamp_seconds",
    help: "When a ForceUnlocked Event about the object was last seen (Unix time).",
    labels: ["namespace", "kind", "name"],
    kind: PhantomData,
};

const CAPTF_CONDITION: Family<Gauge, 5> = Family {
    name: "captf_state_lock_captf_condition",
    help: "CAPTF's own StateReadable condition of the object, as last written (1; reason outside CAPTF's set as other).",
    labels: ["namespace", "kind", "name", "status", "reason"],
    kind: PhantomData,
};
const VERDICT_MISMATCH: Family<Gauge, 3> = Family {
    name: "captf_state_lock_verdict_mismatch",
    help: "1 when CAPTF's StateReadable verdict and the exporter's class have disagreed for longer than --verdict-grace with no Job of the object active, else 0.",
    labels: ["namespace", "kind", "name"],
    kind: PhantomData,
};
const JOB_ACTIVE: Family<Gauge, 3> = Family {
    name: "captf_state_lock_job_active",
    help: "1 while the object's status.activeJob is set (CAPTF checks the lock only between Jobs).",
    labels: ["namespace", "kind", "name"],
    kind: PhantomData,
};
const PLAN_PENDING: Family<Gauge, 4> = Family {
    name: "captf_state_lock_plan_pending",
    help: "1 for each TerraformPlan in phase Pending for the object: its apply waits for an approval, so no Job runs to clear a stale lock.",
    labels: ["namespace", "kind", "name", "plan"],
    kind: PhantomData,
};

// 7.3 Overview, 7.4 the exporter itself. The self-metric counters are
// prometheus-client counters registered by `Health::register_counters`.

const HELD_PER_CLASS: Family<Gauge, 1> = Family {
    name: "captf_state_locks_held",
    help: "Held state locks per holder class.",
    labels: ["class"],
    kind: PhantomData,
};
const BUILD_INFO: Family<Gauge, 1> = Family {
    name: "captf_lock_exporter_build_info",
    help: "Build information (always 1).",
    labels: ["version"],
    kind: PhantomData,
};
const WATCH_UP: Family<Gauge, 1> = Family {
    name: "captf_lock_exporter_watch_up",
    help: "1 while every watch of the resource has listed once and its last request succeeded.",
    labels: ["resource"],
    kind: PhantomData,
};
const WATCH_LAST_SUCCESS: Family<Gauge, 1> = Family {
    name: "captf_lock_exporter_watch_last_success_timestamp_seconds",
    help: "Unix time of the last successful request (list, watch start, event or bookmark) of the resource, oldest across namespaces: how old its data may be.",
    labels: ["resource"],
    kind: PhantomData,
};

/// The (namespace, kind, name) label values every per-object series starts
/// with, so that they join with CAPTF's own metrics.
trait ObjectKey {
    fn key(&self) -> [&str; 3];
}

impl ObjectKey for LockRow {
    fn key(&self) -> [&str; 3] {
        [&self.ns, self.kind, &self.name]
    }
}

impl ObjectKey for ObjectRow {
    fn key(&self) -> [&str; 3] {
        [&self.ns, self.kind, &self.name]
    }
}

impl ObjectKey for FuRow {
    fn key(&self) -> [&str; 3] {
        [&self.ns, &self.kind, &self.name]
    }
}

fn flag(b: bool) -> f64 {
    if b {
        1.0
    } else {
        0.0
    }
}

/// 7.1: the series of every held lock (ages only when asked for).
pub(super) fn encode_locks(
    enc: &mut DescriptorEncoder<'_>,
    held: &[LockRow],
    exposition: super::Exposition,
) -> fmt::Result {
    LOCK_INFO.encode(
        enc,
        held.iter().map(|r| {
            let [ns, kind, name] = r.key();
            let values = [
                ns,
                kind,
                name,
                r.class.as_str(),
                &r.operation,
                &r.holder,
                &r.lock_id,
                &r.version,
            ];
            (values, 1.0)
        }),
    )?;
    LOCK_ACQUIRED.encode(
        enc,
        held.iter().map(|r| {
            let [ns, kind, name] = r.key();
            ([ns, kind, name, r.class.as_str(), r.age_source], r.base)
        }),
    )?;
    if exposition.lock_age {
        LOCK_AGE.encode(
            enc,
            held.iter().map(|r| {
                let [ns, kind, name] = r.key();
                ([ns, kind, name, r.class.as_str(), r.age_source], r.age)
            }),
        )?;
    }
    LOCK_CREATED.encode(
        enc,
        held.iter().filter_map(|r| r.created.map(|c| (r.key(), c))),
    )?;
    LOCK_OVERDUE.encode(
        enc,
        held.iter().map(|r| {
            let [ns, kind, name] = r.key();
            ([ns, kind, name, r.class.as_str()], flag(r.overdue))
        }),
    )
}

/// 7.2: the series of every known object, held or not.
pub(super) fn encode_objects(
    enc: &mut DescriptorEncoder<'_>,
    objects: &[ObjectRow],
) -> fmt::Result {
    HELD.encode(enc, objects.iter().map(|r| (r.key(), flag(r.held))))?;
    TIMEOUT.encode(enc, objects.iter().map(|r| (r.key(), r.timeout as f64)))?;
    DEADLINE.encode(enc, objects.iter().map(|r| (r.key(), r.deadline as f64)))?;
    encode_captf(enc, objects)
}

/// 7.2: CAPTF's own verdict beside ours, and what keeps a lock waiting.
fn encode_captf(enc: &mut DescriptorEncoder<'_>, objects: &[ObjectRow]) -> fmt::Result {
    CAPTF_CONDITION.encode(
        enc,
        objects.iter().filter_map(|r| {
            let (status, reason) = r.condition?;
            let [ns, kind, name] = r.key();
            Some(([ns, kind, name, status, reason], 1.0))
        }),
    )?;
    VERDICT_MISMATCH.encode(enc, objects.iter().map(|r| (r.key(), flag(r.mismatch))))?;
    JOB_ACTIVE.encode(
        enc,
        objects
            .iter()
            .filter(|r| r.job_active)
            .map(|r| (r.key(), 1.0)),
    )?;
    PLAN_PENDING.encode(
        enc,
        objects.iter().flat_map(|r| {
            let [ns, kind, name] = r.key();
            r.plans
                .iter()
                .map(move |p| ([ns, kind, name, p.as_str()], 1.0))
        }),
    )
}

/// 7.2: force-unlock counters and when the last one was seen.
pub(super) fn encode_force_unlocks(enc: &mut DescriptorEncoder<'_>, rows: &[FuRow]) -> fmt::Result {
    // Every known object has a counter from the start (at 0), so the
    // first force-unlock is an increase Prometheus can see.
    FORCE_UNLOCKS.encode(enc, rows.iter().map(|r| (r.key(), r.fu.total)))?;
    LAST_FORCE_UNLOCK.encode(
        enc,
        rows.iter()
            .filter_map(|r| r.fu.last_seen.map(|t| (r.key(), t))),
    )
}

/// 7.3 and build_info: held locks per class (all five, 0 included).
pub(super) fn encode_overview(
    enc: &mut DescriptorEncoder<'_>,
    per_class: &[(HolderClass, u64); 5],
    version: &str,
) -> fmt::Result {
    HELD_PER_CLASS.encode(
        enc,
        per_class.iter().map(|(c, n)| ([c.as_str()], *n as f64)),
    )?;
    BUILD_INFO.encode(enc, [([version], 1.0)])
}

/// 7.4: the gauges of watch health, for every watched resource.
pub(super) fn encode_watch_health(enc: &mut DescriptorEncoder<'_>, health: &Health) -> fmt::Result {
    let watched: Vec<Resource> = Resource::ALL
        .into_iter()
        .filter(|r| health.is_watched(*r))
        .collect();
    WATCH_UP.encode(
        enc,
        watched
            .iter()
            .map(|r| ([r.as_str()], flag(health.watch_up(*r)))),
    )?;
    WATCH_LAST_SUCCESS.encode(
        enc,
        watched.iter().filter_map(|r| {
            health
                .last_success(*r)
                .map(|t| ([r.as_str()], unix_seconds(t)))
        }),
    )
}
