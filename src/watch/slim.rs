//! The API objects as the watchers decode them: only the fields the
//! exporter reads, so a list of 100k objects is not 100k full `ObjectMeta`s
//! with their managedFields, nor 100k `serde_json::Value` trees.
//!
//! Every type keeps `metadata` as a [`ObjectMeta`] (kube's `Resource` trait
//! needs one) but fills only name, namespace, resourceVersion, labels,
//! creationTimestamp and the lock-info annotation; everything else is
//! skipped unread. Past `metadata`, decoding is lenient: a field of the
//! wrong type reads as unset instead of failing the whole list, so one odd
//! object cannot blind the exporter to all the others.
//!
//! This file holds the types, one per resource and part read, and the one
//! decoder that knows a type (`state_readable_only`, which keeps CAPTF's
//! `StateReadable` condition). The field decoders they name in
//! `deserialize_with`, slimmed metadata and the lenient readers, are in
//! `decode`: they are about serde, not about any resource.

mod decode;

use std::borrow::Cow;
use std::fmt;

use kube::api::ApiResource;
use kube::core::{DynamicResourceScope, ObjectMeta};
use serde::de::{IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};

pub use decode::lenient_string;
use decode::{
    lenient, lenient_i64, lenient_opt_string, lenient_u64, scalars_read_as_none, slim_meta,
};

/// Annotation holding the backend's lock-info JSON: the one annotation kept.
pub const LOCK_INFO_ANNOTATION: &str = "app.terraform.io/lock-info";

/// kube's `Resource` for a slim type: dynamic, like kube's `DynamicObject`
/// (kind, group and version come from the `ApiResource` a watch is made
/// with), and `metadata` as its object metadata.
macro_rules! slim_resource {
    ($t:ty) => {
        impl kube::Resource for $t {
            type DynamicType = ApiResource;
            type Scope = DynamicResourceScope;

            fn kind(dt: &ApiResource) -> Cow<'_, str> {
                Cow::from(&dt.kind)
            }
            fn group(dt: &ApiResource) -> Cow<'_, str> {
                Cow::from(&dt.group)
            }
            fn version(dt: &ApiResource) -> Cow<'_, str> {
                Cow::from(&dt.version)
            }
            fn api_version(dt: &ApiResource) -> Cow<'_, str> {
                Cow::from(&dt.api_version)
            }
            fn plural(dt: &ApiResource) -> Cow<'_, str> {
                Cow::from(&dt.plural)
            }
            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

// After the macro, which it uses.
mod node;
pub use node::{NodeObject, NodeSpecDoc, NodeStatusDoc};

/// The part of a Lease spec the exporter reads.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaseSpec {
    /// The lock ID while held, cut past
    /// [`crate::watch::trim::MAX_LOCK_ID_BYTES`] as it is decoded.
    #[serde(default, deserialize_with = "lenient_lock_id")]
    pub holder_identity: String,
}

/// A lock ID as [`crate::watch::trim::keep_lock_id`] keeps it; anything
/// but a string reads as empty.
fn lenient_lock_id<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    lenient_string(d).map(|id| super::lock_id::keep_lock_id(&id))
}

/// A Lease.
#[derive(Clone, Debug, Deserialize)]
pub struct LeaseObject {
    /// Name, namespace, labels, lock-info.
    #[serde(deserialize_with = "slim_meta")]
    pub metadata: ObjectMeta,
    /// holderIdentity.
    #[serde(default, deserialize_with = "lenient")]
    pub spec: Option<LeaseSpec>,
}
slim_resource!(LeaseObject);
// Its protobuf reader: `crate::watch::proto::lease`.

/// The part of a pod status the exporter reads.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct PodStatus {
    /// Pending, Running, Succeeded, Failed or Unknown.
    #[serde(default, deserialize_with = "lenient_string")]
    pub phase: String,
    /// The `Ready` and `DisruptionTarget` conditions (the others skipped).
    #[serde(default, deserialize_with = "pod_conditions")]
    pub conditions: PodConditions,
}

/// The statuses of the two pod conditions the lost-node report shows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodConditions {
    /// `Ready`'s status as written.
    pub ready: Option<String>,
    /// `DisruptionTarget`'s status as written.
    pub disruption_target: Option<String>,
}

/// The part of a pod spec the exporter reads.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSpecDoc {
    /// The node the pod is bound to.
    #[serde(default, deserialize_with = "lenient_string")]
    pub node_name: String,
}

/// A pod: its labels, deletion time, node, phase and two conditions (the
/// rest of the spec, containers included, is skipped unread).
#[derive(Clone, Debug, Deserialize)]
pub struct PodObject {
    /// Name, namespace, labels, deletionTimestamp and its grace.
    #[serde(deserialize_with = "slim_meta")]
    pub metadata: ObjectMeta,
    /// `spec.nodeName`.
    #[serde(default, deserialize_with = "lenient")]
    pub spec: Option<PodSpecDoc>,
    /// The phase and conditions.
    #[serde(default, deserialize_with = "lenient")]
    pub status: Option<PodStatus>,
}
slim_resource!(PodObject);

/// `spec.jobs` (or `spec.defaults.jobs`) as written.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct JobsDoc {
    /// lockTimeoutSeconds.
    #[serde(default, deserialize_with = "lenient_i64")]
    pub lock_timeout_seconds: Option<i64>,
    /// activeDeadlineSeconds.
    #[serde(default, deserialize_with = "lenient_i64")]
    pub active_deadline_seconds: Option<i64>,
}

/// `spec.defaults` of a TerraformCluster.
#[derive(Clone, Copy, Debug, Default, Deserialize)]
pub struct DefaultsDoc {
    /// `spec.defaults.jobs`.
    #[serde(default, deserialize_with = "lenient")]
    pub jobs: Option<JobsDoc>,
}

/// The part of a Terraform* spec the exporter reads (the rest, module
/// inputs included, is skipped unread).
#[derive(Clone, Copy, Debug, Default, Deserialize)]
pub struct TerraformSpec {
    /// `spec.jobs`.
    #[serde(default, deserialize_with = "lenient")]
    pub jobs: Option<JobsDoc>,
    /// `spec.defaults` (TerraformCluster only).
    #[serde(default, deserialize_with = "lenient")]
    pub defaults: Option<DefaultsDoc>,
}

/// One `metav1.Condition`, every field lenient.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConditionDoc {
    /// `type`.
    #[serde(default, rename = "type", deserialize_with = "lenient_string")]
    pub type_: String,
    /// `status`.
    #[serde(default, deserialize_with = "lenient_string")]
    pub status: String,
    /// `reason`.
    #[serde(default, deserialize_with = "lenient_string")]
    pub reason: String,
    /// `message`.
    #[serde(default, deserialize_with = "lenient_string")]
    pub message: String,
    /// `lastTransitionTime` (RFC 3339).
    #[serde(default, deserialize_with = "lenient_string")]
    pub last_transition_time: String,
}

/// A list element that is a condition object, else nothing.
struct LenientCondition(Option<ConditionDoc>);

impl<'de> Deserialize<'de> for LenientCondition {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        lenient(d).map(LenientCondition)
    }
}

/// Keeps the `StateReadable` condition of a `conditions` list (the last
/// one, should a list repeat it) and skips the others; anything but a list
/// reads as none.
fn state_readable_only<'de, D: Deserializer<'de>>(d: D) -> Result<Option<ConditionDoc>, D::Error> {
    let kept = conditions_of(d, &[crate::core::captf_verdict::STATE_READABLE])?;
    Ok(kept.into_iter().next().flatten())
}

/// The pod's `Ready` and `DisruptionTarget` statuses.
fn pod_conditions<'de, D: Deserializer<'de>>(d: D) -> Result<PodConditions, D::Error> {
    let [ready, disruption] = conditions_of(d, &["Ready", "DisruptionTarget"])?
        .try_into()
        .unwrap_or_default();
    let status = |c: Option<ConditionDoc>| c.map(|c| crate::index::cap(&c.status, 16).to_owned());
    Ok(PodConditions {
        ready: status(ready),
        disruption_target: status(disruption),
    })
}

/// The conditions of `types` in a `conditions` list, one slot per type in
/// that order (the last one of a type, should a list repeat it); the
/// others are skipped, and anything but a list reads as none.
pub(super) fn conditions_of<'de, D: Deserializer<'de>>(
    d: D,
    types: &'static [&'static str],
) -> Result<Vec<Option<ConditionDoc>>, D::Error> {
    struct Keep(&'static [&'static str]);
    impl<'de> Visitor<'de> for Keep {
        type Value = Option<Vec<Option<ConditionDoc>>>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a list of conditions")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut kept = vec![None; self.0.len()];
            while let Some(LenientCondition(c)) = seq.next_element()? {
                let Some(c) = c else { continue };
                let slot = self.0.iter().position(|t| *t == c.type_);
                if let Some(slot) = slot.and_then(|i| kept.get_mut(i)) {
                    *slot = Some(c);
                }
            }
            Ok(Some(kept))
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            Ok(None)
        }
        scalars_read_as_none!();
    }
    let kept = d.deserialize_any(Keep(types))?;
    Ok(kept.unwrap_or_else(|| vec![None; types.len()]))
}

/// The part of a Terraform* status the exporter reads: CAPTF's own lock
/// verdict and whether a Job runs (the rest is skipped unread).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TerraformStatus {
    /// The `StateReadable` condition of `status.conditions`.
    #[serde(
        default,
        rename = "conditions",
        deserialize_with = "state_readable_only"
    )]
    pub state_readable: Option<ConditionDoc>,
    /// `status.activeJob`, set (an object) while a Job of the object runs.
    #[serde(default, deserialize_with = "lenient")]
    pub active_job: Option<IgnoredAny>,
}

/// A TerraformCluster, TerraformMachine or TerraformMachinePool.
#[derive(Clone, Debug, Deserialize)]
pub struct TerraformObject {
    /// Name, namespace, labels.
    #[serde(deserialize_with = "slim_meta")]
    pub metadata: ObjectMeta,
    /// Job policies.
    #[serde(default, deserialize_with = "lenient")]
    pub spec: Option<TerraformSpec>,
    /// CAPTF's verdict and the active Job.
    #[serde(default, deserialize_with = "lenient")]
    pub status: Option<TerraformStatus>,
}
slim_resource!(TerraformObject);

/// `spec.targetRef` of a TerraformPlan.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct PlanTargetDoc {
    /// TerraformCluster or TerraformMachinePool.
    #[serde(default, deserialize_with = "lenient_string")]
    pub kind: String,
    /// The target's name, in the plan's namespace.
    #[serde(default, deserialize_with = "lenient_string")]
    pub name: String,
}

/// The part of a TerraformPlan spec the exporter reads.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanSpecDoc {
    /// `spec.targetRef`.
    #[serde(default, deserialize_with = "lenient")]
    pub target_ref: Option<PlanTargetDoc>,
}

/// The part of a TerraformPlan status the exporter reads.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct PlanStatusDoc {
    /// Pending, Approved, Applied, Superseded or Failed.
    #[serde(default, deserialize_with = "lenient_string")]
    pub phase: String,
}

/// A TerraformPlan: its target and phase (the plan itself is skipped unread).
#[derive(Clone, Debug, Deserialize)]
pub struct TerraformPlanObject {
    /// Name, namespace, labels (`captf.io/plan-phase`).
    #[serde(deserialize_with = "slim_meta")]
    pub metadata: ObjectMeta,
    /// The target.
    #[serde(default, deserialize_with = "lenient")]
    pub spec: Option<PlanSpecDoc>,
    /// The phase.
    #[serde(default, deserialize_with = "lenient")]
    pub status: Option<PlanStatusDoc>,
}
slim_resource!(TerraformPlanObject);

/// `spec.infrastructureRef` of a CAPI Cluster, in either version's shape.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InfraRefDoc {
    /// v1beta2: the API group.
    #[serde(default, deserialize_with = "lenient_opt_string")]
    pub api_group: Option<String>,
    /// v1beta1: "group/version".
    #[serde(default, deserialize_with = "lenient_string")]
    pub api_version: String,
    /// Kind.
    #[serde(default, deserialize_with = "lenient_string")]
    pub kind: String,
    /// Name.
    #[serde(default, deserialize_with = "lenient_string")]
    pub name: String,
}

/// The part of a CAPI Cluster spec the exporter reads.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CapiSpec {
    /// `spec.infrastructureRef`.
    #[serde(default, deserialize_with = "lenient")]
    pub infrastructure_ref: Option<InfraRefDoc>,
}

/// A CAPI Cluster (v1beta2 or v1beta1).
#[derive(Clone, Debug, Deserialize)]
pub struct CapiClusterObject {
    /// Name, namespace.
    #[serde(deserialize_with = "slim_meta")]
    pub metadata: ObjectMeta,
    /// infrastructureRef.
    #[serde(default, deserialize_with = "lenient")]
    pub spec: Option<CapiSpec>,
}
slim_resource!(CapiClusterObject);

/// An object an Event is about, or relates to.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EventRef {
    /// API version (`group/version`, or `version` for the core group).
    #[serde(default, deserialize_with = "lenient_string")]
    pub api_version: String,
    /// Namespace.
    #[serde(default, deserialize_with = "lenient_string")]
    pub namespace: String,
    /// Kind.
    #[serde(default, deserialize_with = "lenient_string")]
    pub kind: String,
    /// Name.
    #[serde(default, deserialize_with = "lenient_string")]
    pub name: String,
}

/// `series` of an Event that repeated.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EventSeries {
    /// How often it happened.
    #[serde(default, deserialize_with = "lenient_u64")]
    pub count: Option<u64>,
    /// When it last happened (RFC 3339).
    #[serde(default, deserialize_with = "lenient_string")]
    pub last_observed_time: String,
}

/// An events.k8s.io/v1 Event.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EventObject {
    /// Name, namespace, creationTimestamp.
    #[serde(deserialize_with = "slim_meta")]
    pub metadata: ObjectMeta,
    /// Reason (`ForceUnlocked`).
    #[serde(default, deserialize_with = "lenient_string")]
    pub reason: String,
    /// Who emitted it (`captf-manager`).
    #[serde(default, deserialize_with = "lenient_string")]
    pub reporting_controller: String,
    /// The object it is about.
    #[serde(default, deserialize_with = "lenient")]
    pub regarding: Option<EventRef>,
    /// The secondary object (for ForceUnlocked: the Job that unlocks).
    #[serde(default, deserialize_with = "lenient")]
    pub related: Option<EventRef>,
    /// Repeats.
    #[serde(default, deserialize_with = "lenient")]
    pub series: Option<EventSeries>,
    /// When it happened (RFC 3339, microseconds).
    #[serde(default, deserialize_with = "lenient_string")]
    pub event_time: String,
    /// The core/v1 fallback time.
    #[serde(default, deserialize_with = "lenient_string")]
    pub deprecated_last_timestamp: String,
}
slim_resource!(EventObject);

#[cfg(test)]
mod tests;
