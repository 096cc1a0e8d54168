//! The store against an independent render: after every change of a
//! random sequence (every resource, deletes, clock-driven flips), the
//! store that re-rendered only the keys the index named gives the same
//! body as every key rendered on its own and put in order (a write that
//! forgets to name what it moved fails here), at every bucket count it
//! takes, and its gzip body is the plain one; a change re-renders its
//! bucket alone; the scrape cache publishes changes. Each family's own
//! lines: `families`.

mod families;

use std::io::Read as _;
use std::time::{Duration, SystemTime};

use super::buckets::{bucket_of, KeyHash, KEYS_PER_BUCKET};
use super::key_families::{headers, KEY_FAMILIES};
use super::render::render_key;
use super::store::{Sizing, Store};
use super::{families as fam, render_at, Body, Exposition, Format, ScrapeCache};
use crate::core::kind::Kind;
use crate::index::fixtures::random::{change, lease, names, object, Rng, KINDS, NS};
use crate::index::{IndexResource, LockKey, ObjectKey};
use crate::shared::Shared;

/// The first differing lines of two expositions, for a failure message.
fn first_difference(a: &[u8], b: &[u8]) -> String {
    let (a, b) = (String::from_utf8_lossy(a), String::from_utf8_lossy(b));
    let d: Vec<_> = a
        .lines()
        .zip(b.lines())
        .filter(|(x, y)| x != y)
        .take(2)
        .collect();
    format!(
        "{d:?} (lines: {} vs {})",
        a.lines().count(),
        b.lines().count()
    )
}

/// The plain body of a store as it is now.
fn body_of(store: &Store, shared: &Shared) -> Vec<u8> {
    let health = fam::health(&shared.health, Format::OpenMetrics).expect("encodes");
    let body = Body::plain(&store.snapshot(), Format::OpenMetrics, health.into());
    let bytes = body.to_bytes().to_vec();
    assert_eq!(body.len(), bytes.len(), "Content-Length is the body's");
    bytes
}

fn take(sink: &std::sync::Mutex<crate::index::Changes>) -> crate::index::Changes {
    sink.lock().map(|mut c| c.take()).expect("unpoisoned")
}

/// Every shown key rendered on its own, then put in the body's order
/// (bucket by `hash` among `1 << bits`, then shown name, then suffix),
/// family by family: no buckets kept, nothing incremental, no
/// compression.
fn reference(
    shared: &Shared,
    exposition: Exposition,
    hash: &KeyHash,
    bits: u32,
    at: SystemTime,
) -> Vec<u8> {
    let mut rows = Vec::new();
    shared.read(|ix| {
        ix.for_each_shown_key(|key| {
            let mut buf = Vec::new();
            if let Some((shown, ends)) = render_key(ix, key, at, exposition, &mut buf) {
                let starts = std::iter::once(0).chain(ends);
                let lines: Vec<Vec<u8>> =
                    starts.zip(ends).map(|(s, e)| buf[s..e].to_vec()).collect();
                rows.push((
                    bucket_of(hash.of(key), bits),
                    shown,
                    key.suffix.clone(),
                    lines,
                ));
            }
        });
    });
    rows.sort_by(|a, b| (a.0, &a.1, &a.2).cmp(&(b.0, &b.1, &b.2)));
    let mut out = Vec::new();
    for (f, family) in KEY_FAMILIES.iter().enumerate() {
        if family.shown(exposition) {
            let lines: Vec<u8> = rows.iter().flat_map(|r| r.3[f].iter().copied()).collect();
            out.extend_from_slice(&headers(Format::OpenMetrics)[f].0);
            out.extend_from_slice(&lines);
        }
    }
    let per_class = shared.read(|ix| ix.held_per_class());
    out.extend_from_slice(&fam::overview(&per_class, crate::VERSION));
    out.extend_from_slice(&fam::health(&shared.health, Format::OpenMetrics).expect("encodes"));
    out
}

#[test]
fn the_store_equals_an_independent_render_after_every_change() {
    for seed in 1..=8u64 {
        let (shared, _rx) = Shared::new();
        shared.write(|ix, _| ix.set_verdict_grace(Duration::from_secs(1)));
        let sink = shared.changes();
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let start = SystemTime::now();
        // Odd seeds keep the text compressed only, as past the plain
        // limit; seeds from 5 size buckets for one key each, so that the
        // store regroups its buckets as the fleet grows and shrinks; seeds
        // from 3 use the keyed hash; even seeds show idle objects.
        let sizing = Sizing {
            plain_limit: if seed % 2 == 1 { 1 } else { usize::MAX },
            keys_per_bucket: if seed > 4 { 1 } else { KEYS_PER_BUCKET },
            ..if seed >= 3 {
                Sizing::default()
            } else {
                Sizing::fixed()
            }
        };
        let (limit, hash) = (sizing.plain_limit, sizing.hash.clone());
        let exposition = Exposition {
            idle_objects: seed % 2 == 0,
            ..Exposition::default()
        };
        let mut store = Store::new(exposition, sizing);
        let mut bucket_counts = std::collections::BTreeSet::new();
        for step in 0..400 {
            // Fixed render time per step, ahead of every write's clock.
            let at = start + Duration::from_secs(3600 + step);
            shared.write(|ix, now| change(&mut rng, ix, now, at));
            store.update(&shared, &sink, at);
            let whole = reference(&shared, exposition, &hash, store.bits(), at);
            let a = body_of(&store, &shared);
            let b = &whole[..];
            assert!(
                a == b,
                "seed {seed}, step {step}: {}",
                first_difference(&a, b)
            );
            let health = fam::health(&shared.health, Format::OpenMetrics).expect("renders");
            let gz = Body::gzip(&store.snapshot(), Format::OpenMetrics, &health).to_bytes();
            let mut unzipped = Vec::new();
            let read = flate2::read::GzDecoder::new(&gz[..]).read_to_end(&mut unzipped);
            assert!(read.is_ok(), "seed {seed}, step {step}: {read:?}");
            assert!(unzipped == b, "seed {seed}, step {step}: gzip");
            if matches!(hash, KeyHash::Fixed)
                && store.bucket_count() == 16
                && !exposition.idle_objects
            {
                let scratch = render_at(&shared, Format::OpenMetrics, at).expect("renders");
                assert!(
                    a == scratch.as_bytes(),
                    "seed {seed}, step {step}: render_at"
                );
            }
            let buckets = store.snapshot().buckets;
            let plain_kept = buckets.iter().any(|b| b.lines.is_some());
            let text = buckets
                .iter()
                .flat_map(|b| &b.gzip)
                .any(|p| p.plain_len() > 0);
            // With no line at all, nothing is over the limit.
            let expected = limit == usize::MAX || !text;
            assert_eq!(plain_kept, expected, "seed {seed}, step {step}");
            bucket_counts.insert(store.bucket_count());
        }
        if seed > 4 && exposition.idle_objects {
            assert!(
                bucket_counts.len() > 1,
                "seed {seed}: never regrouped: {bucket_counts:?}"
            );
        }
    }
}

/// Without idle objects most keys render nothing: the buckets are sized
/// for those that render, not for every key the index shows (else every
/// update would find too many buckets and render everything again).
#[test]
fn buckets_are_sized_for_the_keys_that_render() {
    let (shared, _rx) = Shared::new();
    let sink = shared.changes();
    let now = SystemTime::now();
    shared.write(|ix, now| {
        for i in 0..4000 {
            let name = format!("m{i}");
            let key = (Kind::TerraformMachine, ObjectKey::new("ns-a", &name));
            ix.apply(
                key,
                crate::index::TfObject::new(Kind::TerraformMachine, &name),
                now,
            );
        }
    });
    let mut rng = Rng(11);
    for i in 0..10 {
        let (key, l) = lease(&mut rng, "ns-a", Kind::TerraformMachine, &format!("m{i}"));
        shared.write(|ix, now| ix.apply(key, l, now));
    }
    let sizing = Sizing {
        keys_per_bucket: 16,
        ..Sizing::default()
    };
    let hash = sizing.hash.clone();
    let mut store = Store::new(Exposition::default(), sizing);
    store.update(&shared, &sink, now);
    assert_eq!(store.bucket_count(), 16, "sized for at most 10 keys");
    let a = body_of(&store, &shared);
    let b = reference(&shared, Exposition::default(), &hash, store.bits(), now);
    assert!(a == b, "{}", first_difference(&a, &b));
    // A later change finds the buckets right: its own bucket alone.
    let (key, l) = lease(&mut rng, "ns-a", Kind::TerraformMachine, "m3");
    shared.write(|ix, now| ix.apply(key, l, now));
    assert_eq!(store.update(&shared, &sink, now).buckets, 1);
}

/// A change to idle objects (a TerraformCluster's label flip notes every
/// machine that inherits from it) renders no bucket while those objects
/// still have nothing to say; the first of them that does is rendered.
#[test]
fn a_change_to_idle_objects_renders_no_bucket() {
    let (shared, _rx) = Shared::new();
    let sink = shared.changes();
    let now = SystemTime::now();
    let machine = |i: usize, label: Option<&str>| {
        let name = format!("m{i}");
        let key = (Kind::TerraformMachine, ObjectKey::new("ns-a", &name));
        let mut o = crate::index::TfObject::new(Kind::TerraformMachine, &name);
        o.cluster_label = label.map(str::to_string);
        (key, o)
    };
    shared.write(|ix, now| {
        for i in 0..400 {
            let (key, o) = machine(i, None);
            ix.apply(key, o, now);
        }
    });
    let mut rng = Rng(5);
    for i in 0..40 {
        let (key, l) = lease(&mut rng, "ns-a", Kind::TerraformMachine, &format!("m{i}"));
        shared.write(|ix, now| ix.apply(key, l, now));
    }
    let hash = Sizing::default().hash.clone();
    let mut store = Store::new(
        Exposition::default(),
        Sizing {
            hash: hash.clone(),
            ..Sizing::default()
        },
    );
    store.update(&shared, &sink, now);

    // 300 idle machines change what they inherit: each is noted, none shows.
    shared.write(|ix, now| {
        for i in 100..400 {
            let (key, o) = machine(i, Some("c1"));
            ix.apply(key, o, now);
        }
    });
    let noted = sink.lock().map(|c| c.keys().count()).unwrap_or(0);
    assert!(noted >= 300, "the index noted the machines ({noted})");
    assert_eq!(store.update(&shared, &sink, now).buckets, 0);
    let a = body_of(&store, &shared);
    let b = reference(&shared, Exposition::default(), &hash, store.bits(), now);
    assert!(a == b, "{}", first_difference(&a, &b));

    // One of them takes a lock: its bucket, and only it, is rendered.
    let (key, l) = loop {
        let (key, l) = lease(&mut rng, "ns-a", Kind::TerraformMachine, "m250");
        if l.is_held() {
            break (key, l);
        }
    };
    shared.write(|ix, now| ix.apply(key, l, now));
    assert_eq!(store.update(&shared, &sink, now).buckets, 1);
    let a = body_of(&store, &shared);
    let b = reference(&shared, Exposition::default(), &hash, store.bits(), now);
    assert!(a == b, "{}", first_difference(&a, &b));
    assert!(
        String::from_utf8_lossy(&a).contains("name=\"m250\""),
        "the new holder shows"
    );
}

/// Every series of a body that appears more than once: a sample line's
/// metric name and label set, counted.
fn duplicate_series(body: &[u8]) -> Vec<(String, usize)> {
    let mut seen = std::collections::HashMap::<&str, usize>::new();
    let text = std::str::from_utf8(body).unwrap_or("");
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let series = line.rsplit_once(' ').map_or(line, |(s, _)| s);
        *seen.entry(series).or_default() += 1;
    }
    let mut dups: Vec<(String, usize)> = seen
        .into_iter()
        .filter(|(_, n)| *n > 1)
        .map(|(s, n)| (s.to_string(), n))
        .collect();
    dups.sort();
    dups
}

/// Neither text format's body of `store` shows a label set twice.
fn assert_no_label_set_twice(store: &Store, shared: &Shared, what: &str) {
    for format in [Format::OpenMetrics, Format::Prometheus] {
        let health = fam::health(&shared.health, format).expect("renders");
        let body = Body::plain(&store.snapshot(), format, health.into()).to_bytes();
        let dups = duplicate_series(&body);
        assert!(dups.is_empty(), "{what}, {format:?}: {dups:?}");
    }
}

/// OpenMetrics forbids two samples with one label set in a family (once,
/// a Lease named like an object, the lock that name gives and an Event
/// about that name showed one counter twice). After every change of random
/// sequences over every input, both text formats' bodies have none.
#[test]
fn label_sets_are_unique_per_family_after_every_change() {
    for seed in 1..=8u64 {
        let (shared, _rx) = Shared::new();
        let sink = shared.changes();
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let start = SystemTime::now();
        let mut store = Store::new(Exposition::default(), Sizing::default());
        for step in 0..400 {
            let at = start + Duration::from_secs(3600 + step);
            shared.write(|ix, now| change(&mut rng, ix, now, at));
            store.update(&shared, &sink, at);
            assert_no_label_set_twice(&store, &shared, &format!("seed {seed}, step {step}"));
        }
    }
}

/// A render is read a key at a time here, and a writer changes the index
/// all along (every resource, names that claim others' names): every
/// snapshot published is still one view, with no label set twice, in
/// both formats.
#[test]
fn a_snapshot_is_one_view_while_writes_interleave_with_the_render() {
    for seed in 1..=4u64 {
        let (shared, _rx) = Shared::new();
        let sink = shared.changes();
        let start = SystemTime::now();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writer = {
            let (shared, stop) = (shared.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
                let mut writes = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let at = start + Duration::from_secs(3600);
                    shared.write(|ix, now| change(&mut rng, ix, now, at));
                    writes += 1;
                }
                writes
            })
        };
        let sizing = Sizing {
            keys_per_read: 1,
            keys_per_bucket: 2,
            ..Sizing::default()
        };
        let mut store = Store::new(Exposition::default(), sizing);
        for step in 0..300 {
            let at = start + Duration::from_secs(3600 + step);
            store.update(&shared, &sink, at);
            assert_no_label_set_twice(&store, &shared, &format!("seed {seed}, step {step}"));
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let writes = writer.join().expect("the writer ends");
        assert!(
            writes > 300,
            "seed {seed}: the writer wrote only {writes} times"
        );
    }
}

#[test]
fn a_change_re_renders_its_bucket_alone() {
    let (shared, _rx) = Shared::new();
    let sink = shared.changes();
    let mut rng = Rng(7);
    let now = SystemTime::now();
    shared.write(|ix, now| {
        for (ns, kind) in NS.iter().flat_map(|ns| KINDS.map(|k| (*ns, k))) {
            for name in names(kind) {
                let obj = object(&mut rng, kind, &name);
                ix.apply((kind, ObjectKey::new(ns, &name)), obj, now);
            }
        }
    });
    // Idle objects shown: every key has lines.
    let everything = Exposition {
        idle_objects: true,
        ..Exposition::default()
    };
    let mut store = Store::new(everything, Sizing::fixed());
    store.note(&take(&sink));
    let first = store.update(&shared, &sink, now);
    assert_eq!(first.keys, 24, "the first update renders every key");
    let (key, l) = lease(&mut rng, "ns-a", Kind::TerraformMachine, "m1");
    shared.write(|ix, now| ix.apply(key, l, now));
    let changes = take(&sink);
    let changed: Vec<LockKey> = changes.keys().cloned().collect();
    let [changed] = &changed[..] else {
        panic!("one key changed: {changed:?}");
    };
    let mut in_bucket = 0;
    shared.read(|ix| {
        ix.for_each_shown_key(|k| {
            in_bucket += usize::from(store.bucket_of(k) == store.bucket_of(changed));
        });
    });
    store.note(&changes);
    let done = store.update(&shared, &sink, now);
    assert_eq!(
        (done.buckets, done.keys),
        (1, in_bucket),
        "its bucket alone"
    );
    assert_eq!(
        store.update(&shared, &sink, now).buckets,
        0,
        "nothing noted since"
    );
    // In its place: as a render from scratch.
    let whole = super::render_with(&shared, Format::OpenMetrics, now, everything);
    let whole = whole.expect("renders");
    let body = body_of(&store, &shared);
    assert!(
        body == whole.as_bytes(),
        "{}",
        first_difference(&body, whole.as_bytes())
    );
}

#[tokio::test]
async fn the_cache_publishes_changes_and_gzip_is_the_plain_body() {
    let (shared, _rx) = Shared::new();
    // An object with nothing to tell shows only with idle objects.
    let everything = Exposition {
        idle_objects: true,
        ..Exposition::default()
    };
    let cache = ScrapeCache::with_exposition(shared.clone(), everything);
    let refresher = tokio::spawn(cache.clone().refresh());
    let text = |b: Body| String::from_utf8(b.to_bytes().to_vec()).expect("utf-8");
    let plain = cache.body(Format::OpenMetrics, false).await;
    assert!(!text(plain.expect("a body")).contains("name=\"m1\""));
    let mut rng = Rng(3);
    let obj = object(&mut rng, Kind::TerraformMachine, "m1");
    let key = (Kind::TerraformMachine, ObjectKey::new("ns-a", "m1"));
    shared.write(|ix, now| ix.apply(key, obj, now));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let plain = loop {
        let body = cache.body(Format::OpenMetrics, false).await;
        let body = text(body.expect("a body"));
        if body.contains("captf_state_lock_held{namespace=\"ns-a\"") {
            break body;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the change never showed"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let gz = cache.body(Format::OpenMetrics, true).await;
    let gz = gz.expect("a gzip body").to_bytes();
    let mut unzipped = String::new();
    let read = flate2::read::GzDecoder::new(&gz[..]).read_to_string(&mut unzipped);
    assert!(read.is_ok(), "{read:?}");
    assert!(
        unzipped == plain,
        "{}",
        first_difference(unzipped.as_bytes(), plain.as_bytes())
    );
    refresher.abort();
}
