//! The exposition in two parts, each rendered beside the scrapes:
//!
//! - the *index part*: every family the index feeds (locks, objects,
//!   counters per object, overview), rendered bucket by bucket when the
//!   index changes ([`super::buckets`]);
//! - the *health part* (here): watch health and the self-metric counters,
//!   small, rendered with every pass of the renderer (at least once a
//!   second).
//!
//! A body is the index part's text followed by the health part's: the same
//! bytes an uncached render ([`super::render_at`]) gives at that instant (a
//! test shows it). Nothing in either part moves with the clock alone: the
//! index part carries timestamps, not ages (unless `--export-lock-age`
//! asks for them), and an overdue flip reaches it as an index change.

use std::sync::Arc;

use prometheus_client::registry::Registry;

use super::{Format, LockCollector};
use crate::shared::Shared;

/// One encoded registry in `format`, without the OpenMetrics `# EOF`.
pub(crate) fn encode(
    registry: &Registry,
    format: Format,
    capacity: usize,
) -> Result<String, std::fmt::Error> {
    let mut out = String::with_capacity(capacity);
    match format {
        Format::OpenMetrics => {
            prometheus_client::encoding::text::encode_registry(&mut out, registry)?
        }
        Format::Prometheus => {
            prometheus_client::encoding::prometheus_text::encode(&mut out, registry)?
        }
    }
    Ok(out)
}

/// Renders the health part: watch health and the self-metric counters,
/// with the OpenMetrics `# EOF` that ends every body.
pub(crate) fn render_health(
    shared: &Arc<Shared>,
    format: Format,
) -> Result<String, std::fmt::Error> {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(LockCollector {
        shared: shared.clone(),
    }));
    shared
        .health
        .register_counters(registry.sub_registry_with_labels(std::iter::empty()));
    let mut out = encode(&registry, format, 4096)?;
    if format == Format::OpenMetrics {
        prometheus_client::encoding::text::encode_eof(&mut out)?;
    }
    Ok(out)
}
