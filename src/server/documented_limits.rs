//! Every limit the docs state, pinned here as the literal they state it
//! as: changing a limit without its docs fails this test, and so does docs text that no longer names it.
//!
//! Not pinned here: the 128 MiB of plain text a snapshot keeps
//! (`metrics::store::PLAIN_KEPT_UP_TO`, private to its module).

use std::path::Path;

use super::auth::{CACHE_CAPACITY, MAX_REVIEWS_IN_FLIGHT, MAX_TOKEN_BYTES};
use super::listen::MAX_BUFFER;
use super::pins::Pins;
use super::Config;
use crate::index::{
    MAX_UNKNOWN_OBJECT_EVENTS_PER_NAMESPACE, MAX_UNKNOWN_OBJECT_EVENTS_WHILE_STARTING,
};

fn doc(path: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The docs' lines are wrapped anywhere: compare with runs of blanks as one.
fn flat(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `value` is `literal`, and `file` says so in `words`.
fn pinned(value: usize, literal: usize, file: &str, words: &str) {
    assert_eq!(
        value, literal,
        "{file} says {words:?}: change the docs with the limit"
    );
    assert!(
        flat(&doc(file)).contains(words),
        "{file} no longer says {words:?}"
    );
}

#[test]
fn every_documented_limit_is_the_one_in_force() {
    let contract = "docs/contract.md";
    pinned(
        MAX_UNKNOWN_OBJECT_EVENTS_PER_NAMESPACE,
        256,
        contract,
        "at most 256 per namespace",
    );
    pinned(
        MAX_UNKNOWN_OBJECT_EVENTS_WHILE_STARTING,
        4096,
        contract,
        "at most 4096 such in all over the run",
    );
    pinned(
        Pins::SUPERSEDED,
        2,
        contract,
        "answers in flight keep at most two snapshots older than the newest",
    );
    pinned(
        CACHE_CAPACITY,
        1024,
        contract,
        "per cache at most 1024 allowed answers and, apart from them, 1024 identities RBAC has not yet allowed anything and 1024 refusals",
    );
    pinned(
        MAX_BUFFER,
        32 * 1024,
        contract,
        "a request head over 32 KiB",
    );
    pinned(
        MAX_TOKEN_BYTES,
        16 * 1024,
        contract,
        "A bearer token over 16 KiB is refused without a review",
    );
    pinned(
        MAX_REVIEWS_IN_FLIGHT,
        8,
        contract,
        "At most 8 review calls run at once",
    );
    pinned(crate::pages::MAX_ROWS, 500, contract, "(at most 500 rows)");
    pinned(
        Config::DEFAULT.max_connections,
        128,
        contract,
        "At most 128 connections are open",
    );
}

/// The worst case of the pinned snapshots at 100k objects, from the
/// figures the docs give, is under the chart's memory limit for 100k.
#[test]
fn superseded_snapshots_at_100k_fit_the_charts_limit() {
    const MB: f64 = 1_000_000.0;
    const MIB: f64 = 1_048_576.0;
    // Plain text per format at 100k (docs/performance.md, the bench) and
    // its gzip pieces (chart/README.md): both formats are kept.
    let text = 61.0 * MB;
    let gzip = 3.5 * MB;
    assert!(flat(&doc("docs/performance.md")).contains("inflating 61 MB"));
    assert!(flat(&doc("chart/README.md")).contains("1.8–3.5 MB gzipped"));
    let readme = doc("chart/README.md");
    let row = readme
        .lines()
        .find(|l| l.starts_with("| up to 100k (measured) |"))
        .unwrap_or_else(|| panic!("chart/README.md: no 100k row"));
    let cells: Vec<&str> = row.split('|').map(str::trim).collect();
    let mib = |cell: &str, unit: &str| -> f64 {
        let n = cell
            .split_whitespace()
            .next()
            .and_then(|n| n.trim_end_matches(unit).parse::<f64>().ok());
        n.unwrap_or_else(|| panic!("{cell:?} in {row:?}"))
    };
    let at_rest = mib(cells[3], "MiB") * MIB;
    let limit = mib(cells[5], "Mi") * MIB;
    #[allow(clippy::cast_precision_loss)]
    let superseded = Pins::SUPERSEDED as f64 * 2.0 * (text + gzip);
    let worst = at_rest + superseded;
    println!(
        "at rest {:.0} MiB + {} superseded snapshots {:.0} MiB = {:.0} MiB, limit {:.0} MiB",
        at_rest / MIB,
        Pins::SUPERSEDED,
        superseded / MIB,
        worst / MIB,
        limit / MIB
    );
    assert!(worst < limit, "{worst} bytes over the chart's {limit}");
    let said = format!(
        "add at most about {:.0} MB ({:.0} MiB) when every bucket changed between them: {:.0} MiB with the {:.0} MiB measured at rest, under the chart's {:.0}Mi limit",
        superseded / MB,
        superseded / MIB,
        worst / MIB,
        at_rest / MIB,
        limit / MIB
    );
    assert!(
        flat(&doc("docs/contract.md")).contains(&said),
        "docs/contract.md should say: {said}"
    );
}
