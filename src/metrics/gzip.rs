//! One gzip member from pieces compressed at different times.
//!
//! Each bucket's lines of a family are compressed when the bucket changes,
//! as raw DEFLATE ended by a sync flush, so the piece ends on a byte
//! boundary and refers to nothing before it. The small pieces a scrape
//! adds (family headers, the overview, the health part) go in as stored
//! blocks, which cost a copy. One gzip header, the pieces in order, the
//! last piece stored as the final block and one trailer (the CRC-32 of the whole, combined
//! from the pieces') make a single-member gzip file (RFC 1951, 1952).

use bytes::Bytes;
use crc32fast::Hasher;
use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress};

/// The DEFLATE level of the compressed pieces. Each starts with an empty
/// window; level 4 keeps the body within a few percent of level 6 for
/// less CPU (docs/decisions/exposition-by-key.md).
const LEVEL: u32 = 4;

/// Part of a DEFLATE stream and the CRC-32 and length of its plain bytes.
#[derive(Clone, Debug)]
pub(super) struct Piece {
    deflate: Bytes,
    crc: Hasher,
    len: u64,
}

impl Piece {
    /// `plain` compressed, ended by a sync flush.
    pub(super) fn compressed(plain: &[u8]) -> std::io::Result<Piece> {
        // zlib's bound for one call: the input, 5 bytes per 16 KiB stored
        // block at worst, and the flush marker.
        let mut out = Vec::with_capacity(plain.len() + plain.len() / 16_000 * 5 + 64);
        let mut c = Compress::new(Compression::new(LEVEL), false);
        c.compress_vec(plain, &mut out, FlushCompress::Sync)
            .map_err(std::io::Error::other)?;
        if c.total_in() != plain.len() as u64 || out.len() == out.capacity() {
            return Err(std::io::Error::other(
                "deflate did not take the whole input",
            ));
        }
        // An exact copy: the bound's spare room is not kept for the life of
        // the bucket.
        Ok(Piece::new(Bytes::copy_from_slice(&out), plain))
    }

    /// `plain` as stored (uncompressed) blocks; `last` ends the stream.
    pub(super) fn stored(plain: &[u8], last: bool) -> Piece {
        let mut out = Vec::with_capacity(plain.len() + plain.len() / 65_535 * 5 + 5);
        let mut blocks = plain.chunks(usize::from(u16::MAX)).peekable();
        if blocks.peek().is_none() && last {
            out.extend_from_slice(&[1, 0, 0, 0xff, 0xff]);
        }
        while let Some(block) = blocks.next() {
            let final_block = last && blocks.peek().is_none();
            // The block header (BFINAL, BTYPE 00) fills a byte: every piece
            // ends on a byte boundary.
            out.push(u8::from(final_block));
            let len = block.len() as u16;
            out.extend_from_slice(&len.to_le_bytes());
            out.extend_from_slice(&(!len).to_le_bytes());
            out.extend_from_slice(block);
        }
        Piece::new(Bytes::from(out), plain)
    }

    /// The plain bytes back. A piece ends on a sync flush, so it inflates
    /// on its own.
    pub(super) fn inflate(&self) -> std::io::Result<Bytes> {
        let mut out = Vec::with_capacity(self.plain_len());
        Decompress::new(false)
            .decompress_vec(&self.deflate, &mut out, FlushDecompress::Sync)
            .map_err(std::io::Error::other)?;
        if out.len() != self.plain_len() {
            return Err(std::io::Error::other(
                "a piece inflated to the wrong length",
            ));
        }
        Ok(Bytes::from(out))
    }

    /// The length of the plain bytes.
    pub(super) fn plain_len(&self) -> usize {
        usize::try_from(self.len).unwrap_or(usize::MAX)
    }

    fn new(deflate: Bytes, plain: &[u8]) -> Piece {
        let mut crc = Hasher::new();
        crc.update(plain);
        Piece {
            deflate,
            crc,
            len: plain.len() as u64,
        }
    }
}

/// The gzip header: no name, no time, unknown OS.
const HEADER: [u8; 10] = [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff];

/// The pieces of a gzip member before its last: their chunks, and the
/// CRC-32 and length of their plain bytes, combined once (a combine costs
/// microseconds; a body has hundreds of pieces).
#[derive(Clone, Debug)]
pub(super) struct Head {
    chunks: Vec<Bytes>,
    crc: Hasher,
    len: u64,
}

impl Head {
    /// The head made of `pieces` in order; empty pieces are left out.
    pub(super) fn new<'a>(pieces: impl IntoIterator<Item = &'a Piece>) -> Head {
        let mut head = Head {
            chunks: vec![Bytes::from_static(&HEADER)],
            crc: Hasher::new(),
            len: 0,
        };
        for p in pieces.into_iter().filter(|p| p.len > 0) {
            head.crc.combine(&p.crc);
            head.len += p.len;
            head.chunks.push(p.deflate.clone());
        }
        head
    }

    /// The chunks of the whole member: the head, then `last` stored as
    /// the final block, then the trailer.
    pub(super) fn member(&self, last: &[u8]) -> Vec<Bytes> {
        let mut chunks = Vec::with_capacity(self.chunks.len() + 2);
        chunks.extend(self.chunks.iter().cloned());
        chunks.push(Piece::stored(last, true).deflate);
        let mut crc = self.crc.clone();
        crc.update(last);
        let len = self.len + last.len() as u64;
        let mut trailer = crc.finalize().to_le_bytes().to_vec();
        // ISIZE is the length modulo 2^32.
        trailer.extend_from_slice(&((len & 0xffff_ffff) as u32).to_le_bytes());
        chunks.push(Bytes::from(trailer));
        chunks
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read as _;

    #[test]
    fn pieces_of_both_kinds_make_one_member() {
        // Past 64 KiB, so the stored piece takes several blocks.
        let big: Vec<u8> = (0..20_000u32)
            .flat_map(|i| format!("x{{n=\"{}\"}} {i}\n", i % 97).into_bytes())
            .collect();
        let deflated = Piece::compressed(&big).expect("compresses");
        assert!(deflated.deflate.len() * 3 < big.len(), "it compresses");
        assert_eq!(deflated.inflate().expect("inflates"), big);
        for last in [&big[..], b""] {
            let pieces = [
                Piece::compressed(b"").expect("compresses"),
                Piece::stored(&big, false),
                deflated.clone(),
            ];
            let gz = Head::new(&pieces).member(last).concat();
            let mut out = Vec::new();
            let read = flate2::read::GzDecoder::new(&gz[..]).read_to_end(&mut out);
            assert!(read.is_ok(), "{read:?}");
            assert_eq!(out, [&big[..], &big, last].concat());
        }
    }
}
