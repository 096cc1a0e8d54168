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
