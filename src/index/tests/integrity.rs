//! No Lease can render series under another object's labels.

use super::*;

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
    use crate::metrics::{render, Format};
    let m = Kind::TerraformMachine;
    let (shared, _rx) = crate::shared::Shared::new();
    shared.update(|ix, now| {
        let mut fx = Effects::default();
        let mut add = |ix: &mut Index, r: Resource, c: Change| {
            let more = feed(ix, r, c, now);
            fx.class_changes.extend(more.class_changes);
        };
        // The real object "web" and its held lock.
        add(
            ix,
            Resource::TerraformMachines,
            object(m, "web", None, None, None),
        );
        add(
            ix,
            Resource::Leases,
            lease_change(m, "web", Some(info("alice@laptop"))),
        );
        // A Lease with web's labels copied, under another suffix.
        let other = state_suffix(NS, m, "other");
        add(
            ix,
            Resource::Leases,
            raw_lease(
                &other,
                Some("TerraformMachine"),
                Some("web"),
                "mallory@laptop",
            ),
        );
        // The lock of a deleted object (labels verify), and a copy of it.
        add(
            ix,
            Resource::Leases,
            lease_change(m, "retained", Some(info("bob@laptop"))),
        );
        let other2 = state_suffix(NS, m, "other2");
        add(
            ix,
            Resource::Leases,
            raw_lease(
                &other2,
                Some("TerraformMachine"),
                Some("retained"),
                "eve@laptop",
            ),
        );
        // Suffixes that are also the names of a real object and of a
        // retained lock: a label-less Lease falls back to its suffix.
        add(
            ix,
            Resource::TerraformMachines,
            object(m, "x-m", None, None, None),
        );
        add(
            ix,
            Resource::Leases,
            raw_lease("x-m", None, None, "trudy@laptop"),
        );
        add(
            ix,
            Resource::Leases,
            lease_change(m, "y-m", Some(info("carol@laptop"))),
        );
        add(
            ix,
            Resource::Leases,
            raw_lease(
                "y-m",
                Some("TerraformMachine"),
                Some("nope"),
                "oscar@laptop",
            ),
        );
        // No kind anywhere: kind "", name the suffix.
        add(
            ix,
            Resource::Leases,
            raw_lease("plain", None, None, "peggy@laptop"),
        );
        fx
    });
    let text = render(&shared, Format::Prometheus).expect("renders");
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
        held("TerraformMachine", &state_suffix(NS, m, "other")),
        held("TerraformMachine", &state_suffix(NS, m, "other2")),
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
