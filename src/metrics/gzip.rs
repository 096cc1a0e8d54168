//! One gzip member from pieces compressed at different times.
//!
//! Each bucket's lines of a family are compressed when the bucket changes,
//! as raw DEFLATE ended by a sync flush, so the piece ends on a byte
//! boundary and refers to nothing before it. The small pieces a scrape
//! adds (family headers, the overview, the health part) go in as stored
//! blocks, which cost a copy. One gzip header, the pieces in order, the
//! last piece stored as the final block and one trailer (the CRC-32 of the
//! whole, combined from the pieces') make a single-member gzip file (RFC
//! 1951, 1952).

use std::sync::Arc;

use bytes::Bytes;
use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress};

/// The DEFLATE level of the compressed pieces. Each starts with an empty
/// window; with zlib-rs, level 4 compresses the exposition faster than
/// miniz_oxide did at the same level, and level 2 another half faster for
/// a body 15 % larger (docs/decisions/flat-cost.md).
const LEVEL: u32 = 4;

/// Part of a DEFLATE stream, the CRC-32 and length of its plain bytes, and
/// what appending it does to a CRC before it ([`crc_shift`]).
#[derive(Clone, Debug)]
pub(super) struct Piece {
    deflate: Bytes,
    crc: u32,
    shift: u32,
    len: u64,
}

impl Piece {
    /// `plain` compressed, ended by a sync flush.
    #[cfg(test)]
    pub(super) fn compressed(plain: &[u8]) -> std::io::Result<Piece> {
        Deflater::new().piece(plain)
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
        let len = plain.len() as u64;
        Piece {
            deflate,
            crc: crc32fast::hash(plain),
            shift: crc_shift(len),
            len,
        }
    }
}

/// A DEFLATE compressor kept for many pieces: each piece starts from a
/// reset one, so the compressor's state (hundreds of kilobytes) is
/// allocated once, not once per piece.
#[derive(Debug)]
pub(super) struct Deflater(Compress);

impl Deflater {
    pub(super) fn new() -> Deflater {
        Deflater(Compress::new(Compression::new(LEVEL), false))
    }

    /// `plain` compressed, ended by a sync flush, with nothing before it.
    pub(super) fn piece(&mut self, plain: &[u8]) -> std::io::Result<Piece> {
        let c = &mut self.0;
        c.reset();
        // zlib's bound for one call: the input, 5 bytes per 16 KiB stored
        // block at worst, and the flush marker.
        let mut out = Vec::with_capacity(plain.len() + plain.len() / 16_000 * 5 + 64);
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
}

/// A part of a body: bytes as they are, or compressed lines a plain body
/// inflates as it is sent (a bucket kept compressed only).
#[derive(Clone, Debug)]
pub(super) enum Chunk {
    Plain(Bytes),
    Deflated(Piece),
}

impl Chunk {
    /// The length of the bytes it sends.
    pub(super) fn len(&self) -> usize {
        match self {
            Chunk::Plain(b) => b.len(),
            Chunk::Deflated(p) => p.plain_len(),
        }
    }
}

/// The gzip header: no name, no time, unknown OS.
const HEADER: [u8; 10] = [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff];

/// The pieces of a gzip member before its last: their chunks, shared by
/// every body made from them, and the CRC-32 and length of their plain
/// bytes, combined once.
#[derive(Clone, Debug)]
pub(super) struct Head {
    chunks: Arc<Vec<Chunk>>,
    sent: usize,
    crc: u32,
    len: u64,
}

impl Head {
    /// The head made of `pieces` in order; empty pieces are left out.
    pub(super) fn new<'a>(pieces: impl IntoIterator<Item = &'a Piece>) -> Head {
        let mut chunks = vec![Chunk::Plain(Bytes::from_static(&HEADER))];
        let (mut crc, mut len, mut sent) = (0, 0, HEADER.len());
        for p in pieces.into_iter().filter(|p| p.len > 0) {
            crc = crc_mul(p.shift, crc) ^ p.crc;
            len += p.len;
            sent += p.deflate.len();
            chunks.push(Chunk::Plain(p.deflate.clone()));
        }
        Head {
            chunks: Arc::new(chunks),
            sent,
            crc,
            len,
        }
    }

    /// The whole member: the head's chunks (shared, and how many bytes
    /// they are), then `last` stored as the final block and the trailer.
    pub(super) fn member(&self, last: &[u8]) -> (Arc<Vec<Chunk>>, usize, Vec<Bytes>) {
        let mut crc = crc32fast::Hasher::new_with_initial(self.crc);
        crc.update(last);
        let len = self.len + last.len() as u64;
        let mut trailer = crc.finalize().to_le_bytes().to_vec();
        // ISIZE is the length modulo 2^32.
        trailer.extend_from_slice(&((len & 0xffff_ffff) as u32).to_le_bytes());
        let tail = vec![Piece::stored(last, true).deflate, Bytes::from(trailer)];
        (self.chunks.clone(), self.sent, tail)
    }
}

/// The CRC-32 polynomial, reflected (x^32 implied).
const POLY: u32 = 0xedb8_8320;

/// `a * b` modulo the CRC polynomial, both reflected (zlib's `multmodp`).
fn crc_mul(a: u32, mut b: u32) -> u32 {
    let mut m: u32 = 1 << 31;
    let mut p = 0;
    while m != 0 {
        if a & m != 0 {
            p ^= b;
        }
        m >>= 1;
        b = if b & 1 != 0 { (b >> 1) ^ POLY } else { b >> 1 };
    }
    p
}

/// x^(8 * len) modulo the CRC polynomial: `crc(A ++ B)` is
/// `crc_mul(crc_shift(len(B)), crc(A)) ^ crc(B)`. Worked out once per
/// piece, so that a head combines a piece in one multiplication (zlib's
/// `x2nmodp`, which `crc32_combine` calls every time).
fn crc_shift(len: u64) -> u32 {
    // x^(2^k) for k = 3..67 (a length in bytes is 2^3 bits).
    let mut square: u32 = 1 << 30; // x^1
    for _ in 0..3 {
        square = crc_mul(square, square);
    }
    let mut p: u32 = 1 << 31; // x^0
    let mut n = len;
    while n != 0 {
        if n & 1 != 0 {
            p = crc_mul(square, p);
        }
        square = crc_mul(square, square);
        n >>= 1;
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read as _;

    /// The bytes of the member `head` makes with `last`.
    fn member_bytes(head: &Head, last: &[u8]) -> Vec<u8> {
        let (shared, sent, tail) = head.member(last);
        let mut out = Vec::new();
        for chunk in shared.iter() {
            match chunk {
                Chunk::Plain(b) => out.extend_from_slice(b),
                Chunk::Deflated(_) => panic!("a head sends its pieces as they are"),
            }
        }
        assert_eq!(out.len(), sent, "the head's length");
        tail.iter().for_each(|b| out.extend_from_slice(b));
        out
    }

    #[test]
    fn a_head_combines_the_crc_of_its_pieces() {
        let data: Vec<u8> = (0..300_000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        let cuts = [
            (0, 0),
            (0, 1),
            (1, 1),
            (7, 70_000),
            (65_535, 65_536),
            (100_000, 300_000),
        ];
        for (a, b) in cuts {
            let parts = [&data[..a], &data[a..b], &data[b..]];
            let pieces: Vec<Piece> = parts.iter().map(|p| Piece::stored(p, false)).collect();
            let head = Head::new(&pieces);
            assert_eq!(head.crc, crc32fast::hash(&data), "cut at {a} and {b}");
            assert_eq!(head.len, data.len() as u64);
        }
    }

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
            let gz = member_bytes(&Head::new(&pieces), last);
            let mut out = Vec::new();
            let read = flate2::read::GzDecoder::new(&gz[..]).read_to_end(&mut out);
            assert!(read.is_ok(), "{read:?}");
            assert_eq!(out, [&big[..], &big, last].concat());
        }
    }
}
