//! Holder classes: the joins between a lock, its object and its holder pod,
//! decided by `core::classify` and kept up to date on every change.

use std::time::SystemTime;

use super::pods::ReadTicket;
use super::{ClassChange, Effects, Index, Lock, LockKey, LockLease, ObjectKey, PodRead};
use captf_core::captf_verdict::{compare, Agreement, OurVerdict};
use captf_core::classify::{classify, holder_of, Holder, HolderClass, PodEvidence};
use captf_core::kind::Kind;
use captf_core::suffix::state_suffix;

/// Classification: the joins between locks, objects and pods.
impl Index {
    pub(super) fn reclassify_lock(&mut self, key: &LockKey, now: SystemTime, fx: &mut Effects) {
        if let Some(old) = self.locks.get(key).map(|l| l.state.class) {
            self.reclassify_from(key, old, old, now, fx);
        }
    }

    /// Reclassifies the lock of `key`, or, for an object without a lock
    /// Lease, compares CAPTF's verdict with "released": either way the
    /// verdict is reviewed once.
    pub(super) fn reclassify_lock_or_review(
        &mut self,
        key: &LockKey,
        now: SystemTime,
        fx: &mut Effects,
    ) {
        if self.locks.contains(key) {
            self.reclassify_lock(key, now, fx);
        } else {
            self.review_verdict(key, now);
        }
    }

    pub(super) fn reclassify_holder(&mut self, pod: &ObjectKey, now: SystemTime, fx: &mut Effects) {
        for key in self.locks.held_by(pod) {
            self.reclassify_lock(&key, now, fx);
        }
    }

    /// The object a lock belongs to: the watched object, else kind and name
    /// from the Lease's owner labels when they are provably the real name.
    fn owner_of(&self, key: &LockKey) -> Option<(Kind, String)> {
        if let Some(obj) = self.policy.object(key) {
            return Some((obj.kind, obj.name.clone()));
        }
        verified_label_owner(key, &self.locks.get(key)?.lease)
    }

    /// Reclassifies a lock. `old_class` is what the log reports as "from";
    /// `keep` is the verdict to hold while a live read of the holder pod is
    /// pending (None for a new lock, which then starts as own_unverified).
    pub(super) fn reclassify_from(
        &mut self,
        key: &LockKey,
        old_class: Option<HolderClass>,
        keep: Option<HolderClass>,
        now: SystemTime,
        fx: &mut Effects,
    ) {
        let owner = self.owner_of(key);
        let Some(lock) = self.locks.get(key) else {
            return;
        };
        let mut link = None;
        let new_class = if lock.lease.is_held() {
            let holder = holder_of(
                lock.lease.info.as_ref(),
                owner.as_ref().map(|(k, n)| (*k, n.as_str())),
            );
            Some(match &holder {
                Holder::OwnPod(pod) => {
                    let pod_key = ObjectKey::new(&key.namespace, pod);
                    link = Some(pod_key.clone());
                    match self.pods.evidence(&pod_key) {
                        Some(ev) => classify(&holder, ev),
                        None => {
                            fx.confirm.push(pod_key);
                            // Unconfirmed: keep the last verdict of this
                            // same lock rather than flap through
                            // own_unverified for a few ms.
                            keep.unwrap_or(HolderClass::OwnUnverified)
                        }
                    }
                }
                other => classify(other, PodEvidence::Unreadable),
            })
        } else {
            None
        };
        match link {
            Some(pod) => self.locks.link(key, pod),
            None => self.locks.unlink(key),
        }
        self.locks.set_class(key, new_class);
        self.schedule_overdue(key, now);
        self.review_verdict(key, now);
        self.review_node_lost(key, now);
        if new_class != old_class {
            self.mark(key);
            if let Some(lock) = self.locks.get(key) {
                self.record_change(fx, key, lock, old_class, new_class, now);
            }
        }
    }

    /// Compares CAPTF's verdict on the object of `key` with the lock's
    /// class now, and records what differs. No object, or one with an
    /// active Job (CAPTF does not look then), has nothing to compare.
    pub(super) fn review_verdict(&mut self, key: &LockKey, now: SystemTime) {
        let difference = self.policy.object(key).and_then(|obj| {
            if obj.captf.active_job {
                return None;
            }
            let ours = match self.locks.get(key) {
                Some(lock) if lock.lease.is_held() => OurVerdict::Held {
                    // Held locks always carry a class once classified.
                    class: lock.state.class?,
                    who: lock.lease.info.as_ref().map(|i| i.who.as_str()),
                    who_cut: lock.lease.who_cut,
                },
                _ => OurVerdict::Released,
            };
            match compare(obj.captf.state_readable.as_ref(), ours) {
                Agreement::Differs(d) => Some(d),
                Agreement::Agrees | Agreement::Silent => None,
            }
        });
        if self.disagreements.observe(key, difference, now) {
            self.mark(key);
        }
    }

    /// From now until [`Index::finish_start`], no lock is overdue and no
    /// class change is recorded: called before the watches start, whose
    /// first syncs arrive one kind at a time.
    pub fn begin_start(&mut self) {
        self.starting = true;
    }

    /// Every watch has synced (or settled on an error a retry will not fix
    /// soon): class changes are recorded from now on, the held foreign and
    /// unknown locks are queued at their deadlines, and those already past
    /// are redrawn as overdue.
    pub fn finish_start(&mut self, now: SystemTime) {
        if !std::mem::take(&mut self.starting) {
            return;
        }
        let waiting: Vec<LockKey> = self
            .locks
            .iter()
            .filter(|(_, lock)| awaits_overdue(lock))
            .map(|(key, _)| key.clone())
            .collect();
        let now_ms = super::unix_ms(now);
        for key in &waiting {
            self.schedule_overdue(key, now);
            if self.deadlines.any_due_for(key, now_ms) {
                // Redrawn by this write, so reaching the deadline needs no
                // render of its own (as in `schedule_overdue`).
                self.mark(key);
                self.deadlines.note_shown(key);
            }
        }
    }

    /// Queues a held foreign or unknown lock whose overdue warning is not
    /// logged yet at its deadline (`Created` or first seen, plus the
    /// effective lockTimeoutSeconds); forgets any other.
    pub(super) fn schedule_overdue(&mut self, key: &LockKey, now: SystemTime) {
        let deadline = self.locks.get(key).and_then(|lock| {
            if self.starting || !awaits_overdue(lock) {
                return None;
            }
            let (base, _) =
                lock.lease
                    .age_base(lock.state.first_seen_held, lock.state.class, now)?;
            let timeout = self
                .effective_of_lock(key, &lock.lease)
                .lock_timeout_seconds;
            // Whole milliseconds, rounded down: a lock popped a fraction
            // early is checked exactly and queued again.
            #[allow(clippy::cast_possible_truncation, clippy::cast_precision_loss)]
            Some(((base + timeout as f64) * 1000.0).floor() as i64)
        });
        match deadline {
            Some(d) => {
                self.deadlines.set(key, d);
                // Past already, and this write redraws the key: the render,
                // later than now, computes it overdue from the clock.
                if d < super::unix_ms(now) && self.changes.covers(key) {
                    self.deadlines.note_shown(key);
                }
            }
            None => self.deadlines.remove(key),
        }
    }

    /// Records a class change of `lock` in `fx`, for the log; nothing while
    /// starting (see `Index::starting`).
    pub(super) fn record_change(
        &self,
        fx: &mut Effects,
        key: &LockKey,
        lock: &Lock,
        from: Option<HolderClass>,
        to: Option<HolderClass>,
        now: SystemTime,
    ) {
        if self.starting {
            return;
        }
        let (kind, name) = self.display_owner(key, &lock.lease);
        fx.class_changes.push(ClassChange {
            namespace: key.namespace.clone(),
            kind,
            name,
            from,
            to,
            holder: lock.lease.holder_label().to_string(),
            age_seconds: lock.age(now).map(|(age, _)| age),
        });
    }

    /// Kind and name for metric labels, unique per lock so that no Lease
    /// can render series under another object's labels:
    /// - the watched object's kind and name;
    /// - else the `owner-kind`/`owner-name` labels, only when they reproduce
    ///   the Lease's suffix (see [`Self::owner_of`]);
    /// - else the kind from the labels or the suffix, and the suffix as the
    ///   name. Suffixes are unique per namespace, but an object may be
    ///   *named* like one (`x-m`): when the key that (kind, name) gives has
    ///   an object or any lock Lease, the kind is left empty, which no
    ///   object has. Any Lease, not only one whose labels prove the name:
    ///   the force-unlock counter of that name is shown beside it
    ///   ([`Index::force_unlocks_beside`]), and must not be shown twice.
    pub(super) fn display_owner(&self, key: &LockKey, lease: &LockLease) -> (&'static str, String) {
        // `lease` may already be out of the map (a deletion being logged).
        if let Some(obj) = self.policy.object(key) {
            return (obj.kind.as_str(), obj.name.clone());
        }
        if let Some((kind, name)) = verified_label_owner(key, lease) {
            return (kind.as_str(), name);
        }
        let Some(kind) = lease.owner_kind() else {
            return ("", key.suffix.clone());
        };
        // Whose lock would (namespace, kind, suffix) name? Never this one:
        // a name whose suffix equals itself would need a sha256 preimage.
        let claimed = LockKey::new(
            &key.namespace,
            state_suffix(&key.namespace, kind, &key.suffix),
        );
        let taken = self.policy.object(&claimed).is_some() || self.locks.contains(&claimed);
        (if taken { "" } else { kind.as_str() }, key.suffix.clone())
    }
}

/// The key whose owner decides how the Lease of `key` is shown when its
/// object is unknown ([`Index::display_owner`]'s last branch): None when
/// its owner labels prove its name, or it names no kind.
pub(super) fn claimed_by(key: &LockKey, lease: &LockLease) -> Option<LockKey> {
    if lease.verified_label_owner().is_some() {
        return None;
    }
    let kind = lease.owner_kind()?;
    Some(LockKey::new(
        &key.namespace,
        state_suffix(&key.namespace, kind, &key.suffix),
    ))
}

/// Kind and name from the owner labels of the Lease at `key`, only when
/// they reproduce its suffix ([`LockLease::verified_label_owner`], checked
/// once when the entry was made from that same namespace and suffix).
fn verified_label_owner(key: &LockKey, lease: &LockLease) -> Option<(Kind, String)> {
    debug_assert!(key.namespace == lease.namespace && key.suffix == lease.suffix);
    lease
        .verified_label_owner()
        .map(|(kind, name)| (kind, name.to_string()))
}

/// The verifier's questions.
impl Index {
    /// Records a live read of a holder pod, started and answered now, and
    /// reclassifies its locks.
    pub fn record_pod_read(&mut self, pod: ObjectKey, read: PodRead, now: SystemTime) -> Effects {
        let ticket = self.begin_pod_read(pod);
        self.finish_pod_read(ticket, read, now)
    }

    /// Starts a live read of `pod`; see [`Index::finish_pod_read`].
    pub fn begin_pod_read(&mut self, pod: ObjectKey) -> ReadTicket {
        self.pods.begin_read(pod)
    }

    /// Records the answer of a live read and reclassifies the pod's locks.
    /// An answer from before a cache change of the pod is dropped, and the
    /// pod is queued again when a read is still needed: the cache wins over
    /// a read that raced it.
    pub fn finish_pod_read(
        &mut self,
        ticket: ReadTicket,
        read: PodRead,
        now: SystemTime,
    ) -> Effects {
        let mut fx = Effects::default();
        let pod = ticket.pod.clone();
        if self.pods.finish_read(ticket, read, now) {
            self.reclassify_holder(&pod, now, &mut fx);
        } else if self.needs_read(&pod) {
            fx.confirm.push(pod);
        }
        fx
    }

    /// Whether a queued live read of `pod` is still useful: some lock names
    /// it, the cache does not show it live, and no read has settled it as
    /// gone or finished (queued duplicates are dropped this way).
    pub fn needs_read(&self, pod: &ObjectKey) -> bool {
        self.locks.is_holder(pod) && self.pods.needs_read(pod)
    }

    /// Holder pods that need a (new) live read. Used by the periodic
    /// re-check.
    pub fn pods_to_recheck(&self) -> Vec<ObjectKey> {
        self.locks
            .holders()
            .filter(|pod| self.pods.needs_recheck(pod))
            .cloned()
            .collect()
    }

    /// Drops live-read results of pods no lock names any more.
    pub fn gc_pod_reads(&mut self) {
        let locks = &self.locks;
        self.pods.gc_reads(|pod| locks.is_holder(pod));
    }
}

/// A held foreign or unknown lock whose overdue warning is not logged yet:
/// one the clock may turn overdue.
fn awaits_overdue(lock: &Lock) -> bool {
    lock.lease.is_held()
        && !lock.state.overdue_logged
        && matches!(
            lock.state.class,
            Some(HolderClass::Foreign | HolderClass::Unknown)
        )
}
