//! Fleet-scale figures: index build, scrape render time and memory for
//! 100k objects and Leases. Prints figures; asserts nothing about speed.
//!
//! cargo bench --bench scale -- [objects]
//!
//! The cached figures (the server's path) come first: peak RSS only grows,
//! so the 16 concurrent uncached renders (the old path) come last.

use std::sync::Arc;
use std::time::Instant;

use captf_lock_exporter::core::kind::Kind;
use captf_lock_exporter::core::lockinfo::parse_lock_info;
use captf_lock_exporter::core::suffix::{lock_lease_name, state_suffix};
use captf_lock_exporter::index::{IndexResource, LockLease, ObjectKey, PodState, TfObject};
use captf_lock_exporter::metrics::{render, Format, ScrapeCache};
use captf_lock_exporter::shared::Shared;

fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with(field)).map(str::to_owned))
        .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

fn rss_kib() -> u64 {
    status_kib("VmRSS:")
}

/// Peak RSS so far (monotonic: measure the smaller case first).
fn peak_kib() -> u64 {
    status_kib("VmHWM:")
}

/// The server's path: the scrape cache, single flight, gzip as Prometheus
/// asks. Measured first, because peak RSS only grows.
fn cached(shared: &Arc<Shared>) {
    let Ok(rt) = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    else {
        return;
    };
    rt.block_on(async {
        let cache = ScrapeCache::new(shared.clone());
        let refresher = tokio::spawn(cache.clone().refresh());
        let t = Instant::now();
        let plain = cache.body(Format::OpenMetrics, false).await.expect("renders");
        let render = t.elapsed();
        let t = Instant::now();
        let zipped = cache.body(Format::OpenMetrics, true).await.expect("compresses");
        let compress = t.elapsed();
        println!(
            "cached (openmetrics): render {render:?}, gzip {compress:?}; {:.1} MiB plain, {:.2} MiB gzip ({:.0}x)",
            plain.len() as f64 / 1048576.0,
            zipped.len() as f64 / 1048576.0,
            plain.len() as f64 / zipped.len().max(1) as f64
        );
        drop((plain, zipped));
        let mut hits = Vec::new();
        for _ in 0..101 {
            let t = Instant::now();
            let body = cache.body(Format::OpenMetrics, true).await.expect("cached");
            hits.push(t.elapsed());
            drop(body);
        }
        hits.sort();
        println!("cached scrape, body current: median {:?}, max {:?}", hits[50], hits[100]);
        refresher.abort();
        drop(cache);
        let one = peak_kib();
        // A fresh cache: 16 scrapers arrive together and need a render.
        let cache = ScrapeCache::new(shared.clone());
        tokio::spawn(cache.clone().refresh());
        let t = Instant::now();
        let scrapes: Vec<_> = (0..16)
            .map(|_| {
                let cache = cache.clone();
                tokio::spawn(async move { cache.body(Format::OpenMetrics, true).await.map(|b| b.len()) })
            })
            .collect();
        for s in scrapes {
            let _ = s.await;
        }
        println!(
            "16 concurrent cached scrapes: {:?} for all, {} render(s); peak RSS {} MiB after one, {} MiB after 16 concurrent",
            t.elapsed(),
            cache.renders(),
            one / 1024,
            peak_kib() / 1024
        );
    });
}

/// Without the cache: every scraper renders its own copy at once.
fn uncached_concurrent(shared: &Arc<Shared>) {
    let t = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..16 {
            s.spawn(|| render(shared, Format::OpenMetrics).map(|b| b.len()));
        }
    });
    println!(
        "16 concurrent uncached renders: {:?} for all; peak RSS {} MiB",
        t.elapsed(),
        peak_kib() / 1024
    );
}

fn main() {
    let n: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(100_000);
    let base = rss_kib();
    let (shared, _rx) = Shared::new();
    let t = Instant::now();
    shared.update(|ix, now| {
        for i in 0..n {
            let ns = format!("team-{}", i % 100);
            let name = format!("machine-{i}");
            let kind = Kind::TerraformMachine;
            let obj = TfObject { kind, name: name.clone(), cluster_label: Some(format!("c{}", i % 1000)), jobs: None, cluster: None, captf: Default::default() };
            ix.apply((obj.kind, ObjectKey::new(&ns, &name)), obj, now);
            let suffix = state_suffix(&ns, kind, &name);
            // One lock in ten is held; a third of those by a live runner pod.
            let held = i % 10 == 0;
            let info = held.then(|| {
                let who = if i % 30 == 0 { format!("@captf-m-{name}-apply-a1-abc123-x7k2p") } else { format!("user{i}@laptop") };
                format!(r#"{{"ID":"id-{i}","Operation":"OperationTypeApply","Info":"","Who":"{who}","Version":"1.9.0","Created":"2026-09-26T15:53:38.315668626Z","Path":""}}"#)
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
            let lease = LockLease::new(ns.clone(), suffix.clone(), Some("TerraformMachine"), Some(name), holder, parsed);
            ix.apply(ObjectKey::new(ns, lock_lease_name(&suffix)), lease, now);
        }
        Default::default()
    });
    let build = t.elapsed();
    let after_build = rss_kib();
    cached(&shared);
    let mut sizes = Vec::new();
    for (label, format) in [
        ("openmetrics", Format::OpenMetrics),
        ("prometheus 0.0.4", Format::Prometheus),
    ] {
        let mut times = Vec::new();
        for _ in 0..5 {
            let t = Instant::now();
            let text = render(&shared, format).expect("renders");
            times.push(t.elapsed());
            sizes.push((label, text.len()));
        }
        times.sort();
        println!(
            "scrape ({label}): median {:?}, min {:?}, max {:?}",
            times[2], times[0], times[4]
        );
    }
    uncached_concurrent(&shared);
    let (label, bytes) = sizes[0];
    println!("objects and Leases: {n} ({} held)", n / 10);
    println!(
        "index build: {build:?} ({:.1} µs per object+Lease)",
        build.as_secs_f64() * 1e6 / n as f64
    );
    println!("RSS: {} MiB before, {} MiB after build ({:.0} bytes per object+Lease), {} MiB after scrapes", base / 1024, after_build / 1024, (after_build.saturating_sub(base) * 1024) as f64 / n as f64, rss_kib() / 1024);
    println!(
        "exposition size ({label}): {:.1} MiB",
        bytes as f64 / 1048576.0
    );
}
