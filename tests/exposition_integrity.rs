//! No Lease can render series under another object's labels: Leases that
//! copy a real object's labels, or whose suffix is another object's name,
//! keep their own series. (The same over random sequences of every input:
//! `metrics::tests::label_sets_are_unique_per_family_after_every_change`.)

use std::collections::HashMap;

use captf_lock_exporter::core::kind::Kind;
use captf_lock_exporter::core::suffix::state_suffix;
use captf_lock_exporter::index::fixtures::held_lease;
use captf_lock_exporter::index::{
    Effects, ForceUnlockEvent, Index, IndexResource, LockLease, ObjectKey, TfObject,
};
use captf_lock_exporter::metrics::{render, render_with, Exposition, Format};
use captf_lock_exporter::shared::Shared;

const NS: &str = "ns1";

/// A held lock Lease of any suffix and owner labels, held by `who`.
fn lease(
    suffix: &str,
    kind: Option<&str>,
    name: Option<&str>,
    who: &str,
) -> (ObjectKey, LockLease) {
    held_lease(NS, suffix, kind, name, who)
}

/// The lock Lease CAPTF writes for (kind, name), held by `who`.
fn own_lease(kind: Kind, name: &str, who: &str) -> (ObjectKey, LockLease) {
    let suffix = state_suffix(NS, kind, name);
    lease(&suffix, Some(kind.as_str()), Some(name), who)
}

fn machine(name: &str) -> ((Kind, ObjectKey), TfObject) {
    let obj = TfObject::new(Kind::TerraformMachine, name);
    ((obj.kind, ObjectKey::new(NS, name)), obj)
}

/// Every sample line of a Prometheus 0.0.4 exposition, as (metric name and
/// label set) -> how often it appears.
fn series_counts(text: &str) -> HashMap<String, usize> {
    let mut out = HashMap::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let series = line.rsplit_once(' ').map_or(line, |(s, _)| s);
        *out.entry(series.to_string()).or_default() += 1;
    }
    out
}

#[test]
fn a_lease_cannot_impersonate_another_object_in_the_exposition() {
    let m = Kind::TerraformMachine;
    let other = state_suffix(NS, m, "other");
    let other2 = state_suffix(NS, m, "other2");
    let (shared, _rx) = Shared::new();
    shared.update(|ix: &mut Index, now| {
        let mut fx = Effects::default();
        let (k, o) = machine("web");
        ix.apply(k, o, now);
        // A real object whose name is also a Lease's suffix.
        let (k, o) = machine("x-m");
        ix.apply(k, o, now);
        let leases = [
            // web's own held lock.
            own_lease(m, "web", "alice@laptop"),
            // A Lease with web's labels copied, under another suffix.
            lease(
                &other,
                Some("TerraformMachine"),
                Some("web"),
                "mallory@laptop",
            ),
            // The lock of a deleted object (labels verify), and a copy of it.
            own_lease(m, "retained", "bob@laptop"),
            lease(
                &other2,
                Some("TerraformMachine"),
                Some("retained"),
                "eve@laptop",
            ),
            // Suffixes that are also the names of a real object and of a
            // retained lock: a label-less Lease falls back to its suffix.
            lease("x-m", None, None, "trudy@laptop"),
            own_lease(m, "y-m", "carol@laptop"),
            lease(
                "y-m",
                Some("TerraformMachine"),
                Some("nope"),
                "oscar@laptop",
            ),
            // No kind anywhere: kind "", name the suffix.
            lease("plain", None, None, "peggy@laptop"),
        ];
        for (k, l) in leases {
            let more = ix.apply(k, l, now);
            fx.class_changes.extend(more.class_changes);
        }
        fx
    });
    // Every object's series: x-m's free lock has nothing else to tell.
    let everything = Exposition {
        idle_objects: true,
        ..Exposition::default()
    };
    let at = std::time::SystemTime::now();
    let text = render_with(&shared, Format::Prometheus, at, everything).expect("renders");
    let dups: Vec<(String, usize)> = series_counts(&text)
        .into_iter()
        .filter(|(_, n)| *n > 1)
        .collect();
    assert!(dups.is_empty(), "duplicate series {dups:?}\n{text}");
    // The real objects keep their own series; impostors get their suffix.
    let held = |kind: &str, name: &str| {
        format!("captf_state_lock_held{{namespace=\"{NS}\",kind=\"{kind}\",name=\"{name}\"}} 1")
    };
    for line in [
        held("TerraformMachine", "web"),
        held("TerraformMachine", "retained"),
        held("TerraformMachine", &other),
        held("TerraformMachine", &other2),
        held("TerraformMachine", "y-m"),
        held("", "x-m"),
        held("", "y-m"),
        held("", "plain"),
    ] {
        assert!(text.contains(&line), "missing {line}\n{text}");
    }
    assert!(text.contains(&format!(
        "captf_state_lock_held{{namespace=\"{NS}\",kind=\"TerraformMachine\",name=\"x-m\"}} 0"
    )));
    let web_holders = text
        .lines()
        .filter(|l| l.starts_with("captf_state_lock_info{") && l.contains("name=\"web\""))
        .count();
    assert_eq!(web_holders, 1, "{text}");
}

/// Every series of `text` that appears more than once (OpenMetrics forbids
/// two samples with one label set in a family).
fn duplicates(text: &str) -> Vec<(String, usize)> {
    let mut dups: Vec<(String, usize)> = series_counts(text)
        .into_iter()
        .filter(|(_, n)| *n > 1)
        .collect();
    dups.sort();
    dups
}

/// Issue 43, item 5: a tenant who may create Leases and Events. Lease
/// `web-m` (owner-kind TerraformMachine, no owner-name) is shown as
/// (TerraformMachine, web-m); a second Lease under the suffix an object
/// named `web-m` would have, and a ForceUnlocked Event about that object,
/// put its counter beside the second Lease too. One label set, twice.
#[test]
fn a_lease_named_like_an_object_shares_no_force_unlock_series_with_its_lock() {
    let m = Kind::TerraformMachine;
    let real = state_suffix(NS, m, "web-m");
    let (shared, _rx) = Shared::new();
    shared.update(|ix: &mut Index, now| {
        let (k, l) = lease("web-m", Some("TerraformMachine"), None, "mallory@laptop");
        let mut fx = ix.apply(k, l, now);
        let (k, l) = lease(&real, None, None, "mallory@laptop");
        fx.class_changes.extend(ix.apply(k, l, now).class_changes);
        let ev = ForceUnlockEvent {
            namespace: NS.into(),
            kind: "TerraformMachine".into(),
            name: "web-m".into(),
            occurrences: 1,
            last_seen: Some(1_700_000_000.0),
        };
        ix.apply(ObjectKey::new(NS, "ev-1"), ev, now);
        fx
    });
    for format in [Format::OpenMetrics, Format::Prometheus] {
        let text = render(&shared, format).expect("renders");
        let dups = duplicates(&text);
        assert!(
            dups.is_empty(),
            "{format:?}: duplicate series {dups:?}\n{text}"
        );
        // The counter of the object named web-m is shown once, beside the
        // lock its name gives.
        let counted = text
            .lines()
            .filter(|l| l.starts_with("captf_state_lock_force_unlocks_total{"))
            .filter(|l| l.contains("kind=\"TerraformMachine\",name=\"web-m\""))
            .count();
        assert_eq!(counted, 1, "{format:?}:\n{text}");
    }
}
