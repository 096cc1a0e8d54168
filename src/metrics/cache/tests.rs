//! The scrape cache against a real index on a paused clock: when the
//! renderer publishes (debounce, health at most once a second, nothing at
//! rest), that a change costs the buckets it touches, that a scrape never
//! waits on a render, and that every published body, plain or gzip, equals
//! an uncached render byte for byte.

use super::*;
use crate::core::kind::Kind;
use crate::core::lockinfo::parse_lock_info;
use crate::core::suffix::{lock_lease_name, state_suffix};
use crate::index::fixtures::workstation_lock;
use crate::index::{IndexResource, LockLease, ObjectKey, TfObject};
use futures::FutureExt;

fn object(shared: &Shared, name: &str) {
    let obj = TfObject::new(Kind::TerraformMachine, name);
    shared.update(|ix, now| ix.apply((obj.kind, ObjectKey::new("ns", name)), obj, now));
}

fn held_lock(shared: &Shared, name: &str) {
    let (key, lease) = workstation_lock(name, "bob@laptop", "2026-09-26T15:53:38Z");
    shared.update(|ix, now| ix.apply(key, lease, now));
}

/// A fleet like the bench's: `n` TerraformMachines in 100 namespaces, a
/// tenth of them held by workstations.
fn fleet(shared: &Shared, n: usize) {
    for i in 0..n {
        let ns = format!("fleet-{:03}", i % 100);
        let name = format!("wl-{:05}-m-{:04}", i / 100, i % 100);
        let obj = TfObject {
            cluster_label: Some(format!("wl-{:05}", i / 100)),
            ..TfObject::new(Kind::TerraformMachine, name.clone())
        };
        let suffix = state_suffix(&ns, Kind::TerraformMachine, &name);
        shared.update(|ix, now| ix.apply((obj.kind, ObjectKey::new(&ns, &name)), obj, now));
        if i % 10 == 0 {
            let info = format!(
                r#"{{"ID":"{:08x}-aaaa-bbbb-cccc-{:012x}","Operation":"OperationTypeApply","Info":"","Who":"user{}@laptop-{}","Version":"1.9.0","Created":"2026-09-26T15:53:38Z","Path":""}}"#,
                i * 7919,
                i,
                i % 50,
                i % 20
            );
            let lease = LockLease::new(
                ns.clone(),
                suffix.clone(),
                Some("TerraformMachine"),
                Some(name.clone()),
                format!("{:08x}", i * 7919),
                parse_lock_info(&info).map(Some),
            );
            shared.update(|ix, now| {
                ix.apply(ObjectKey::new(&ns, lock_lease_name(&suffix)), lease, now)
            });
        }
    }
}

/// The gzip body, made of parts compressed apart (so that a change
/// compresses one bucket again), is at most 1.2x the same body
/// compressed whole at gzip's default level. Prints both sizes.
#[tokio::test]
async fn the_gzip_body_is_close_to_the_whole_body_compressed_at_once() {
    let (shared, _rx) = Shared::new();
    fleet(&shared, 10_000);
    let cache = ScrapeCache::new(shared.clone());
    let gz = cache
        .body(Format::OpenMetrics, AcceptEncoding::Gzip)
        .await
        .expect("gzip body");
    let plain = gunzip(&gz);
    let mut whole = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    std::io::Write::write_all(&mut whole, &plain).expect("compress");
    let whole = whole.finish().expect("compress").len();
    let served = gz.to_bytes().len();
    println!(
        "plain {} B, served gzip {served} B, whole at level 6 {whole} B: {:.2}x",
        plain.len(),
        served as f64 / whole as f64
    );
    assert!(
        served as f64 <= whole as f64 * 1.2,
        "served {served} B against {whole} B compressed whole"
    );
}

/// A gzip body's plain bytes; one member must hold them all.
fn gunzip(body: &Body) -> Vec<u8> {
    let mut out = Vec::new();
    std::io::Read::read_to_end(
        &mut flate2::read::GzDecoder::new(&body.to_bytes()[..]),
        &mut out,
    )
    .expect("one gzip member");
    out
}

async fn text(cache: &Arc<ScrapeCache>) -> String {
    match cache
        .body(Format::OpenMetrics, AcceptEncoding::Identity)
        .await
    {
        Ok(b) => String::from_utf8_lossy(&b.to_bytes()).into_owned(),
        Err(e) => panic!("{e}"),
    }
}

/// Scrapes until the body satisfies `pred`, for at most `within`
/// (virtual time): the renderer publishes on its own schedule.
async fn wait_body(
    cache: &Arc<ScrapeCache>,
    within: Duration,
    pred: impl Fn(&str) -> bool,
) -> String {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let t = text(cache).await;
        if pred(&t) {
            return t;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not within {within:?}:\n{t}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_change_is_published_after_the_debounce_and_a_quiet_index_renders_nothing() {
    let (shared, _rx) = Shared::new();
    let cache = ScrapeCache::new(shared.clone());
    object(&shared, "a");
    assert!(text(&cache).await.contains("name=\"a\""));
    assert_eq!(cache.renders(), 1);
    // Nothing changes: no pass at all, health included.
    let passes = cache.passes();
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(cache.passes(), passes, "at rest the renderer sleeps");
    text(&cache).await;
    assert_eq!(cache.renders(), 1, "no change, no render");
    // A change shows within the debounce and one render (sooner when
    // the health tick runs a pass first).
    let t0 = tokio::time::Instant::now();
    object(&shared, "b");
    wait_body(&cache, Duration::from_secs(1), |t| t.contains("name=\"b\"")).await;
    assert!(t0.elapsed() < DEBOUNCE * 3, "{:?}", t0.elapsed());
    assert_eq!(cache.renders(), 2);
    // A burst of changes within the debounce costs one render.
    for n in ["c", "d", "e", "f"] {
        object(&shared, n);
    }
    wait_body(&cache, Duration::from_secs(1), |t| t.contains("name=\"f\"")).await;
    assert_eq!(cache.renders(), 3, "one render for the burst");
    // A held lock shows when it was taken, a timestamp: the body does
    // not move with the clock.
    held_lock(&shared, "a");
    let with_lock = wait_body(&cache, Duration::from_secs(1), |t| {
        t.contains("captf_state_lock_acquired_timestamp_seconds{")
    })
    .await;
    assert!(!with_lock.contains("captf_state_lock_age_seconds"));
    let publications = cache.publications();
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(
        text(&cache).await,
        with_lock,
        "the clock alone moves nothing"
    );
    assert_eq!(cache.publications(), publications, "nothing published");
}

/// A change costs the buckets it touches, not the fleet: one object's
/// write encodes one bucket again, and the body still equals an
/// uncached render.
#[tokio::test(start_paused = true)]
async fn a_change_of_one_object_encodes_one_bucket() {
    let (shared, _rx) = Shared::new();
    for i in 0..500 {
        object(&shared, &format!("m-{i}"));
    }
    let cache = ScrapeCache::new(shared.clone());
    text(&cache).await;
    let first = cache.bucket_renders();
    assert_eq!(
        first,
        crate::metrics::buckets::BUCKETS as u64,
        "every bucket once"
    );
    held_lock(&shared, "m-7");
    wait_body(&cache, Duration::from_secs(1), |t| {
        t.contains("captf_state_lock_info{namespace=\"ns\",kind=\"TerraformMachine\",name=\"m-7\"")
    })
    .await;
    assert_eq!(cache.bucket_renders() - first, 1, "one bucket");
    // Another change later: the held lock's bucket is not encoded again
    // because its age moved (ages are not exported).
    tokio::time::sleep(Duration::from_secs(5)).await;
    object(&shared, "m-new");
    let body = wait_body(&cache, Duration::from_secs(1), |t| {
        t.contains("name=\"m-new\"")
    })
    .await;
    assert_eq!(cache.bucket_renders() - first, 2, "only m-new's bucket");
    let uncached = crate::metrics::render_at(&shared, Format::OpenMetrics, SystemTime::now())
        .expect("renders");
    assert!(
        body == uncached,
        "the bucketed body is not the whole render: {}",
        crate::metrics::incremental_tests::first_difference(body.as_bytes(), uncached.as_bytes())
    );
}

#[tokio::test(start_paused = true)]
async fn health_moves_within_a_second_without_an_index_render() {
    let (shared, _rx) = Shared::new();
    let cache = ScrapeCache::new(shared.clone());
    object(&shared, "a");
    text(&cache).await;
    let renders = cache.renders();
    shared.health.on_pod_read(crate::health::ReadResult::Found);
    wait_body(&cache, HEALTH_EVERY + DEBOUNCE, |t| {
        t.contains("captf_lock_exporter_pod_reads_total{result=\"found\"} 1")
    })
    .await;
    assert_eq!(cache.renders(), renders, "health is its own part");
}

/// An index change is not held back by a health move waiting for its
/// second: it shows after the debounce.
#[tokio::test(start_paused = true)]
async fn an_index_change_does_not_wait_behind_a_health_move() {
    let (shared, _rx) = Shared::new();
    let cache = ScrapeCache::new(shared.clone());
    object(&shared, "a");
    wait_body(&cache, Duration::from_secs(1), |t| t.contains("name=\"a\"")).await;
    shared.health.on_pod_read(crate::health::ReadResult::Found);
    tokio::time::sleep(Duration::from_millis(1)).await;
    let t0 = tokio::time::Instant::now();
    object(&shared, "b");
    wait_body(&cache, Duration::from_secs(1), |t| t.contains("name=\"b\"")).await;
    assert!(t0.elapsed() < DEBOUNCE * 3, "{:?}", t0.elapsed());
}

/// Health that moves all the time (a stream of watch events) costs at
/// most one pass a second, and each move shows within a second.
#[tokio::test(start_paused = true)]
async fn moving_health_costs_at_most_a_pass_a_second() {
    let (shared, _rx) = Shared::new();
    let cache = ScrapeCache::new(shared.clone());
    text(&cache).await;
    let passes = cache.passes();
    for n in 1..=100u64 {
        shared.health.on_pod_read(crate::health::ReadResult::Found);
        tokio::time::sleep(Duration::from_millis(100)).await;
        if n % 10 == 0 {
            let want = format!("captf_lock_exporter_pod_reads_total{{result=\"found\"}} {n}");
            wait_body(&cache, HEALTH_EVERY, |t| t.contains(&want)).await;
        }
    }
    let made = cache.passes() - passes;
    assert!((5..=11).contains(&made), "{made} passes for 10 s of moves");
    let passes = cache.passes();
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(cache.passes(), passes, "none once health stops moving");
}

/// A scrape that arrives while the renderer is inside a render gets the
/// previous complete body on its first poll: it never waits.
#[tokio::test(start_paused = true)]
async fn a_scrape_during_a_render_gets_the_previous_complete_body_at_once() {
    let (shared, _rx) = Shared::new();
    let cache = ScrapeCache::new(shared.clone());
    object(&shared, "a");
    let before = text(&cache).await;
    for encoding in [AcceptEncoding::Identity, AcceptEncoding::Gzip] {
        cache
            .body(Format::OpenMetrics, encoding)
            .await
            .expect("first");
    }
    let hold = cache
        .gate
        .acquire_many(GATE_PERMITS as u32)
        .await
        .expect("the gate");
    let entries = cache.gate_entries.load(Ordering::SeqCst);
    object(&shared, "b");
    // The renderer sees the change and comes to the gate, mid-pass.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(1);
    while cache.gate_entries.load(Ordering::SeqCst) == entries {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the renderer never came to the gate"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let renders = cache.renders();
    for encoding in [AcceptEncoding::Identity, AcceptEncoding::Gzip] {
        let now = cache
            .body(Format::OpenMetrics, encoding)
            .now_or_never()
            .expect("answered on its first poll")
            .expect("a body");
        if encoding == AcceptEncoding::Identity {
            assert_eq!(String::from_utf8_lossy(&now.to_bytes()), before);
        }
    }
    assert_eq!(cache.renders(), renders, "still inside the render");
    drop(hold);
    wait_body(&cache, Duration::from_secs(1), |t| t.contains("name=\"b\"")).await;
}

/// What a scrape gets is what an uncached render at that moment gives,
/// byte for byte, plain and (once decompressed) gzip.
#[tokio::test]
async fn a_published_body_equals_an_uncached_render() {
    let (shared, _rx) = Shared::new();
    object(&shared, "a");
    held_lock(&shared, "a");
    held_lock(&shared, "b");
    shared.health.on_pod_read(crate::health::ReadResult::Found);
    let cache = ScrapeCache::new(shared.clone());
    for format in [Format::OpenMetrics, Format::Prometheus] {
        let plain = cache
            .body(format, AcceptEncoding::Identity)
            .await
            .expect("plain");
        let uncached =
            crate::metrics::render_at(&shared, format, SystemTime::now()).expect("renders");
        assert!(
            plain.to_bytes() == uncached.as_bytes(),
            "{format:?} differs"
        );
        let zipped = cache
            .body(format, AcceptEncoding::Gzip)
            .await
            .expect("gzip");
        assert!(
            gunzip(&zipped) == uncached.as_bytes(),
            "{format:?} gzip differs"
        );
    }
}

/// Past the plain limit a render keeps only gzip parts: a plain scrape
/// is decompressed from them in steps and still gives the uncached
/// render's bytes, before and after a change, and the render goes back
/// to plain text when the index part shrinks well below the limit.
#[tokio::test(start_paused = true)]
async fn a_compact_render_serves_plain_scrapes_from_its_gzip_parts() {
    let (shared, _rx) = Shared::new();
    for i in 0..300 {
        object(&shared, &format!("m-{i}"));
    }
    let cache = ScrapeCache::build(shared.clone(), Exposition::default(), 20_000);
    let same_as_uncached = |body: &Body| {
        let uncached = crate::metrics::render_at(&shared, Format::OpenMetrics, SystemTime::now())
            .expect("renders");
        body.to_bytes() == uncached.as_bytes()
    };
    let plain = cache
        .body(Format::OpenMetrics, AcceptEncoding::Identity)
        .await
        .expect("plain");
    assert!(plain.is_deflated(), "{} bytes kept compressed", plain.len());
    assert!(same_as_uncached(&plain));
    held_lock(&shared, "m-7");
    let t = wait_body(&cache, Duration::from_secs(1), |t| {
        t.contains("captf_state_lock_info{")
    })
    .await;
    assert!(t.ends_with("# EOF\n"));
    let plain = cache
        .body(Format::OpenMetrics, AcceptEncoding::Identity)
        .await
        .expect("plain");
    assert!(same_as_uncached(&plain), "after a change");
    let zipped = cache
        .body(Format::OpenMetrics, AcceptEncoding::Gzip)
        .await
        .expect("gzip");
    assert!(gunzip(&zipped) == plain.to_bytes(), "gzip and plain agree");
    // Shrink far below the limit: plain text again.
    for i in 0..300 {
        let key = (
            Kind::TerraformMachine,
            ObjectKey::new("ns", format!("m-{i}")),
        );
        shared.update(|ix, now| IndexResource::<TfObject>::delete(ix, key, now));
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let body = cache
            .body(Format::OpenMetrics, AcceptEncoding::Identity)
            .await
            .expect("plain");
        if !body.is_deflated() {
            assert!(same_as_uncached(&body));
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "still compact");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn concurrent_first_scrapes_share_one_render_and_one_compression() {
    let (shared, _rx) = Shared::new();
    object(&shared, "a");
    let cache = ScrapeCache::new(shared.clone());
    let scrapes: Vec<_> = (0..16)
        .map(|_| {
            let c = cache.clone();
            tokio::spawn(async move { c.body(Format::OpenMetrics, AcceptEncoding::Gzip).await })
        })
        .collect();
    let mut bodies = Vec::new();
    for s in scrapes {
        bodies.push(s.await.expect("joins").expect("a body"));
    }
    assert!(bodies.windows(2).all(|w| w[0] == w[1]), "one shared body");
    assert_eq!(cache.renders(), 1);
    assert_eq!(cache.compressions(), 1);
}

#[tokio::test(start_paused = true)]
async fn lock_ages_only_with_the_flag_and_then_every_second() {
    let (shared, _rx) = Shared::new();
    held_lock(&shared, "a");
    let cache = ScrapeCache::with_exposition(shared.clone(), Exposition { lock_age: true });
    let first = text(&cache).await;
    assert!(first.contains("captf_state_lock_age_seconds{"));
    tokio::time::sleep(HEALTH_EVERY * 2).await;
    assert_ne!(text(&cache).await, first, "ages moved");
}
