//! The watch request and its answer read in either encoding, against a
//! scripted server (a tower service behind kube's `Client`): what is
//! asked, protobuf frames split anywhere across body chunks, the JSON
//! fallback, a refusal in each encoding, a cut body, a frame past the
//! limit.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures::StreamExt;
use http::{Request, Response};
use http_body_util::StreamBody;
use hyper::body::Frame;
use kube::api::{Api, ApiResource, GroupVersionKind, WatchEvent, WatchParams};

use super::*;
use crate::watch::proto::wire::write::Msg;
use crate::watch::proto::MAGIC;
use crate::watch::slim::LeaseObject;

type Chunk = Result<Frame<Bytes>, std::io::Error>;

/// What the scripted server answers: a status, a content type and body
/// chunks (an `Err` chunk breaks the body there).
#[derive(Clone)]
struct Script {
    code: u16,
    content_type: &'static str,
    chunks: Vec<Result<Vec<u8>, std::io::ErrorKind>>,
}

/// A client whose every request gets `script`'s answer; the requests seen
/// are kept in the returned list.
fn client(script: Script) -> (kube::Client, Arc<Mutex<Vec<Request<kube::client::Body>>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let keep = seen.clone();
    let svc = tower::service_fn(move |req: Request<kube::client::Body>| {
        keep.lock().unwrap().push(req);
        let s = script.clone();
        async move {
            let chunks: Vec<Chunk> = s
                .chunks
                .into_iter()
                .map(|c| match c {
                    Ok(b) => Ok(Frame::data(Bytes::from(b))),
                    Err(kind) => Err(std::io::Error::new(kind, "scripted break")),
                })
                .collect();
            let body = StreamBody::new(futures::stream::iter(chunks));
            Ok::<_, Infallible>(
                Response::builder()
                    .status(s.code)
                    .header("content-type", s.content_type)
                    .body(body)
                    .unwrap(),
            )
        }
    });
    (kube::Client::new(svc, "default"), seen)
}

fn leases(client: kube::Client) -> Api<LeaseObject> {
    let gvk = GroupVersionKind::gvk("coordination.k8s.io", "v1", "Lease");
    Api::all_with(client, &ApiResource::from_gvk_with_plural(&gvk, "leases"))
}

const KIND: &ProtoKind<LeaseObject> = &ProtoKind {
    kind: "Lease",
    decode: proto::lease,
};

fn object(kind: &str, raw: Msg) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    out.extend(
        Msg::new()
            .msg(
                1,
                Msg::new()
                    .string(1, "coordination.k8s.io/v1")
                    .string(2, kind),
            )
            .msg(2, raw)
            .0,
    );
    out
}

fn framed(type_: &str, obj: Vec<u8>) -> Vec<u8> {
    let ev = Msg::new()
        .string(1, type_)
        .msg(2, Msg::new().bytes(1, &obj))
        .0;
    let mut out = (ev.len() as u32).to_be_bytes().to_vec();
    out.extend(ev);
    out
}

fn lease_named(name: &str, rv: &str) -> Msg {
    Msg::new().msg(1, Msg::new().string(1, name).string(3, "ns").string(6, rv))
}

fn end_bookmark(rv: &str) -> Msg {
    Msg::new().msg(
        1,
        Msg::new()
            .string(6, rv)
            .entry(12, "k8s.io/initial-events-end", "true"),
    )
}

async fn all(events: Events<LeaseObject>) -> Vec<Result<WatchEvent<LeaseObject>, kube::Error>> {
    events.collect().await
}

/// Every event of a watch whose answer is 200, protobuf, in `chunks`.
async fn protobuf_answer(
    chunks: Vec<Result<Vec<u8>, std::io::ErrorKind>>,
) -> Vec<Result<WatchEvent<LeaseObject>, kube::Error>> {
    let (c, _) = client(Script {
        code: 200,
        content_type: "application/vnd.kubernetes.protobuf;stream=watch",
        chunks,
    });
    let events = open_watch(&leases(c), &WatchParams::default(), "1", Some(KIND))
        .await
        .unwrap();
    all(events).await
}

fn name(e: &Result<WatchEvent<LeaseObject>, kube::Error>) -> String {
    match e {
        Ok(WatchEvent::Added(l) | WatchEvent::Modified(l) | WatchEvent::Deleted(l)) => {
            l.metadata.name.clone().unwrap_or_default()
        }
        Ok(WatchEvent::Bookmark(b)) => format!("bookmark {}", b.metadata.resource_version),
        Ok(WatchEvent::Error(s)) => format!("error {}", s.code),
        Err(e) => format!("err {e}"),
    }
}

#[tokio::test]
async fn asks_protobuf_then_json_and_reads_frames_split_anywhere() {
    let mut body = framed("ADDED", object("Lease", lease_named("a", "1")));
    body.extend(framed("ADDED", object("Lease", lease_named("b", "2"))));
    body.extend(framed("BOOKMARK", object("Lease", end_bookmark("3"))));
    // Every split point of the body into two chunks, and one byte a chunk.
    let mut splits: Vec<Vec<Result<Vec<u8>, std::io::ErrorKind>>> = (0..=body.len())
        .map(|i| vec![Ok(body[..i].to_vec()), Ok(body[i..].to_vec())])
        .collect();
    splits.push(body.iter().map(|b| Ok(vec![*b])).collect());
    for chunks in splits {
        let (c, seen) = client(Script {
            code: 200,
            content_type: "application/vnd.kubernetes.protobuf;stream=watch",
            chunks,
        });
        let params = WatchParams::default().timeout(300).initial_events();
        let events = open_watch(&leases(c), &params, "", Some(KIND))
            .await
            .unwrap();
        let got: Vec<String> = all(events).await.iter().map(name).collect();
        assert_eq!(got, ["a", "b", "bookmark 3"]);
        let req = &seen.lock().unwrap()[0];
        assert_eq!(
            req.headers()["accept"],
            "application/vnd.kubernetes.protobuf, application/json"
        );
        assert_eq!(req.headers()["accept-encoding"], "identity");
        let q = req.uri().query().unwrap_or_default();
        assert!(
            q.contains("watch=true") && q.contains("sendInitialEvents=true"),
            "{q}"
        );
        assert_eq!(req.method(), http::Method::GET);
    }
}

#[tokio::test]
async fn a_json_answer_is_read_as_json_lines() {
    let lines = concat!(
        r#"{"type":"ADDED","object":{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"j","namespace":"ns","resourceVersion":"5"}}}"#,
        "\n",
        r#"{"type":"BOOKMARK","object":{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"resourceVersion":"6","annotations":{"k8s.io/initial-events-end":"true"}}}}"#,
        "\n",
        r#"{"type":"ADDED","object":{"kind":"Lease","metadata":{"name":"cut"#
    );
    let (c, _) = client(Script {
        code: 200,
        content_type: "application/json",
        chunks: vec![Ok(lines.as_bytes().to_vec())],
    });
    let events = open_watch(&leases(c), &WatchParams::default(), "4", Some(KIND))
        .await
        .unwrap();
    let got: Vec<String> = all(events).await.iter().map(name).collect();
    // The incomplete last line (a body cut short) is dropped, as kube-rs drops it.
    assert_eq!(got, ["j", "bookmark 6"]);
}

#[tokio::test]
async fn an_unreadable_frame_is_one_decode_error_and_the_stream_goes_on() {
    let mut body = framed("ADDED", b"not an object".to_vec());
    body.extend(framed("ADDED", object("Lease", lease_named("after", "7"))));
    let got = protobuf_answer(vec![Ok(body)]).await;
    assert!(
        matches!(got[0], Err(kube::Error::SerdeError(_))),
        "{:?}",
        got[0]
    );
    assert_eq!(name(&got[1]), "after");
    assert_eq!(got.len(), 2);
}

#[tokio::test]
async fn a_refusal_is_the_servers_status_in_either_encoding() {
    let status = Msg::new()
        .string(2, "Failure")
        .string(3, "leases is forbidden")
        .string(4, "Forbidden")
        .varint(6, 403);
    let mut pb = MAGIC.to_vec();
    pb.extend(
        Msg::new()
            .msg(1, Msg::new().string(1, "v1").string(2, "Status"))
            .msg(2, status)
            .0,
    );
    for (ct, body) in [
        ("application/vnd.kubernetes.protobuf", pb),
        (
            "application/json",
            br#"{"kind":"Status","status":"Failure","message":"leases is forbidden","reason":"Forbidden","code":403}"#.to_vec(),
        ),
    ] {
        let (c, _) = client(Script {
            code: 403,
            content_type: ct,
            chunks: vec![Ok(body)],
        });
        let Err(kube::Error::Api(s)) =
            open_watch(&leases(c), &WatchParams::default(), "1", Some(KIND)).await
        else {
            panic!("not refused ({ct})");
        };
        assert_eq!((s.code, s.reason.as_str()), (403, "Forbidden"), "{ct}");
        assert_eq!(s.message, "leases is forbidden");
    }
}

#[tokio::test]
async fn a_refusal_without_a_status_keeps_the_http_code_and_the_text() {
    let (c, _) = client(Script {
        code: 502,
        content_type: "text/html",
        chunks: vec![Ok(b"<html>bad gateway</html>".to_vec())],
    });
    let Err(kube::Error::Api(s)) =
        open_watch(&leases(c), &WatchParams::default(), "1", Some(KIND)).await
    else {
        panic!("not refused");
    };
    assert_eq!(s.code, 502);
    assert!(s.message.contains("bad gateway"));
}

#[tokio::test]
async fn a_cut_body_ends_the_stream_and_a_broken_one_is_an_error() {
    let good = framed("ADDED", object("Lease", lease_named("x", "1")));
    let half = framed("ADDED", object("Lease", lease_named("y", "2")));
    let cases = [
        (std::io::ErrorKind::UnexpectedEof, vec!["x".to_string()]),
        (
            std::io::ErrorKind::ConnectionReset,
            vec!["x".to_string(), "err".to_string()],
        ),
    ];
    for (kind, want) in cases {
        let got: Vec<String> =
            protobuf_answer(vec![Ok(good.clone()), Ok(half[..5].to_vec()), Err(kind)])
                .await
                .iter()
                .map(|e| match e {
                    Err(kube::Error::ReadEvents(_)) => "err".to_string(),
                    e => name(e),
                })
                .collect();
        assert_eq!(got, want, "{kind:?}");
    }
}

#[tokio::test]
async fn a_frame_longer_than_the_limit_breaks_the_stream_unbuffered() {
    let len = (MAX_FRAME as u32 + 1).to_be_bytes().to_vec();
    let got = protobuf_answer(vec![Ok(len)]).await;
    assert_eq!(got.len(), 1);
    assert!(
        matches!(got[0], Err(kube::Error::ReadEvents(_))),
        "{:?}",
        got[0]
    );
}

#[test]
fn refusal_keeps_the_http_code_when_the_status_has_none() {
    let s = refusal(429, false, br#"{"kind":"Status","message":"slow down"}"#);
    assert_eq!((s.code, s.message.as_str()), (429, "slow down"));
}

#[tokio::test]
async fn a_json_line_past_the_limit_is_one_error_and_the_next_lines_are_read() {
    let event = |name: &str, holder: &str| {
        format!(
            r#"{{"type":"ADDED","object":{{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{{"name":"{name}","namespace":"ns","resourceVersion":"5"}},"spec":{{"holderIdentity":"{holder}"}}}}}}"#
        ) + "\n"
    };
    // A Lease line longer than the limit (16 MiB), sent in small chunks.
    let body = [
        event("before", "a"),
        event("huge", &"h".repeat((16 << 20) + 1)),
        event("after", "b"),
    ]
    .concat();
    let chunks = body
        .as_bytes()
        .chunks(1 << 20)
        .map(|c| Ok(c.to_vec()))
        .collect();
    let (c, _) = client(Script {
        code: 200,
        content_type: "application/json",
        chunks,
    });
    let events = open_watch(&leases(c), &WatchParams::default(), "4", None)
        .await
        .unwrap();
    let got = all(events).await;
    assert_eq!(
        got.len(),
        3,
        "{:?}",
        got.iter().map(name).collect::<Vec<_>>()
    );
    assert_eq!(name(&got[0]), "before");
    assert!(
        matches!(got[1], Err(kube::Error::LinesCodecMaxLineLengthExceeded)),
        "the long line is refused: {}",
        name(&got[1])
    );
    assert_eq!(name(&got[2]), "after");
}
