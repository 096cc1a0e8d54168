//! Kubernetes' protobuf encoding of the built-in kinds, read without IO:
//! what a watch of Leases carries when it asks for
//! `application/vnd.kubernetes.protobuf`, as client-go components
//! (kube-state-metrics among them) ask.
//!
//! Why: at start the API server encodes every lock Lease once for the
//! exporter, and protobuf costs it about a third of JSON (measured in
//! `tools/bench/stream_cost.py`; docs/decisions/watch-start.md). A custom
//! resource has no protobuf form, so only built-in kinds are read so;
//! a server or proxy that answers JSON anyway is read as JSON
//! (`super::encoding`).
//!
//! The shapes, from k8s.io/apimachinery and k8s.io/api `generated.proto`:
//!
//! - a watch stream is a run of frames, each a 4-byte big-endian length and
//!   a `metav1.WatchEvent` (`type` = 1, `object` = 2, a `RawExtension` whose
//!   `raw` = 1), with no envelope of its own;
//! - the object inside, and a non-watch answer such as an error `Status`,
//!   is the magic `k8s\0` and a `runtime.Unknown` (`typeMeta` = 1 with
//!   `apiVersion` = 1 and `kind` = 2, `raw` = 2, `contentEncoding` = 3);
//! - `ObjectMeta` is field 1 of every kind; in it `name` = 1,
//!   `namespace` = 3, `resourceVersion` = 6, `labels` = 11 and
//!   `annotations` = 12 (maps: repeated entries of `key` = 1, `value` = 2);
//! - `Lease.spec` = 2, in it `holderIdentity` = 1;
//! - `Status`: `status` = 2, `message` = 3, `reason` = 4, `code` = 6.
//!
//! Only the fields the exporter reads are kept, as the JSON decoders keep
//! them (`super::slim`): everything else is skipped unread. Malformed
//! bytes are a [`ProtoError`], never a panic.

pub mod wire;

use std::collections::BTreeMap;

use kube::core::response::StatusSummary;
use kube::core::watch::{Bookmark, BookmarkMeta};
use kube::core::{ObjectMeta, Status, TypeMeta, WatchEvent};

use super::slim::{
    CapiClusterObject, EventObject, LeaseObject, LeaseSpec, NodeObject, PodObject, TerraformObject,
    TerraformPlanObject, LOCK_INFO_ANNOTATION,
};
use wire::{fields, Value};

/// The magic that begins a protobuf-encoded Kubernetes object.
pub const MAGIC: &[u8; 4] = b"k8s\0";

/// Why bytes could not be read as the expected message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProtoError {
    /// A length or value runs past the end of its message.
    #[error("a value runs past the end of its message")]
    Truncated,
    /// A varint of more than ten bytes.
    #[error("a varint longer than ten bytes")]
    VarintTooLong,
    /// A wire type no Kubernetes message uses (3 and 4 are groups).
    #[error("wire type {0}")]
    UnknownWireType(u8),
    /// Field number 0, which protobuf forbids.
    #[error("field number 0")]
    FieldZero,
    /// A known field with a wire type its schema does not have.
    #[error("{0} has the wrong wire type")]
    WireType(&'static str),
    /// A string field that is not UTF-8.
    #[error("{0} is not UTF-8")]
    Utf8(&'static str),
    /// An object without the `k8s\0` magic.
    #[error("the object does not begin with the k8s\\0 magic")]
    NoMagic,
    /// An object compressed or otherwise encoded inside its envelope.
    #[error("content encoding {0:?} is not read")]
    ContentEncoding(String),
    /// An object of another kind than the watch's.
    #[error("a {got} where a {expected} belongs")]
    Kind {
        /// The kind the watch is of.
        expected: &'static str,
        /// The kind the envelope names.
        got: String,
    },
    /// A watch event type that is none of ADDED, MODIFIED, DELETED,
    /// BOOKMARK and ERROR.
    #[error("watch event type {0:?}")]
    EventType(String),
    /// A watch event without an object.
    #[error("a watch event without an object")]
    NoObject,
}

/// A kind the exporter can read in protobuf: its name, as the envelope of
/// each object names it, and its decoder.
pub struct ProtoKind<K> {
    /// The kind (`Lease`).
    pub kind: &'static str,
    /// Reads one object of the kind from its `runtime.Unknown` `raw` bytes.
    pub decode: fn(&[u8]) -> Result<K, ProtoError>,
}

/// Implemented by every slim type; a built-in kind read in protobuf says
/// how. Custom resources have no protobuf form and keep the default.
pub trait Protobuf: Sized + 'static {
    /// How to read the kind in protobuf, None to ask the server for JSON.
    const PROTOBUF: Option<&'static ProtoKind<Self>> = None;
}

// Custom resources and kinds read in JSON: the default (ask for JSON).
impl Protobuf for PodObject {}
impl Protobuf for TerraformObject {}
impl Protobuf for TerraformPlanObject {}
impl Protobuf for CapiClusterObject {}
impl Protobuf for EventObject {}
impl Protobuf for NodeObject {}

impl Protobuf for LeaseObject {
    const PROTOBUF: Option<&'static ProtoKind<Self>> = Some(&ProtoKind {
        kind: "Lease",
        decode: lease,
    });
}

/// A `runtime.Unknown` envelope: the object's type and its bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unknown<'a> {
    /// `apiVersion` of the object.
    pub api_version: &'a str,
    /// `kind` of the object.
    pub kind: &'a str,
    /// The object's own message.
    pub raw: &'a [u8],
}

/// Opens the envelope of an encoded object (magic, then `runtime.Unknown`).
pub fn unknown(bytes: &[u8]) -> Result<Unknown<'_>, ProtoError> {
    let body = bytes.strip_prefix(MAGIC).ok_or(ProtoError::NoMagic)?;
    let mut out = Unknown {
        api_version: "",
        kind: "",
        raw: &[],
    };
    for f in fields(body) {
        match f? {
            (1, v) => {
                for t in fields(v.bytes("typeMeta")?) {
                    match t? {
                        (1, v) => out.api_version = v.string("typeMeta.apiVersion")?,
                        (2, v) => out.kind = v.string("typeMeta.kind")?,
                        _ => {}
                    }
                }
            }
            (2, v) => out.raw = v.bytes("raw")?,
            (3, v) => {
                let enc = v.string("contentEncoding")?;
                if !enc.is_empty() {
                    return Err(ProtoError::ContentEncoding(enc.to_owned()));
                }
            }
            _ => {}
        }
    }
    Ok(out)
}

/// Reads one frame of a protobuf watch stream (a `metav1.WatchEvent`) with
/// `kind`'s decoder. A bookmark keeps its resourceVersion and every
/// annotation (the initial-events-end one among them); an ERROR event's
/// `Status` becomes [`WatchEvent::Error`].
pub fn watch_event<K>(frame: &[u8], kind: &ProtoKind<K>) -> Result<WatchEvent<K>, ProtoError> {
    let mut type_ = "";
    let mut object: Option<&[u8]> = None;
    for f in fields(frame) {
        match f? {
            (1, v) => type_ = v.string("type")?,
            (2, v) => {
                for r in fields(v.bytes("object")?) {
                    if let (1, v) = r? {
                        object = Some(v.bytes("object.raw")?);
                    }
                }
            }
            _ => {}
        }
    }
    let object = unknown(object.ok_or(ProtoError::NoObject)?)?;
    let of_kind = |o: Unknown<'_>| {
        if o.kind == kind.kind {
            (kind.decode)(o.raw)
        } else {
            Err(ProtoError::Kind {
                expected: kind.kind,
                got: o.kind.to_owned(),
            })
        }
    };
    Ok(match type_ {
        "ADDED" => WatchEvent::Added(of_kind(object)?),
        "MODIFIED" => WatchEvent::Modified(of_kind(object)?),
        "DELETED" => WatchEvent::Deleted(of_kind(object)?),
        "BOOKMARK" => WatchEvent::Bookmark(bookmark(object)?),
        "ERROR" if object.kind == "Status" => WatchEvent::Error(Box::new(status(object.raw)?)),
        "ERROR" => {
            return Err(ProtoError::Kind {
                expected: "Status",
                got: object.kind.to_owned(),
            })
        }
        other => return Err(ProtoError::EventType(other.to_owned())),
    })
}

/// A bookmark: the object's type, resourceVersion and annotations.
fn bookmark(object: Unknown<'_>) -> Result<Bookmark, ProtoError> {
    let mut meta = ObjectMeta::default();
    for f in fields(object.raw) {
        if let (1, v) = f? {
            meta = object_meta(v.bytes("metadata")?, |_| true)?;
        }
    }
    Ok(Bookmark {
        types: TypeMeta {
            api_version: object.api_version.to_owned(),
            kind: object.kind.to_owned(),
        },
        metadata: BookmarkMeta {
            resource_version: meta.resource_version.unwrap_or_default(),
            annotations: meta.annotations.unwrap_or_default(),
        },
    })
}

/// The metadata fields the exporter reads, annotations filtered by
/// `keep_annotation` (an object's other annotations, kubectl's
/// last-applied configuration among them, can be as large as the object).
fn object_meta(
    raw: &[u8],
    keep_annotation: impl Fn(&str) -> bool,
) -> Result<ObjectMeta, ProtoError> {
    let mut meta = ObjectMeta::default();
    for f in fields(raw) {
        match f? {
            (1, v) => meta.name = Some(v.string("metadata.name")?.to_owned()),
            (3, v) => meta.namespace = Some(v.string("metadata.namespace")?.to_owned()),
            (6, v) => {
                meta.resource_version = Some(v.string("metadata.resourceVersion")?.to_owned())
            }
            (11, v) => {
                let (k, v) = entry(v, "metadata.labels")?;
                meta.labels
                    .get_or_insert_with(BTreeMap::new)
                    .insert(k.to_owned(), v.to_owned());
            }
            (12, v) => {
                let (k, v) = entry(v, "metadata.annotations")?;
                let kept = meta.annotations.get_or_insert_with(BTreeMap::new);
                if keep_annotation(k) {
                    kept.insert(k.to_owned(), v.to_owned());
                }
            }
            _ => {}
        }
    }
    Ok(meta)
}

/// One `map<string, string>` entry.
fn entry<'a>(v: Value<'a>, field: &'static str) -> Result<(&'a str, &'a str), ProtoError> {
    let (mut key, mut value) = ("", "");
    for f in fields(v.bytes(field)?) {
        match f? {
            (1, v) => key = v.string(field)?,
            (2, v) => value = v.string(field)?,
            _ => {}
        }
    }
    Ok((key, value))
}

/// A `coordination.k8s.io/v1` Lease: the metadata the trim reads (name,
/// namespace, resourceVersion, labels, the lock-info annotation) and
/// `spec.holderIdentity`.
pub fn lease(raw: &[u8]) -> Result<LeaseObject, ProtoError> {
    let mut metadata = ObjectMeta::default();
    let mut spec = None;
    for f in fields(raw) {
        match f? {
            (1, v) => metadata = object_meta(v.bytes("metadata")?, |k| k == LOCK_INFO_ANNOTATION)?,
            (2, v) => {
                let mut s = LeaseSpec::default();
                for f in fields(v.bytes("spec")?) {
                    if let (1, v) = f? {
                        s.holder_identity =
                            super::lock_id::keep_lock_id(v.string("spec.holderIdentity")?);
                    }
                }
                spec = Some(s);
            }
            _ => {}
        }
    }
    Ok(LeaseObject { metadata, spec })
}

/// A `metav1.Status`: code, status, reason and message (its details and
/// list metadata are not read).
pub fn status(raw: &[u8]) -> Result<Status, ProtoError> {
    let mut out = Status::default();
    for f in fields(raw) {
        match f? {
            (2, v) => {
                out.status = match v.string("status")? {
                    "Success" => Some(StatusSummary::Success),
                    "Failure" => Some(StatusSummary::Failure),
                    _ => None,
                }
            }
            (3, v) => out.message = v.string("message")?.to_owned(),
            (4, v) => out.reason = v.string("reason")?.to_owned(),
            // int32 on the wire: a negative one is ten bytes of varint.
            (6, v) => out.code = u16::try_from(v.varint("code")?).unwrap_or(0),
            _ => {}
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
