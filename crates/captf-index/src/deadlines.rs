//! Deadlines by lock, in deadline order: when each foreign or unknown lock
//! becomes overdue, and when each disagreement with CAPTF outlasts its
//! grace, so the clock's check touches only what is due instead of walking
//! every Lease, and sleeps until the first deadline instead of polling.

use std::collections::{BTreeSet, HashMap, HashSet};

use super::keys::LockKey;

/// Deadlines in Unix milliseconds, by lock.
#[derive(Debug, Default)]
pub struct DeadlineQueue {
    by_deadline: BTreeSet<(i64, LockKey)>,
    deadline_of: HashMap<LockKey, i64>,
    /// The first deadline moved earlier (or everything went stale) since
    /// [`DeadlineQueue::take_moved_earlier`]: a checker sleeping until the
    /// old first deadline must wake.
    moved_earlier: bool,
    /// Locks queued at a deadline already past by a write that also
    /// re-renders them: that render shows them overdue, so reaching the
    /// deadline needs no render of its own (a restart with many overdue
    /// locks would otherwise redraw them all a second time).
    shown: HashSet<LockKey>,
}

impl DeadlineQueue {
    /// Queues (or moves) a lock's deadline.
    pub fn set(&mut self, key: &LockKey, deadline_ms: i64) {
        match self.deadline_of.get(key) {
            Some(d) if *d == deadline_ms => return,
            Some(d) => {
                self.by_deadline.remove(&(*d, key.clone()));
            }
            None => {}
        }
        self.shown.remove(key);
        if self
            .by_deadline
            .first()
            .is_none_or(|(first, _)| deadline_ms < *first)
        {
            self.moved_earlier = true;
        }
        self.by_deadline.insert((deadline_ms, key.clone()));
        self.deadline_of.insert(key.clone(), deadline_ms);
    }

    /// Notes that the render following this write shows `key` past its
    /// deadline (see `shown`); forgotten when the deadline moves.
    pub fn note_shown(&mut self, key: &LockKey) {
        if self.deadline_of.contains_key(key) {
            self.shown.insert(key.clone());
        }
    }

    /// Whether a popped `key` was already shown past its deadline; forgets it.
    pub fn take_shown(&mut self, key: &LockKey) -> bool {
        self.shown.remove(key)
    }

    /// Forgets a lock.
    pub fn remove(&mut self, key: &LockKey) {
        self.shown.remove(key);
        if let Some(d) = self.deadline_of.remove(key) {
            self.by_deadline.remove(&(d, key.clone()));
        }
    }

    /// Takes the locks whose deadline is before `now_ms`, earliest first.
    pub fn pop_due(&mut self, now_ms: i64) -> Vec<LockKey> {
        let mut due = Vec::new();
        while let Some((d, _)) = self.by_deadline.first() {
            if *d >= now_ms {
                break;
            }
            if let Some((_, key)) = self.by_deadline.pop_first() {
                self.deadline_of.remove(&key);
                due.push(key);
            }
        }
        due
    }

    /// Whether some deadline lies before `now_ms` (nothing is taken).
    pub fn any_due(&self, now_ms: i64) -> bool {
        self.by_deadline.first().is_some_and(|(d, _)| *d < now_ms)
    }

    /// Whether `key` is queued at a deadline before `now_ms`.
    pub fn any_due_for(&self, key: &LockKey, now_ms: i64) -> bool {
        self.deadline_of.get(key).is_some_and(|d| *d < now_ms)
    }

    /// The first deadline (Unix ms); None when nothing is queued.
    pub fn first_deadline(&self) -> Option<i64> {
        self.by_deadline.first().map(|(d, _)| *d)
    }

    /// Whether the first deadline moved earlier since the last call; clears
    /// the flag.
    pub fn take_moved_earlier(&mut self) -> bool {
        std::mem::take(&mut self.moved_earlier)
    }

    /// Number of queued locks.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.deadline_of.len()
    }

    /// Nothing queued.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.deadline_of.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shown_deadline_is_forgotten_when_it_moves_or_is_taken() {
        let mut q = DeadlineQueue::default();
        let (a, b) = (LockKey::new("ns", "a-m"), LockKey::new("ns", "b-m"));
        q.note_shown(&b);
        assert!(!q.take_shown(&b), "only a queued lock can be shown");
        q.set(&a, 1_000);
        q.note_shown(&a);
        q.set(&a, 1_000);
        assert!(q.take_shown(&a), "the same deadline keeps it");
        q.note_shown(&a);
        q.set(&a, 2_000);
        assert!(!q.take_shown(&a), "a moved deadline was not shown");
        q.note_shown(&a);
        q.remove(&a);
        assert!(!q.take_shown(&a));
    }

    #[test]
    fn says_when_the_first_deadline_moves_earlier() {
        let mut q = DeadlineQueue::default();
        let (a, b) = (LockKey::new("ns", "a-m"), LockKey::new("ns", "b-m"));
        assert_eq!(q.first_deadline(), None);
        q.set(&a, 2_000);
        assert!(
            q.take_moved_earlier(),
            "the first deadline of an empty queue"
        );
        assert!(!q.take_moved_earlier(), "the flag is cleared once taken");
        q.set(&b, 3_000);
        assert!(!q.take_moved_earlier(), "a later deadline wakes nobody");
        q.set(&b, 1_500);
        assert!(q.take_moved_earlier());
        assert_eq!(q.first_deadline(), Some(1_500));
        q.remove(&b);
        assert!(
            !q.take_moved_earlier(),
            "a removal only makes a wake useless"
        );
        assert_eq!(q.first_deadline(), Some(2_000));
        q.remove(&a);
        assert_eq!(q.first_deadline(), None);
    }

    #[test]
    fn pops_only_what_is_due_in_order_and_moves_on_reset() {
        let mut q = DeadlineQueue::default();
        let (a, b) = (LockKey::new("ns", "a-m"), LockKey::new("ns", "b-m"));
        q.set(&a, 2_000);
        q.set(&b, 1_000);
        q.set(&a, 3_000);
        assert_eq!(q.len(), 2);
        assert!(q.pop_due(1_000).is_empty(), "strictly before now");
        assert_eq!(q.pop_due(1_001), vec![b.clone()]);
        assert!(q.pop_due(2_500).is_empty(), "a moved to 3 s");
        q.remove(&a);
        assert!(q.is_empty() && q.pop_due(i64::MAX).is_empty());
    }
}
