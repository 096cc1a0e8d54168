//! The self-metric counters (watch events, watch errors, live pod reads) as
//! prometheus-client counter families with closed label sets.

use std::fmt::{self, Write as _};
use std::hash::Hash;

use prometheus_client::encoding::{
    EncodeLabelSet, EncodeLabelValue, EncodeMetric, LabelValueEncoder, MetricEncoder,
};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use super::endpoint::{AuthLabels, AuthResult, Outcome, OutcomeLabels, Review, ReviewLabels};
use super::{ErrorReason, Health, ReadResult, SyncMode};
use crate::index::Resource;

/// A watched resource as a label value (the enum lives in the index crate,
/// the encoding trait in prometheus-client: a local type joins them).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub(super) struct ResourceLabel(Resource);

impl From<Resource> for ResourceLabel {
    fn from(r: Resource) -> Self {
        ResourceLabel(r)
    }
}

impl EncodeLabelValue for ResourceLabel {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> fmt::Result {
        encoder.write_str(self.0.as_str())
    }
}

impl EncodeLabelValue for ErrorReason {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> fmt::Result {
        encoder.write_str(self.as_str())
    }
}

impl EncodeLabelValue for SyncMode {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> fmt::Result {
        encoder.write_str(self.as_str())
    }
}

impl EncodeLabelValue for ReadResult {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> fmt::Result {
        encoder.write_str(self.as_str())
    }
}

/// `{resource}` of `watch_events_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ResourceLabels {
    pub(super) resource: ResourceLabel,
}

/// `{resource, reason}` of `watch_errors_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ErrorLabels {
    pub(super) resource: ResourceLabel,
    pub(super) reason: ErrorReason,
}

/// `{resource, mode}` of `watch_syncs_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct SyncLabels {
    pub(super) resource: ResourceLabel,
    pub(super) mode: SyncMode,
}

/// `{result}` of `pod_reads_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ReadLabels {
    pub(super) result: ReadResult,
}

/// The counters; a family is an `Arc` inside, so registering a clone per
/// scrape shares the live values.
#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) events: Family<ResourceLabels, Counter>,
    pub(super) errors: Family<ErrorLabels, Counter>,
    pub(super) syncs: Family<SyncLabels, Counter>,
    pub(super) pod_reads: Family<ReadLabels, Counter>,
    pub(super) auth: Family<AuthLabels, Counter>,
    pub(super) reviews: Family<ReviewLabels, Counter>,
    pub(super) tls_reloads: Family<OutcomeLabels, Counter>,
    pub(super) events_dropped: Counter,
    pub(super) invalid_node_names: Counter,
}

/// A counter family encoded over a closed list of label sets, in that
/// order, each at 0 until counted. A registered `Family` alone would encode
/// only the series touched so far, in hash-map order, which differs from
/// one process to the next.
#[derive(Debug)]
struct InOrder<L: Clone + Hash + Eq> {
    family: Family<L, Counter>,
    series: Vec<L>,
}

impl<L> EncodeMetric for InOrder<L>
where
    L: EncodeLabelSet + Clone + Hash + Eq + fmt::Debug + Send + Sync + 'static,
{
    fn encode(&self, mut encoder: MetricEncoder<'_>) -> fmt::Result {
        for labels in &self.series {
            let counter = self.family.get_or_create(labels);
            EncodeMetric::encode(&*counter, encoder.encode_family(labels)?)?;
        }
        Ok(())
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Counter
    }
}

impl Health {
    /// Registers the watch-event, watch-error, pod-read, dropped-Event and
    /// endpoint counters in `registry`: events and errors of every watched
    /// resource (every reason), pod reads of every result, 0 included.
    pub fn register_counters(&self, registry: &mut Registry) {
        let watched: Vec<Resource> = Resource::ALL
            .into_iter()
            .filter(|r| self.is_watched(*r))
            .collect();
        let c = &self.counters;
        // Names without `_total`: the encoder adds it (and prometheus-client
        // asserts it in debug builds); the registry adds the help's full stop.
        registry.register(
            "captf_lock_exporter_watch_events",
            "Watch events received per resource",
            InOrder {
                family: c.events.clone(),
                series: watched
                    .iter()
                    .map(|&resource| ResourceLabels {
                        resource: resource.into(),
                    })
                    .collect(),
            },
        );
        registry.register(
            "captf_lock_exporter_watch_errors",
            "Watch errors per resource and reason",
            InOrder {
                family: c.errors.clone(),
                series: watched
                    .iter()
                    .flat_map(|&resource| {
                        ErrorReason::ALL.map(|reason| ErrorLabels {
                            resource: resource.into(),
                            reason,
                        })
                    })
                    .collect(),
            },
        );
        registry.register(
            "captf_lock_exporter_watch_syncs",
            "Whole syncs (first syncs and relists) per resource and how they were made: one streaming watch-list, or a paged list",
            InOrder {
                family: c.syncs.clone(),
                series: watched
                    .iter()
                    .flat_map(|&resource| SyncMode::ALL.map(|mode| SyncLabels { resource: resource.into(), mode }))
                    .collect(),
            },
        );
        registry.register(
            "captf_lock_exporter_pod_reads",
            "Live reads of holder pods per result",
            InOrder {
                family: c.pod_reads.clone(),
                series: ReadResult::ALL.map(|result| ReadLabels { result }).to_vec(),
            },
        );
        registry.register(
            "captf_lock_exporter_force_unlock_events_dropped",
            "ForceUnlocked Events not kept: about objects the exporter does not know, in a namespace that already holds 256 such Events",
            c.events_dropped.clone(),
        );
        registry.register(
            "captf_lock_exporter_invalid_node_names",
            "Runner pod updates whose spec.nodeName is not a name a Node can have: kept without node evidence, the class unchanged",
            c.invalid_node_names.clone(),
        );
        registry.register(
            "captf_lock_exporter_http_auth",
            "Requests for protected paths by what authentication and authorization decided",
            InOrder {
                family: c.auth.clone(),
                series: AuthResult::ALL.map(|result| AuthLabels { result }).to_vec(),
            },
        );
        registry.register(
            "captf_lock_exporter_auth_reviews",
            "TokenReview and SubjectAccessReview calls to the API server (cache misses) by result",
            InOrder {
                family: c.reviews.clone(),
                series: Review::ALL
                    .into_iter()
                    .flat_map(|review| Outcome::ALL.map(|result| ReviewLabels { review, result }))
                    .collect(),
            },
        );
        registry.register(
            "captf_lock_exporter_tls_reloads",
            "Changed TLS certificate files read again, by whether the new pair is served",
            InOrder {
                family: c.tls_reloads.clone(),
                series: Outcome::ALL.map(|result| OutcomeLabels { result }).to_vec(),
            },
        );
    }
}

impl Health {
    /// Counts `n` ForceUnlocked Events the index did not keep
    /// (`Effects::events_dropped`).
    pub fn count_events_dropped(&self, n: u64) {
        self.counters.events_dropped.inc_by(n);
        self.moved();
    }

    /// Counts `n` runner pod updates with a `spec.nodeName` no Node can
    /// have (`Effects::invalid_node_names`).
    pub fn count_invalid_node_names(&self, n: u64) {
        self.counters.invalid_node_names.inc_by(n);
        self.moved();
    }

    /// Runner pod updates with an invalid `spec.nodeName`, so far.
    pub fn invalid_node_names(&self) -> u64 {
        self.counters.invalid_node_names.get()
    }

    /// ForceUnlocked Events the index did not keep, so far.
    pub fn events_dropped(&self) -> u64 {
        self.counters.events_dropped.get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(h: &Health) -> String {
        let mut registry = Registry::default();
        h.register_counters(&mut registry);
        let mut out = String::new();
        match prometheus_client::encoding::text::encode(&mut out, &registry) {
            Ok(()) => out,
            Err(e) => panic!("encoding failed: {e}"),
        }
    }

    #[test]
    fn series_exist_at_zero_in_closed_order_and_only_for_watched_resources() {
        let h = Health::new();
        // Counted before its watch is registered: kept, shown once watched.
        h.on_event(Resource::Pods);
        let text = encoded(&h);
        assert!(!text.contains("resource="), "nothing watched yet:\n{text}");
        assert!(text.contains("captf_lock_exporter_pod_reads_total{result=\"error\"} 0"));
        h.register(Resource::Pods, "");
        h.register(Resource::Leases, "");
        h.count_error(Resource::Leases, ErrorReason::Other);
        let text = encoded(&h);
        let leases = text.find("watch_events_total{resource=\"leases\"} 0");
        let pods = text.find("watch_events_total{resource=\"pods\"} 1");
        assert!(
            leases.is_some() && leases < pods,
            "Resource::ALL order:\n{text}"
        );
        assert!(text.contains("{resource=\"leases\",reason=\"other\"} 1"));
        assert_eq!(text.matches("watch_errors_total{").count(), 20);
        assert_eq!(h.events(Resource::Pods), 1);
        assert_eq!(h.errors(Resource::Leases, ErrorReason::Other), 1);
        assert_eq!(h.pod_reads(ReadResult::Found), 0);
    }
}
