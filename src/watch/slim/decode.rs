//! The serde decoders the slim types name in `deserialize_with`: the
//! slimmed metadata ([`slim_meta`]), and the lenient readers of every
//! field past it, which turn a value of the wrong type into "unset".
//!
//! Apart from the types ([`super`]) because they know nothing of any
//! resource: they are about serde (visitors that skip what is not kept
//! without building a `Value` tree), while the types say which fields of
//! which object the exporter reads.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::core::ObjectMeta;
use serde::de::value::MapAccessDeserializer;
use serde::de::{IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::Value;

use super::LOCK_INFO_ANNOTATION;

/// The metadata fields the exporter reads.
#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SlimMeta {
    name: Option<String>,
    namespace: Option<String>,
    resource_version: Option<String>,
    labels: Option<BTreeMap<String, String>>,
    #[serde(default, deserialize_with = "lock_info_only")]
    annotations: Option<BTreeMap<String, String>>,
    creation_timestamp: Option<Time>,
    /// Set on a terminating object (a pod: the end of its grace period);
    /// a value that is not an RFC 3339 time reads as unset.
    #[serde(default, deserialize_with = "lenient_time")]
    deletion_timestamp: Option<Time>,
    #[serde(default, deserialize_with = "lenient_i64")]
    deletion_grace_period_seconds: Option<i64>,
}

/// The metadata of an object, only the fields [`SlimMeta`] names filled.
pub(super) fn slim_meta<'de, D: Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    let m = SlimMeta::deserialize(d)?;
    Ok(ObjectMeta {
        name: m.name,
        namespace: m.namespace,
        resource_version: m.resource_version,
        labels: m.labels,
        annotations: m.annotations,
        creation_timestamp: m.creation_timestamp,
        deletion_timestamp: m.deletion_timestamp,
        deletion_grace_period_seconds: m.deletion_grace_period_seconds,
        ..ObjectMeta::default()
    })
}

/// Keeps the lock-info annotation and skips the others (kubectl's
/// last-applied configuration can be as large as the object).
fn lock_info_only<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<BTreeMap<String, String>>, D::Error> {
    struct Keep;
    impl<'de> Visitor<'de> for Keep {
        type Value = Option<BTreeMap<String, String>>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("an annotations map")
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_none<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D2: Deserializer<'de>>(self, d: D2) -> Result<Self::Value, D2::Error> {
            d.deserialize_map(Keep)
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut kept = BTreeMap::new();
            while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                if key == LOCK_INFO_ANNOTATION {
                    let v: Value = map.next_value()?;
                    if let Value::String(s) = v {
                        kept.insert(key.into_owned(), s);
                    }
                } else {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            Ok(Some(kept))
        }
    }
    d.deserialize_option(Keep)
}

/// An RFC 3339 time, or None for anything else.
fn lenient_time<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Time>, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::String(s) => s.parse::<k8s_openapi::jiff::Timestamp>().ok().map(Time),
        _ => None,
    })
}

/// A string, or "" for anything else.
pub fn lenient_string<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::String(s) => s,
        _ => String::new(),
    })
}

/// A string, or None for anything else.
pub(super) fn lenient_opt_string<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<String>, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::String(s) => Some(s),
        _ => None,
    })
}

/// A whole number, or None for anything else.
pub(super) fn lenient_i64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    Ok(Value::deserialize(d)?.as_i64())
}

/// A non-negative whole number, or None for anything else.
pub(super) fn lenient_u64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    Ok(Value::deserialize(d)?.as_u64())
}

/// The visitor methods of a lenient `Option` decoder for every value that
/// is not the expected shape: `null` and scalars read as `None`, and
/// `Some` unwraps to the value itself.
macro_rules! scalars_read_as_none {
    () => {
        fn visit_some<D2: serde::Deserializer<'de>>(self, d: D2) -> Result<Self::Value, D2::Error> {
            d.deserialize_any(self)
        }
        fn visit_none<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
            Ok(None)
        }
    };
}
// By path, for the visitors of the types (`state_readable_only`).
pub(super) use scalars_read_as_none;

/// `T` when the value is a JSON object, else None: a string or a list
/// where an object belongs is skipped, not an error. Fields inside `T`
/// are lenient on their own. No `Value` tree is built on the way.
pub(super) fn lenient<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<T>, D::Error> {
    struct ObjectOrNothing<T>(PhantomData<T>);
    impl<'de, T: Deserialize<'de>> Visitor<'de> for ObjectOrNothing<T> {
        type Value = Option<T>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("an object")
        }
        fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
            T::deserialize(MapAccessDeserializer::new(map)).map(Some)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            Ok(None)
        }
        scalars_read_as_none!();
    }
    d.deserialize_any(ObjectOrNothing(PhantomData))
}
