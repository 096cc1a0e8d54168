//! Fleet-scale figures: index build, scrape render time and memory for
//! 100k objects and Leases. Prints figures; asserts nothing about speed.
//!
//! cargo bench --bench scale -- [objects]

use std::time::Instant;

use captf_lock_exporter::core::kind::Kind;
use captf_lock_exporter::core::lockinfo::parse_lock_info;
use captf_lock_exporter::core::suffix::{lock_lease_name, state_suffix};
use captf_lock_exporter::index::{IndexResource, LockLease, ObjectKey, PodState, TfObject};
use captf_lock_exporter::metrics::{render, Format};
use captf_lock_exporter::shared::Shared;

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .map(str::to_owned)
        })
        .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        .unwrap_or(0)
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
            let obj = TfObject { kind, name: name.clone(), cluster_label: Some(format!("c{}", i % 1000)), jobs: None, cluster: None };
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
                ix.apply(ObjectKey::new(&ns, pod), PodState { finished: false }, now);
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
