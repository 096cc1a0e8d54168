//! Values whoever may write a Lease or a Secret chooses: characters that
//! steer a terminal or a page are shown escaped while verdicts and the
//! printed commands keep the raw value, an ID that starts with '-' is no
//! flag, and an image from tenant-writable data never runs unchecked.

use std::time::SystemTime;

use super::*;
use crate::core::shown::is_hidden;

/// A hidden character other than the line breaks the output is made of.
fn has_hidden(s: &str) -> bool {
    s.chars().any(|c| is_hidden(c) && c != '\n')
}

/// Sets the operator's clipboard (OSC 52) where a terminal prints it raw.
const OSC52_WHO: &str = "x@captf-m-\u{1b}]52;c;Y3VybCBldmlsfHNo\u{7}-apply-a1-h-abcde";

fn with_holder(hid: &str, who: &str, now: SystemTime) -> LockFacts {
    let mut f = facts(HolderClass::Foreign, None, 10, None, now);
    let info = format!(
        r#"{{"ID":{},"Operation":"OperationTypeApply","Who":{},"Version":"1.9.0"}}"#,
        serde_json::Value::from(hid),
        serde_json::Value::from(who)
    );
    f.lease = LockLease::new(
        NS.into(),
        state_suffix(NS, Kind::TerraformMachine, "web"),
        Some("TerraformMachine"),
        Some("web".into()),
        hid.into(),
        parse_lock_info(&info).map(Some),
    );
    f
}

fn every_output(r: &LockReport) -> String {
    let mut out = render::evidence_text(r);
    fix_text(r, None, &mut out);
    out.push_str(&render::locks_output(
        std::slice::from_ref(r),
        render::Output::Wide,
    ));
    out.push_str(&render::locks_output(
        std::slice::from_ref(r),
        render::Output::Json,
    ));
    out.push_str(&crate::pages::evidence_html(r));
    out
}

#[test]
fn hidden_characters_in_who_are_shown_escaped_everywhere() {
    let now = SystemTime::now();
    for who in [
        OSC52_WHO,
        "alice@lap\u{202e}top",
        "ali\u{200b}ce@laptop",
        "a\u{9b}31m@h\u{2028}",
    ] {
        let f = with_holder("id-1", who, now);
        let r = LockReport::build(&f, now);
        let all = every_output(&r);
        assert!(!has_hidden(&all), "{who:?} reached the output raw:\n{all}");
        assert!(
            !has_hidden(f.lease.holder_label()),
            "{who:?} in the holder label"
        );
    }
    let r = LockReport::build(&with_holder("id-1", OSC52_WHO, now), now);
    let text = render::evidence_text(&r);
    assert!(
        text.contains("another object (TerraformMachine \\u{1b}]52;c;Y3VybCBldmlsfHNo\\u{7})"),
        "{text}"
    );
}

#[test]
fn verdicts_use_the_raw_values() {
    let now = SystemTime::now();
    let f = with_holder("id-1", OSC52_WHO, now);
    // The index's verdict on the raw host: the pod name CAPTF would derive.
    match own_verdict(&f.lease, Some((Kind::TerraformMachine, "web"))) {
        OwnVerdict::NotOwn {
            why: NotOwn::OtherObjectsPod { name, .. },
        } => assert_eq!(name, "\u{1b}]52;c;Y3VybCBldmlsfHNo\u{7}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        f.lease.info.as_ref().map(|i| i.who.as_str()),
        Some(OSC52_WHO)
    );
    assert_eq!(f.lease.lock_id(), "id-1");
}

#[test]
fn force_unlock_ends_flags_and_carries_the_raw_id() {
    let now = SystemTime::now();
    for (hid, word) in [
        ("-foo", "-foo"),
        ("-force", "-force"),
        ("id\u{1b}]52;c;eA==\u{7}", r"$'id\033]52;c;eA==\007'"),
        ("id\u{202e}1", r"$'id\342\200\2561'"),
    ] {
        let r = LockReport::build(&with_holder(hid, "alice@laptop", now), now);
        let mut out = String::new();
        fix_text(&r, None, &mut out);
        let want = format!("\"$TF\" force-unlock -force -- {word})");
        assert!(out.contains(&want), "missing {want:?} in\n{out}");
        assert!(!has_hidden(&out), "{out}");
        assert_eq!(
            out.contains("$'...' with octal escapes"),
            word.starts_with('$'),
            "{out}"
        );
    }
}

fn image_inputs(image: &str, trusted: &str) -> FixInputs {
    FixInputs {
        image: Lookup::Found {
            value: image.into(),
            from: "Secret captf-applied-m-web, annotation captf.io/image-digest".into(),
        },
        labels: Lookup::Found {
            value: "{}".into(),
            from: "y".into(),
        },
        trusted_repository: trusted.into(),
    }
}

#[test]
fn an_image_from_tenant_writable_data_is_refused_unless_trusted() {
    let now = SystemTime::now();
    let r = LockReport::build(
        &facts(HolderClass::Foreign, Some("alice@laptop"), 400, None, now),
        now,
    );
    let evil = "evil.example/x@sha256:0123456789abcdef";
    let mut out = String::new();
    fix_text(
        &r,
        Some(&image_inputs(evil, image::DEFAULT_RUNNER_IMAGE_REPOSITORY)),
        &mut out,
    );
    assert!(
        !out.contains("docker run") && !out.contains("IMAGE="),
        "{out}"
    );
    assert!(
        out.contains("WARNING: no command here runs the object's pinned image"),
        "{out}"
    );
    assert!(
        out.contains("--runner-image-repository evil.example/x."),
        "{out}"
    );
    assert!(
        out.contains("\"$TF\" force-unlock -force -- 3442fe8d-2b45"),
        "{out}"
    );
    let refused = out;
    // Trusted: it runs, after the local variant, with a namespaced token.
    let mut out = String::new();
    fix_text(&r, Some(&image_inputs(evil, "evil.example/x")), &mut out);
    assert!(out.contains(&format!("IMAGE={evil}")), "{out}");
    assert!(
        out.contains("kubectl create token \"$SA\" -n team-a --duration=10m"),
        "{out}"
    );
    assert!(
        out.contains("\"$IMAGE\" force-unlock -force -- 3442fe8d-2b45"),
        "{out}"
    );
    assert!(
        out.find("\"$TF\" force-unlock") < out.find("docker run"),
        "{out}"
    );
    for out in [&refused, &out] {
        assert!(
            !out.contains(".kube/config:") && !out.contains("config_path=/kube/config"),
            "{out}"
        );
    }
}

/// What the printed commands did, run by `sh` against stubs: `kubectl`
/// answers with a Lease whose holderIdentity is `holder_now`, and `tofu`
/// and `docker` only write down how they were called.
fn run_printed(script: &str, holder_now: &str) -> String {
    use std::os::unix::fs::PermissionsExt;
    static RUN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = RUN.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let dir = std::env::temp_dir().join(format!("captf-printed-{}-{n}", std::process::id()));
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap_or_else(|e| panic!("{e}"));
    let lease = serde_json::json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": LEASE, "namespace": NS},
        "spec": {"holderIdentity": holder_now},
    });
    let write = |path: std::path::PathBuf, text: &str, exec: bool| {
        std::fs::write(&path, text).unwrap_or_else(|e| panic!("{e}"));
        if exec {
            let mode = std::fs::Permissions::from_mode(0o755);
            std::fs::set_permissions(&path, mode).unwrap_or_else(|e| panic!("{e}"));
        }
    };
    write(dir.join("lease.json"), &lease.to_string(), false);
    write(dir.join("holder"), holder_now, false);
    write(
        bin.join("kubectl"),
        r#"#!/bin/sh
for a in "$@"; do
  case "$a" in
    json) cat "$STUBS/lease.json"; exit 0 ;;
    "jsonpath={.spec.holderIdentity}") cat "$STUBS/holder"; exit 0 ;;
    token) echo a-token; exit 0 ;;
    view) echo view; exit 0 ;;
  esac
done
echo "kubectl stub: not served: $*" >&2
exit 1
"#,
        true,
    );
    for tool in ["tofu", "docker"] {
        write(
            bin.join(tool),
            &format!("#!/bin/sh\necho \"{tool} $*\" >> \"$STUBS/log\"\n"),
            true,
        );
    }
    write(dir.join("log"), "", false);
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let jq = std::process::Command::new("jq").arg("--version").output();
    assert!(
        jq.is_ok_and(|o| o.status.success()),
        "jq is needed (scripts/test.sh installs it)"
    );
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir(&dir)
        .env("PATH", path)
        .env("STUBS", &dir)
        .output()
        .unwrap_or_else(|e| panic!("sh: {e}"));
    let log = std::fs::read_to_string(dir.join("log")).unwrap_or_else(|e| panic!("{e}"));
    let _ = std::fs::remove_dir_all(&dir);
    format!("{log}--- stderr:\n{}", String::from_utf8_lossy(&out.stderr))
}

/// The lines of `fix` from the one starting `first` (after the indent) to
/// the one containing `last`, as a script: the indent of four dropped.
fn printed_block(fix: &str, first: &str, last: &str) -> String {
    let lines: Vec<&str> = fix.lines().collect();
    let start = lines
        .iter()
        .position(|l| l.trim_start().starts_with(first))
        .unwrap_or_else(|| panic!("no line starting {first:?} in\n{fix}"));
    let end = lines[start..]
        .iter()
        .position(|l| l.contains(last))
        .unwrap_or_else(|| panic!("no line with {last:?} in\n{fix}"));
    lines[start..=start + end]
        .iter()
        .map(|l| l.strip_prefix("    ").unwrap_or(l))
        .collect::<Vec<_>>()
        .join("\n")
}

/// For a holderIdentity over 1,024 bytes (shown cut),
/// both printed force-unlocks read the holder from the Lease when pasted;
/// if the lock changed hands since `explain` ran, they released the new
/// holder's lock. Now they refuse unless the holder still has the length
/// and head the exporter saw, as the guarded release already did.
#[test]
fn a_printed_force_unlock_of_a_cut_holder_refuses_a_changed_holder() {
    let now = SystemTime::now();
    let whole = "h".repeat(1_500);
    let mut f = facts(HolderClass::Foreign, Some("alice@laptop"), 400, None, now);
    f.lease.holder_identity = crate::watch::trim::keep_lock_id(&whole);
    let r = LockReport::build(&f, now);
    let mut fix = String::new();
    let image = "ghcr.io/captf-io/m@sha256:0123456789abcdef";
    let inputs = image_inputs(image, image::DEFAULT_RUNNER_IMAGE_REPOSITORY);
    fix_text(&r, Some(&inputs), &mut fix);
    let tofu = printed_block(&fix, "LABELS=", "\"$TF\" force-unlock");
    let docker = printed_block(&fix, "IMAGE=", "\"$IMAGE\" force-unlock");
    let script = format!("{tofu}\n{docker}\n");
    // The holder unchanged: both release it, with the whole ID.
    let log = run_printed(&script, &whole);
    assert!(
        log.contains(&format!("tofu force-unlock -force -- {whole}\n")),
        "tofu did not release the unchanged lock:\n{log}\n{script}"
    );
    assert!(
        log.contains(&format!("{image} force-unlock -force -- {whole}\n")),
        "the image did not release the unchanged lock:\n{log}\n{script}"
    );
    // Released and taken again by a run (a UUID), or by a writer with an
    // ID as long as the old one: neither is released.
    let same_length = format!("g{}", &whole[1..]);
    for holder_now in ["0b7c5e1a-34f2-4d8e-9c61-2f0a5b9d7e43", same_length.as_str()] {
        let log = run_printed(&script, holder_now);
        assert!(
            !log.contains("force-unlock"),
            "a changed holder ({} bytes) was force-unlocked:\n{log}\n{script}",
            holder_now.len()
        );
        assert!(
            log.contains("spec.holderIdentity is no longer the one read"),
            "no word why nothing was released:\n{log}"
        );
    }
}
