//! One lock key's sample lines, written straight from the index's view of
//! the key, family by family in the order of [`KEY_FAMILIES`].

use std::time::SystemTime;

use super::families::{flag, Sample, HELD_AT, KEY_FAMILIES};
use super::Exposition;
use crate::core::timeouts::Effective;
use crate::index::{Index, KeyView, LockKey, LockView, ObjectRef, ObjectView};

/// Where each family's lines of one key end in the buffer they were
/// written to (family `f` of [`KEY_FAMILIES`] starts where `f - 1` ends).
pub(super) type Ends = [usize; KEY_FAMILIES.len()];

/// The labels a lock key is shown under: (namespace, kind, name).
pub(super) type Shown = (String, &'static str, String);

/// Writes the lines of one family after another.
struct Writer<'b> {
    buf: &'b mut Vec<u8>,
    ends: Ends,
    family: usize,
}

impl Writer<'_> {
    /// A line of the current family.
    fn line(&mut self, values: &[&str], sample: Sample) {
        KEY_FAMILIES[self.family].line(self.buf, values, sample);
    }

    /// Ends the current family; the next lines belong to the next one.
    fn next(&mut self) {
        self.ends[self.family] = self.buf.len();
        self.family += 1;
    }

    /// The one line of the current family, which it ends.
    fn only(&mut self, values: &[&str], sample: Sample) {
        self.line(values, sample);
        self.next();
    }

    /// Ends the current family and those up to `family`, without lines.
    fn skip_to(&mut self, family: usize) {
        while self.family < family {
            self.next();
        }
    }
}

/// Appends the series of `key` at `now` to `buf`; None (and nothing
/// written) when it has none.
pub(super) fn render_key(
    ix: &Index,
    key: &LockKey,
    now: SystemTime,
    exposition: Exposition,
    buf: &mut Vec<u8>,
) -> Option<(Shown, Ends)> {
    ix.with_view_of(key, |view| {
        let ends = [0; KEY_FAMILIES.len()];
        let mut w = Writer {
            buf,
            ends,
            family: 0,
        };
        let held = match &view {
            KeyView::Lock(v) => {
                write_held(&mut w, v, now, exposition);
                v.lease.is_held()
            }
            KeyView::Object(_) => false,
        };
        let o = view.object();
        write_object(&mut w, ix, key, o, held);
        (
            (o.namespace.to_string(), o.kind, o.name.to_string()),
            w.ends,
        )
    })
}

/// The families of a held lock (none for a free one).
fn write_held(w: &mut Writer<'_>, v: &LockView<'_>, now: SystemTime, exposition: Exposition) {
    let [ns, kind, name] = [v.object.namespace, v.object.kind, v.object.name];
    if let Some((class, (age, source))) = v.state.class.zip(v.age(now)) {
        // Shown forms (docs/contract.md 7.5): a label value never carries
        // a character that steers a terminal.
        let info = v.lease.shown_info();
        let op = info.map_or("", |[_, _, op, _]| op);
        let version = info.map_or("", |[.., version]| version);
        let (holder, lock_id) = (v.lease.holder_label(), v.lease.lock_id_label());
        let base = v.lease.age_base(v.state.first_seen_held, Some(class), now);
        let overdue = flag(v.overdue(class, age));
        let (class, source) = (class.as_str(), source.as_str());
        let info = [ns, kind, name, class, op, holder, lock_id, version];
        w.only(&info, Sample::Float(1.0));
        let base = base.map_or(0.0, |(base, _)| base);
        w.only(&[ns, kind, name, class, source], Sample::Float(base));
        if exposition.lock_age {
            w.line(&[ns, kind, name, class, source], Sample::Float(age));
        }
        w.next();
        if let Some(created) = v.lease.created_seconds() {
            w.line(&[ns, kind, name], Sample::Float(created));
        }
        w.next();
        w.only(&[ns, kind, name, class], overdue);
        if let Some(lost) = v.node_lost {
            let labels = [ns, kind, name, &lost.node, lost.reason.as_str()];
            w.line(&labels, Sample::Float(lost.since));
        }
        w.next();
    }
}

/// The families of the lock's object, which every lock key has.
fn write_object(w: &mut Writer<'_>, ix: &Index, key: &LockKey, o: &ObjectView<'_>, held: bool) {
    let shown = [o.namespace, o.kind, o.name];
    let [ns, kind, name] = shown;
    w.skip_to(HELD_AT);
    let Effective {
        lock_timeout_seconds: timeout,
        active_deadline_seconds: deadline,
    } = o.effective;
    w.only(&shown, flag(held));
    w.only(&shown, Sample::Float(timeout as f64));
    w.only(&shown, Sample::Float(deadline as f64));
    if let Some(c) = o.captf.and_then(|c| c.state_readable.as_ref()) {
        w.line(
            &[ns, kind, name, c.status.as_str(), c.reason.as_str()],
            Sample::Float(1.0),
        );
    }
    w.next();
    w.only(&shown, flag(o.mismatch));
    if o.captf.is_some_and(|c| c.active_job) {
        w.line(&shown, Sample::Float(1.0));
    }
    w.next();
    for plan in &o.pending_plans {
        w.line(&[ns, kind, name, plan], Sample::Float(1.0));
    }
    w.next();
    let counters = ix.force_unlocks_beside(key, ObjectRef::new(ns, kind, name));
    for (o, fu) in &counters {
        w.line(&[&o.namespace, &o.kind, &o.name], Sample::Count(fu.total));
    }
    w.next();
    for (o, fu) in &counters {
        if let Some(t) = fu.last_seen {
            w.line(&[&o.namespace, &o.kind, &o.name], Sample::Float(t));
        }
    }
    w.next();
}
