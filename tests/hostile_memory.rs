//! What hostile cluster data may cost the index in memory (issue 43, item
//! 6), measured with a counting allocator: the heap the index keeps after
//! the writes, less what it held before.
//!
//! - Lock Leases whose IDs, `Who`, `Operation` and `Version` are all ESC:
//!   every shown (escaped) copy is six times its raw value, and before the
//!   cap a Lease kept about 26 KB.
//! - ForceUnlocked Events about objects that do not exist: kept up to a
//!   cap per namespace, the rest dropped (and counted: tests/hostile_events.rs).
//!
//! The two tests take turns (one lock): the allocator counts the whole
//! process.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::Mutex;
use std::time::SystemTime;

use captf_lock_exporter::core::kind::Kind;
use captf_lock_exporter::core::suffix::{lock_lease_name, state_suffix};
use captf_lock_exporter::index::{ForceUnlockEvent, Index, IndexResource, ObjectKey, TfObject};
use captf_lock_exporter::watch::trim::{self, LeaseObject};
use serde_json::json;

/// The system allocator, counting the bytes live.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

#[allow(clippy::cast_possible_wrap)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_add(
                new_size as isize - layout.size() as isize,
                Ordering::Relaxed,
            );
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// One measurement at a time.
static TURN: Mutex<()> = Mutex::new(());

const MIB: f64 = 1024.0 * 1024.0;

/// The heap `fill` leaves behind in `ix` (bytes).
fn retained(ix: &mut Index, fill: impl FnOnce(&mut Index)) -> isize {
    let before = LIVE.load(Ordering::Relaxed);
    fill(ix);
    LIVE.load(Ordering::Relaxed) - before
}

const LEASES: usize = 10_000;

/// Most heap 10,000 all-ESC Leases may keep: 9 KiB each. What is kept of
/// one: the raw IDs cut to 1024 bytes and a digest (about 1.1 KiB each,
/// issue 33), `Who` up to 1024 bytes, `Operation` and `Version` 128
/// each; the shown forms of the IDs and `Who` cut by the same rule (about
/// 1.1 KiB each), of `Operation` and `Version` capped at 128 bytes; the
/// keys, the map and the overdue queue. Measured: 8239 bytes (before the
/// cut, 39111).
const LEASES_BOUND_BYTES: f64 = LEASES as f64 * 9.0 * 1024.0;

/// A lock Lease of TerraformMachine `m<i>` whose every lock-info string
/// and holderIdentity is ESC (the raw ID past 1024 bytes, so cut).
fn esc_lease(i: usize) -> LeaseObject {
    let esc = |n: usize| "\u{1b}".repeat(n);
    let id = esc(2048);
    let info = json!({"ID": id, "Operation": esc(128), "Who": format!("{}@{}", esc(1000), esc(20)),
        "Version": esc(128), "Created": "2026-09-26T15:53:38Z", "Info": "", "Path": ""});
    let name = format!("m{i}");
    let suffix = state_suffix("tenant", Kind::TerraformMachine, &name);
    let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": lock_lease_name(&suffix), "namespace": "tenant", "resourceVersion": "1",
            "labels": {"tfstate": "true",
                "captf.infrastructure.cluster.x-k8s.io/owner-kind": "TerraformMachine",
                "captf.infrastructure.cluster.x-k8s.io/owner-name": name},
            "annotations": {"app.terraform.io/lock-info": info.to_string()}},
        "spec": {"holderIdentity": id}});
    serde_json::from_value(lease).unwrap_or_else(|e| panic!("a Lease: {e}"))
}

#[test]
fn ten_thousand_leases_with_all_esc_ids_stay_under_nine_kib_each() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let now = SystemTime::now();
    let mut ix = Index::new();
    let kept = retained(&mut ix, |ix| {
        for i in 0..LEASES {
            // Decoded and trimmed as a watch does; only the entry is kept.
            let (key, entry) = trim::lease(&esc_lease(i));
            let entry = entry.unwrap_or_else(|| panic!("Lease {i} is a lock"));
            drop(ix.apply(key, entry, now));
        }
    });
    let (locks, _, _) = ix.sizes();
    assert_eq!(locks, LEASES);
    println!(
        "{LEASES} all-ESC Leases: {:.1} MiB kept by the index, {:.0} bytes each (bound {:.1} MiB)",
        kept as f64 / MIB,
        kept as f64 / LEASES as f64,
        LEASES_BOUND_BYTES / MIB
    );
    assert!(
        (kept as f64) < LEASES_BOUND_BYTES,
        "{LEASES} all-ESC Leases keep {:.1} MiB, over {:.1} MiB",
        kept as f64 / MIB,
        LEASES_BOUND_BYTES / MIB
    );
}

/// Events sent about objects that do not exist, in one namespace.
const GHOST_EVENTS: usize = 10_000;

/// Most heap those may keep: 1 MiB (the cap of Events kept per namespace
/// about unknown objects, 256, at about 1.5 KiB each with their counters).
const GHOST_EVENTS_BOUND_BYTES: f64 = MIB;

fn force_unlock(object: &str) -> ForceUnlockEvent {
    ForceUnlockEvent {
        namespace: "tenant".into(),
        kind: "TerraformMachine".into(),
        name: object.into(),
        occurrences: 1,
        last_seen: Some(1_700_000_000.0),
    }
}

#[test]
fn events_about_objects_that_do_not_exist_keep_a_bounded_heap() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let now = SystemTime::now();
    let mut ix = Index::new();
    let web = TfObject::new(Kind::TerraformMachine, "web");
    ix.apply(
        (Kind::TerraformMachine, ObjectKey::new("tenant", "web")),
        web,
        now,
    );
    let kept = retained(&mut ix, |ix| {
        for i in 0..GHOST_EVENTS {
            // Names as long as an object's may be (253 bytes).
            let ghost = format!("ghost-{i:0>247}");
            let key = ObjectKey::new("tenant", format!("ev-{i}"));
            drop(ix.apply(key, force_unlock(&ghost), now));
        }
    });
    println!(
        "{GHOST_EVENTS} Events about objects that do not exist: {:.2} MiB kept (bound {:.2} MiB)",
        kept as f64 / MIB,
        GHOST_EVENTS_BOUND_BYTES / MIB
    );
    assert!(
        (kept as f64) < GHOST_EVENTS_BOUND_BYTES,
        "{GHOST_EVENTS} Events about unknown objects keep {:.2} MiB",
        kept as f64 / MIB
    );
    // Events about an object that exists are all kept and counted, past
    // the cap too.
    for i in 0..300 {
        let key = ObjectKey::new("tenant", format!("web-{i}"));
        drop(ix.apply(key, force_unlock("web"), now));
    }
    assert_eq!(
        ix.force_unlocks_of("tenant", "TerraformMachine", "web")
            .total,
        300
    );
}
