//! One lock key's sample lines, written straight from the index's view of
//! the key, family by family in the order of [`KEY_FAMILIES`].

use std::time::SystemTime;

use super::families::{flag, Sample, HELD_AT, KEY_FAMILIES};
use super::Exposition;
use crate::core::timeouts::Effective;
use crate::index::{CaptfStatus, Index, KeyView, LockKey, LockView};

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

/// What a lock key's object series say.
struct Object<'a> {
    held: bool,
    effective: Effective,
    captf: Option<&'a CaptfStatus>,
    mismatch: bool,
    plans: &'a [&'a str],
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
        let (ns, kind, name, object) = match &view {
            KeyView::Lock(v) => {
                write_held(&mut w, v, now, exposition);
                let object = Object {
                    held: v.lease.is_held(),
                    effective: v.effective,
                    captf: v.captf,
                    mismatch: v.mismatch,
                    plans: &v.pending_plans,
                };
                (v.namespace, v.kind, v.name, object)
            }
            KeyView::Object(v) => {
                let object = Object {
                    held: false,
                    effective: v.effective,
                    captf: Some(&v.object.captf),
                    mismatch: v.mismatch,
                    plans: &v.pending_plans,
                };
                (
                    v.namespace,
                    v.object.kind.as_str(),
                    v.object.name.as_str(),
                    object,
                )
            }
        };
        write_object(&mut w, ix, key, [ns, kind, name], &object);
        ((ns.to_string(), kind, name.to_string()), w.ends)
    })
}

/// The families of a held lock (none for a free one).
fn write_held(w: &mut Writer<'_>, v: &LockView<'_>, now: SystemTime, exposition: Exposition) {
    let [ns, kind, name] = [v.namespace, v.kind, v.name];
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
    }
}

/// The families of the lock's object, which every lock key has.
fn write_object(w: &mut Writer<'_>, ix: &Index, key: &LockKey, shown: [&str; 3], o: &Object<'_>) {
    let [ns, kind, name] = shown;
    w.skip_to(HELD_AT);
    let Effective {
        lock_timeout_seconds: timeout,
        active_deadline_seconds: deadline,
    } = o.effective;
    w.only(&shown, flag(o.held));
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
    for plan in o.plans {
        w.line(&[ns, kind, name, plan], Sample::Float(1.0));
    }
    w.next();
    // Every object shows its counter (0 before any force-unlock), and a
    // counter kept under another name of the same lock beside it.
    let mut counters = vec![(
        (ns.to_string(), kind.to_string(), name.to_string()),
        ix.force_unlocks_of(ns, kind, name),
    )];
    for (obj, fu) in ix.force_unlocks_of_lock(key) {
        let labels = (obj.namespace.clone(), obj.kind.clone(), obj.name.clone());
        if (labels.0.as_str(), labels.1.as_str(), labels.2.as_str()) != (ns, kind, name) {
            counters.push((labels, fu));
        }
    }
    counters.sort_by(|a, b| a.0.cmp(&b.0));
    for ((n, k, o), fu) in &counters {
        w.line(&[n, k, o], Sample::Count(fu.total));
    }
    w.next();
    for ((n, k, o), fu) in &counters {
        if let Some(t) = fu.last_seen {
            w.line(&[n, k, o], Sample::Float(t));
        }
    }
    w.next();
}
