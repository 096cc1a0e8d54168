//! The pages against an index at fleet scale: what they cost the writers.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;
use crate::core::kind::Kind;
use crate::core::lockinfo::parse_lock_info;
use crate::core::suffix::{lock_lease_name, state_suffix};
use crate::index::{IndexResource, LockLease, ObjectKey, PodState, TfObject};

/// `n` TerraformMachines with their lock Leases, one in ten held (a third
/// of those by a live runner pod), as benches/scale.rs builds them.
fn fleet(n: usize) -> Arc<Shared> {
    let (shared, _rx) = Shared::new();
    shared.update(|ix, now| {
        for i in 0..n {
            let ns = format!("team-{}", i % 100);
            let name = format!("machine-{i}");
            let kind = Kind::TerraformMachine;
            let obj = TfObject {
                kind,
                name: name.clone(),
                cluster_label: Some(format!("c{}", i % 1000)),
                jobs: None,
                cluster: None,
                captf: Default::default(),
            };
            ix.apply((obj.kind, ObjectKey::new(&ns, &name)), obj, now);
            let suffix = state_suffix(&ns, kind, &name);
            let held = i % 10 == 0;
            let info = held.then(|| {
                let who = if i % 30 == 0 {
                    format!("@captf-m-{name}-apply-a1-abc123-x7k2p")
                } else {
                    format!("user{i}@laptop")
                };
                format!(
                    r#"{{"ID":"id-{i}","Operation":"OperationTypeApply","Info":"","Who":"{who}","Version":"1.9.0","Created":"2026-09-26T15:53:38.315668626Z","Path":""}}"#
                )
            });
            if i % 30 == 0 {
                let pod = format!("captf-m-{name}-apply-a1-abc123-x7k2p");
                ix.apply(ObjectKey::new(&ns, pod), PodState::new(false), now);
            }
            let parsed = match &info {
                Some(raw) => parse_lock_info(raw).map(Some),
                None => Ok(None),
            };
            let holder = if held { format!("id-{i}") } else { String::new() };
            let lease = LockLease::new(
                ns.clone(),
                suffix.clone(),
                Some("TerraformMachine"),
                Some(name),
                holder,
                parsed,
            );
            ix.apply(ObjectKey::new(ns, lock_lease_name(&suffix)), lease, now);
        }
        Default::default()
    });
    shared
}

thread_local! {
    /// The longest CPU time one read of the index by a page took on this
    /// thread since [`ReadHold::reset`].
    static LONGEST_READ: std::cell::Cell<Duration> = const { std::cell::Cell::new(Duration::ZERO) };
}

/// This thread's CPU time: what it spent running, not waiting for a core,
/// so a loaded machine does not stretch it.
fn thread_cpu() -> Duration {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec, which `t` is.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    Duration::new(
        u64::try_from(t.tv_sec).unwrap_or(0),
        u32::try_from(t.tv_nsec).unwrap_or(0),
    )
}

/// Measures one read of the index by a page, from before the lock is
/// taken to after it is released, in the reading thread's CPU time: as
/// long as it holds the lock, the page works (waiting for the lock costs
/// no CPU), so this is how long a writer waits for it, less the time the
/// machine's scheduler adds.
pub(super) struct ReadHold(Duration);

impl ReadHold {
    pub(super) fn start() -> ReadHold {
        ReadHold(thread_cpu())
    }

    fn reset() {
        LONGEST_READ.with(|l| l.set(Duration::ZERO));
    }

    fn longest() -> Duration {
        LONGEST_READ.with(std::cell::Cell::get)
    }
}

impl Drop for ReadHold {
    fn drop(&mut self) {
        let held = thread_cpu().saturating_sub(self.0);
        LONGEST_READ.with(|l| l.set(l.get().max(held)));
    }
}

/// `/` built every held lock's facts under the index's
/// read lock, so at 100k objects (10k held) a watch event waited for the
/// whole copy, a third of the page's work. Now the page reads the index a
/// few locks at a time and renders with no lock; no read may take more
/// than 50 ms of CPU time (a generous bound: this test runs unoptimized).
/// Measured in CPU time, not by a writer's wall clock: on a loaded
/// machine a writer woken from the lock waits for a core, which a
/// control of 1 ms reads showed at over 100 ms.
#[test]
fn a_page_at_100k_holds_a_watch_event_back_at_most_a_bound() {
    let shared = fleet(100_000);
    let bound = Duration::from_millis(50);
    ReadHold::reset();
    let t = Instant::now();
    let page = locks_page(&shared, "");
    let (one_page, longest) = (t.elapsed(), ReadHold::longest());
    assert!(
        page.contains("9500 more held locks not shown"),
        "{}",
        &page[..2000.min(page.len())]
    );
    println!("one page {one_page:?}; the longest read of the index: {longest:?} CPU");
    assert!(
        longest < bound,
        "one read of the index by / took {longest:?} of CPU time (one page {one_page:?}): a watch event waits that long"
    );
    // Filtered, and one lock's page: the same bound.
    ReadHold::reset();
    let page = locks_page(&shared, "namespace=team-1&class=foreign");
    assert!(page.contains("team-1"), "{}", &page[..2000.min(page.len())]);
    assert!(lock_page(&shared, "team-0/TerraformMachine/machine-0").is_some());
    let longest = ReadHold::longest();
    assert!(longest < bound, "{longest:?}");
}
