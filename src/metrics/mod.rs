//! `/metrics`: metric families rendered from the index, lock key by lock
//! key, as kube-state-metrics does it, kept in 16 buckets so that a change
//! renders one again.
//!
//! Nothing here talks to the API server. Label sets are closed: classes,
//! resources, reasons and results are fixed enums, and every value taken
//! from lock-info is capped when it enters the index.
//!
//! `families` declares every family once and writes its lines; `render`
//! writes one lock key's lines; `store` keeps every bucket's lines per
//! family, plain or compressed (`gzip`); `serve` publishes the newest
//! snapshot to the scrapes; `body` is what a scrape is sent. [`render_at`]
//! is the same store rendered from scratch. The self-metric counters live
//! in [`crate::health::Health`] as prometheus-client counters, encoded at
//! the end of every body.

mod body;
mod families;
mod gzip;
mod render;
mod serve;
mod store;

#[cfg(test)]
mod tests;

pub use body::{Body, Frames};
pub use families::{family_docs, FamilyDoc};
pub use serve::{ScrapeCache, ScrapeError, AGES_EVERY, GATHER, HEALTH_EVERY};

use std::sync::Arc;
use std::time::SystemTime;

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
/// get a deterministic exposition: a store rendered from scratch, sent as
/// a scrape would be.
pub fn render_at(
    shared: &Arc<Shared>,
    format: Format,
    now: SystemTime,
) -> Result<String, std::fmt::Error> {
    render_with(shared, format, now, Exposition::default())
}

/// [`render_at`] with the optional families of `exposition`.
pub fn render_with(
    shared: &Arc<Shared>,
    format: Format,
    now: SystemTime,
    exposition: Exposition,
) -> Result<String, std::fmt::Error> {
    let mut store = store::Store::new(exposition);
    store.update(shared, now, false);
    let health = families::health(&shared.health, format)?;
    let body = Body::plain(&store.snapshot(), format, health.into());
    String::from_utf8(body.to_bytes().to_vec()).map_err(|_| std::fmt::Error)
}
