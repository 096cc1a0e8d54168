//! Behaviour of the whole decoder, one Go rule per test.

use super::*;
use chrono::{TimeDelta, TimeZone};

fn ok(raw: &str) -> LockInfo {
    match parse_lock_info(raw) {
        Ok(i) => i,
        Err(e) => panic!("{raw:?}: {e}"),
    }
}

fn err(raw: &[u8]) -> LockInfoError {
    match parse_lock_info_bytes(raw) {
        Ok(i) => panic!("{:?} accepted: {i:?}", String::from_utf8_lossy(raw)),
        Err(e) => e,
    }
}

fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32, ns: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(y, mo, d, h, mi, s).unwrap() + TimeDelta::nanoseconds(i64::from(ns))
}

fn t(s: &str) -> Option<DateTime<Utc>> {
    parse_go_rfc3339(s.as_bytes())
}

#[test]
fn real_sample() {
    let raw = r#"{"ID":"3b1c2f7e-2d5a-4c1e-9a0b-6f1d2e3c4b5a","Operation":"OperationTypeApply","Info":"","Who":"@captf-m-web-apply-a1-abc123-x7k2p","Version":"1.9.0","Created":"2026-09-26T15:53:38.315668626Z","Path":""}"#;
    let info = ok(raw);
    assert_eq!(info.id, "3b1c2f7e-2d5a-4c1e-9a0b-6f1d2e3c4b5a");
    assert_eq!(info.operation, "OperationTypeApply");
    assert_eq!(info.who, "@captf-m-web-apply-a1-abc123-x7k2p");
    assert_eq!(info.version, "1.9.0");
    assert_eq!(
        info.created,
        Some(utc(2026, 9, 26, 15, 53, 38, 315_668_626))
    );
    assert_eq!(
        holder_host(&info.who),
        Some("captf-m-web-apply-a1-abc123-x7k2p")
    );
}

#[test]
fn case_insensitive_keys() {
    assert_eq!(ok(r#"{"who":"a@b"}"#).who, "a@b");
    assert_eq!(ok(r#"{"WHO":"a@b"}"#).who, "a@b");
    assert_eq!(ok(r#"{"wHo":"a@b"}"#).who, "a@b");
    assert_eq!(ok(r#"{"id":"x"}"#).id, "x");
    assert_eq!(ok(r#"{"operation":"op"}"#).operation, "op");
    assert_eq!(
        ok(r#"{"created":"2026-01-02T03:04:05Z"}"#).created,
        Some(utc(2026, 1, 2, 3, 4, 5, 0))
    );
    // Go folds ſ (U+017F) to S, ı (U+0131) and İ (U+0130) to I.
    assert_eq!(ok("{\"Ver\u{017F}ion\":\"1.9\"}").version, "1.9");
    assert_eq!(ok("{\"\u{0131}D\":\"x\"}").id, "x");
    assert_eq!(ok("{\"\u{0130}d\":\"x\"}").id, "x");
    assert_eq!(ok("{\"Operat\u{0131}on\":\"o\"}").operation, "o");
    // Escaped keys are decoded before matching.
    assert_eq!(ok(r#"{"\u0057ho":"a@b"}"#).who, "a@b");
    assert_eq!(ok(r#"{"W\u0068O":"a@b"}"#).who, "a@b");
    // Near misses are unknown keys.
    assert_eq!(ok(r#"{"Who ":"a@b"}"#).who, "");
    assert_eq!(ok(r#"{"Whoo":"a@b","Wh":"x"}"#).who, "");
    assert_eq!(ok("{\"W\u{00F6}\":\"x\"}").who, "");
}

#[test]
fn duplicates_later_wins() {
    assert_eq!(ok(r#"{"Who":"a@x","who":"b@y"}"#).who, "b@y");
    assert_eq!(ok(r#"{"who":"b@y","Who":"a@x"}"#).who, "a@x");
    // null does not reset an earlier value.
    assert_eq!(ok(r#"{"Who":"a@x","Who":null}"#).who, "a@x");
    let c = ok(r#"{"Created":"2026-01-02T03:04:05Z","created":null}"#);
    assert_eq!(c.created, Some(utc(2026, 1, 2, 3, 4, 5, 0)));
    let c = ok(r#"{"Created":"2026-01-02T03:04:05Z","CREATED":"2027-01-02T03:04:05Z"}"#);
    assert_eq!(c.created, Some(utc(2027, 1, 2, 3, 4, 5, 0)));
}

#[test]
fn unknown_keys_are_ignored_whatever_their_type() {
    let raw = r#"{"Info":{"a":[1,2,{"b":null}]},"Path":[true,false],"X":1.5e3,"Y":-0,"Z":null,"Who":"u@h","":"","Ident":"x"}"#;
    let info = ok(raw);
    assert_eq!(info.who, "u@h");
    assert_eq!(info.id, "");
    assert_eq!(ok(r#"{"Info":"","Path":""}"#), LockInfo::default());
}

#[test]
fn wrong_types_reject_the_document() {
    assert_eq!(
        err(br#"{"Who":1}"#),
        LockInfoError::WrongType {
            field: "Who",
            found: "number"
        }
    );
    assert_eq!(
        err(br#"{"ID":true}"#),
        LockInfoError::WrongType {
            field: "ID",
            found: "bool"
        }
    );
    assert!(matches!(
        err(br#"{"version":{}}"#),
        LockInfoError::WrongType {
            field: "Version",
            found: "object"
        }
    ));
    assert!(matches!(
        err(br#"{"Operation":[]}"#),
        LockInfoError::WrongType {
            field: "Operation",
            found: "array"
        }
    ));
    // Even when a later duplicate is a valid string.
    assert!(parse_lock_info_bytes(br#"{"Who":1,"Who":"a@b"}"#).is_err());
}

#[test]
fn nulls_are_fine() {
    let info = ok(r#"{"ID":null,"Operation":null,"Who":null,"Version":null,"Created":null}"#);
    assert_eq!(info, LockInfo::default());
    assert_eq!(ok("{}"), LockInfo::default());
    assert_eq!(ok(" \t\r\n{ } \n"), LockInfo::default());
}

#[test]
fn top_level_values() {
    assert_eq!(ok("null"), LockInfo::default());
    assert_eq!(ok("  null  "), LockInfo::default());
    assert_eq!(err(b"[]"), LockInfoError::NotAnObject { found: "array" });
    assert_eq!(
        err(b"\"x\""),
        LockInfoError::NotAnObject { found: "string" }
    );
    assert_eq!(err(b"1"), LockInfoError::NotAnObject { found: "number" });
    assert_eq!(err(b"true"), LockInfoError::NotAnObject { found: "bool" });
}

#[test]
fn syntax_errors() {
    for raw in [
        &b""[..],
        b"   ",
        b"{",
        b"{\"Who\"",
        b"{\"Who\":",
        b"{\"Who\":\"a\"",
        b"{\"Who\":\"a\",}",
        b"{\"Who\":\"a\"} x",
        b"{}{}",
        b"{\"Who\" \"a\"}",
        b"{Who:\"a\"}",
        b"{'Who':'a'}",
        b"{\"Who\":\"a\nb\"}",
        b"{\"Who\":\"\\x\"}",
        b"{\"Who\":\"\\'\"}",
        b"{\"Who\":\"\\u12\"}",
        b"{\"Who\":\"\\u12G4\"}",
        b"{\"X\":01}",
        b"{\"X\":1.}",
        b"{\"X\":.5}",
        b"{\"X\":1e}",
        b"{\"X\":+1}",
        b"{\"X\":-}",
        b"{\"X\":tru}",
        b"{\"X\":True}",
        b"{\"X\":nul}",
        b"{\"X\":[1,]}",
        b"{\"X\":[1 2]}",
        b"{\"X\":{\"a\"}}",
        b"{\"X\":NaN}",
        b"\xEF\xBB\xBF{}",
        b"{}\x00",
        b"{\"Who\":\"a\"}\x0c",
        b"nulll",
    ] {
        assert!(
            matches!(
                parse_lock_info_bytes(raw),
                Err(LockInfoError::Syntax { .. })
            ),
            "{:?}",
            String::from_utf8_lossy(raw)
        );
    }
}

#[test]
fn syntax_error_wins_over_type_error() {
    assert!(matches!(
        err(br#"{"Who":1} x"#),
        LockInfoError::Syntax { .. }
    ));
    assert!(matches!(err(b"[1,]"), LockInfoError::Syntax { .. }));
    assert!(matches!(
        err(br#"{"Created":"bad","X":}"#),
        LockInfoError::Syntax { .. }
    ));
}

#[test]
fn created_error_wins_over_earlier_type_error() {
    assert_eq!(
        err(br#"{"Who":1,"Created":"bad"}"#),
        LockInfoError::BadCreated { found: "string" }
    );
    assert_eq!(
        err(br#"{"Created":5}"#),
        LockInfoError::BadCreated { found: "number" }
    );
    assert_eq!(
        err(br#"{"Created":{}}"#),
        LockInfoError::BadCreated { found: "object" }
    );
}

#[test]
fn bad_created_rejects_the_document() {
    for c in [
        "yesterday",
        "",
        "2026-13-01T00:00:00Z",
        "2026-02-30T00:00:00Z",
        "2026-02-29T00:00:00Z",
        "2026-04-31T00:00:00Z",
        "2026-00-01T00:00:00Z",
        "2026-01-00T00:00:00Z",
        "2026\\u002d01-01T00:00:00Z",
        "2026-01-01T00:00:00\\u005a",
        "2026-01-01T00:00:00.5\\/",
        "2026-01-01t00:00:00Z",
        "2026-01-01T00:00:00z",
        "2026-01-01 00:00:00Z",
        "2026-01-01T00:00:00",
        "2026-01-01T24:00:00Z",
        "2026-01-01T00:60:00Z",
        "2026-01-01T00:00:60Z",
        "2026-01-01T00:00:00.Z",
        "2026-01-01T00:00:00+0200",
        "2026-01-01T00:00:00+02",
        "2026-01-01T00:00:00+25:00",
        "2026-01-01T00:00:00+00:61",
        "2026-01-01T00:00:00Z ",
        " 2026-01-01T00:00:00Z",
        "26-01-01T00:00:00Z",
        "+2026-01-01T00:00:00Z",
        "2026-1-01T00:00:00Z",
        "2026-01-1T00:00:00Z",
        "2026-01-01T00:0:00Z",
        "2026-01-01T00:00:0Z",
        "2026-01-01T00:00:00+00:44:30",
        "2026-01-01T00:00:00Z[UTC]",
        "2026-01-01",
    ] {
        let raw = format!("{{\"Who\":\"a@b\",\"Created\":\"{c}\"}}");
        assert_eq!(
            parse_lock_info(&raw),
            Err(LockInfoError::BadCreated { found: "string" }),
            "{c:?}"
        );
    }
    // Non-string, non-null Created.
    for v in ["1", "true", "[]", "{}", "\"\"", "0"] {
        let raw = format!("{{\"Created\":{v}}}");
        assert!(
            matches!(parse_lock_info(&raw), Err(LockInfoError::BadCreated { .. })),
            "{v}"
        );
    }
}

#[test]
fn good_created_values() {
    let cases = [
        ("2026-09-26T15:53:38Z", utc(2026, 9, 26, 15, 53, 38, 0)),
        (
            "2026-09-26T15:53:38.315668626Z",
            utc(2026, 9, 26, 15, 53, 38, 315_668_626),
        ),
        // Beyond nine digits Go truncates, never rounds.
        (
            "2026-09-26T15:53:38.999999999999Z",
            utc(2026, 9, 26, 15, 53, 38, 999_999_999),
        ),
        (
            "2026-09-26T15:53:38.5Z",
            utc(2026, 9, 26, 15, 53, 38, 500_000_000),
        ),
        ("2026-09-26T17:53:38+02:00", utc(2026, 9, 26, 15, 53, 38, 0)),
        ("2026-09-26T10:23:38-05:30", utc(2026, 9, 26, 15, 53, 38, 0)),
        ("2026-09-26T15:53:38-00:00", utc(2026, 9, 26, 15, 53, 38, 0)),
        // Go's lenient layout parser: one-digit hour, comma fraction.
        ("2026-09-26T5:53:38Z", utc(2026, 9, 26, 5, 53, 38, 0)),
        (
            "2026-09-26T15:53:38,25Z",
            utc(2026, 9, 26, 15, 53, 38, 250_000_000),
        ),
        // Offset hour 24 and minute 60 are accepted by Go.
        ("2026-09-24T12:00:00+24:00", utc(2026, 9, 23, 12, 0, 0, 0)),
        ("2026-09-24T12:00:00+23:60", utc(2026, 9, 23, 12, 0, 0, 0)),
        ("2026-09-24T12:00:00+24:60", utc(2026, 9, 23, 11, 0, 0, 0)),
        ("2024-02-29T00:00:00Z", utc(2024, 2, 29, 0, 0, 0, 0)),
        ("2000-02-29T00:00:00Z", utc(2000, 2, 29, 0, 0, 0, 0)),
        ("0000-02-29T00:00:00Z", utc(0, 2, 29, 0, 0, 0, 0)),
        ("9999-12-31T23:59:59Z", utc(9999, 12, 31, 23, 59, 59, 0)),
        ("0099-01-01T00:00:00Z", utc(99, 1, 1, 0, 0, 0, 0)),
    ];
    for (s, want) in cases {
        assert_eq!(t(s), Some(want), "{s}");
        let raw = format!("{{\"Created\":\"{s}\"}}");
        assert_eq!(ok(&raw).created, Some(want), "{s}");
    }
    assert_eq!(t("1900-02-29T00:00:00Z"), None);
    assert_eq!(t("2100-02-29T00:00:00Z"), None);
}

#[test]
fn zero_created_is_not_usable() {
    assert_eq!(t("0001-01-01T00:00:00Z"), Some(utc(1, 1, 1, 0, 0, 0, 0)));
    assert_eq!(ok(r#"{"Created":"0001-01-01T00:00:00Z"}"#).created, None);
    // The same instant written with an offset is still Go's zero time.
    assert_eq!(
        ok(r#"{"Created":"0001-01-01T01:00:00+01:00"}"#).created,
        None
    );
    // One nanosecond later is a real time.
    assert!(ok(r#"{"Created":"0001-01-01T00:00:00.000000001Z"}"#)
        .created
        .is_some());
    assert!(ok(r#"{"Created":"0000-12-31T23:59:59Z"}"#)
        .created
        .is_some());
    assert_eq!(ok(r#"{"Who":"a@b"}"#).created, None);
}

#[test]
fn holder_hosts() {
    assert_eq!(holder_host("@pod"), Some("pod"));
    assert_eq!(holder_host("user@pod"), Some("pod"));
    assert_eq!(holder_host("a@b@pod"), Some("pod"));
    assert_eq!(holder_host("user@"), None);
    assert_eq!(holder_host("@"), None);
    assert_eq!(holder_host("nouser"), None);
    assert_eq!(holder_host(""), None);
}

#[test]
fn large_inputs() {
    let who = "w".repeat(1 << 20);
    let raw = format!("{{\"Who\":\"u@{who}\"}}");
    let info = ok(&raw);
    assert_eq!(info.who.len(), (1 << 20) + 2);
    // A 1 MiB unknown key is skipped without decoding.
    let raw = format!("{{\"{who}\":1,\"ID\":\"x\"}}");
    assert_eq!(ok(&raw).id, "x");
}

#[test]
fn deep_nesting_is_bounded_and_matches_go() {
    // 64 KiB of '{': a syntax error, no stack overflow.
    let raw = vec![b'{'; 64 * 1024];
    assert!(matches!(err(&raw), LockInfoError::Syntax { .. }));
    let raw = vec![b'['; 64 * 1024];
    assert!(matches!(err(&raw), LockInfoError::Syntax { .. }));
    let mut raw = b"{\"Info\":".to_vec();
    raw.extend(std::iter::repeat_n(b'[', 64 * 1024));
    assert!(matches!(err(&raw), LockInfoError::Syntax { .. }));

    // Go allows exactly 10 000 levels: the object is level 1.
    let nested = |levels: usize| {
        let mut s = String::from("{\"Info\":");
        s.push_str(&"[".repeat(levels - 1));
        s.push_str(&"]".repeat(levels - 1));
        s.push_str(",\"Who\":\"u@h\"}");
        s
    };
    assert_eq!(ok(&nested(MAX_DEPTH)).who, "u@h");
    assert_eq!(
        err(nested(MAX_DEPTH + 1).as_bytes()),
        LockInfoError::Syntax {
            reason: "exceeded max depth",
            offset: 8 + MAX_DEPTH
        }
    );
    let mut objs = String::from("{\"Info\":");
    for _ in 0..MAX_DEPTH {
        objs.push_str("{\"a\":");
    }
    objs.push('1');
    objs.push_str(&"}".repeat(MAX_DEPTH + 1));
    assert!(matches!(err(objs.as_bytes()), LockInfoError::Syntax { .. }));
}

#[test]
fn invalid_utf8_is_replaced_per_byte() {
    let raw = b"{\"Who\":\"u@p\xffo\xe2\x82d\"}";
    assert_eq!(
        parse_lock_info_bytes(raw).unwrap().who,
        "u@p\u{FFFD}o\u{FFFD}\u{FFFD}d"
    );
    // An encoded surrogate (ED A0 80) is three bad bytes in Go too.
    let raw = b"{\"Who\":\"\xed\xa0\x80\"}";
    assert_eq!(
        parse_lock_info_bytes(raw).unwrap().who,
        "\u{FFFD}".repeat(3)
    );
    // Valid multi-byte text passes through.
    assert_eq!(
        ok("{\"Who\":\"h\u{e9}@p\u{1F600}\"}").who,
        "h\u{e9}@p\u{1F600}"
    );
    // Invalid bytes in a key never match a field.
    assert_eq!(
        parse_lock_info_bytes(b"{\"Wh\xff\":\"x\"}").unwrap().who,
        ""
    );
}

#[test]
fn surrogate_escapes() {
    assert_eq!(ok(r#"{"Who":"\ud800"}"#).who, "\u{FFFD}");
    assert_eq!(ok(r#"{"Who":"\udc00"}"#).who, "\u{FFFD}");
    assert_eq!(ok(r#"{"Who":"\ud83d\ude00"}"#).who, "\u{1F600}");
    assert_eq!(ok(r#"{"Who":"\uD83D\uDE00"}"#).who, "\u{1F600}");
    // High then high: the first is replaced, the second stands alone.
    assert_eq!(ok(r#"{"Who":"\ud800\ud800"}"#).who, "\u{FFFD}\u{FFFD}");
    // High then a high+low pair: replacement, then the pair.
    assert_eq!(
        ok(r#"{"Who":"\ud800\ud83d\ude00"}"#).who,
        "\u{FFFD}\u{1F600}"
    );
    // Low then high: both replaced.
    assert_eq!(ok(r#"{"Who":"\ude00\ud83d"}"#).who, "\u{FFFD}\u{FFFD}");
    // High followed by a non-\u escape or plain text.
    assert_eq!(ok(r#"{"Who":"\ud800\n"}"#).who, "\u{FFFD}\n");
    assert_eq!(ok(r#"{"Who":"\ud800x"}"#).who, "\u{FFFD}x");
    // Other escapes.
    assert_eq!(
        ok(r#"{"Who":"\"\\\/\b\f\n\r\t\u0041\u00e9\u0000"}"#).who,
        "\"\\/\u{8}\u{c}\n\r\tA\u{e9}\u{0}"
    );
}

#[test]
fn errors_never_echo_input() {
    let secret = "SECRET-TOKEN";
    for raw in [
        format!("{{\"Who\":\"{secret}\"}} junk"),
        format!("[\"{secret}\"]"),
        format!("{{\"Who\":{secret}}}"),
        format!("{{\"Created\":\"{secret}\"}}"),
        format!("{{\"ID\":1,\"{secret}\":2}}"),
    ] {
        let e = parse_lock_info(&raw).unwrap_err();
        assert!(!e.to_string().contains(secret), "{e}");
        assert!(e.to_string().len() < 120, "{e}");
    }
}

#[test]
fn error_messages() {
    assert_eq!(
        LockInfoError::WrongType {
            field: "Who",
            found: "number"
        }
        .to_string(),
        "lock-info field Who is a JSON number, not a string"
    );
    assert_eq!(
        err(b"").to_string(),
        "lock-info is not valid JSON: unexpected end of JSON input at byte 0"
    );
}
