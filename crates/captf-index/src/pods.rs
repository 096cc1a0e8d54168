//! Runner pods: the watch cache and the live reads that confirm it.
//!
//! A lock is called stale only when CAPTF would call it stale, and CAPTF
//! reads the holder pod uncached. So a pod the cache shows gone or finished
//! is read live before its lock turns `own_stale`; this sub-index keeps the
//! cache, the reads' results, and decides which pods need a read.

use std::collections::HashMap;
use std::time::SystemTime;

use super::entries::PodState;
use super::keys::ObjectKey;
use captf_core::classify::PodEvidence;
use captf_core::podname::{check_pod_name, PodName};

/// What a live read of a holder pod found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodRead {
    /// The pod exists and has not reached Succeeded or Failed.
    Live,
    /// The pod exists with phase Succeeded or Failed.
    Finished,
    /// The API server answered not found.
    Gone,
    /// The read failed for another reason (403, 500, transport).
    Failed,
}

/// A live read in flight: recorded only if the pod's cache entry did not
/// change since the read started (see [`PodIndex::begin_read`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadTicket {
    /// The pod being read.
    pub pod: ObjectKey,
    id: u64,
}

/// The pod sub-index.
#[derive(Debug, Default)]
pub struct PodIndex {
    cache: HashMap<ObjectKey, PodState>,
    /// Live reads of holder pods the cache called not live.
    reads: HashMap<ObjectKey, PodRead>,
    /// When each entry of `reads` was recorded (for the lock pages).
    read_at: HashMap<ObjectKey, SystemTime>,
    /// Reads in flight, by the ticket id they were started with. A cache
    /// change of the pod revokes its ticket: the answer describes the pod
    /// before that change and must not overwrite what the cache says now.
    in_flight: HashMap<ObjectKey, u64>,
    next_ticket: u64,
}

/// What the watch cache says of a pod: absent, live, or finished.
fn cache_state(p: Option<&PodState>) -> Option<bool> {
    p.map(|p| p.finished)
}

impl PodIndex {
    /// Stores a pod from the watch. Returns true when the holder's verdict
    /// may have changed (the cache moved, or no read describes it).
    pub fn apply(&mut self, key: ObjectKey, pod: PodState) -> bool {
        let before = cache_state(self.cache.get(&key));
        self.cache.insert(key.clone(), pod);
        self.moved(key, before)
    }

    /// Removes a pod from the cache; same return as [`PodIndex::apply`].
    pub fn delete(&mut self, key: &ObjectKey) -> bool {
        let before = cache_state(self.cache.get(key));
        self.cache.remove(key);
        self.moved(key.clone(), before)
    }

    fn moved(&mut self, key: ObjectKey, before: Option<bool>) -> bool {
        // Absent, live and finished are three states: a pod that enters the
        // cache already finished (a relist after an OOM kill) moved as much
        // as one that turns from live to finished.
        if before == cache_state(self.cache.get(&key)) && self.reads.contains_key(&key) {
            return false;
        }
        // The cache moved: an earlier live read, or one still in flight,
        // no longer describes the pod. The cache wins.
        self.reads.remove(&key);
        self.read_at.remove(&key);
        self.in_flight.remove(&key);
        true
    }

    /// Keys of cached pods in `scope` (all namespaces when None).
    pub fn keys_in(&self, scope: Option<&str>) -> Vec<ObjectKey> {
        self.cache
            .keys()
            .filter(|k| scope.is_none_or(|s| s == k.namespace))
            .cloned()
            .collect()
    }

    /// The cache shows the pod, not finished.
    pub fn cached_live(&self, pod: &ObjectKey) -> bool {
        self.cache.get(pod).is_some_and(|p| !p.finished)
    }

    /// Records a live read made at `at`.
    pub fn record_read(&mut self, pod: ObjectKey, read: PodRead, at: SystemTime) {
        self.read_at.insert(pod.clone(), at);
        self.reads.insert(pod, read);
    }

    /// Starts a live read of `pod`: the ticket to hand to
    /// [`PodIndex::finish_read`] with its answer.
    pub fn begin_read(&mut self, pod: ObjectKey) -> ReadTicket {
        self.next_ticket = self.next_ticket.wrapping_add(1);
        self.in_flight.insert(pod.clone(), self.next_ticket);
        ReadTicket {
            pod,
            id: self.next_ticket,
        }
    }

    /// Records the answer of a read started with `ticket`, unless the
    /// pod's cache entry changed meanwhile (then the answer is older than
    /// what the cache says, and false is returned: read it again if still
    /// needed).
    pub fn finish_read(&mut self, ticket: ReadTicket, read: PodRead, at: SystemTime) -> bool {
        if self.in_flight.get(&ticket.pod) != Some(&ticket.id) {
            return false;
        }
        self.in_flight.remove(&ticket.pod);
        self.record_read(ticket.pod, read, at);
        true
    }

    /// The cached pod, if the watch has it.
    pub fn cached(&self, pod: &ObjectKey) -> Option<PodState> {
        self.cache.get(pod).cloned()
    }

    /// The cached pod, borrowed.
    pub fn cached_ref(&self, pod: &ObjectKey) -> Option<&PodState> {
        self.cache.get(pod)
    }

    /// The last live read of a holder pod and when it was recorded.
    pub fn last_read(&self, pod: &ObjectKey) -> Option<(PodRead, Option<SystemTime>)> {
        let read = *self.reads.get(pod)?;
        Some((read, self.read_at.get(pod).copied()))
    }

    /// What is known of a holder pod; None while a live read is pending.
    pub fn evidence(&self, pod: &ObjectKey) -> Option<PodEvidence> {
        // A host that is not a pod name is never read: its verdict is what
        // CAPTF's read of it gives (see `core::podname`).
        match check_pod_name(&pod.name) {
            PodName::Valid => {}
            PodName::RefusedByClient => return Some(PodEvidence::Unreadable),
            PodName::CannotExist => return Some(PodEvidence::Gone),
        }
        // Succeeded and Failed are final: a pod the watch shows there can
        // only stay there or be deleted, both stale for CAPTF, so only a
        // cache *miss* needs a live read.
        match self.cache.get(pod) {
            Some(p) if p.finished => return Some(PodEvidence::Finished),
            Some(_) => return Some(PodEvidence::Live),
            None => {}
        }
        Some(match self.reads.get(pod)? {
            PodRead::Live => PodEvidence::Live,
            PodRead::Finished => PodEvidence::Finished,
            PodRead::Gone => PodEvidence::Gone,
            PodRead::Failed => PodEvidence::Unreadable,
        })
    }

    /// Whether a read of a holder pod is still useful: it is a pod name,
    /// the cache does not have it and no read has settled it as gone or
    /// finished.
    pub fn needs_read(&self, pod: &ObjectKey) -> bool {
        check_pod_name(&pod.name) == PodName::Valid
            && !self.cache.contains_key(pod)
            && !matches!(
                self.reads.get(pod),
                Some(PodRead::Gone) | Some(PodRead::Finished)
            )
    }

    /// Whether a holder pod needs a new read on the periodic re-check: it
    /// is a pod name, the cache does not have it and its last read failed
    /// or found it live (cache lag that has not resolved), or it was never
    /// read.
    pub fn needs_recheck(&self, pod: &ObjectKey) -> bool {
        check_pod_name(&pod.name) == PodName::Valid
            && !self.cache.contains_key(pod)
            && matches!(
                self.reads.get(pod),
                None | Some(PodRead::Failed) | Some(PodRead::Live)
            )
    }

    /// Drops read results of pods `still_named` rejects.
    pub fn gc_reads(&mut self, still_named: impl Fn(&ObjectKey) -> bool) {
        self.reads.retain(|pod, _| still_named(pod));
        self.in_flight.retain(|pod, _| still_named(pod));
        let reads = &self.reads;
        self.read_at.retain(|pod, _| reads.contains_key(pod));
    }

    /// Number of cached pods.
    pub fn len(&self) -> usize {
        self.cache.len()
    }

    /// No pod cached.
    pub fn is_empty(&self) -> bool {
        self.cache.is_empty()
    }
}
