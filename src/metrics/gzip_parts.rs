//! One gzip stream from parts compressed at different times.
//!
//! The text around the timed blocks is compressed once per render; the
//! timed blocks and the health part once per assembly. Each part is a raw
//! DEFLATE stream of its own, ended by a sync flush (so it ends on a byte
//! boundary in a non-final block) or, for the last part, finished. Parts
//! compressed independently never refer back into one another, so their
//! concatenation is one valid DEFLATE stream; one gzip header and one
//! trailer (the CRC-32 of the whole, combined from the parts' CRCs, and
//! its length) make it a single-member gzip file that every gzip reader
//! reads, not only those that accept several members.

use std::sync::Arc;

use bytes::Bytes;
use crc32fast::Hasher;
use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};

/// A compressed part and the CRC-32 of its plain bytes.
#[derive(Clone, Debug)]
pub(crate) struct Part {
    pub(crate) deflate: Bytes,
    crc: Hasher,
    len: u64,
}

impl Part {
    /// Length of the plain bytes it holds.
    pub(crate) fn plain_len(&self) -> usize {
        usize::try_from(self.len).unwrap_or(usize::MAX)
    }
}

/// The DEFLATE level of every part. Parts are compressed apart (a change
/// compresses only its buckets again), each starting with an empty
/// window, so level 1 made the body 1.6x the same text compressed whole at
/// level 6 (359 against 222 kB at 10k objects); level 4 makes it 1.08x
/// (240 kB), and level 6 no better than 1.07x for more CPU
/// (`cache::tests::the_gzip_body_is_close_to_the_whole_body_compressed_at_once`).
const LEVEL: u32 = 4;

/// Compresses `plain` as one part; `last` finishes the DEFLATE stream.
pub(crate) fn part(plain: &[u8], last: bool) -> std::io::Result<Part> {
    let mut c = Compress::new(Compression::new(LEVEL), false);
    let mut out = Vec::with_capacity(plain.len() / 8 + 64);
    let flush = if last {
        FlushCompress::Finish
    } else {
        FlushCompress::Sync
    };
    loop {
        let consumed = usize::try_from(c.total_in()).unwrap_or(usize::MAX);
        let input = plain.get(consumed..).unwrap_or_default();
        if out.capacity() - out.len() < 64 {
            out.reserve(out.capacity().max(4096));
        }
        let status = c
            .compress_vec(input, &mut out, flush)
            .map_err(std::io::Error::other)?;
        let all_in = usize::try_from(c.total_in()).unwrap_or(usize::MAX) >= plain.len();
        // Done when all input is in and the flush left room to spare (a
        // full buffer may hide more output).
        let done = match status {
            Status::StreamEnd => true,
            _ => all_in && !last && out.len() < out.capacity(),
        };
        if done {
            break;
        }
    }
    let mut crc = Hasher::new();
    crc.update(plain);
    Ok(Part {
        deflate: Bytes::from(out),
        crc,
        len: plain.len() as u64,
    })
}

/// The gzip header: no name, no time, unknown OS (RFC 1952).
const HEADER: [u8; 10] = [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff];

/// The chunks of one gzip file made of `parts` in order, the last of which
/// must have been compressed with `last`.
pub(crate) fn stream(parts: &[&Part]) -> Vec<Bytes> {
    let mut crc = Hasher::new();
    let mut len = 0u64;
    let mut chunks = Vec::with_capacity(parts.len() + 2);
    chunks.push(Bytes::from_static(&HEADER));
    for p in parts {
        crc.combine(&p.crc);
        len += p.len;
        chunks.push(p.deflate.clone());
    }
    let mut trailer = Vec::with_capacity(8);
    trailer.extend_from_slice(&crc.finalize().to_le_bytes());
    // ISIZE is the length modulo 2^32.
    trailer.extend_from_slice(&((len & 0xffff_ffff) as u32).to_le_bytes());
    chunks.push(Bytes::from(trailer));
    chunks
}

/// Most plain bytes one step of [`Inflate`] yields: what a plain scrape of
/// a body kept compressed holds at a time.
pub(crate) const INFLATE_STEP: usize = 256 * 1024;

/// The plain bytes of parts that make one DEFLATE stream, decompressed
/// step by step as they are sent, so a plain scrape holds one step, not
/// the body. Ends at the stream's end, or early at a corrupt stream (the
/// parts are this process's own output, so that is a bug, and the short
/// body fails the scrape's Content-Length check rather than lying).
pub struct Inflate {
    parts: Arc<Vec<Bytes>>,
    part: usize,
    offset: usize,
    d: Decompress,
    done: bool,
}

impl Inflate {
    /// Plain bytes of `parts` (raw DEFLATE, the last one finished).
    pub(crate) fn new(parts: Arc<Vec<Bytes>>) -> Inflate {
        Inflate {
            parts,
            part: 0,
            offset: 0,
            d: Decompress::new(false),
            done: false,
        }
    }
}

impl Iterator for Inflate {
    type Item = Bytes;

    fn next(&mut self) -> Option<Bytes> {
        let mut out = Vec::with_capacity(INFLATE_STEP);
        while !self.done && out.len() < INFLATE_STEP {
            let Some(part) = self.parts.get(self.part) else {
                self.done = true;
                break;
            };
            let input = part.get(self.offset..).unwrap_or_default();
            let (before_in, before_out) = (self.d.total_in(), self.d.total_out());
            let status = self
                .d
                .decompress_vec(input, &mut out, FlushDecompress::None);
            let used = usize::try_from(self.d.total_in() - before_in).unwrap_or(usize::MAX);
            let made = self.d.total_out() - before_out;
            self.offset = self.offset.saturating_add(used);
            match status {
                Ok(Status::StreamEnd) | Err(_) => self.done = true,
                Ok(_) if self.offset >= part.len() => {
                    self.part += 1;
                    self.offset = 0;
                }
                // No progress with input left and room in `out` would
                // loop forever: a corrupt stream.
                Ok(_) if used == 0 && made == 0 && out.len() < out.capacity() => self.done = true,
                Ok(_) => {}
            }
        }
        (!out.is_empty()).then(|| Bytes::from(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn parts_inflate_step_by_step_to_their_plain_bytes() {
        let a: Vec<u8> = (0..300_000u32)
            .flat_map(|i| format!("sample{{n=\"{i}\"}} 1\n").into_bytes())
            .collect();
        let parts = [
            part(&a[..5], false).expect("tiny"),
            part(b"", false).expect("empty"),
            part(&a, false).expect("big"),
            part(b"# EOF\n", true).expect("last"),
        ];
        let deflate: Vec<Bytes> = parts.iter().map(|p| p.deflate.clone()).collect();
        let steps: Vec<Bytes> = Inflate::new(Arc::new(deflate)).collect();
        assert!(steps.len() > 2, "a large body comes in several steps");
        assert!(steps.iter().all(|s| s.len() <= INFLATE_STEP));
        let got: Vec<u8> = steps.iter().flat_map(|s| s.iter().copied()).collect();
        let mut want = a[..5].to_vec();
        want.extend_from_slice(&a);
        want.extend_from_slice(b"# EOF\n");
        assert!(got == want, "inflated bytes differ");
    }

    #[test]
    fn parts_make_one_member_any_gzip_reader_reads_whole() {
        let a: Vec<u8> = (0..200_000u32)
            .flat_map(|i| format!("line {i}\n").into_bytes())
            .collect();
        let parts = [
            part(&a, false).expect("a"),
            part(b"", false).expect("empty"),
            part(b"middle\n", false).expect("b"),
            part(&a[..1000], true).expect("c"),
        ];
        let refs: Vec<&Part> = parts.iter().collect();
        let body: Vec<u8> = stream(&refs)
            .iter()
            .flat_map(|b| b.iter().copied())
            .collect();
        // The single-member reader stops after the first member: it must
        // still see everything.
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(&body[..])
            .read_to_end(&mut out)
            .expect("a valid gzip file");
        let mut want = a.clone();
        want.extend_from_slice(b"middle\n");
        want.extend_from_slice(&a[..1000]);
        assert!(out == want, "round trip differs");
    }
}
