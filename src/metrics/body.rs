//! A scrape's answer and how it is sent: the [`Body`], chunks shared with
//! the store's snapshot, plain or gzip.

use std::sync::Arc;

use bytes::Bytes;

use super::gzip::Chunk;
use super::store::Snapshot;
use super::Format;

/// A scrape's answer: the chunks of a snapshot in one format, shared by
/// every scrape of it (a plain body: per family its header and every
/// bucket's lines, then the overview; a gzip body: the member's head),
/// and the few chunks made for this scrape (the health part; for gzip,
/// also the trailer). Cloning it shares the bytes.
#[derive(Clone, Debug)]
pub struct Body {
    shared: Arc<Vec<Chunk>>,
    shared_len: usize,
    tail: Arc<Vec<Bytes>>,
}

impl Body {
    /// The plain body of `snapshot` in `format`, ending with `health`.
    pub(super) fn plain(snapshot: &Snapshot, format: Format, health: Bytes) -> Body {
        let (shared, shared_len) = snapshot.plain(format);
        Body {
            shared,
            shared_len,
            tail: Arc::new(vec![health]),
        }
    }

    /// The same body gzip-compressed, from the snapshot's compressed
    /// buckets.
    pub(super) fn gzip(snapshot: &Snapshot, format: Format, health: &[u8]) -> Body {
        let (shared, shared_len, tail) = snapshot.gzip_heads[format.slot()].member(health);
        Body {
            shared,
            shared_len,
            tail: Arc::new(tail),
        }
    }

    /// The bytes in order, as the server sends them: shared chunks.
    pub fn frames(&self) -> Frames {
        Frames {
            body: self.clone(),
            next: 0,
        }
    }

    /// The length in bytes.
    pub fn len(&self) -> usize {
        self.shared_len + self.tail.iter().map(Bytes::len).sum::<usize>()
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
    body: Body,
    next: usize,
}

impl Iterator for Frames {
    type Item = Bytes;

    fn next(&mut self) -> Option<Bytes> {
        let shared = self.body.shared.len();
        let i = self.next;
        self.next = self.next.saturating_add(1);
        let chunk = match self.body.shared.get(i) {
            Some(chunk) => chunk,
            None => return self.body.tail.get(i.checked_sub(shared)?).cloned(),
        };
        match chunk {
            Chunk::Plain(b) => Some(b.clone()),
            Chunk::Deflated(p) => match p.inflate() {
                Ok(b) => Some(b),
                Err(e) => {
                    // Our own output, so a bug: the short body fails the
                    // scrape's Content-Length check rather than lying.
                    tracing::error!(error = %e, "a compressed bucket did not inflate");
                    self.next = usize::MAX;
                    None
                }
            },
        }
    }
}
