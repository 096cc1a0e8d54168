//! `/metrics`: metric families generated from the index at scrape time.
//!
//! Nothing here talks to the API server. Label sets are closed: classes,
//! resources, reasons and results are fixed enums, and every value taken
//! from lock-info is capped when it enters the index.
//!
//! `cache` keeps the newest complete body per format (plain and gzip),
//! rendered beside the scrapes by one task when the index changes and
//! shared by every scrape, which never waits on a render; `parts` renders
//! its two parts, and [`render_at`] is the uncached encoder that gives the
//! same bytes; `buckets` renders the index part in buckets, each only when
//! its rows changed, and `gzip_parts` joins parts compressed at different
//! times into one gzip stream. `body` holds what a scrape is sent: the
//! content coding negotiated from `Accept-Encoding` and the [`Body`] with
//! its [`Frames`]. `snapshot` copies what a render needs out of the index
//! under one short read lock; `families` declares every family once and
//! encodes the snapshot. The self-metric counters live in
//! [`crate::health::Health`] as prometheus-client counters and are
//! registered beside the collector.

mod body;
pub(crate) mod buckets;
mod cache;
mod families;
mod gzip_parts;
mod parts;
mod snapshot;

#[cfg(test)]
mod incremental_tests;

pub use body::{AcceptEncoding, Body, Frames};
pub use cache::{ScrapeCache, ScrapeError, DEBOUNCE, HEALTH_EVERY};
pub use families::{family_docs, FamilyDoc};

use std::sync::Arc;
use std::time::SystemTime;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;

use crate::shared::Shared;

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

/// What the exposition includes beyond the contract's default families.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Exposition {
    /// `captf_state_lock_age_seconds` (`--export-lock-age`): a value that
    /// moves with the clock, so with it on the body changes every second.
    pub lock_age: bool,
}

/// Renders every metric family in `format`.
pub fn render(shared: &Arc<Shared>, format: Format) -> Result<String, std::fmt::Error> {
    render_at(shared, format, SystemTime::now())
}

/// Renders every default metric family in `format` at `now`, so that tests
/// get a deterministic exposition. Uncached: `/metrics` answers from
/// [`ScrapeCache`], which renders in parts and gives the same bytes.
pub fn render_at(
    shared: &Arc<Shared>,
    format: Format,
    now: SystemTime,
) -> Result<String, std::fmt::Error> {
    render_with(shared, format, now, Exposition::default())
}

/// [`render_at`] with the optional families of `exposition`: the index
/// part rendered from scratch (every bucket), then the health part.
pub fn render_with(
    shared: &Arc<Shared>,
    format: Format,
    now: SystemTime,
    exposition: Exposition,
) -> Result<String, std::fmt::Error> {
    // Never compact: this render is the plain text the cached bodies are
    // compared with.
    let mut index = buckets::IndexRender::new(format, exposition)?.with_plain_limit(usize::MAX);
    index.update(shared, now)?;
    let mut out = String::with_capacity(64 * 1024);
    for chunk in index.chunks().ok_or(std::fmt::Error)? {
        out.push_str(std::str::from_utf8(&chunk).map_err(|_| std::fmt::Error)?);
    }
    out.push_str(&parts::render_health(shared, format)?);
    Ok(out)
}

/// Watch health, computed at render time (the self-metric counters are
/// registered beside it).
#[derive(Debug)]
struct LockCollector {
    shared: Arc<Shared>,
}

impl Collector for LockCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        families::encode_watch_health(&mut enc, &self.shared.health)
    }
}
