//! Every family `/metrics` shows, declared once (name, help, type, label
//! names), and the writer of their lines: no encoder in between, so one
//! lock key's lines can be written on their own (`render`). Sample lines
//! are the same in both text formats; only the HELP/TYPE lines differ.

use std::io::Write as _;

use prometheus_client::registry::Registry;

use super::subject::Subject;
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

/// Writes one family's lines of one key into a buffer.
pub(super) struct Lines<'b> {
    pub(super) family: &'static Family,
    pub(super) buf: &'b mut Vec<u8>,
}

impl Lines<'_> {
    /// A line of the family; `values` in the order of its label names.
    pub(super) fn line(&mut self, values: &[&str], sample: Sample) {
        self.family.line(self.buf, values, sample);
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

    /// The same family, shown only when `on` says so for the exposition.
    pub(super) const fn only_with(mut self, on: fn(Exposition) -> bool) -> Family {
        self.optional = Some(on);
        self
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

    pub(super) fn doc(&self) -> FamilyDoc {
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

/// A family with no lines of its own per key (the overview and the
/// exporter's own, written elsewhere).
fn no_key_lines(_: &Subject<'_>, _: &mut Lines<'_>) {}

pub(super) const fn gauge(
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

pub(super) const fn counter(
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

// 7.3 Overview, 7.4 the exporter itself. The self-metric counters are
// prometheus-client counters registered by `Health::register_counters`.

const OVERVIEW: &str = "Overview";
const ITSELF: &str = "The exporter itself";

pub(super) const HELD_PER_CLASS: Family = gauge(
    OVERVIEW,
    "captf_state_locks_held",
    "Held state locks per holder class.",
    &["class"],
    no_key_lines,
);
pub(super) const BUILD_INFO: Family = gauge(
    ITSELF,
    "captf_lock_exporter_build_info",
    "Build information (always 1).",
    &["version"],
    no_key_lines,
);
pub(super) const WATCH_UP: Family = gauge(
    ITSELF,
    "captf_lock_exporter_watch_up",
    "1 while every watch of the resource has listed once and its last request succeeded.",
    &["resource"],
    no_key_lines,
);
pub(super) const WATCH_LAST_SUCCESS: Family = gauge(
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
