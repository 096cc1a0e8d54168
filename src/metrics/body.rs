//! A scrape's answer and how it is sent: the content coding negotiated
//! from `Accept-Encoding` ([`AcceptEncoding`]), and the [`Body`], kept as
//! chunks of shared bytes or, for a large plain body, as DEFLATE parts
//! inflated step by step while it is sent ([`Frames`]).
//!
//! Apart from [`super::cache`], which decides when bodies are rendered and
//! published: what a body holds and how its bytes come out does not depend
//! on when or by which pass it was rendered.

use std::sync::Arc;

use bytes::Bytes;

use super::gzip_parts;

/// The content coding of a scrape's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AcceptEncoding {
    /// The body as rendered.
    Identity,
    /// The body gzip-compressed (`Content-Encoding: gzip`).
    Gzip,
}

impl AcceptEncoding {
    /// Gzip when the `Accept-Encoding` header lists `gzip` (or `*`) with a
    /// non-zero quality, as Prometheus always does; identity otherwise.
    pub fn negotiate(header: Option<&str>) -> AcceptEncoding {
        let Some(header) = header else {
            return AcceptEncoding::Identity;
        };
        let gzip = header.split(',').any(|item| {
            let mut parts = item.split(';');
            let coding = parts.next().unwrap_or("").trim();
            if !(coding.eq_ignore_ascii_case("gzip") || coding == "*") {
                return false;
            }
            // q=0 means "not acceptable".
            !parts.any(|p| {
                p.trim()
                    .strip_prefix("q=")
                    .and_then(|q| q.trim().parse::<f32>().ok())
                    .is_some_and(|q| q <= 0.0)
            })
        });
        if gzip {
            AcceptEncoding::Gzip
        } else {
            AcceptEncoding::Identity
        }
    }
}

/// A scrape's answer: the body as chunks that share the cached bytes, so
/// concurrent scrapers do not each hold a copy. With gzip, the chunks make
/// one gzip file (a single member). A plain body of a large index part is
/// kept compressed only (past `buckets::PLAIN_KEPT_UP_TO`) and
/// decompressed step by step as it is sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Body {
    repr: Arc<Repr>,
}

#[derive(Debug, PartialEq, Eq)]
enum Repr {
    /// The bytes as sent.
    Chunks(Vec<Bytes>),
    /// Raw DEFLATE parts of the plain bytes, and their plain length.
    Deflated(Arc<Vec<Bytes>>, usize),
}

impl Body {
    /// A body sent as it is kept: shared chunks, in order.
    pub(super) fn chunks(chunks: Vec<Bytes>) -> Body {
        Body {
            repr: Arc::new(Repr::Chunks(chunks)),
        }
    }

    /// A body kept as raw DEFLATE parts of `len` plain bytes, inflated
    /// as it is sent.
    pub(super) fn deflated(parts: Vec<Bytes>, len: usize) -> Body {
        Body {
            repr: Arc::new(Repr::Deflated(Arc::new(parts), len)),
        }
    }

    /// The bytes in order, as the server sends them: shared chunks, or
    /// plain steps of at most 256 KiB decompressed one at a time.
    pub fn frames(&self) -> Frames {
        match &*self.repr {
            Repr::Chunks(c) => Frames::Chunks(c.clone().into_iter()),
            Repr::Deflated(parts, _) => Frames::Inflate(gzip_parts::Inflate::new(parts.clone())),
        }
    }

    /// The length in bytes.
    pub fn len(&self) -> usize {
        match &*self.repr {
            Repr::Chunks(c) => c.iter().map(Bytes::len).sum(),
            Repr::Deflated(_, len) => *len,
        }
    }

    /// No bytes at all.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the body is kept compressed and decompressed per scrape.
    pub fn is_deflated(&self) -> bool {
        matches!(&*self.repr, Repr::Deflated(..))
    }

    /// The body in one piece (a copy; for tests and small bodies).
    pub fn to_bytes(&self) -> Bytes {
        let mut out = Vec::with_capacity(self.len());
        for c in self.frames() {
            out.extend_from_slice(&c);
        }
        Bytes::from(out)
    }
}

/// The bytes of a [`Body`] in order.
pub enum Frames {
    /// Shared chunks.
    Chunks(std::vec::IntoIter<Bytes>),
    /// Plain steps decompressed one at a time.
    Inflate(gzip_parts::Inflate),
}

impl Iterator for Frames {
    type Item = Bytes;

    fn next(&mut self) -> Option<Bytes> {
        match self {
            Frames::Chunks(c) => c.next(),
            Frames::Inflate(i) => i.next(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_encoding_is_negotiated() {
        use AcceptEncoding::*;
        for (header, want) in [
            (None, Identity),
            (Some(""), Identity),
            (Some("gzip"), Gzip),
            // What Prometheus sends.
            (Some("gzip"), Gzip),
            (Some("deflate, GZip;q=0.5"), Gzip),
            (Some("br, *"), Gzip),
            (Some("gzip;q=0"), Identity),
            (Some("gzip; q=0.0, identity"), Identity),
            (Some("identity"), Identity),
            (Some("x-gzip-nope"), Identity),
        ] {
            assert_eq!(AcceptEncoding::negotiate(header), want, "{header:?}");
        }
    }
}
