//! The shown form of a value from the cluster: characters that steer a
//! terminal, a page or a chat client instead of being read are escaped.
//!
//! lock-info and the Lease are written by whoever may update Leases in a
//! namespace, so a value may carry ESC sequences (OSC 52 sets the
//! operator's clipboard), C1 controls, bidi overrides (U+202E shows text
//! reversed) or zero-width characters (two IDs that look the same). Each
//! such character is written as `\u{<hex>}` (lowercase hex, no padding), the
//! form of docs/contract.md section 7.5. Nothing else changes, so a clean
//! value is shown as written and escaping twice changes nothing.

use std::borrow::Cow;
use std::fmt::Write as _;

use sha2::{Digest, Sha256};

/// Unicode format characters (general category Cf, Unicode 15): bidi
/// controls, zero-width characters, the byte-order mark, tags and others;
/// the tag block is taken whole (U+E0002..U+E001F are unassigned).
const FORMAT: [(u32, u32); 20] = [
    (0xAD, 0xAD),
    (0x600, 0x605),
    (0x61C, 0x61C),
    (0x6DD, 0x6DD),
    (0x70F, 0x70F),
    (0x890, 0x891),
    (0x8E2, 0x8E2),
    (0x180E, 0x180E),
    (0x200B, 0x200F),
    (0x202A, 0x202E),
    (0x2060, 0x2064),
    (0x2066, 0x206F),
    (0xFEFF, 0xFEFF),
    (0xFFF9, 0xFFFB),
    (0x110BD, 0x110BD),
    (0x110CD, 0x110CD),
    (0x13430, 0x1343F),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0001, 0xE007F),
];

/// Whether `c` is escaped when shown: a control character (Cc: C0, DEL,
/// C1), a format character (Cf) or the line and paragraph separators
/// (U+2028, U+2029).
pub fn is_hidden(c: char) -> bool {
    if c.is_control() || c == '\u{2028}' || c == '\u{2029}' {
        return true;
    }
    let u = u32::from(c);
    u >= 0xAD && FORMAT.iter().any(|&(lo, hi)| (lo..=hi).contains(&u))
}

/// Whether `s` holds a character [`is_hidden`] escapes.
pub fn has_hidden(s: &str) -> bool {
    s.chars().any(is_hidden)
}

/// `s` with every [`is_hidden`] character written as `\u{<hex>}`;
/// borrowed when there is none.
pub fn shown(s: &str) -> Cow<'_, str> {
    if !has_hidden(s) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if is_hidden(c) {
            let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Longest label value taken from lock-info (Who, ID, Operation, Version).
/// lock-info is written by the runner's ServiceAccount: untrusted, any size.
/// The lock ID is kept whole (it tells one lock from the next and is the
/// argument of the printed force-unlock) and capped only as a label.
pub const MAX_LABEL_BYTES: usize = 128;

/// Longest shown form kept as written (lock IDs, holderIdentity, `Who`):
/// the raw lock IDs' cut (1024 bytes), applied to the shown form, which is
/// up to six times longer (`\u{1b}` for one ESC byte). A longer one is
/// kept cut ([`cut_with_digest`]).
pub const MAX_SHOWN_BYTES: usize = 1024;

/// What is kept of an untrusted string: `s` itself up to `max` bytes,
/// else its head (the longest prefix within `max` bytes), `…`, and its
/// whole length and sha256. Two strings give the same result exactly when
/// they are equal (the length and hash tell strings with one head apart),
/// and a cut result is longer than `max`, so no string kept whole equals
/// one. Nothing in it is escaped when shown: cutting a shown form keeps it
/// one.
pub fn cut_with_digest(s: &str, max: usize) -> Cow<'_, str> {
    if s.len() <= max {
        return Cow::Borrowed(s);
    }
    let digest = hex::encode(Sha256::digest(s.as_bytes()));
    Cow::Owned(format!(
        "{}…[cut: {} bytes, sha256 {digest}]",
        cap(s, max),
        s.len()
    ))
}

/// The shown form of `s` as kept: escaped ([`shown`]), then cut past
/// [`MAX_SHOWN_BYTES`] ([`cut_with_digest`]), without spare capacity
/// (an escaped string is grown by doubling, and kept for as long as its
/// Lease exists).
pub fn kept_shown(s: &str) -> Box<str> {
    let escaped = shown(s);
    cut_with_digest(&escaped, MAX_SHOWN_BYTES).into()
}

/// The longest prefix of `s` of at most `max` bytes that ends on a char
/// boundary.
pub fn cap(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_controls_format_and_separators() {
        assert_eq!(
            shown("x@captf-m-\u{1b}]52;c;Y3VybA==\u{7}-apply"),
            "x@captf-m-\\u{1b}]52;c;Y3VybA==\\u{7}-apply"
        );
        assert_eq!(shown("a\u{9b}b\u{7f}"), "a\\u{9b}b\\u{7f}");
        assert_eq!(shown("id\u{202e}cba"), "id\\u{202e}cba");
        assert_eq!(shown("i\u{200b}d\u{feff}"), "i\\u{200b}d\\u{feff}");
        assert_eq!(shown("a\u{2028}b\u{2029}"), "a\\u{2028}b\\u{2029}");
        assert_eq!(shown("a\nb\tc"), "a\\u{a}b\\u{9}c");
        assert_eq!(shown("tag\u{e0041}"), "tag\\u{e0041}");
    }

    #[test]
    fn a_long_shown_form_is_cut_with_its_length_and_digest() {
        let raw = "\u{1b}".repeat(1024);
        let kept = kept_shown(&raw);
        let escaped = "\\u{1b}".repeat(1024);
        let digest = hex::encode(Sha256::digest(escaped.as_bytes()));
        assert!(kept.starts_with(cap(&escaped, MAX_SHOWN_BYTES)));
        assert!(kept.ends_with(&format!("…[cut: 6144 bytes, sha256 {digest}]")));
        assert!(kept.len() > MAX_SHOWN_BYTES && kept.len() < MAX_SHOWN_BYTES + 128);
        assert_eq!(shown(&kept), &*kept, "a cut shown form is one");
        // One byte more is another value.
        assert_ne!(kept_shown(&format!("{raw}\u{1b}")), kept);
        // Short, or clean and within the limit: as written, no digest.
        assert_eq!(&*kept_shown("a\u{1b}b"), "a\\u{1b}b");
        let clean = "x".repeat(MAX_SHOWN_BYTES);
        assert_eq!(&*kept_shown(&clean), clean);
        assert!(matches!(cut_with_digest("abc", 3), Cow::Borrowed("abc")));
    }

    #[test]
    fn leaves_the_rest_and_is_idempotent() {
        for s in [
            "3442fe8d-2b45",
            "ci@runner-1",
            "ünïcödé 日本",
            "a\\u{1b}b",
            "",
        ] {
            assert!(matches!(shown(s), Cow::Borrowed(_)), "{s}");
        }
        let once = shown("a\u{1b}\u{202e}b").into_owned();
        assert_eq!(shown(&once), once);
        assert!(!is_hidden(' ') && !is_hidden('é') && !is_hidden('\u{a0}'));
    }
}
