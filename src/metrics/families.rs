//! Every family `/metrics` shows, declared once (name, help, type, label
//! names), and the writer of their lines: no encoder in between, so one
//! lock key's lines can be written on their own (`render`). Sample lines
//! are the same in both text formats; only the HELP/TYPE lines differ.

use std::io::Write as _;
use std::sync::LazyLock;

use bytes::Bytes;

use prometheus_client::registry::Registry;

use super::gzip::Piece;
use super::{Exposition, Format};
use crate::core::classify::HolderClass;
use crate::health::Health;
use crate::index::{unix_seconds, Resource};

/// One metric family: everything the exposition says of it but its series.
/// The name is without the `_total` a counter's series get.
#[derive(Debug)]
pub(super) struct Family {
    name: &'static str,
    help: &'static str,
    labels: &'static [&'static str],
    /// A count since the exporter started (its series named with
    /// `_total`), else a gauge.
    counter: bool,
}

/// A sample value.
#[derive(Clone, Copy)]
pub(super) enum Sample {
    Float(f64),
    Count(u64),
}

impl Family {
    /// The HELP and TYPE lines in `format` (a counter is named with
    /// `_total` there only in the Prometheus text format).
    pub(super) fn header(&self, format: Format) -> String {
        let total = match self.counter && format == Format::Prometheus {
            true => "_total",
            false => "",
        };
        let kind = self.kind();
        format!(
            "# HELP {0}{total} {1}\n# TYPE {0}{total} {kind}\n",
            self.name, self.help
        )
    }

    /// One sample line; `values` in the order of the label names.
    pub(super) fn line(&self, out: &mut Vec<u8>, values: &[&str], sample: Sample) {
        out.extend_from_slice(self.name.as_bytes());
        if self.counter {
            out.extend_from_slice(b"_total");
        }
        out.push(b'{');
        for (i, (label, value)) in self.labels.iter().zip(values).enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(label.as_bytes());
            out.extend_from_slice(b"=\"");
            escape(out, value);
            out.push(b'"');
        }
        out.extend_from_slice(b"} ");
        match sample {
            Sample::Float(v) => out.extend_from_slice(dtoa::Buffer::new().format(v).as_bytes()),
            // Writing into a Vec cannot fail.
            Sample::Count(n) => drop(write!(out, "{n}")),
        }
        out.push(b'\n');
    }

    fn kind(&self) -> &'static str {
        match self.counter {
            true => "counter",
            false => "gauge",
        }
    }

    fn doc(&self, group: &'static str) -> FamilyDoc {
        FamilyDoc {
            group,
            name: match self.counter {
                true => format!("{}_total", self.name),
                false => self.name.to_string(),
            },
            kind: self.kind(),
            labels: self.labels.to_vec(),
            help: self.help,
        }
    }
}

/// A label value as the text formats quote it.
fn escape(out: &mut Vec<u8>, value: &str) {
    for b in value.bytes() {
        match b {
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'"' => out.extend_from_slice(b"\\\""),
            b'\n' => out.extend_from_slice(b"\\n"),
            _ => out.push(b),
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
    let mut docs: Vec<FamilyDoc> = KEY_FAMILIES
        .iter()
        .enumerate()
        .map(|(i, f)| f.doc(if i < HELD_AT { LOCK } else { OBJECT }))
        .collect();
    docs.push(HELD_PER_CLASS.doc("Overview"));
    for f in [&BUILD_INFO, &WATCH_UP, &WATCH_LAST_SUCCESS] {
        docs.push(f.doc("The exporter itself"));
    }
    docs
}

/// The families of one lock key, in exposition order.
pub(super) const KEY_FAMILIES: [&Family; 15] = [
    &LOCK_INFO,
    &LOCK_ACQUIRED,
    &LOCK_AGE,
    &LOCK_CREATED,
    &LOCK_OVERDUE,
    &HOLDER_NODE_LOST,
    &HELD,
    &TIMEOUT,
    &DEADLINE,
    &CAPTF_CONDITION,
    &VERDICT_MISMATCH,
    &JOB_ACTIVE,
    &PLAN_PENDING,
    &FORCE_UNLOCKS,
    &LAST_FORCE_UNLOCK,
];
/// Where [`LOCK_AGE`] (only with `--export-lock-age`) is in [`KEY_FAMILIES`].
pub(super) const LOCK_AGE_AT: usize = 2;
/// Where the per-object families start in [`KEY_FAMILIES`].
pub(super) const HELD_AT: usize = 6;

/// Every key family's header lines per format, plain and as a stored
/// gzip piece; made once.
static HEADERS: LazyLock<[Vec<(Bytes, Piece)>; 2]> = LazyLock::new(|| {
    [Format::OpenMetrics, Format::Prometheus].map(|format| {
        let header = |f: &&Family| {
            let h = f.header(format);
            (Bytes::from(h.clone()), Piece::stored(h.as_bytes(), false))
        };
        KEY_FAMILIES.iter().map(header).collect()
    })
});

/// The header lines of every family of [`KEY_FAMILIES`] in `format`.
pub(super) fn headers(format: Format) -> &'static [(Bytes, Piece)] {
    &HEADERS[format.slot()]
}

/// Whether the exposition shows family `f` of [`KEY_FAMILIES`].
pub(super) fn shown(f: usize, exposition: Exposition) -> bool {
    f != LOCK_AGE_AT || exposition.lock_age
}

const fn gauge(name: &'static str, help: &'static str, labels: &'static [&'static str]) -> Family {
    Family {
        name,
        help,
        labels,
        counter: false,
    }
}

const fn counter(
    name: &'static str,
    help: &'static str,
    labels: &'static [&'static str],
) -> Family {
    Family {
        counter: true,
        ..gauge(name, help, labels)
    }
}

/// The labels every per-object series starts with, so that they join with
/// CAPTF's own metrics.
const OBJECT: &[&str] = &["namespace", "kind", "name"];

// 7.1 Per held lock.

const LOCK_INFO: Family = gauge(
    "captf_state_lock_info",
    "A held state lock and its holder (1 while held).",
    &[
        "namespace",
        "kind",
        "name",
        "class",
        "operation",
        "holder",
        "lock_id",
        "version",
    ],
);
const LOCK_ACQUIRED: Family = gauge(
    "captf_state_lock_acquired_timestamp_seconds",
    "When a held state lock was taken, as Unix time: lock-info Created, else when this exporter first saw it held (age_source).",
    &["namespace", "kind", "name", "class", "age_source"],
);
const LOCK_AGE: Family = gauge(
    "captf_state_lock_age_seconds",
    "Age of a held state lock: now minus lock-info Created, else since first observed (only with --export-lock-age).",
    &["namespace", "kind", "name", "class", "age_source"],
);
const LOCK_CREATED: Family = gauge(
    "captf_state_lock_created_timestamp_seconds",
    "lock-info Created of a held state lock, as Unix time.",
    OBJECT,
);
const LOCK_OVERDUE: Family = gauge(
    "captf_state_lock_overdue",
    "1 when a foreign or unknown lock is older than the effective lockTimeoutSeconds.",
    &["namespace", "kind", "name", "class"],
);
const HOLDER_NODE_LOST: Family = gauge(
    "captf_state_lock_holder_node_lost_timestamp_seconds",
    "When the evidence began that the node of the own runner pod holding the lock is lost (Unix time); only while the class is own_live and the evidence holds: CAPTF counts the pod alive and never force-unlocks.",
    &["namespace", "kind", "name", "node", "reason"],
);

// 7.2 Per known object.

const HELD: Family = gauge(
    "captf_state_lock_held",
    "1 while the object's state lock is held, else 0.",
    OBJECT,
);
const TIMEOUT: Family = gauge(
    "captf_state_lock_timeout_seconds",
    "Effective lockTimeoutSeconds of the object's Jobs.",
    OBJECT,
);
const DEADLINE: Family = gauge(
    "captf_state_lock_deadline_seconds",
    "Effective activeDeadlineSeconds of the object's Jobs.",
    OBJECT,
);
const FORCE_UNLOCKS: Family = counter(
    "captf_state_lock_force_unlocks",
    "Force-unlocks of the object's state lock, counted from ForceUnlocked Events since this exporter started.",
    OBJECT,
);
const LAST_FORCE_UNLOCK: Family = gauge(
    "captf_state_lock_last_force_unlock_timestamp_seconds",
    "When a ForceUnlocked Event about the object was last seen (Unix time).",
    OBJECT,
);

const CAPTF_CONDITION: Family = gauge(
    "captf_state_lock_captf_condition",
    "CAPTF's own StateReadable condition of the object, as last written (1; reason outside CAPTF's set as other).",
    &["namespace", "kind", "name", "status", "reason"],
);
const VERDICT_MISMATCH: Family = gauge(
    "captf_state_lock_verdict_mismatch",
    "1 when CAPTF's StateReadable verdict and the exporter's class have disagreed for longer than --verdict-grace with no Job of the object active, else 0.",
    OBJECT,
);
const JOB_ACTIVE: Family = gauge(
    "captf_state_lock_job_active",
    "1 while the object's status.activeJob is set (CAPTF checks the lock only between Jobs).",
    OBJECT,
);
const PLAN_PENDING: Family = gauge(
    "captf_state_lock_plan_pending",
    "1 for each TerraformPlan in phase Pending for the object: its apply waits for an approval, so no Job runs to clear a stale lock.",
    &["namespace", "kind", "name", "plan"],
);

// 7.3 Overview, 7.4 the exporter itself. The self-metric counters are
// prometheus-client counters registered by `Health::register_counters`.

const HELD_PER_CLASS: Family = gauge(
    "captf_state_locks_held",
    "Held state locks per holder class.",
    &["class"],
);
const BUILD_INFO: Family = gauge(
    "captf_lock_exporter_build_info",
    "Build information (always 1).",
    &["version"],
);
const WATCH_UP: Family = gauge(
    "captf_lock_exporter_watch_up",
    "1 while every watch of the resource has listed once and its last request succeeded.",
    &["resource"],
);
const WATCH_LAST_SUCCESS: Family = gauge(
    "captf_lock_exporter_watch_last_success_timestamp_seconds",
    "Unix time of the last successful request (list, watch start, event or bookmark) of the resource, oldest across namespaces: how old its data may be.",
    &["resource"],
);

pub(super) fn flag(b: bool) -> Sample {
    Sample::Float(if b { 1.0 } else { 0.0 })
}

/// The overview families: held locks per class (all five, 0 included)
/// and build_info. Gauges: the same bytes in both formats.
pub(super) fn overview(per_class: &[(HolderClass, u64); 5], version: &str) -> Vec<u8> {
    let mut out = HELD_PER_CLASS.header(Format::OpenMetrics).into_bytes();
    for (class, n) in per_class {
        HELD_PER_CLASS.line(&mut out, &[class.as_str()], Sample::Float(*n as f64));
    }
    out.extend_from_slice(BUILD_INFO.header(Format::OpenMetrics).as_bytes());
    BUILD_INFO.line(&mut out, &[version], Sample::Float(1.0));
    out
}

/// The health part, rendered per scrape: watch health for every watched
/// resource, then the self-metric counters (prometheus-client's), then
/// the OpenMetrics `# EOF` that ends every body.
pub(super) fn health(health: &Health, format: Format) -> Result<Vec<u8>, std::fmt::Error> {
    let watched: Vec<Resource> = Resource::ALL
        .into_iter()
        .filter(|r| health.is_watched(*r))
        .collect();
    let mut out = WATCH_UP.header(format).into_bytes();
    for r in &watched {
        WATCH_UP.line(&mut out, &[r.as_str()], flag(health.watch_up(*r)));
    }
    out.extend_from_slice(WATCH_LAST_SUCCESS.header(format).as_bytes());
    for r in &watched {
        if let Some(t) = health.last_success(*r) {
            let t = Sample::Float(unix_seconds(t));
            WATCH_LAST_SUCCESS.line(&mut out, &[r.as_str()], t);
        }
    }
    let mut registry = Registry::default();
    health.register_counters(&mut registry);
    let mut text = String::with_capacity(4096);
    match format {
        Format::OpenMetrics => {
            prometheus_client::encoding::text::encode_registry(&mut text, &registry)?;
            prometheus_client::encoding::text::encode_eof(&mut text)?;
        }
        Format::Prometheus => {
            prometheus_client::encoding::prometheus_text::encode(&mut text, &registry)?
        }
    }
    out.extend_from_slice(text.as_bytes());
    Ok(out)
}
