//! `/metrics`: metric families rendered from the index, lock key by lock
//! key, as kube-state-metrics does it, kept in buckets of a few hundred
//! keys so that a change renders one again, at any fleet size.
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
mod buckets;
mod families;
mod gzip;
mod key_families;
mod render;
mod serve;
mod store;
mod subject;

#[cfg(test)]
mod tests;

pub use body::{Body, Frames};
pub use families::FamilyDoc;
pub use key_families::family_docs;
pub use serve::{ScrapeCache, ScrapeError, AGES_EVERY, GATHER};

use std::sync::Arc;
use std::time::SystemTime;

use crate::shared::Shared;

/// Exposition formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// OpenMetrics 1.0 text (the default).
    OpenMetrics,
    /// Prometheus text 0.0.4.
    Prometheus,
}

impl Format {
    /// Where this format's entry is in the per-format arrays (headers,
    /// gzip heads, health parts).
    pub(super) fn slot(self) -> usize {
        usize::from(self == Format::Prometheus)
    }
}

/// What the exposition includes beyond the contract's default families.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Exposition {
    /// `captf_state_lock_age_seconds` (`--export-lock-age`): a value that
    /// moves with the clock, so with it on the body changes every second.
    pub lock_age: bool,
    /// The per-object series of objects with nothing to tell
    /// (`--export-idle-objects`): without it an object has series only
    /// while its lock is held, a force-unlock of it was seen, its verdict
    /// disagrees with CAPTF's or a TerraformPlan of it is pending.
    pub idle_objects: bool,
}

/// Renders every default metric family in `format` now (a store rendered
/// from scratch: the tests' and the bench's view, not the scrapes').
pub fn render(shared: &Arc<Shared>, format: Format) -> Result<String, std::fmt::Error> {
    render_at(shared, format, SystemTime::now())
}

/// Renders every default metric family in `format` at `now`, so that tests
/// get a deterministic exposition: a store rendered from scratch (keys in
/// buckets by a fixed hash), sent as a scrape would be.
pub fn render_at(
    shared: &Arc<Shared>,
    format: Format,
    now: SystemTime,
) -> Result<String, std::fmt::Error> {
    render_with(shared, format, now, Exposition::default())
}

/// [`render_at`] with the families and series `exposition` chooses.
pub fn render_with(
    shared: &Arc<Shared>,
    format: Format,
    now: SystemTime,
    exposition: Exposition,
) -> Result<String, std::fmt::Error> {
    let mut store = store::Store::new(exposition, store::Sizing::fixed());
    store.update(shared, &shared.changes(), now);
    let health = families::health(&shared.health, format)?;
    let body = Body::plain(&store.snapshot(), format, health.into());
    String::from_utf8(body.to_bytes().to_vec()).map_err(|_| std::fmt::Error)
}
