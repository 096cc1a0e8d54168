//! Go's string rules: how `encoding/json` unquotes a string (escapes,
//! lone surrogates, invalid UTF-8 per byte) and how it matches a key to a
//! field name (exact, then `foldName`).

use super::Field;

/// Matches a raw (still escaped) key to a field as Go does: exact name
/// first, then Go's case fold.
pub(super) fn match_field(raw_key: &[u8]) -> Option<Field> {
    // A field name has at most 9 characters and one character takes at
    // most 6 bytes of JSON (\uXXXX); a longer key cannot match, so it is
    // not decoded at all.
    if raw_key.len() > 9 * 6 {
        return None;
    }
    let key = decode_go_string(raw_key);
    if let Some(f) = Field::ALL.into_iter().find(|f| f.go_name() == key) {
        return Some(f);
    }
    let folded = go_fold(&key)?;
    Field::ALL
        .into_iter()
        .find(|f| f.go_name().to_ascii_uppercase() == folded)
}

/// Go's `foldName` restricted to results that can equal an (all-ASCII)
/// field name: `None` as soon as a character folds to non-ASCII.
fn go_fold(key: &str) -> Option<String> {
    key.chars().map(go_fold_char).collect()
}

/// `unicode.ToUpper(unicode.ToLower(r))` when that is ASCII. Only four
/// non-ASCII runes fold to ASCII letters under Go's simple case mappings.
fn go_fold_char(c: char) -> Option<char> {
    match c {
        _ if c.is_ascii() => Some(c.to_ascii_uppercase()),
        '\u{017F}' => Some('S'),              // ſ LATIN SMALL LETTER LONG S
        '\u{0131}' | '\u{0130}' => Some('I'), // ı dotless i, İ dotted capital I
        '\u{212A}' => Some('K'),              // KELVIN SIGN
        _ => None,
    }
}

/// Decodes the raw content of a scanned JSON string as Go's `unquote`:
/// escapes decoded, lone surrogates and each invalid UTF-8 byte replaced
/// by U+FFFD. The input must already have passed the scanner.
pub(super) fn decode_go_string(raw: &[u8]) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        let rest = raw.get(i..).unwrap_or_default();
        let plain = rest.iter().position(|&c| c == b'\\').unwrap_or(rest.len());
        push_go_lossy(&mut out, rest.get(..plain).unwrap_or_default());
        i += plain;
        if i >= raw.len() {
            break;
        }
        // raw[i] is a backslash.
        let esc = raw.get(i + 1).copied();
        i += 2;
        let simple = match esc {
            Some(b'"') => Some('"'),
            Some(b'\\') => Some('\\'),
            Some(b'/') => Some('/'),
            Some(b'b') => Some('\u{8}'),
            Some(b'f') => Some('\u{c}'),
            Some(b'n') => Some('\n'),
            Some(b'r') => Some('\r'),
            Some(b't') => Some('\t'),
            _ => None,
        };
        if let Some(ch) = simple {
            out.push(ch);
            continue;
        }
        let Some(r) = (esc == Some(b'u')).then(|| hex4(raw, i)).flatten() else {
            // Unreachable after the scanner; degrade rather than panic.
            out.push('\u{FFFD}');
            continue;
        };
        i += 4;
        if (0xD800..0xE000).contains(&r) {
            // A high surrogate followed by an escaped low one is a pair;
            // anything else is replaced and the next escape is kept.
            let low = (raw.get(i) == Some(&b'\\') && raw.get(i + 1) == Some(&b'u'))
                .then(|| hex4(raw, i + 2))
                .flatten();
            match low {
                Some(lo) if (0xD800..0xDC00).contains(&r) && (0xDC00..0xE000).contains(&lo) => {
                    let c = 0x10000 + ((r - 0xD800) << 10) + (lo - 0xDC00);
                    out.push(char::from_u32(c).unwrap_or('\u{FFFD}'));
                    i += 6;
                }
                _ => out.push('\u{FFFD}'),
            }
        } else {
            out.push(char::from_u32(r).unwrap_or('\u{FFFD}'));
        }
    }
    out
}

/// Four hex digits at `at` as a code unit.
fn hex4(raw: &[u8], at: usize) -> Option<u32> {
    let digits = raw.get(at..at + 4)?;
    digits.iter().try_fold(0u32, |acc, &c| {
        let d = char::from(c).to_digit(16)?;
        Some(acc * 16 + d)
    })
}

/// Appends bytes as Go's `utf8.DecodeRune` loop does: valid sequences as
/// they are, one U+FFFD for every byte of an invalid sequence (Go resyncs
/// after a single byte, unlike `String::from_utf8_lossy`).
fn push_go_lossy(out: &mut String, bytes: &[u8]) {
    for chunk in bytes.utf8_chunks() {
        out.push_str(chunk.valid());
        for _ in chunk.invalid() {
            out.push('\u{FFFD}');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_fold_table_is_complete() {
        // Every non-ASCII char whose single-char lower-then-upper mapping is
        // ASCII must be in the table (Rust's tables; İ lowers to two chars
        // in Rust's full mapping but to 'i' in Go's simple one).
        fn single(mut it: impl Iterator<Item = char>) -> Option<char> {
            let c = it.next()?;
            it.next().is_none().then_some(c)
        }
        for c in (0x80u32..=0x10FFFF).filter_map(char::from_u32) {
            let lower = single(c.to_lowercase()).unwrap_or(c);
            let upper = single(lower.to_uppercase()).unwrap_or(lower);
            if upper.is_ascii() {
                assert_eq!(go_fold_char(c), Some(upper), "{c:?}");
            } else if c != '\u{0130}' {
                assert_eq!(go_fold_char(c), None, "{c:?}");
            }
        }
        assert_eq!(go_fold_char('\u{0130}'), Some('I'));
        assert_eq!(go_fold_char('\u{212A}'), Some('K'));
    }

    #[test]
    fn go_lossy_matches_go_decode_rune() {
        // Go's utf8.DecodeRune, written from its tables: returns the
        // length of a valid sequence, or 0 for an invalid one.
        fn go_valid_len(p: &[u8]) -> usize {
            let Some(&b0) = p.first() else { return 0 };
            let (n, lo, hi) = match b0 {
                0x00..=0x7F => return 1,
                0xC2..=0xDF => (2, 0x80, 0xBF),
                0xE0 => (3, 0xA0, 0xBF),
                0xE1..=0xEC | 0xEE..=0xEF => (3, 0x80, 0xBF),
                0xED => (3, 0x80, 0x9F),
                0xF0 => (4, 0x90, 0xBF),
                0xF1..=0xF3 => (4, 0x80, 0xBF),
                0xF4 => (4, 0x80, 0x8F),
                _ => return 0,
            };
            if p.len() < n {
                return 0;
            }
            if !(lo..=hi).contains(&p[1]) {
                return 0;
            }
            if p[2..n].iter().any(|&c| !(0x80..=0xBF).contains(&c)) {
                return 0;
            }
            n
        }
        fn go_lossy(mut p: &[u8]) -> String {
            let mut s = String::new();
            while !p.is_empty() {
                let n = go_valid_len(p);
                if n == 0 {
                    s.push('\u{FFFD}');
                    p = &p[1..];
                } else {
                    s.push_str(std::str::from_utf8(&p[..n]).unwrap());
                    p = &p[n..];
                }
            }
            s
        }
        let interesting = [
            0x00u8, 0x41, 0x7F, 0x80, 0xBF, 0xC0, 0xC1, 0xC2, 0xDF, 0xE0, 0xE1, 0xEC, 0xED, 0xEE,
            0xEF, 0xF0, 0xF1, 0xF3, 0xF4, 0xF5, 0xFF, 0x8F, 0x90, 0x9F, 0xA0,
        ];
        let mut buf = Vec::new();
        for &a in &interesting {
            for &b in &interesting {
                for &c in &interesting {
                    for &d in &interesting {
                        buf.clear();
                        buf.extend([a, b, c, d]);
                        let mut mine = String::new();
                        push_go_lossy(&mut mine, &buf);
                        assert_eq!(mine, go_lossy(&buf), "{buf:02x?}");
                    }
                }
            }
        }
    }
}
