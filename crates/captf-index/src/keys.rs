//! Typed keys of the index. Each join has its own key type, so a pod key
//! can never be looked up among locks by mistake.

use std::fmt;

/// (namespace, name) of a namespaced API object: a Lease, a pod, an Event,
/// a Terraform* object or a CAPI Cluster as the API server names it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl ObjectKey {
    /// A key from its parts.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        ObjectKey {
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// A state lock and its Terraform* object: (namespace, state suffix). The
/// suffix is a function of (namespace, kind, name), so a Lease and its
/// object meet on this key without a scan.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LockKey {
    /// Namespace.
    pub namespace: String,
    /// State suffix, e.g. `48db616173c97a97-m`.
    pub suffix: String,
}

impl LockKey {
    /// A key from its parts.
    pub fn new(namespace: impl Into<String>, suffix: impl Into<String>) -> Self {
        LockKey {
            namespace: namespace.into(),
            suffix: suffix.into(),
        }
    }
}

/// (namespace, kind, name) of an object as an Event names it; the key of a
/// force-unlock counter. The kind is kept as text: an Event may name any.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectRef {
    /// Namespace.
    pub namespace: String,
    /// Full kind.
    pub kind: String,
    /// Name.
    pub name: String,
}

impl ObjectRef {
    /// A reference from its parts.
    pub fn new(
        namespace: impl Into<String>,
        kind: impl Into<String>,
        name: impl Into<String>,
    ) -> Self {
        ObjectRef {
            namespace: namespace.into(),
            kind: kind.into(),
            name: name.into(),
        }
    }
}
