//! The lost-node evidence of each lock held by an own runner pod
//! (`core::node_lost`), kept up to date on every change of the lock, its
//! pod or the pod's Node, and when a terminating pod's grace runs out.
//!
//! Evidence beside the class, never a change of it: only a lock whose
//! class is `own_live` (its pod exists and has not finished) has any.
//! Also the Node input: a Node change reaches the locks held by the
//! cached pods bound to it ([`super::nodes`]), and nothing else.

use std::time::SystemTime;

use super::{unix_ms, unix_seconds, Effects, Index, IndexResource, LockKey, NodeEntry, ObjectKey};
use captf_core::classify::HolderClass;
use captf_core::node_lost::{grace_ends, node_lost, LostReason};

/// Why and since when the node of a lock's holder pod is lost.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeLost {
    /// The pod's `spec.nodeName`.
    pub node: Box<str>,
    /// The closed reason.
    pub reason: LostReason,
    /// When the evidence began (Unix seconds).
    pub since: f64,
}

impl Index {
    /// Decides the evidence of lock `key` again; marks the key when it
    /// moved, and queues the moment a terminating holder's grace ends.
    pub(super) fn review_node_lost(&mut self, key: &LockKey, now: SystemTime) {
        let now_s = unix_seconds(now);
        let mut grace = None;
        let found = self.holder_pod_of_live_lock(key).and_then(|pod| {
            let p = self.pods.cached_ref(pod)?;
            let signs = p.signs();
            grace = grace_ends(&signs, now_s);
            let node = signs.node_name?;
            let sight = self.nodes.signs(node, now);
            let (reason, since) = node_lost(&signs, sight.as_sight(), now_s)?;
            Some(NodeLost {
                node: node.into(),
                reason,
                since,
            })
        });
        match grace {
            #[allow(clippy::cast_possible_truncation)]
            Some(end) => self.grace.set(key, (end * 1000.0).floor() as i64),
            None => self.grace.remove(key),
        }
        if self.lost.get(key) != found.as_ref() {
            match found {
                Some(f) => self.lost.insert(key.clone(), f),
                None => self.lost.remove(key),
            };
            self.mark(key);
        }
    }

    /// The cached own runner pod holding lock `key`, while its class is
    /// `own_live`.
    fn holder_pod_of_live_lock(&self, key: &LockKey) -> Option<&ObjectKey> {
        let lock = self.locks.get(key)?;
        if !lock.lease.is_held() || lock.state.class != Some(HolderClass::OwnLive) {
            return None;
        }
        self.locks.holder(key)
    }

    /// Reviews the locks held by `pod`.
    pub(super) fn review_node_lost_of_pod(&mut self, pod: &ObjectKey, now: SystemTime) {
        for key in self.locks.held_by(pod) {
            self.review_node_lost(&key, now);
        }
    }

    /// Reviews the locks held by the cached pods bound to `node`.
    fn review_node_lost_on(&mut self, node: &str, now: SystemTime) {
        for pod in self.nodes.pods_on(node) {
            self.review_node_lost_of_pod(&pod, now);
        }
    }

    /// Reviews the locks whose holder's grace ended by `now` (the clock's
    /// part: called by the deadline task).
    pub fn node_lost_due(&mut self, now: SystemTime) {
        for key in self.grace.pop_due(unix_ms(now)) {
            self.review_node_lost(&key, now);
        }
    }

    /// The lost-node evidence of lock `key`, if any.
    pub fn node_lost(&self, key: &LockKey) -> Option<&NodeLost> {
        self.lost.get(key)
    }

    /// Number of locks with lost-node evidence.
    pub fn node_lost_count(&self) -> usize {
        self.lost.len()
    }

    /// Whether the Node watch has synced (node evidence counts).
    pub fn nodes_synced(&self) -> bool {
        self.nodes.synced()
    }
}

impl IndexResource<NodeEntry> for Index {
    type Key = ObjectKey;
    type Scope = Option<String>;

    fn apply(&mut self, key: ObjectKey, node: NodeEntry, now: SystemTime) -> Effects {
        if self.nodes.apply(&key.name, node, now) {
            self.review_node_lost_on(&key.name, now);
        }
        Effects::default()
    }

    fn delete(&mut self, key: ObjectKey, now: SystemTime) -> Effects {
        if self.nodes.delete(&key.name, now) {
            self.review_node_lost_on(&key.name, now);
        }
        Effects::default()
    }

    fn reset(
        &mut self,
        _scope: &Option<String>,
        items: Vec<(ObjectKey, NodeEntry)>,
        now: SystemTime,
    ) -> Effects {
        let first = !self.nodes.synced();
        let listed: std::collections::HashSet<&str> =
            items.iter().map(|(k, _)| k.name.as_str()).collect();
        let gone: Vec<String> = self
            .nodes
            .names()
            .into_iter()
            .filter(|n| !listed.contains(n.as_str()))
            .collect();
        for name in gone {
            self.nodes.delete(&name, now);
            self.review_node_lost_on(&name, now);
        }
        for (key, node) in items {
            if self.nodes.apply(&key.name, node, now) && !first {
                self.review_node_lost_on(&key.name, now);
            }
        }
        self.nodes.mark_synced(now);
        if first {
            // Node evidence counts from now on: every own lock is judged
            // again (a missing Node among them).
            let linked: Vec<LockKey> = self.locks.linked().cloned().collect();
            for key in linked {
                self.review_node_lost(&key, now);
            }
        }
        Effects::default()
    }
}
