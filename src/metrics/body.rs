//! A scrape's answer and how it is sent: the [`Body`], chunks shared with
//! the store's snapshot, plain or gzip.

use std::sync::Arc;

use bytes::Bytes;

use super::families::{headers, shown, KEY_FAMILIES};
use super::gzip::Piece;
use super::store::{Snapshot, BUCKETS};
use super::Format;

/// A scrape's answer: chunks of shared bytes (a plain body: per family its
/// header and every bucket's lines; a gzip body: one gzip member).
/// Cloning it shares the bytes.
#[derive(Clone, Debug)]
pub struct Body {
    chunks: Arc<Vec<Chunk>>,
}

/// Bytes as they are, or compressed lines a plain body inflates as it is
/// sent (a bucket kept compressed only).
#[derive(Clone, Debug)]
enum Chunk {
    Plain(Bytes),
    Deflated(Piece),
}

impl Chunk {
    fn len(&self) -> usize {
        match self {
            Chunk::Plain(b) => b.len(),
            Chunk::Deflated(p) => p.plain_len(),
        }
    }
}

impl Body {
    /// The plain body of `snapshot` in `format`, ending with `health`.
    pub(super) fn plain(snapshot: &Snapshot, format: Format, health: Bytes) -> Body {
        let mut chunks = Vec::with_capacity(KEY_FAMILIES.len() * (BUCKETS + 1) + 2);
        for (f, (header, _)) in headers(format).iter().enumerate() {
            if shown(f, snapshot.exposition) {
                chunks.push(Chunk::Plain(header.clone()));
                for bucket in &snapshot.buckets {
                    chunks.push(match (&bucket.lines, bucket.gzip.get(f)) {
                        (Some(lines), _) => Chunk::Plain(lines[f].clone()),
                        (None, Some(piece)) => Chunk::Deflated(piece.clone()),
                        (None, None) => Chunk::Plain(Bytes::new()),
                    });
                }
            }
        }
        chunks.push(Chunk::Plain(snapshot.overview.clone()));
        chunks.push(Chunk::Plain(health));
        chunks.retain(|c| c.len() > 0);
        Body {
            chunks: Arc::new(chunks),
        }
    }

    /// The same body gzip-compressed, from the snapshot's compressed
    /// buckets.
    pub(super) fn gzip(snapshot: &Snapshot, format: Format, health: &[u8]) -> Body {
        let head = &snapshot.gzip_heads[format.slot()];
        let chunks = head.member(health).into_iter().map(Chunk::Plain).collect();
        Body {
            chunks: Arc::new(chunks),
        }
    }

    /// The bytes in order, as the server sends them: shared chunks.
    pub fn frames(&self) -> Frames {
        Frames {
            chunks: self.chunks.clone(),
            next: 0,
        }
    }

    /// The length in bytes.
    pub fn len(&self) -> usize {
        self.chunks.iter().map(Chunk::len).sum()
    }

    /// No bytes at all.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The body in one piece (a copy; for tests and small bodies).
    pub fn to_bytes(&self) -> Bytes {
        Bytes::from(self.frames().collect::<Vec<_>>().concat())
    }
}

/// The bytes of a [`Body`] in order; a compressed bucket is inflated when
/// its turn comes, so a plain scrape holds one bucket's family at a time.
pub struct Frames {
    chunks: Arc<Vec<Chunk>>,
    next: usize,
}

impl Iterator for Frames {
    type Item = Bytes;

    fn next(&mut self) -> Option<Bytes> {
        let chunk = self.chunks.get(self.next)?;
        self.next += 1;
        match chunk {
            Chunk::Plain(b) => Some(b.clone()),
            Chunk::Deflated(p) => match p.inflate() {
                Ok(b) => Some(b),
                Err(e) => {
                    // Our own output, so a bug: the short body fails the
                    // scrape's Content-Length check rather than lying.
                    tracing::error!(error = %e, "a compressed bucket did not inflate");
                    self.next = self.chunks.len();
                    None
                }
            },
        }
    }
}
