//! Every family `/metrics` shows, declared once (name, help, type, label
//! names), and the writer of their lines: no encoder in between, so one
//! lock key's lines can be written on their own (`render`). Sample lines
//! are the same in both text formats; only the HELP/TYPE lines differ.

use std::io::Write as _;
use std::sync::LazyLock;

use bytes::Bytes;

use prometheus_client::registry::Registry;

use super::gzip::Piece;
use super::render::{Lines, Subject};
use super::{Exposition, Format};
use crate::core::classify::HolderClass;
use crate::health::Health;
use crate::index::{unix_seconds, Resource};

/// One metric family: everything the exposition says of it, and the
/// writer of its lines of one lock key. The name is without the `_total`
/// a counter's series get.
pub(super) struct Family {
    name: &'static str,
    help: &'static str,
    labels: &'static [&'static str],
    /// A count since the exporter started (its series named with
    /// `_total`), else a gauge.
    counter: bool,
    /// The heading docs/metrics.md lists it under.
    group: &'static str,
    /// Shown only with this exposition option (`--export-lock-age`).
    optional: Option<fn(Exposition) -> bool>,
    /// Writes its lines of one lock key.
    pub(super) write: fn(&Subject<'_>, &mut Lines<'_>),
}

impl std::fmt::Debug for Family {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Family").field("name", &self.name).finish()
    }
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
        // A value without its label name (or the reverse) would shift
        // every later pair: caught by each family's test.
        debug_assert_eq!(values.len(), self.labels.len(), "{}", self.name);
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

    /// Whether `exposition` shows this family.
    pub(super) fn shown(&self, exposition: Exposition) -> bool {
        self.optional.is_none_or(|on| on(exposition))
    }

    /// The label names, in exposition order.
    #[cfg(test)]
    pub(super) fn labels(&self) -> &'static [&'static str] {
        self.labels
    }

    /// The series name (a counter's with `_total`).
    pub(super) fn series_name(&self) -> String {
        match self.counter {
            true => format!("{}_total", self.name),
            false => self.name.to_string(),
        }
    }

    fn doc(&self) -> FamilyDoc {
        FamilyDoc {
            group: self.group,
            name: self.series_name(),
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
    let mut docs: Vec<FamilyDoc> = KEY_FAMILIES.iter().map(|f| f.doc()).collect();
    for f in [&HELD_PER_CLASS, &BUILD_INFO, &WATCH_UP, &WATCH_LAST_SUCCESS] {
        docs.push(f.doc());
    }
    docs
}

/// The families of one lock key, in exposition order.
pub(super) const KEY_FAMILIES: [&Family; 14] = [
    &LOCK_INFO,
    &LOCK_ACQUIRED,
    &LOCK_AGE,
    &LOCK_CREATED,
    &LOCK_OVERDUE,
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

/// A family with no lines of its own per key (the overview and the
/// exporter's own, written elsewhere).
fn no_key_lines(_: &Subject<'_>, _: &mut Lines<'_>) {}

const fn gauge(
    group: &'static str,
    name: &'static str,
    help: &'static str,
    labels: &'static [&'static str],
    write: fn(&Subject<'_>, &mut Lines<'_>),
) -> Family {
    Family {
        name,
        help,
        labels,
        counter: false,
        group,
        optional: None,
        write,
    }
}

const fn counter(
    group: &'static str,
    name: &'static str,
    help: &'static str,
    labels: &'static [&'static str],
    write: fn(&Subject<'_>, &mut Lines<'_>),
) -> Family {
    Family {
        counter: true,
        ..gauge(group, name, help, labels, write)
    }
}

/// The labels every per-object series starts with, so that they join with
/// CAPTF's own metrics.
const OBJECT: &[&str] = &["namespace", "kind", "name"];

const LOCK: &str = "Per held lock";
const PER_OBJECT: &str = "Per object with something to tell";

// 7.1 Per held lock.

pub(super) const LOCK_INFO: Family = gauge(
    LOCK,
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
    |s, out| {
        if let Some(l) = &s.lock {
            let [ns, kind, name] = s.object;
            let info = [
                ns,
                kind,
                name,
                l.class,
                l.operation,
                l.holder,
                l.lock_id,
                l.version,
            ];
            out.line(&info, Sample::Float(1.0));
        }
    },
);
pub(super) const LOCK_ACQUIRED: Family = gauge(
    LOCK,
    "captf_state_lock_acquired_timestamp_seconds",
    "When a held state lock was taken, as Unix time: lock-info Created, else when this exporter first saw it held (age_source).",
    &["namespace", "kind", "name", "class", "age_source"],
    |s, out| {
        if let Some(l) = &s.lock {
            let [ns, kind, name] = s.object;
            let labels = [ns, kind, name, l.class, l.age_source];
            out.line(&labels, Sample::Float(l.acquired));
        }
    },
);
pub(super) const LOCK_AGE: Family = Family {
    optional: Some(|e| e.lock_age),
    ..gauge(
        LOCK,
        "captf_state_lock_age_seconds",
        "Age of a held state lock: now minus lock-info Created, else since first observed (only with --export-lock-age).",
        &["namespace", "kind", "name", "class", "age_source"],
        |s, out| {
            if let Some(l) = &s.lock {
                let [ns, kind, name] = s.object;
                out.line(&[ns, kind, name, l.class, l.age_source], Sample::Float(l.age));
            }
        },
    )
};
pub(super) const LOCK_CREATED: Family = gauge(
    LOCK,
    "captf_state_lock_created_timestamp_seconds",
    "lock-info Created of a held state lock, as Unix time.",
    OBJECT,
    |s, out| {
        if let Some(created) = s.lock.as_ref().and_then(|l| l.created) {
            out.line(&s.object, Sample::Float(created));
        }
    },
);
pub(super) const LOCK_OVERDUE: Family = gauge(
    LOCK,
    "captf_state_lock_overdue",
    "1 when a foreign or unknown lock is older than the effective lockTimeoutSeconds.",
    &["namespace", "kind", "name", "class"],
    |s, out| {
        if let Some(l) = &s.lock {
            let [ns, kind, name] = s.object;
            out.line(&[ns, kind, name, l.class], flag(l.overdue));
        }
    },
);

// 7.2 Per object with something to tell (every known object with
// --export-idle-objects).

pub(super) const HELD: Family = gauge(
    PER_OBJECT,
    "captf_state_lock_held",
    "1 while the object's state lock is held, else 0.",
    OBJECT,
    |s, out| out.line(&s.object, flag(s.held)),
);
pub(super) const TIMEOUT: Family = gauge(
    PER_OBJECT,
    "captf_state_lock_timeout_seconds",
    "Effective lockTimeoutSeconds of the object's Jobs.",
    OBJECT,
    |s, out| {
        let t = s.view.effective.lock_timeout_seconds;
        out.line(&s.object, Sample::Float(t as f64));
    },
);
pub(super) const DEADLINE: Family = gauge(
    PER_OBJECT,
    "captf_state_lock_deadline_seconds",
    "Effective activeDeadlineSeconds of the object's Jobs.",
    OBJECT,
    |s, out| {
        let d = s.view.effective.active_deadline_seconds;
        out.line(&s.object, Sample::Float(d as f64));
    },
);
pub(super) const CAPTF_CONDITION: Family = gauge(
    PER_OBJECT,
    "captf_state_lock_captf_condition",
    "CAPTF's own StateReadable condition of the object, as last written (1; reason outside CAPTF's set as other).",
    &["namespace", "kind", "name", "status", "reason"],
    |s, out| {
        if let Some(c) = s.view.captf.and_then(|c| c.state_readable.as_ref()) {
            let [ns, kind, name] = s.object;
            let labels = [ns, kind, name, c.status.as_str(), c.reason.as_str()];
            out.line(&labels, Sample::Float(1.0));
        }
    },
);
pub(super) const VERDICT_MISMATCH: Family = gauge(
    PER_OBJECT,
    "captf_state_lock_verdict_mismatch",
    "1 when CAPTF's StateReadable verdict and the exporter's class have disagreed for longer than --verdict-grace with no Job of the object active, else 0.",
    OBJECT,
    |s, out| out.line(&s.object, flag(s.view.mismatch)),
);
pub(super) const JOB_ACTIVE: Family = gauge(
    PER_OBJECT,
    "captf_state_lock_job_active",
    "1 while the object's status.activeJob is set (CAPTF checks the lock only between Jobs).",
    OBJECT,
    |s, out| {
        if s.view.captf.is_some_and(|c| c.active_job) {
            out.line(&s.object, Sample::Float(1.0));
        }
    },
);
pub(super) const PLAN_PENDING: Family = gauge(
    PER_OBJECT,
    "captf_state_lock_plan_pending",
    "1 for each TerraformPlan in phase Pending for the object: its apply waits for an approval, so no Job runs to clear a stale lock.",
    &["namespace", "kind", "name", "plan"],
    |s, out| {
        let [ns, kind, name] = s.object;
        for plan in &s.view.pending_plans {
            out.line(&[ns, kind, name, plan], Sample::Float(1.0));
        }
    },
);
pub(super) const FORCE_UNLOCKS: Family = counter(
    PER_OBJECT,
    "captf_state_lock_force_unlocks",
    "Force-unlocks of the object's state lock, counted from ForceUnlocked Events since this exporter started.",
    OBJECT,
    |s, out| {
        for (o, fu) in &s.counters {
            out.line(&[&o.namespace, &o.kind, &o.name], Sample::Count(fu.total));
        }
    },
);
pub(super) const LAST_FORCE_UNLOCK: Family = gauge(
    PER_OBJECT,
    "captf_state_lock_last_force_unlock_timestamp_seconds",
    "When a ForceUnlocked Event about the object was last seen (Unix time).",
    OBJECT,
    |s, out| {
        for (o, fu) in &s.counters {
            if let Some(t) = fu.last_seen {
                out.line(&[&o.namespace, &o.kind, &o.name], Sample::Float(t));
            }
        }
    },
);

// 7.3 Overview, 7.4 the exporter itself. The self-metric counters are
// prometheus-client counters registered by `Health::register_counters`.

const OVERVIEW: &str = "Overview";
const ITSELF: &str = "The exporter itself";

const HELD_PER_CLASS: Family = gauge(
    OVERVIEW,
    "captf_state_locks_held",
    "Held state locks per holder class.",
    &["class"],
    no_key_lines,
);
const BUILD_INFO: Family = gauge(
    ITSELF,
    "captf_lock_exporter_build_info",
    "Build information (always 1).",
    &["version"],
    no_key_lines,
);
const WATCH_UP: Family = gauge(
    ITSELF,
    "captf_lock_exporter_watch_up",
    "1 while every watch of the resource has listed once and its last request succeeded.",
    &["resource"],
    no_key_lines,
);
const WATCH_LAST_SUCCESS: Family = gauge(
    ITSELF,
    "captf_lock_exporter_watch_last_success_timestamp_seconds",
    "Unix time of the last successful request (list, watch start, event or bookmark) of the resource, oldest across namespaces: how old its data may be.",
    &["resource"],
    no_key_lines,
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
