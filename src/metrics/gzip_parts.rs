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

use bytes::Bytes;
use crc32fast::Hasher;
use flate2::{Compress, Compression, FlushCompress, Status};

/// A compressed part and the CRC-32 of its plain bytes.
#[derive(Clone, Debug)]
pub(crate) struct Part {
    pub(crate) deflate: Bytes,
    crc: Hasher,
    len: u64,
}

/// Compresses `plain` as one part; `last` finishes the DEFLATE stream.
pub(crate) fn part(plain: &[u8], last: bool) -> std::io::Result<Part> {
    let mut c = Compress::new(Compression::fast(), false);
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

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
