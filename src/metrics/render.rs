//! One lock key's sample lines: what the families are written from
//! ([`Subject`], read from the index's view of the key), then each family
//! of [`KEY_FAMILIES`] writing its own lines, in order.

use std::time::SystemTime;

use super::families::{Family, Sample, KEY_FAMILIES};
use super::Exposition;
use crate::index::{ForceUnlocks, Index, KeyView, LockKey, ObjectRef, ObjectView};

/// Where each family's lines of one key end in the buffer they were
/// written to (family `f` of [`KEY_FAMILIES`] starts where `f - 1` ends).
pub(super) type Ends = [usize; KEY_FAMILIES.len()];

/// The labels a lock key is shown under: (namespace, kind, name).
pub(super) type Shown = (String, &'static str, String);

/// A held lock as its families show it (a lock whose class or age is not
/// known yet has none).
pub(super) struct HeldLock<'a> {
    pub(super) class: &'static str,
    pub(super) operation: &'a str,
    pub(super) holder: &'a str,
    pub(super) lock_id: &'a str,
    pub(super) version: &'a str,
    pub(super) age_source: &'static str,
    /// When it was taken, as acquired_timestamp shows it.
    pub(super) acquired: f64,
    pub(super) age: f64,
    /// lock-info Created, when given.
    pub(super) created: Option<f64>,
    pub(super) overdue: bool,
    /// The holder pod's node is lost (an own live lock only).
    pub(super) node_lost: Option<&'a crate::index::NodeLost>,
}

/// Everything one lock key's families are written from.
pub(super) struct Subject<'a> {
    /// (namespace, kind, name) of its object.
    pub(super) object: [&'a str; 3],
    pub(super) view: &'a ObjectView<'a>,
    pub(super) lock: Option<HeldLock<'a>>,
    /// Its Lease is held (even before its class is known).
    pub(super) held: bool,
    /// The force-unlock counters shown beside it, in (namespace, kind,
    /// name) order.
    pub(super) counters: Vec<(ObjectRef, ForceUnlocks)>,
}

impl Subject<'_> {
    /// Whether the key has anything to tell beyond its existence: a held
    /// lock, a force-unlock seen, a verdict that disagrees with CAPTF's, a
    /// pending plan.
    fn tells_something(&self) -> bool {
        self.held
            || self.view.mismatch
            || !self.view.pending_plans.is_empty()
            || !self.counters.is_empty()
    }
}

/// A force-unlock counter that says something: one counted, or one whose
/// Event was seen (history at the first list sets only the time).
fn seen(fu: &ForceUnlocks) -> bool {
    fu.total > 0 || fu.last_seen.is_some()
}

/// Writes one family's lines of one key into a buffer.
pub(super) struct Lines<'b> {
    family: &'static Family,
    buf: &'b mut Vec<u8>,
}

/// One family's lines of `subject` alone.
#[cfg(test)]
pub(super) fn lines_of(family: &'static Family, subject: &Subject<'_>) -> String {
    let mut buf = Vec::new();
    (family.write)(
        subject,
        &mut Lines {
            family,
            buf: &mut buf,
        },
    );
    String::from_utf8(buf).unwrap_or_default()
}

impl Lines<'_> {
    /// A line of the family; `values` in the order of its label names.
    pub(super) fn line(&mut self, values: &[&str], sample: Sample) {
        self.family.line(self.buf, values, sample);
    }
}

/// Appends the series of `key` at `now` to `buf`; None (and nothing
/// written) when it has none, or only idle ones the exposition leaves out.
pub(super) fn render_key(
    ix: &Index,
    key: &LockKey,
    now: SystemTime,
    exposition: Exposition,
    buf: &mut Vec<u8>,
) -> Option<(Shown, Ends)> {
    ix.with_view_of(key, |view| {
        let o = view.object();
        let object = [o.namespace, o.kind, o.name];
        let own = ObjectRef::new(o.namespace, o.kind, o.name);
        let mut counters = ix.force_unlocks_beside(key, own);
        if !exposition.idle_objects {
            counters.retain(|(_, fu)| seen(fu));
        }
        let (lock, held) = match &view {
            KeyView::Lock(v) => (held_lock(v, now), v.lease.is_held()),
            KeyView::Object(_) => (None, false),
        };
        let subject = Subject {
            object,
            view: o,
            lock,
            held,
            counters,
        };
        if !exposition.idle_objects && !subject.tells_something() {
            return None;
        }
        let ends = write_families(&subject, exposition, buf);
        Some(((o.namespace.to_string(), o.kind, o.name.to_string()), ends))
    })
    .flatten()
}

/// Every shown family's lines of `subject`, in order.
pub(super) fn write_families(
    subject: &Subject<'_>,
    exposition: Exposition,
    buf: &mut Vec<u8>,
) -> Ends {
    let mut ends = [0; KEY_FAMILIES.len()];
    for (end, family) in ends.iter_mut().zip(KEY_FAMILIES) {
        if family.shown(exposition) {
            (family.write)(subject, &mut Lines { family, buf });
        }
        *end = buf.len();
    }
    ends
}

/// The lock's families' view of a held lock.
fn held_lock<'a>(v: &crate::index::LockView<'a>, now: SystemTime) -> Option<HeldLock<'a>> {
    let (class, (age, source)) = v.state.class.zip(v.age(now))?;
    // Shown forms (docs/contract.md 7.5): a label value never carries a
    // character that steers a terminal.
    let info = v.lease.shown_info();
    let base = v.lease.age_base(v.state.first_seen_held, Some(class), now);
    Some(HeldLock {
        class: class.as_str(),
        operation: info.map_or("", |[_, _, op, _]| op),
        holder: v.lease.holder_label(),
        lock_id: v.lease.lock_id_label(),
        version: info.map_or("", |[.., version]| version),
        age_source: source.as_str(),
        acquired: base.map_or(0.0, |(base, _)| base),
        age,
        created: v.lease.created_seconds(),
        overdue: v.overdue(class, age),
        node_lost: v.node_lost,
    })
}
