//! The exposition stays valid whatever lock-info holds: `promtool check
//! metrics` lints the Prometheus 0.0.4 text (the format promtool 2.42 reads)
//! and the OpenMetrics text is checked for its framing.

use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::Arc;

use captf_lock_exporter::core::kind::Kind;
use captf_lock_exporter::core::lockinfo::parse_lock_info;
use captf_lock_exporter::core::suffix::{lock_lease_name, state_suffix};
use captf_lock_exporter::index::{IndexResource, LockLease, ObjectKey, TfObject};
use captf_lock_exporter::metrics::{render, render_with, Exposition, Format};
use captf_lock_exporter::shared::Shared;

fn hostile_who() -> String {
    let mut who = String::from("ev\"il\\us\ner\t@");
    who.push_str(&"x".repeat(64 * 1024));
    who.push_str("\u{1F512}\"\\\n");
    who
}

fn shared_with_hostile_lock() -> Arc<Shared> {
    let (shared, _rx) = Shared::new();
    let info = serde_json::json!({
        "ID": "id\"with\\quotes\nand newline", "Operation": "Op\\\"", "Info": "", "Who": hostile_who(),
        "Version": "1.9.0\n# TYPE fake counter", "Created": "2026-09-26T15:53:38.315668626Z", "Path": "",
    })
    .to_string();
    let suffix = state_suffix("ns", Kind::TerraformMachine, "web");
    let lease = LockLease::new(
        "ns".into(),
        suffix.clone(),
        Some("TerraformMachine"),
        Some("web".into()),
        "holder".into(),
        parse_lock_info(&info).map(Some),
    );
    let obj = TfObject::new(Kind::TerraformMachine, "web");
    shared.update(|ix, now| {
        ix.apply((obj.kind, ObjectKey::new("ns", "web")), obj, now);
        ix.apply(ObjectKey::new("ns", lock_lease_name(&suffix)), lease, now)
    });
    shared
}

#[test]
fn hostile_holder_yields_a_valid_exposition() {
    let shared = shared_with_hostile_lock();
    let text = render(&shared, Format::Prometheus).expect("renders");
    let info_line = text
        .lines()
        .find(|l| l.starts_with("captf_state_lock_info{"))
        .unwrap_or_else(|| panic!("no lock series:\n{text}"));
    // The shown form (contract 7.5: a newline is \u{a}), then the
    // exposition's own escaping of '"' and '\'.
    assert!(
        info_line.contains(r#"holder="ev\"il\\us\\u{a}er\\u{9}_"#),
        "escaped holder: {info_line}"
    );
    assert!(
        info_line.len() < 1024,
        "holder is capped, line is {} bytes",
        info_line.len()
    );
    assert!(
        !text.lines().any(|l| l.starts_with("# TYPE fake")),
        "a newline in a label must not start a line"
    );

    let om = render(&shared, Format::OpenMetrics).expect("renders");
    assert!(om.ends_with("# EOF\n"), "OpenMetrics ends with # EOF");
    assert!(om.contains("# TYPE captf_state_lock_force_unlocks counter"));

    let Some(promtool) = which("promtool") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "promtool is required in CI (scripts/test.sh installs it)"
        );
        eprintln!("SKIP promtool lint: promtool not installed (apt-get install prometheus)");
        return;
    };
    let mut child = Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool starts");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("writes");
    let out = child.wait_with_output().expect("promtool runs");
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "promtool check metrics failed:\n{report}\n--- exposition ---\n{text}"
    );
}

fn which(bin: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| std::path::Path::new(d).join(bin))
        .find(|p| p.is_file())
}

/// CAPTF's verdict, the active Job and pending plans render as one series
/// each, with status and reason from closed sets whatever the status says.
#[test]
fn captf_verdict_families_keep_closed_label_sets() {
    use captf_lock_exporter::index::{CaptfStatus, PlanEntry, StateReadable};
    use std::time::Duration;

    let (shared, _rx) = Shared::new();
    let object = |name: &str, captf: CaptfStatus| TfObject {
        kind: Kind::TerraformCluster,
        name: name.into(),
        cluster_label: None,
        jobs: None,
        cluster: None,
        captf,
    };
    let odd = CaptfStatus {
        state_readable: Some(StateReadable::from_fields(
            "Maybe\"}",
            "Owned\"} 1\n# TYPE x counter",
            "m",
            None,
        )),
        active_job: true,
    };
    let locked = CaptfStatus {
        state_readable: Some(StateReadable::from_fields(
            "False",
            "StateLocked",
            "The state lock id is held by alice@laptop; every Job waits lockTimeoutSeconds for it and fails.",
            None,
        )),
        active_job: false,
    };
    shared.update(|ix, now| {
        let k = Kind::TerraformCluster;
        ix.apply((k, ObjectKey::new("ns", "odd")), object("odd", odd), now);
        ix.apply(
            (k, ObjectKey::new("ns", "prod")),
            object("prod", locked),
            now,
        );
        let plan = PlanEntry {
            target_kind: k,
            target_name: "prod".into(),
            pending: true,
        };
        ix.apply(ObjectKey::new("ns", "prod-plan-1"), plan, now)
    });
    // Every object's series: "odd" has nothing else to tell.
    let everything = Exposition {
        idle_objects: true,
        ..Exposition::default()
    };
    let render = |shared: &Arc<Shared>, format| {
        render_with(shared, format, std::time::SystemTime::now(), everything)
    };
    let before = render(&shared, Format::Prometheus).expect("renders");
    // Sorted: the body's order is bucket order, not name order.
    let line = |text: &str, prefix: &str| {
        let mut lines = text
            .lines()
            .filter(|l| l.starts_with(prefix))
            .map(str::to_string)
            .collect::<Vec<_>>();
        lines.sort();
        lines
    };
    assert_eq!(
        line(&before, "captf_state_lock_captf_condition{"),
        [
            r#"captf_state_lock_captf_condition{namespace="ns",kind="TerraformCluster",name="odd",status="other",reason="other"} 1.0"#,
            r#"captf_state_lock_captf_condition{namespace="ns",kind="TerraformCluster",name="prod",status="False",reason="StateLocked"} 1.0"#,
        ]
    );
    assert_eq!(
        line(&before, "captf_state_lock_job_active{"),
        [r#"captf_state_lock_job_active{namespace="ns",kind="TerraformCluster",name="odd"} 1.0"#]
    );
    assert_eq!(
        line(&before, "captf_state_lock_plan_pending{"),
        [
            r#"captf_state_lock_plan_pending{namespace="ns",kind="TerraformCluster",name="prod",plan="prod-plan-1"} 1.0"#
        ]
    );
    let prod_mismatch =
        r#"captf_state_lock_verdict_mismatch{namespace="ns",kind="TerraformCluster",name="prod"}"#;
    assert_eq!(
        line(&before, prod_mismatch),
        [format!("{prod_mismatch} 0.0")]
    );
    // `prod` has no Lease (released) while CAPTF says StateLocked: once the
    // default grace (10 minutes) is over, the mismatch shows.
    let flagged = shared.write(|ix, now| ix.newly_mismatched(now + Duration::from_secs(601)));
    assert_eq!(flagged.len(), 1);
    let after = render(&shared, Format::Prometheus).expect("renders");
    assert_eq!(
        line(&after, prod_mismatch),
        [format!("{prod_mismatch} 1.0")]
    );
    assert_eq!(
        line(&after, r#"captf_state_lock_verdict_mismatch{namespace="ns",kind="TerraformCluster",name="odd"}"#)
            .first()
            .map(|l| l.ends_with(" 0.0")),
        Some(true),
        "an active Job holds the comparison"
    );
}
