//! The comparison against vectors in CAPTF's own wording: the messages
//! below are what `foreignLock()` (internal/controller/bookkeeping.go)
//! builds for the given lock-info, written out by hand from its format.

use super::*;
use crate::classify::HolderClass::*;

const TAIL: &str = "; every Job waits lockTimeoutSeconds for it and fails. Release it with force-unlock once that holder is gone; see the stale-lock runbook";

fn captf_message(id: &str, who: &str, operation: &str, created: Option<&str>) -> String {
    let mut m = format!("The state lock {id} is held by {who}");
    if !operation.is_empty() {
        m += &format!(" ({operation})");
    }
    if let Some(c) = created {
        m += &format!(" since {c}");
    }
    m + TAIL
}

fn fallback(id: &str) -> String {
    format!("The state lock {id} is held by something other than this object's runner")
}

fn cond(status: &str, reason: &str, message: &str) -> StateReadable {
    StateReadable {
        status: ConditionStatus::parse(status),
        reason: CaptfReason::parse(reason),
        raw_reason: reason.into(),
        message: message.into(),
        message_cut: false,
        since: None,
    }
}

fn locked(message: &str) -> StateReadable {
    cond("False", "StateLocked", message)
}

fn read() -> StateReadable {
    cond("True", "StateRead", "")
}

fn held(class: HolderClass, who: &str) -> OurVerdict<'_> {
    OurVerdict::Held {
        class,
        who: Some(who),
        who_cut: false,
    }
}

fn differs(a: Agreement) -> Difference {
    match a {
        Agreement::Differs(d) => d,
        other => panic!("expected a difference, got {other:?}"),
    }
}

#[test]
fn reasons_outside_captfs_set_are_other() {
    assert_eq!(CaptfReason::parse("StateLocked"), CaptfReason::StateLocked);
    assert_eq!(
        CaptfReason::parse("StateNotFound").as_str(),
        "StateNotFound"
    );
    assert_eq!(CaptfReason::parse("statelocked"), CaptfReason::Other);
    assert_eq!(CaptfReason::parse("other"), CaptfReason::Other);
    assert_eq!(CaptfReason::parse("").as_str(), "other");
    assert_eq!(ConditionStatus::parse("false").as_str(), "other");
}

#[test]
fn captf_locked_while_the_exporter_sees_it_released() {
    let m = captf_message("abc", "alice@laptop", "OperationTypeApply", None);
    assert_eq!(
        differs(compare(Some(&locked(&m)), OurVerdict::Released)),
        Difference::LockedButReleased
    );
    // CAPTF's fallback says "held" just as much.
    assert_eq!(
        differs(compare(
            Some(&locked(&fallback("abc"))),
            OurVerdict::Released
        )),
        Difference::LockedButReleased
    );
}

#[test]
fn captf_locked_while_an_own_runner_holds_it() {
    let m = captf_message("abc", "alice@laptop", "", None);
    for class in [OwnLive, OwnStale, OwnUnverified] {
        let who = "runner@captf-m-web-apply-a1-x7k2p";
        assert_eq!(
            differs(compare(Some(&locked(&m)), held(class, who))),
            Difference::LockedButOwn(class)
        );
        assert_eq!(compare(Some(&read()), held(class, who)), Agreement::Agrees);
    }
}

#[test]
fn captf_read_while_the_exporter_sees_a_foreign_or_unknown_holder() {
    for class in [Foreign, Unknown] {
        assert_eq!(
            differs(compare(Some(&read()), held(class, "alice@laptop"))),
            Difference::ReadButForeign(class)
        );
    }
    assert_eq!(
        compare(Some(&read()), OurVerdict::Released),
        Agreement::Agrees
    );
}

#[test]
fn the_same_foreign_holder_agrees_in_every_shape_of_the_message() {
    let who = "alice@laptop";
    for (op, created) in [
        ("OperationTypeApply", Some("2026-11-30T10:00:00Z")),
        ("OperationTypeApply", None),
        ("", Some("2026-11-30T10:00:00Z")),
        ("", None),
    ] {
        let m = captf_message("0d7f-11", who, op, created);
        assert_eq!(
            compare(Some(&locked(&m)), held(Foreign, who)),
            Agreement::Agrees,
            "{m}"
        );
    }
}

#[test]
fn another_holder_differs_and_is_named() {
    let m = captf_message("id1", "bob@desk", "OperationTypePlan", None);
    assert_eq!(
        differs(compare(Some(&locked(&m)), held(Foreign, "alice@laptop"))),
        Difference::OtherHolder {
            named: "bob@desk".into()
        }
    );
    // A prefix of the named holder is not the holder.
    let m = captf_message("id1", "alice@laptop2", "", None);
    assert!(matches!(
        compare(Some(&locked(&m)), held(Foreign, "alice@laptop")),
        Agreement::Differs(_)
    ));
}

#[test]
fn a_who_containing_captfs_separators_is_compared_whole() {
    for who in [
        "alice (admin)@laptop",
        "ci since 2020@runner",
        "x; every Job@host",
        "a is held by b@c",
    ] {
        let m = captf_message(
            "id",
            who,
            "OperationTypeApply",
            Some("2026-11-30T10:00:00Z"),
        );
        assert!(names_holder(&m, who), "{m}");
        assert_eq!(
            compare(Some(&locked(&m)), held(Foreign, who)),
            Agreement::Agrees,
            "{who}"
        );
        // Cutting at the first separator gets such a Who wrong: only the
        // display uses it.
        if AFTER_WHO.iter().any(|sep| who.contains(sep)) {
            assert_ne!(named_holder(&m), Some(who));
        }
    }
    // A Who that is the head of the named one up to a separator is named
    // too: CAPTF writes the same message for Who `alice` with Operation
    // `admin)@laptop`, so the message cannot tell them apart.
    let m = captf_message("id", "alice (admin)@laptop", "", None);
    assert!(names_holder(&m, "alice"));
    assert!(!names_holder(&m, "alice (admin)"));
}

#[test]
fn a_lock_id_containing_the_words_does_not_fool_the_holder_check() {
    let m = captf_message("x is held by alice (", "bob@desk", "", None);
    assert!(!names_holder(&m, "mallory"));
    assert!(names_holder(&m, "bob@desk"));
}

#[test]
fn captfs_fallback_names_nobody_and_is_no_mismatch() {
    for class in [Foreign, Unknown] {
        assert_eq!(
            compare(Some(&locked(&fallback("id"))), held(class, "alice@laptop")),
            Agreement::Agrees
        );
    }
    assert!(is_fallback(&fallback("id")));
    assert!(!is_fallback(&captf_message("id", "a@b", "", None)));
}

#[test]
fn a_holder_named_from_lock_info_the_exporter_rejected_differs() {
    let m = captf_message("id", "alice@laptop", "", None);
    let ours = OurVerdict::Held {
        class: Unknown,
        who: None,
        who_cut: false,
    };
    assert_eq!(
        differs(compare(Some(&locked(&m)), ours)),
        Difference::OtherHolder {
            named: "alice@laptop".into()
        }
    );
}

#[test]
fn a_who_too_long_to_keep_is_not_compared() {
    let m = captf_message("id", "someone-else@host", "", None);
    let ours = OurVerdict::Held {
        class: Foreign,
        who: Some("a-head@host"),
        who_cut: true,
    };
    assert_eq!(compare(Some(&locked(&m)), ours), Agreement::Agrees);
}

#[test]
fn a_message_cut_inside_who_is_not_judged() {
    let who = "alice@laptop";
    let mut c = locked("The state lock id is held by alice@lap");
    c.message_cut = true;
    assert_eq!(compare(Some(&c), held(Foreign, who)), Agreement::Agrees);
    c.message = "The state lock id is held by bob@d".into();
    assert!(matches!(
        compare(Some(&c), held(Foreign, who)),
        Agreement::Differs(_)
    ));
}

#[test]
fn other_reasons_and_no_condition_say_nothing_about_the_lock() {
    let ours = [
        OurVerdict::Released,
        held(Foreign, "alice@laptop"),
        held(Unknown, "x"),
        held(OwnLive, "r@captf-m-web-apply-a1-x"),
        held(OwnStale, "r@captf-m-web-apply-a1-x"),
    ];
    for v in ours {
        assert_eq!(compare(None, v), Agreement::Silent);
        for (status, reason) in [
            ("False", "StateCorrupt"),
            ("False", "StateLost"),
            ("False", "StateEncrypted"),
            ("False", "StateInconsistent"),
            ("False", "ApplyOutcomeUnknown"),
            ("False", "RetainedStateFound"),
            ("Unknown", "StateNotFound"),
            ("False", "SomethingNew"),
            // StateLocked with any other status is not CAPTF's verdict.
            ("True", "StateLocked"),
            ("Unknown", "StateRead"),
        ] {
            let c = cond(status, reason, "The state lock id is held by bob@desk (x)");
            assert_eq!(
                compare(Some(&c), v),
                Agreement::Silent,
                "{status}/{reason} {v:?}"
            );
        }
    }
}

#[test]
fn a_message_not_in_captfs_wording_says_nothing() {
    let c = locked("locked by someone");
    assert_eq!(
        compare(Some(&c), held(Foreign, "alice@laptop")),
        Agreement::Silent
    );
}
