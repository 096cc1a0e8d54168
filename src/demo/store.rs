//! The simulated cluster's objects, kept as API JSON, with a change log
//! that watches replay from a resourceVersion.
//!
//! One counter gives every change its resourceVersion, as etcd's revision
//! does for a real API server; lists report the counter, watches send the
//! changes after the version they were given.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::sync::{Mutex, MutexGuard};

use serde_json::{json, Value};
use tokio::sync::watch;

use crate::watch::Served;

/// A resource the simulated API serves: one of the watched resources, at
/// the first version the resource table lists for it.
pub type ServedResource = crate::index::Resource;

/// `apiVersion` of the objects of a served resource.
pub fn api_version(r: ServedResource) -> String {
    let spec = r.spec();
    let version = spec.versions.first().copied().unwrap_or("v1");
    if spec.group.is_empty() {
        version.to_string()
    } else {
        format!("{}/{version}", spec.group)
    }
}

/// What happened to an object, as named in a watch event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChangeType {
    /// Created.
    Added,
    /// Updated.
    Modified,
    /// Removed; the event carries the last state.
    Deleted,
}

impl ChangeType {
    /// The watch event `type`.
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeType::Added => "ADDED",
            ChangeType::Modified => "MODIFIED",
            ChangeType::Deleted => "DELETED",
        }
    }
}

/// One logged change.
#[derive(Clone, Debug)]
pub struct LoggedChange {
    /// The resourceVersion the change produced.
    pub rv: u64,
    /// The resource it belongs to.
    pub resource: ServedResource,
    /// What happened.
    pub change: ChangeType,
    /// The object after the change (before it, for a delete).
    pub object: Value,
}

/// How many changes are kept for watches to replay; an older start gets
/// 410 Gone and relists, as with a compacted etcd.
const LOG_LEN: usize = 1024;

/// (namespace, name) of an object.
type Key = (String, String);

#[derive(Debug, Default)]
struct State {
    rv: u64,
    objects: BTreeMap<ServedResource, BTreeMap<Key, Value>>,
    log: VecDeque<LoggedChange>,
    /// The newest version dropped from the log.
    compacted: u64,
    /// Objects whose single GET answers 403 (as RBAC would).
    forbidden: HashSet<(ServedResource, Key)>,
}

/// The simulated cluster's state, shared by the API and the simulation.
#[derive(Debug)]
pub struct Store {
    state: Mutex<State>,
    /// The latest resourceVersion, so open watches wake on a change.
    latest: watch::Sender<u64>,
}

impl Default for Store {
    fn default() -> Self {
        Store {
            state: Mutex::new(State::default()),
            latest: watch::Sender::new(0),
        }
    }
}

/// What a single GET finds.
#[derive(Debug, PartialEq)]
pub enum Lookup {
    /// The object.
    Found(Value),
    /// No such object.
    Absent,
    /// The object may not be read.
    Forbidden,
}

/// Why a watch cannot start where asked.
#[derive(Debug, PartialEq, Eq)]
pub struct Expired;

fn key_of(object: &Value) -> Key {
    let meta = |k: &str| {
        object
            .pointer(&format!("/metadata/{k}"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    (meta("namespace"), meta("name"))
}

fn set_rv(object: &mut Value, rv: u64) {
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("resourceVersion".into(), json!(rv.to_string()));
    }
}

impl Store {
    /// An empty cluster.
    pub fn new() -> Self {
        Self::default()
    }

    // A panic while holding the lock cannot leave the maps half-written in
    // a way that matters to a demo: keep serving.
    fn lock(&self) -> MutexGuard<'_, State> {
        match self.state.lock() {
            Ok(s) => s,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    fn record(
        &self,
        state: &mut State,
        resource: ServedResource,
        change: ChangeType,
        object: Value,
    ) {
        state.log.push_back(LoggedChange {
            rv: state.rv,
            resource,
            change,
            object,
        });
        while state.log.len() > LOG_LEN {
            if let Some(old) = state.log.pop_front() {
                state.compacted = old.rv;
            }
        }
        self.latest.send_replace(state.rv);
    }

    /// Creates or replaces an object (namespace and name from its
    /// metadata), giving it the next resourceVersion.
    pub fn put(&self, resource: ServedResource, mut object: Value) {
        let mut state = self.lock();
        state.rv += 1;
        let rv = state.rv;
        set_rv(&mut object, rv);
        let key = key_of(&object);
        let previous = state
            .objects
            .entry(resource)
            .or_default()
            .insert(key, object.clone());
        let change = match previous {
            Some(_) => ChangeType::Modified,
            None => ChangeType::Added,
        };
        self.record(&mut state, resource, change, object);
    }

    /// Removes an object, if present.
    pub fn delete(&self, resource: ServedResource, namespace: &str, name: &str) {
        let mut state = self.lock();
        let key = (namespace.to_string(), name.to_string());
        let Some(mut object) = state
            .objects
            .get_mut(&resource)
            .and_then(|m| m.remove(&key))
        else {
            return;
        };
        state.rv += 1;
        let rv = state.rv;
        set_rv(&mut object, rv);
        self.record(&mut state, resource, ChangeType::Deleted, object);
    }

    /// Makes the single GET of an object answer 403 Forbidden.
    pub fn forbid_get(&self, resource: ServedResource, namespace: &str, name: &str) {
        let key = (namespace.to_string(), name.to_string());
        self.lock().forbidden.insert((resource, key));
    }

    /// The objects of `resource` (in `namespace`, or all) that `keep`
    /// accepts, and the current resourceVersion.
    pub fn list(
        &self,
        resource: ServedResource,
        namespace: Option<&str>,
        keep: impl Fn(&Value) -> bool,
    ) -> (Vec<Value>, u64) {
        let state = self.lock();
        let items = state
            .objects
            .get(&resource)
            .into_iter()
            .flatten()
            .filter(|((ns, _), _)| namespace.is_none_or(|want| want == ns))
            .map(|(_, o)| o)
            .filter(|o| keep(o))
            .cloned()
            .collect();
        (items, state.rv)
    }

    /// One object, as its single GET sees it.
    pub fn get(&self, resource: ServedResource, namespace: &str, name: &str) -> Lookup {
        let state = self.lock();
        let key = (namespace.to_string(), name.to_string());
        if state.forbidden.contains(&(resource, key.clone())) {
            return Lookup::Forbidden;
        }
        match state.objects.get(&resource).and_then(|m| m.get(&key)) {
            Some(o) => Lookup::Found(o.clone()),
            None => Lookup::Absent,
        }
    }

    /// The changes of `resource` (in `namespace`, or all) after version
    /// `after` that `keep` accepts, and the version they bring a watcher to.
    pub fn changes_after(
        &self,
        after: u64,
        resource: ServedResource,
        namespace: Option<&str>,
        keep: impl Fn(&Value) -> bool,
    ) -> Result<(Vec<LoggedChange>, u64), Expired> {
        let state = self.lock();
        if after < state.compacted {
            return Err(Expired);
        }
        let changes = state
            .log
            .iter()
            .filter(|c| c.rv > after && c.resource == resource)
            .filter(|c| namespace.is_none_or(|want| key_of(&c.object).0 == want))
            .filter(|c| keep(&c.object))
            .cloned()
            .collect();
        Ok((changes, state.rv.max(after)))
    }

    /// A receiver that wakes on every change.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.latest.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const THINGS: ServedResource = ServedResource::Leases;

    fn thing(ns: &str, name: &str) -> Value {
        json!({"metadata": {"namespace": ns, "name": name}})
    }

    #[test]
    fn versions_increase_and_the_log_replays_after_a_version() {
        let store = Store::new();
        store.put(THINGS, thing("a", "x"));
        store.put(THINGS, thing("b", "y"));
        let (items, rv) = store.list(THINGS, Some("a"), |_| true);
        assert_eq!((items.len(), rv), (1, 2));
        assert_eq!(items[0]["metadata"]["resourceVersion"], "1");
        store.put(THINGS, thing("a", "x"));
        store.delete(THINGS, "a", "x");
        store.delete(THINGS, "a", "x");
        let (changes, to) = store.changes_after(2, THINGS, None, |_| true).unwrap();
        let kinds: Vec<_> = changes.iter().map(|c| (c.rv, c.change)).collect();
        assert_eq!(kinds, [(3, ChangeType::Modified), (4, ChangeType::Deleted)]);
        assert_eq!(to, 4);
        assert_eq!(store.get(THINGS, "a", "x"), Lookup::Absent);
    }

    #[test]
    fn a_compacted_version_is_expired() {
        let store = Store::new();
        for i in 0..(LOG_LEN + 5) {
            store.put(THINGS, thing("a", &i.to_string()));
        }
        assert_eq!(
            store.changes_after(1, THINGS, None, |_| true).err(),
            Some(Expired)
        );
        assert!(store.changes_after(10, THINGS, None, |_| true).is_ok());
    }

    #[test]
    fn a_forbidden_object_cannot_be_read() {
        let store = Store::new();
        store.forbid_get(THINGS, "a", "secret");
        assert_eq!(store.get(THINGS, "a", "secret"), Lookup::Forbidden);
    }
}
