//! A watch request, read in whatever the server answers: protobuf frames
//! ([`super::proto`]) from kube-apiserver for a built-in kind with a
//! protobuf reader, JSON lines from anything else (custom resources, a
//! kind without a reader, the demo's in-process API, the test API, a
//! proxy that rewrites bodies).
//!
//! kube-rs asks every watch for JSON and reads its lines whatever their
//! length; this request asks as client-go components do (`Accept:
//! application/vnd.kubernetes.protobuf, application/json` where the kind
//! has a reader, `application/json` otherwise), so the server's content
//! negotiation picks, per request, and the answer's `Content-Type` says
//! which it picked. Nothing is learned or remembered: each watch reads its
//! own answer. Both readers are bounded: a frame past [`MAX_FRAME`]
//! breaks the stream, a line past [`MAX_LINE`] is skipped.
//!
//! Errors keep kube's shapes, so the watch loop cannot tell the two paths
//! apart: a refused request is [`kube::Error::Api`] with the server's
//! `Status` (protobuf or JSON), a frame that cannot be read is a
//! [`kube::Error::SerdeError`] (counted as `decode`, skipped, the scope
//! relisted), a line too long to read is
//! [`kube::Error::LinesCodecMaxLineLengthExceeded`] (skipped, the stream
//! goes on), a broken body is [`kube::Error::ReadEvents`], and the end of
//! the body, clean or cut short, ends the stream.

use std::sync::atomic::{AtomicBool, Ordering};

use futures::{Stream, StreamExt, TryStreamExt};
use http::header::{ACCEPT, ACCEPT_ENCODING, CONTENT_TYPE};
use http::HeaderValue;
use http_body_util::BodyExt;
use kube::api::{Api, WatchEvent, WatchParams};
use kube::core::Status;
use serde::de::DeserializeOwned;
use tokio_util::codec::{Decoder, FramedRead, LengthDelimitedCodec, LinesCodec, LinesCodecError};
use tokio_util::io::StreamReader;

use super::proto::{self, ProtoKind};
use super::request::Events;

/// What the request accepts: protobuf first, JSON where the server has
/// no protobuf for the kind.
const ACCEPT_PROTOBUF: &str = "application/vnd.kubernetes.protobuf, application/json";

/// The media type of a protobuf answer (a watch's carries `;stream=watch`).
const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

/// The largest protobuf frame read: far past any object etcd stores
/// (1.5 MiB by default), small enough that a corrupt length cannot make
/// the exporter allocate gigabytes. A longer one breaks the stream (the
/// watch restarts), it is never buffered.
const MAX_FRAME: usize = 64 << 20;

/// The longest JSON watch line read. kube-apiserver's JSON escapes `<`,
/// `>`, `&` and control characters as six bytes, so an object at etcd's
/// default limit (1.5 MiB) takes at most 9 MiB as a line; past this, a
/// line is not read (it is skipped to its end, never buffered whole) and
/// the watch goes on with the next one.
pub(super) const MAX_LINE: usize = 16 << 20;

/// The most of an error answer's body read to find its `Status`.
const MAX_ERROR_BODY: usize = 1 << 20;

/// Whether watches of built-in kinds ask for protobuf
/// (`--api-protobuf`; on by default).
#[derive(Debug)]
pub struct Wire {
    json_only: AtomicBool,
}

impl Default for Wire {
    fn default() -> Self {
        Wire {
            json_only: AtomicBool::new(false),
        }
    }
}

impl Wire {
    /// Every watch asks for JSON (`--api-protobuf=false`).
    pub fn json_only(&self) {
        self.json_only.store(true, Ordering::Relaxed);
    }

    /// True when watches of built-in kinds ask for protobuf.
    pub fn protobuf(&self) -> bool {
        !self.json_only.load(Ordering::Relaxed)
    }
}

/// Opens a watch of `api`: asking for protobuf, decoded with `kind`, when
/// there is one, else for JSON. Resolves when the server has answered the
/// request (its headers), like [`Api::watch`].
pub(super) async fn open_watch<K>(
    api: &Api<K>,
    params: &WatchParams,
    rv: &str,
    kind: Option<&'static ProtoKind<K>>,
) -> Result<Events<K>, kube::Error>
where
    K: kube::Resource + Clone + DeserializeOwned + Send + 'static,
{
    let mut req = kube::core::Request::new(api.resource_url())
        .watch(params, rv)
        .map_err(kube::Error::BuildRequest)?;
    let headers = req.headers_mut();
    let accept = if kind.is_some() {
        ACCEPT_PROTOBUF
    } else {
        "application/json"
    };
    headers.insert(ACCEPT, HeaderValue::from_static(accept));
    // As kube-rs does for watches: a gzipped stream is one member per
    // event, which its decompression layer does not read.
    headers.insert(ACCEPT_ENCODING, HeaderValue::from_static("identity"));
    let client = api.clone().into_client();
    let res = client.send(req.map(kube::client::Body::from)).await?;
    let protobuf = res
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with(PROTOBUF));
    if !res.status().is_success() {
        let code = res.status().as_u16();
        let body = http_body_util::Limited::new(res.into_body(), MAX_ERROR_BODY)
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        return Err(kube::Error::Api(Box::new(refusal(code, protobuf, &body))));
    }
    let body = res.into_body().into_data_stream().map_err(body_error);
    let reader = StreamReader::new(body);
    Ok(match kind.filter(|_| protobuf) {
        Some(kind) => proto_frames(reader, kind).boxed(),
        None => json_lines(reader, MAX_LINE).boxed(),
    })
}

/// One protobuf frame as a watch event; an unreadable one is a decode
/// error of that event, as an unreadable JSON line is.
fn proto_event<K>(frame: &[u8], kind: &ProtoKind<K>) -> Result<WatchEvent<K>, kube::Error> {
    proto::watch_event(frame, kind).map_err(|e| {
        kube::Error::SerdeError(serde::de::Error::custom(format!(
            "protobuf watch event: {e}"
        )))
    })
}

/// The `Status` of a refused request: decoded in the answer's encoding,
/// else the HTTP code with the body as its message (a proxy's page).
pub(super) fn refusal(code: u16, protobuf: bool, body: &[u8]) -> Status {
    let decoded = if protobuf {
        proto::unknown(body)
            .ok()
            .filter(|u| u.kind == "Status")
            .and_then(|u| proto::status(u.raw).ok())
    } else {
        serde_json::from_slice::<Status>(body).ok()
    };
    let mut status = decoded.unwrap_or_else(|| Status {
        message: String::from_utf8_lossy(&body[..body.len().min(512)]).into_owned(),
        ..Status::default()
    });
    // The HTTP code is the answer's own; a Status without one keeps it.
    if status.code == 0 {
        status.code = code;
    }
    status
}

/// A body error as an IO error; a body cut short (a TLS close, a chunked
/// body ended early) as `UnexpectedEof`, which ends the stream the way
/// kube-rs ends a watch so: a watch ended, to be resumed, not a failure.
fn body_error(e: impl std::error::Error + Send + Sync + 'static) -> std::io::Error {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&e);
    let mut eof = e.to_string().contains("unexpected EOF during chunk");
    // HTTP and TLS nest a few errors; a `source` chain that cycles must
    // not stall the watch.
    for _ in 0..16 {
        let Some(s) = source else { break };
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            eof |= io.kind() == std::io::ErrorKind::UnexpectedEof;
        }
        source = s.source();
    }
    if eof {
        std::io::Error::new(std::io::ErrorKind::UnexpectedEof, e)
    } else {
        std::io::Error::other(e)
    }
}

/// Ends the stream at an IO error that means "ended" (EOF, the client's
/// own timeout), as kube-rs does; other IO errors are
/// [`kube::Error::ReadEvents`].
fn ended_quietly<K, E>(
    frames: impl Stream<Item = Result<Result<WatchEvent<K>, kube::Error>, E>> + Send + 'static,
) -> impl Stream<Item = Result<WatchEvent<K>, kube::Error>> + Send + 'static
where
    K: Send + 'static,
    E: Into<std::io::Error>,
{
    frames
        .map(|item| match item {
            Ok(event) => Some(event),
            Err(e) => {
                let e: std::io::Error = e.into();
                match e.kind() {
                    std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::TimedOut => None,
                    _ => Some(Err(kube::Error::ReadEvents(e))),
                }
            }
        })
        .take_while(|item| std::future::ready(item.is_some()))
        .filter_map(std::future::ready)
}

/// A watch line, or the news that one was too long to read.
enum Line {
    Text(String),
    TooLong,
}

/// `LinesCodec` with a length limit that skips a line past it instead of
/// failing the stream: the codec reports such a line once and then drops
/// its bytes up to the next newline, and this turns that report into a
/// [`Line::TooLong`] item (a codec error would end the `FramedRead`).
struct CappedLines(LinesCodec);

impl CappedLines {
    fn line(r: Result<Option<String>, LinesCodecError>) -> Result<Option<Line>, LinesCodecError> {
        match r {
            Ok(line) => Ok(line.map(Line::Text)),
            Err(LinesCodecError::MaxLineLengthExceeded) => Ok(Some(Line::TooLong)),
            Err(e) => Err(e),
        }
    }
}

impl Decoder for CappedLines {
    type Item = Line;
    type Error = LinesCodecError;

    fn decode(&mut self, buf: &mut bytes::BytesMut) -> Result<Option<Line>, LinesCodecError> {
        Self::line(self.0.decode(buf))
    }

    fn decode_eof(&mut self, buf: &mut bytes::BytesMut) -> Result<Option<Line>, LinesCodecError> {
        Self::line(self.0.decode_eof(buf))
    }
}

/// JSON lines, decoded as kube-rs decodes a watch: a line that is not an
/// event but a `Status` is that error; an incomplete last line (the body
/// cut short) is dropped. A line longer than `max` is
/// [`kube::Error::LinesCodecMaxLineLengthExceeded`], and the lines after
/// it are read.
fn json_lines<K, R>(
    reader: R,
    max: usize,
) -> impl Stream<Item = Result<WatchEvent<K>, kube::Error>> + Send + 'static
where
    K: DeserializeOwned + Send + 'static,
    R: tokio::io::AsyncRead + Send + 'static,
{
    let codec = CappedLines(LinesCodec::new_with_max_length(max));
    let events = FramedRead::new(reader, codec)
        .map(|line| match line {
            Ok(Line::Text(line)) => Ok(match serde_json::from_str::<WatchEvent<K>>(&line) {
                Ok(event) => Some(Ok(event)),
                Err(e) if e.is_eof() => None,
                Err(e) => Some(match serde_json::from_str::<Status>(&line) {
                    Ok(status) => Err(kube::Error::Api(Box::new(status))),
                    Err(_) => Err(kube::Error::SerdeError(e)),
                }),
            }),
            Ok(Line::TooLong) => Ok(Some(Err(kube::Error::LinesCodecMaxLineLengthExceeded))),
            Err(LinesCodecError::Io(io)) => Err(io),
            // Reported as `Line::TooLong` by the codec above.
            Err(LinesCodecError::MaxLineLengthExceeded) => Ok(None),
        })
        .filter_map(|item| std::future::ready(item.transpose()));
    ended_quietly(events)
}

/// Protobuf frames, each a watch event read with `kind`.
fn proto_frames<K, R>(
    reader: R,
    kind: &'static ProtoKind<K>,
) -> impl Stream<Item = Result<WatchEvent<K>, kube::Error>> + Send + 'static
where
    K: Send + 'static,
    R: tokio::io::AsyncRead + Send + 'static,
{
    let codec = LengthDelimitedCodec::builder()
        .length_field_length(4)
        .big_endian()
        .max_frame_length(MAX_FRAME)
        .new_codec();
    ended_quietly(
        FramedRead::new(reader, codec).map(move |f| f.map(|frame| proto_event(&frame, kind))),
    )
}

#[cfg(test)]
mod tests;
