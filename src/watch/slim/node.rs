//! The Node as the watchers decode it: its name, `Ready` condition and
//! the three taints the lost-node rules read (`core::node_lost`);
//! everything else, its image list included, is skipped unread.

use std::fmt;

use kube::api::ApiResource;
use kube::core::{DynamicResourceScope, ObjectMeta};
use serde::de::{IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};
use std::borrow::Cow;

use super::decode::{lenient, lenient_string, scalars_read_as_none, slim_meta};
use super::{conditions_of, ConditionDoc};
use crate::core::node_lost::Taints;

/// A taint's key (the rest of a taint is not read).
#[derive(Clone, Debug, Default, Deserialize)]
struct TaintDoc {
    #[serde(default, deserialize_with = "lenient_string")]
    key: String,
}

/// A list element that is a taint object, else nothing.
struct LenientTaint(Option<TaintDoc>);

impl<'de> Deserialize<'de> for LenientTaint {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        lenient(d).map(LenientTaint)
    }
}

/// The three taints the lost-node rules read, noted as the list is read
/// (no list of every taint is built); anything but a list reads as none.
fn kept_taints<'de, D: Deserializer<'de>>(d: D) -> Result<Taints, D::Error> {
    struct Keep;
    impl<'de> Visitor<'de> for Keep {
        type Value = Option<Taints>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a list of taints")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut kept = Taints::default();
            while let Some(LenientTaint(t)) = seq.next_element()? {
                if let Some(t) = t {
                    kept.note(&t.key);
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
    Ok(d.deserialize_any(Keep)?.unwrap_or_default())
}

/// The part of a Node spec the exporter reads.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct NodeSpecDoc {
    /// The not-ready, unreachable and out-of-service taints.
    #[serde(default, deserialize_with = "kept_taints")]
    pub taints: Taints,
}

/// The `Ready` condition of a `conditions` list, else none.
fn ready_only<'de, D: Deserializer<'de>>(d: D) -> Result<Option<ConditionDoc>, D::Error> {
    Ok(conditions_of(d, &["Ready"])?.into_iter().next().flatten())
}

/// The part of a Node status the exporter reads.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct NodeStatusDoc {
    /// The `Ready` condition (the others, images and volumes skipped).
    #[serde(default, rename = "conditions", deserialize_with = "ready_only")]
    pub ready: Option<ConditionDoc>,
}

/// A Node: its name, `Ready` condition and three taints (everything else,
/// its image list included, is skipped unread).
#[derive(Clone, Debug, Deserialize)]
pub struct NodeObject {
    /// Name.
    #[serde(deserialize_with = "slim_meta")]
    pub metadata: ObjectMeta,
    /// The taints.
    #[serde(default, deserialize_with = "lenient")]
    pub spec: Option<NodeSpecDoc>,
    /// The Ready condition.
    #[serde(default, deserialize_with = "lenient")]
    pub status: Option<NodeStatusDoc>,
}
slim_resource!(NodeObject);
