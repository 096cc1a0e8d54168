//! One lock key's sample lines: its [`Subject`] read from the index's
//! view of the key, then each family of [`KEY_FAMILIES`] writing its own
//! lines, in order.

use std::time::SystemTime;

#[cfg(test)]
use super::families::Family;
use super::families::Lines;
use super::key_families::KEY_FAMILIES;
use super::subject::{seen, HeldLock, Subject};
use super::Exposition;
use crate::index::{Index, KeyView, LockKey, ObjectRef};

/// Where each family's lines of one key end in the buffer they were
/// written to (family `f` of [`KEY_FAMILIES`] starts where `f - 1` ends).
pub(super) type Ends = [usize; KEY_FAMILIES.len()];

/// The labels a lock key is shown under: (namespace, kind, name).
pub(super) type Shown = (String, &'static str, String);

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
