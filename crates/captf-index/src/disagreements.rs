//! Disagreements between CAPTF's own verdict and the exporter's, and how
//! long each has lasted: one is reported (`verdict_mismatch` 1, a log
//! line) only once it outlasts the grace, because CAPTF looks at the lock
//! only between Jobs and only at a reconcile, so its condition lags.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use super::deadlines::DeadlineQueue;
use super::keys::LockKey;
use super::unix_ms;
use captf_core::captf_verdict::Difference;

/// `--verdict-grace` unless set.
pub const DEFAULT_VERDICT_GRACE: Duration = Duration::from_secs(600);

/// A disagreement under way.
#[derive(Clone, Debug, PartialEq)]
pub struct Disagreement {
    /// When the exporter first saw it (with no Job active).
    pub since: SystemTime,
    /// What differs now.
    pub difference: Difference,
    /// It outlasted the grace: `verdict_mismatch` is 1.
    pub flagged: bool,
}

/// Disagreements by lock key (the object's), and their grace deadlines.
#[derive(Debug)]
pub struct Disagreements {
    grace: Duration,
    open: HashMap<LockKey, Disagreement>,
    due: DeadlineQueue,
}

impl Default for Disagreements {
    fn default() -> Self {
        Disagreements {
            grace: DEFAULT_VERDICT_GRACE,
            open: HashMap::new(),
            due: DeadlineQueue::default(),
        }
    }
}

impl Disagreements {
    /// Sets the grace; disagreements already open keep their deadline.
    pub fn set_grace(&mut self, grace: Duration) {
        self.grace = grace;
    }

    /// Records what differs for `key` now (None: nothing). A disagreement
    /// keeps the time it started while it lasts, whatever its direction;
    /// agreement, silence or an active Job ends it.
    /// Returns whether `verdict_mismatch` changed (a reported one ended).
    pub fn observe(
        &mut self,
        key: &LockKey,
        difference: Option<Difference>,
        now: SystemTime,
    ) -> bool {
        let Some(difference) = difference else {
            return self.forget(key);
        };
        if let Some(open) = self.open.get_mut(key) {
            open.difference = difference;
            return false;
        }
        self.due.set(key, unix_ms(now + self.grace));
        self.open.insert(
            key.clone(),
            Disagreement {
                since: now,
                difference,
                flagged: false,
            },
        );
        false
    }

    /// Forgets `key` (its object is gone, or nothing differs); returns
    /// whether its disagreement had been reported.
    pub fn forget(&mut self, key: &LockKey) -> bool {
        self.due.remove(key);
        self.open.remove(key).is_some_and(|d| d.flagged)
    }

    /// When the first open disagreement outlasts its grace (Unix ms).
    pub fn first_deadline(&self) -> Option<i64> {
        self.due.first_deadline()
    }

    /// Whether that first deadline moved earlier since the last call.
    pub fn take_moved_earlier(&mut self) -> bool {
        self.due.take_moved_earlier()
    }

    /// Whether some disagreement outlasted the grace and is not flagged yet.
    pub fn any_due(&self, now: SystemTime) -> bool {
        self.due.any_due(unix_ms(now))
    }

    /// Flags every disagreement that outlasted the grace, and returns them.
    pub fn flag_due(&mut self, now: SystemTime) -> Vec<(LockKey, Disagreement)> {
        let mut flagged = Vec::new();
        for key in self.due.pop_due(unix_ms(now)) {
            if let Some(open) = self.open.get_mut(&key) {
                open.flagged = true;
                flagged.push((key, open.clone()));
            }
        }
        flagged
    }

    /// The disagreement under way for `key`, if any.
    pub fn get(&self, key: &LockKey) -> Option<&Disagreement> {
        self.open.get(key)
    }

    /// Whether `key`'s disagreement outlasted the grace.
    pub fn flagged(&self, key: &LockKey) -> bool {
        self.open.get(key).is_some_and(|d| d.flagged)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_disagreement_is_flagged_once_it_outlasts_the_grace() {
        let mut v = Disagreements::default();
        v.set_grace(Duration::from_secs(60));
        let k = LockKey::new("ns", "web-m");
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        v.observe(&k, Some(Difference::LockedButReleased), t0);
        assert!(!v.any_due(t0 + Duration::from_secs(59)));
        assert!(v.flag_due(t0 + Duration::from_secs(59)).is_empty());
        // Another direction later keeps the start.
        v.observe(
            &k,
            Some(Difference::OtherHolder { named: "b".into() }),
            t0 + Duration::from_secs(30),
        );
        assert!(v.any_due(t0 + Duration::from_secs(61)));
        let flagged = v.flag_due(t0 + Duration::from_secs(61));
        assert_eq!(flagged.len(), 1);
        assert_eq!(flagged[0].1.since, t0);
        assert!(v.flagged(&k));
        assert!(!v.any_due(t0 + Duration::from_secs(1000)), "flagged once");
        // Agreement ends it; a new disagreement waits the whole grace again.
        v.observe(&k, None, t0 + Duration::from_secs(70));
        assert!(!v.flagged(&k) && v.get(&k).is_none());
        v.observe(
            &k,
            Some(Difference::LockedButReleased),
            t0 + Duration::from_secs(80),
        );
        assert!(v.flag_due(t0 + Duration::from_secs(139)).is_empty());
        assert_eq!(v.flag_due(t0 + Duration::from_secs(141)).len(), 1);
    }
}
