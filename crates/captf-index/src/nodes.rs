//! Nodes: what the lost-node rules read of each (`core::node_lost`), and
//! the join from a node's name to the cached runner pods bound to it, so a
//! Node change touches only the locks held on it.
//!
//! Every Node is kept (a missing one is evidence: `node_deleted`), each as
//! its name, the `Ready` status, reason and time, three taint flags and
//! when this exporter first saw that state: about a hundred bytes, so
//! thousands of Nodes stay small. Deletion times are kept only for names a
//! cached pod is bound to, and dropped with the last such pod.

use std::collections::{HashMap, HashSet};
use std::time::SystemTime;

use super::entries::{unix_seconds, NodeEntry};
use super::keys::ObjectKey;
use captf_core::node_lost::{NodeSight, NodeSigns};

/// A Node as kept: its entry and when its current state was first seen.
#[derive(Clone, Debug, PartialEq)]
struct Kept {
    entry: NodeEntry,
    observed_since: SystemTime,
}

/// The node sub-index.
#[derive(Debug, Default)]
pub struct NodeIndex {
    nodes: HashMap<Box<str>, Kept>,
    /// The Node watch has synced once: from then on a missing Node is
    /// evidence. Before (or without a Node watch at all) only pod
    /// evidence counts.
    synced: bool,
    /// Cached pods by the node they are bound to.
    pods_on: HashMap<Box<str>, HashSet<ObjectKey>>,
    /// The node each placed pod is bound to.
    node_of: HashMap<ObjectKey, Box<str>>,
    /// When a Node some cached pod is bound to was seen deleted, or first
    /// found missing after the sync.
    gone_since: HashMap<Box<str>, SystemTime>,
}

/// A Node as the read model shows it.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeView {
    /// The kept entry.
    pub entry: NodeEntry,
    /// When this exporter first saw its current `Ready` status and taints.
    pub observed_since: SystemTime,
}

impl NodeIndex {
    /// Stores a Node; returns whether what the rules read of it changed.
    pub fn apply(&mut self, name: &str, entry: NodeEntry, now: SystemTime) -> bool {
        self.gone_since.remove(name);
        match self.nodes.get_mut(name) {
            Some(k) if k.entry == entry => false,
            Some(k) => {
                if !k.entry.same_state(&entry) {
                    k.observed_since = now;
                }
                k.entry = entry;
                true
            }
            None => {
                self.nodes.insert(
                    name.into(),
                    Kept {
                        entry,
                        observed_since: now,
                    },
                );
                true
            }
        }
    }

    /// Removes a Node; returns whether it was kept.
    pub fn delete(&mut self, name: &str, now: SystemTime) -> bool {
        let was = self.nodes.remove(name).is_some();
        if was && self.pods_on.contains_key(name) {
            self.gone_since.insert(name.into(), now);
        }
        was
    }

    /// The Node watch has listed: from now on a missing Node is evidence.
    /// Names pods are bound to that the list lacks are missing from `now`.
    pub fn mark_synced(&mut self, now: SystemTime) {
        self.synced = true;
        for name in self.pods_on.keys() {
            if !self.nodes.contains_key(name) {
                self.gone_since.entry(name.clone()).or_insert(now);
            }
        }
    }

    /// Whether the Node watch has synced.
    pub fn synced(&self) -> bool {
        self.synced
    }

    /// Names of every kept Node.
    pub fn names(&self) -> Vec<String> {
        self.nodes.keys().map(|n| n.to_string()).collect()
    }

    /// Binds a cached pod to `node` (None: to no node), replacing its
    /// earlier binding.
    pub fn place_pod(&mut self, pod: &ObjectKey, node: Option<&str>, now: SystemTime) {
        if self.node_of.get(pod).map(|n| &**n) == node {
            return;
        }
        self.unplace_pod(pod);
        let Some(node) = node else {
            return;
        };
        self.pods_on
            .entry(node.into())
            .or_default()
            .insert(pod.clone());
        self.node_of.insert(pod.clone(), node.into());
        if self.synced && !self.nodes.contains_key(node) {
            self.gone_since.entry(node.into()).or_insert(now);
        }
    }

    /// Forgets a pod's binding (the pod left the cache).
    pub fn unplace_pod(&mut self, pod: &ObjectKey) {
        let Some(node) = self.node_of.remove(pod) else {
            return;
        };
        if let Some(pods) = self.pods_on.get_mut(&node) {
            pods.remove(pod);
            if pods.is_empty() {
                self.pods_on.remove(&node);
                self.gone_since.remove(&node);
            }
        }
    }

    /// The cached pods bound to `node`.
    pub fn pods_on(&self, node: &str) -> Vec<ObjectKey> {
        self.pods_on
            .get(node)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// What the rules read of `node`: nothing before a sync; a kept Node;
    /// else missing since its deletion or first absence (`now` for a name
    /// no cached pod is bound to).
    pub fn signs(&self, node: &str, now: SystemTime) -> Sight {
        if !self.synced {
            return Sight::NotWatched;
        }
        match self.nodes.get(node) {
            Some(k) => Sight::Present(NodeSigns {
                ready: k.entry.ready,
                ready_since: k.entry.ready_since,
                observed_since: unix_seconds(k.observed_since),
                taints: k.entry.taints,
            }),
            None => Sight::Absent {
                since: unix_seconds(self.gone_since.get(node).copied().unwrap_or(now)),
            },
        }
    }

    /// A kept Node, for the read model.
    pub fn view(&self, node: &str) -> Option<NodeView> {
        self.nodes.get(node).map(|k| NodeView {
            entry: k.entry.clone(),
            observed_since: k.observed_since,
        })
    }

    /// Number of kept Nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// No Node kept.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }
}

/// [`NodeSight`] with its Node owned, as [`NodeIndex::signs`] gives it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Sight {
    /// See [`NodeSight::NotWatched`].
    NotWatched,
    /// See [`NodeSight::Absent`].
    Absent {
        /// Unix seconds.
        since: f64,
    },
    /// See [`NodeSight::Present`].
    Present(NodeSigns),
}

impl Sight {
    /// As the rules take it.
    pub fn as_sight(&self) -> NodeSight<'_> {
        match self {
            Sight::NotWatched => NodeSight::NotWatched,
            Sight::Absent { since } => NodeSight::Absent { since: *since },
            Sight::Present(n) => NodeSight::Present(n),
        }
    }
}
