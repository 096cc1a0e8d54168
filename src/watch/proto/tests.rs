//! The protobuf readers on messages built field by field as the server's
//! generated code lays them out (`wire::write`), and on frames a real
//! kube-apiserver sent (`tests/fixtures/lease-watch.pb`).

use super::wire::write::Msg;
use super::*;

const LEASE_KIND: &ProtoKind<LeaseObject> = &ProtoKind {
    kind: "Lease",
    decode: lease,
};

fn envelope(api_version: &str, kind: &str, raw: Msg) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    let unknown = Msg::new()
        .msg(1, Msg::new().string(1, api_version).string(2, kind))
        .msg(2, raw)
        .string(3, "")
        .string(4, "");
    out.extend(unknown.0);
    out
}

fn event(type_: &str, object: Vec<u8>) -> Vec<u8> {
    Msg::new()
        .string(1, type_)
        .msg(2, Msg::new().bytes(1, &object))
        .0
}

fn lock_lease_msg(holder: &str) -> Msg {
    let meta = Msg::new()
        .string(1, "tfstate-default-m1")
        .string(2, "")
        .string(3, "team-a")
        .string(5, "0b7f6c1e-uid")
        .string(6, "4711")
        .varint(7, 0)
        .msg(8, Msg::new().varint(1, 1_764_000_000))
        .entry(11, "app.kubernetes.io/managed-by", "terraform")
        .entry(11, "tfstate", "true")
        .entry(12, LOCK_INFO_ANNOTATION, r#"{"ID":"abc"}"#)
        .entry(
            12,
            "kubectl.kubernetes.io/last-applied-configuration",
            "{...}",
        )
        .msg(
            17,
            Msg::new()
                .string(1, "terraform")
                .string(2, "Update")
                .string(3, "v1"),
        );
    let spec = Msg::new()
        .string(1, holder)
        .varint(2, 15)
        .msg(3, Msg::new().varint(1, 1_764_000_100));
    Msg::new().msg(1, meta).msg(2, spec)
}

#[test]
fn an_added_lease_keeps_what_the_trim_reads_and_nothing_else() {
    let frame = event(
        "ADDED",
        envelope("coordination.k8s.io/v1", "Lease", lock_lease_msg("abc")),
    );
    let WatchEvent::Added(l) = watch_event(&frame, LEASE_KIND).unwrap() else {
        panic!("not an ADDED event");
    };
    assert_eq!(l.metadata.name.as_deref(), Some("tfstate-default-m1"));
    assert_eq!(l.metadata.namespace.as_deref(), Some("team-a"));
    assert_eq!(l.metadata.resource_version.as_deref(), Some("4711"));
    let labels = l.metadata.labels.unwrap();
    assert_eq!(labels.get("tfstate").map(String::as_str), Some("true"));
    assert_eq!(labels.len(), 2);
    let ann = l.metadata.annotations.unwrap();
    assert_eq!(ann.len(), 1, "only the lock-info annotation is kept");
    assert_eq!(ann[LOCK_INFO_ANNOTATION], r#"{"ID":"abc"}"#);
    assert_eq!(l.metadata.uid, None);
    assert_eq!(l.metadata.managed_fields, None);
    assert_eq!(l.spec.unwrap().holder_identity, "abc");
}

#[test]
fn a_huge_holder_identity_is_cut_as_it_is_read() {
    let holder = "h".repeat(1_500_000);
    let raw = envelope("coordination.k8s.io/v1", "Lease", lock_lease_msg(&holder));
    let frame = event("ADDED", raw);
    let WatchEvent::Added(l) = watch_event(&frame, LEASE_KIND).expect("reads") else {
        panic!("not ADDED")
    };
    let kept = l.spec.map(|s| s.holder_identity).unwrap_or_default();
    assert!(
        kept.len() <= crate::watch::trim::MAX_LOCK_ID_BYTES + 128,
        "kept {} bytes",
        kept.len()
    );
    assert_eq!(kept, crate::watch::trim::keep_lock_id(&holder));
}

#[test]
fn modified_and_deleted_carry_the_lease_and_a_free_lease_has_no_holder() {
    let free = Msg::new().msg(1, Msg::new().string(1, "l").string(6, "9"));
    let frame = event(
        "MODIFIED",
        envelope("coordination.k8s.io/v1", "Lease", free.clone()),
    );
    let WatchEvent::Modified(l) = watch_event(&frame, LEASE_KIND).unwrap() else {
        panic!("not MODIFIED");
    };
    assert!(l.spec.is_none());
    assert_eq!(l.metadata.labels, None);
    let frame = event("DELETED", envelope("coordination.k8s.io/v1", "Lease", free));
    assert!(matches!(
        watch_event(&frame, LEASE_KIND),
        Ok(WatchEvent::Deleted(_))
    ));
}

#[test]
fn a_bookmark_keeps_its_version_and_every_annotation() {
    let meta = Msg::new()
        .string(6, "12345")
        .entry(12, "k8s.io/initial-events-end", "true");
    let frame = event(
        "BOOKMARK",
        envelope("coordination.k8s.io/v1", "Lease", Msg::new().msg(1, meta)),
    );
    let WatchEvent::Bookmark(b) = watch_event(&frame, LEASE_KIND).unwrap() else {
        panic!("not a bookmark");
    };
    assert_eq!(b.metadata.resource_version, "12345");
    assert!(crate::watch::follow::ends_initial_events(&b));
    assert_eq!(b.types.kind, "Lease");
}

#[test]
fn an_error_event_is_its_status() {
    let status = Msg::new()
        .msg(1, Msg::new())
        .string(2, "Failure")
        .string(3, "too old resource version: 1 (4711)")
        .string(4, "Expired")
        .varint(6, 410);
    let frame = event("ERROR", envelope("v1", "Status", status));
    let WatchEvent::Error(s) = watch_event(&frame, LEASE_KIND).unwrap() else {
        panic!("not an error");
    };
    assert_eq!(s.code, 410);
    assert_eq!(s.reason, "Expired");
    assert_eq!(s.status, Some(StatusSummary::Failure));
    assert!(s.message.starts_with("too old"));
}

#[test]
fn a_negative_or_huge_code_reads_as_zero() {
    let neg = Msg::new().varint(6, (-1i64) as u64);
    assert_eq!(status(&neg.0).unwrap().code, 0);
    let huge = Msg::new().varint(6, 70_000);
    assert_eq!(status(&huge.0).unwrap().code, 0);
}

#[test]
fn another_kind_an_unknown_type_or_no_object_is_an_error() {
    let pod = event("ADDED", envelope("v1", "Pod", Msg::new()));
    assert_eq!(
        watch_event(&pod, LEASE_KIND).unwrap_err(),
        ProtoError::Kind {
            expected: "Lease",
            got: "Pod".into()
        }
    );
    let odd = event(
        "SURPRISE",
        envelope("coordination.k8s.io/v1", "Lease", Msg::new()),
    );
    assert_eq!(
        watch_event(&odd, LEASE_KIND).unwrap_err(),
        ProtoError::EventType("SURPRISE".into())
    );
    let bare = Msg::new().string(1, "ADDED").0;
    assert_eq!(
        watch_event(&bare, LEASE_KIND).unwrap_err(),
        ProtoError::NoObject
    );
    let not_status = event(
        "ERROR",
        envelope("coordination.k8s.io/v1", "Lease", Msg::new()),
    );
    assert!(matches!(
        watch_event(&not_status, LEASE_KIND),
        Err(ProtoError::Kind { .. })
    ));
}

#[test]
fn an_object_without_magic_or_with_a_content_encoding_is_an_error() {
    let mut no_magic = envelope("coordination.k8s.io/v1", "Lease", Msg::new());
    no_magic[0] = b'K';
    assert_eq!(unknown(&no_magic).unwrap_err(), ProtoError::NoMagic);
    let mut gz = MAGIC.to_vec();
    gz.extend(Msg::new().string(3, "gzip").0);
    assert_eq!(
        unknown(&gz).unwrap_err(),
        ProtoError::ContentEncoding("gzip".into())
    );
}

#[test]
fn a_wrong_wire_type_in_a_kept_field_is_an_error_naming_it() {
    let meta = Msg::new().varint(1, 7);
    let raw = Msg::new().msg(1, meta);
    assert_eq!(
        lease(&raw.0).unwrap_err(),
        ProtoError::WireType("metadata.name")
    );
    let bad_utf8 = Msg::new().msg(2, Msg::new().bytes(1, &[0xc3, 0x28]));
    assert_eq!(
        lease(&bad_utf8.0).unwrap_err(),
        ProtoError::Utf8("spec.holderIdentity")
    );
}

#[test]
fn every_cut_of_a_frame_is_an_error_or_a_lesser_event_never_a_panic() {
    let frame = event(
        "ADDED",
        envelope("coordination.k8s.io/v1", "Lease", lock_lease_msg("abc")),
    );
    for cut in 0..frame.len() {
        let _ = watch_event(&frame[..cut], LEASE_KIND);
    }
    // Each byte flipped in turn: decoded or refused, never a panic.
    for i in 0..frame.len() {
        let mut f = frame.clone();
        f[i] ^= 0xff;
        let _ = watch_event(&f, LEASE_KIND);
    }
}

/// The frames of a body as a real server sent it (4-byte length, frame).
fn split_frames(mut body: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    while body.len() >= 4 {
        let n = u32::from_be_bytes([body[0], body[1], body[2], body[3]]) as usize;
        out.push(&body[4..4 + n]);
        body = &body[4 + n..];
    }
    assert!(body.is_empty(), "a partial frame at the end of the fixture");
    out
}

const REAL_WATCH: &[u8] = include_bytes!("../../../tests/fixtures/protobuf/lease-watch.bin");
const REAL_WATCH_JSON: &str = include_str!("../../../tests/fixtures/protobuf/lease-watch.json");
const REAL_GONE: &[u8] = include_bytes!("../../../tests/fixtures/protobuf/lease-watch-gone.bin");
const REAL_REFUSAL: &[u8] = include_bytes!("../../../tests/fixtures/protobuf/refusal-403.bin");

/// What a watch event leaves after the trim, in a form two decoders'
/// results can be compared by.
fn kept(e: &WatchEvent<LeaseObject>) -> String {
    match e {
        WatchEvent::Added(l) | WatchEvent::Modified(l) | WatchEvent::Deleted(l) => {
            let (key, lock) = crate::watch::trim::lease(l);
            let kind = match e {
                WatchEvent::Added(_) => "ADDED",
                WatchEvent::Modified(_) => "MODIFIED",
                _ => "DELETED",
            };
            format!(
                "{kind} {key:?} rv={:?} {lock:?}",
                l.metadata.resource_version
            )
        }
        WatchEvent::Bookmark(b) => format!(
            "BOOKMARK rv={} {:?}",
            b.metadata.resource_version, b.metadata.annotations
        ),
        WatchEvent::Error(s) => format!("ERROR {s:?}"),
    }
}

#[test]
fn real_server_frames_read_as_the_same_server_json_reads() {
    let frames = split_frames(REAL_WATCH);
    let proto: Vec<WatchEvent<LeaseObject>> = frames
        .iter()
        .map(|f| watch_event(f, LEASE_KIND).unwrap())
        .collect();
    let json: Vec<WatchEvent<LeaseObject>> = REAL_WATCH_JSON
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(proto.len(), 4);
    assert_eq!(
        proto.iter().map(kept).collect::<Vec<_>>(),
        json.iter().map(kept).collect::<Vec<_>>()
    );
    // And what capture.py wrote is what was read.
    let WatchEvent::Added(l) = &proto[0] else {
        panic!("the first event is not ADDED");
    };
    assert_eq!(
        l.metadata.name.as_deref(),
        Some("lock-tfstate-default-machine-1-m")
    );
    assert_eq!(l.metadata.namespace.as_deref(), Some("team-a"));
    let holder = &l.spec.as_ref().unwrap().holder_identity;
    assert_eq!(holder, "6f9f1d1c-2d7e-4a0b-9a86-3f1c2e2b7a11");
    let info = &l.metadata.annotations.as_ref().unwrap()[LOCK_INFO_ANNOTATION];
    assert!(info.contains("jörg@laptop"), "{info}");
    assert!(crate::watch::trim::lease(l).1.is_some(), "a lock Lease");
    let WatchEvent::Bookmark(b) = &proto[1] else {
        panic!("the second event is not the bookmark");
    };
    assert!(crate::watch::follow::ends_initial_events(b));
    let WatchEvent::Modified(l) = &proto[2] else {
        panic!("the third event is not MODIFIED");
    };
    assert_eq!(
        l.spec.as_ref().map(|s| s.holder_identity.as_str()),
        Some("")
    );
    assert!(matches!(proto[3], WatchEvent::Deleted(_)));
}

#[test]
fn real_server_error_event_and_refusal() {
    let frames = split_frames(REAL_GONE);
    let WatchEvent::Error(s) = watch_event(frames[0], LEASE_KIND).unwrap() else {
        panic!("not an ERROR event");
    };
    assert_eq!((s.code, s.reason.as_str()), (410, "Expired"));
    let u = unknown(REAL_REFUSAL).unwrap();
    assert_eq!((u.api_version, u.kind), ("v1", "Status"));
    let s = status(u.raw).unwrap();
    assert_eq!((s.code, s.reason.as_str()), (403, "Forbidden"));
    assert!(
        s.message.contains(r#"User "nobody" cannot watch"#),
        "{}",
        s.message
    );
}
