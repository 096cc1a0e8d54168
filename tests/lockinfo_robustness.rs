//! lock-info is untrusted: mutated and random inputs never panic, errors
//! never echo the input, and a parse is a pure function of its bytes.

use captf_lock_exporter::core::lockinfo::{holder_host, parse_lock_info, parse_lock_info_bytes};

const SEED_DOC: &[u8] = br#"{"ID":"3b1c2f8e-1a2b-4c3d-8e9f-0a1b2c3d4e5f","Operation":"OperationTypeApply","Info":"","Who":"@captf-m-web-apply-a1-abc123-x7k2p","Version":"1.9.0","Created":"2026-09-26T15:53:38.315668626Z","Path":""}"#;

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

const INTERESTING: &[&[u8]] = &[
    b"{",
    b"}",
    b"[",
    b"]",
    b"\"",
    b"\\",
    b"\\u",
    b"\\ud800",
    b"\\udc00",
    b"null",
    b"1e999",
    b"-0",
    b"@",
    b"\xff",
    b"\xc3",
    b"\"Created\":",
    b"\"who\":",
    b"\"ID\":5",
    b"T",
    b"Z",
    b"+24:60",
    b":",
    b",",
    b"0001-01-01T00:00:00Z",
];

fn mutate(rng: &mut Rng, doc: &mut Vec<u8>) {
    for _ in 0..=rng.below(4) {
        match rng.below(4) {
            0 if !doc.is_empty() => {
                let i = rng.below(doc.len());
                doc.remove(i);
            }
            1 => {
                let i = rng.below(doc.len() + 1);
                let piece = INTERESTING[rng.below(INTERESTING.len())];
                doc.splice(i..i, piece.iter().copied());
            }
            2 if !doc.is_empty() => {
                let i = rng.below(doc.len());
                doc[i] = (rng.next() & 0xff) as u8;
            }
            _ => {
                let i = rng.below(doc.len() + 1);
                let j = (i + rng.below(16)).min(doc.len());
                let copy: Vec<u8> = doc[i..j].to_vec();
                doc.splice(i..i, copy);
            }
        }
    }
}

#[test]
fn mutated_lock_info_never_panics_nor_echoes_input() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let (mut ok, mut bad) = (0u32, 0u32);
    for _ in 0..100_000 {
        let mut doc = SEED_DOC.to_vec();
        mutate(&mut rng, &mut doc);
        let first = parse_lock_info_bytes(&doc);
        assert_eq!(first, parse_lock_info_bytes(&doc), "parse is deterministic");
        // The &str entry point is the same decoder on the same bytes.
        if let Ok(text) = std::str::from_utf8(&doc) {
            assert_eq!(first, parse_lock_info(text));
        }
        match first {
            Ok(info) => {
                ok += 1;
                let _ = holder_host(&info.who);
            }
            Err(e) => {
                bad += 1;
                let msg = e.to_string();
                assert!(msg.len() < 200, "error messages stay short: {msg}");
                assert!(
                    !msg.contains("captf-m-web"),
                    "errors never echo the input: {msg}"
                );
            }
        }
    }
    // Both outcomes must really occur, or the mutator tests nothing.
    assert!(ok > 1_000 && bad > 1_000, "ok {ok}, bad {bad}");
}

#[test]
fn random_and_deep_inputs_never_panic() {
    let mut rng = Rng(42);
    for len in [0usize, 1, 2, 7, 64, 4096] {
        for _ in 0..2_000 {
            let doc: Vec<u8> = (0..len).map(|_| (rng.next() & 0xff) as u8).collect();
            let _ = parse_lock_info_bytes(&doc);
        }
    }
    for depth in [127usize, 128, 129, 10_000, 10_001, 300_000] {
        let mut doc = b"{\"Info\":".to_vec();
        doc.extend(std::iter::repeat_n(b'[', depth));
        doc.extend(std::iter::repeat_n(b']', depth));
        doc.push(b'}');
        let _ = parse_lock_info_bytes(&doc);
    }
}
