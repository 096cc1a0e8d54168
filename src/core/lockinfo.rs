//! Decoding of the `app.terraform.io/lock-info` annotation exactly as CAPTF
//! decodes it (`internal/locks/stale.go`): Go 1.26's `encoding/json` (v1)
//! unmarshalling into
//! `struct { ID, Operation, Who, Version string; Created time.Time }`.
//!
//! The annotation is untrusted (the runner's ServiceAccount can write it),
//! so this is a hand-written, iterative (never recursive), linear-time
//! decoder rather than serde: serde_json differs from Go on
//! case-insensitive keys, lone surrogate escapes, invalid UTF-8, raw
//! (unescaped) `Created` bytes and nesting depth, and each difference would
//! change which locks CAPTF considers stale. Go semantics reproduced:
//!
//! - the whole input must be valid JSON (Go's scanner runs first), nested
//!   at most 10 000 levels deep (Go's `maxNestingDepth`); whitespace is
//!   space, tab, CR and LF only;
//! - top-level `null` decodes to an empty info; any other non-object
//!   top-level value is a type error;
//! - keys match a field exactly, else by Go's fold (ASCII upper-casing,
//!   non-ASCII `r` to `ToUpper(ToLower(r))`); duplicates: the later wins;
//!   unknown keys are skipped whatever their value;
//! - `null` leaves a field unchanged; any other non-string value for a
//!   string field is a type error;
//! - invalid UTF-8 in strings becomes U+FFFD per bad byte, and an escaped
//!   lone UTF-16 surrogate becomes U+FFFD;
//! - `Created` is handed to `time.Time.UnmarshalJSON` as raw token bytes,
//!   so any escape inside it makes it invalid; the bytes are parsed by
//!   [`parse_go_rfc3339`].

use chrono::{DateTime, NaiveDate, TimeDelta, Utc};

/// Go's `encoding/json` scanner nesting limit (`maxNestingDepth`).
const MAX_DEPTH: usize = 10_000;

/// The lock-info fields CAPTF reads. Empty strings and `None` are what Go
/// leaves when a key is absent or `null`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LockInfo {
    /// The lock ID (`ID`).
    pub id: String,
    /// The operation holding the lock, e.g. `OperationTypeApply`.
    pub operation: String,
    /// `<user>@<hostname>`; inside a Job the hostname is the pod name.
    pub who: String,
    /// Terraform/OpenTofu version of the holder.
    pub version: String,
    /// `Created`; `None` when absent, `null`, or Go's zero time
    /// (0001-01-01T00:00:00Z), none of which is a usable lock time.
    pub created: Option<DateTime<Utc>>,
}

/// Why a lock-info annotation is rejected (CAPTF then treats it as absent).
/// The messages never quote the input: it is untrusted and may be huge.
#[derive(Debug, thiserror::Error, PartialEq, Eq, Clone)]
pub enum LockInfoError {
    /// The input is not valid JSON (Go's `SyntaxError`).
    #[error("lock-info is not valid JSON: {reason} at byte {offset}")]
    Syntax {
        /// What the scanner found wrong.
        reason: &'static str,
        /// Byte offset of the problem.
        offset: usize,
    },
    /// The top-level value is neither an object nor `null`.
    #[error("lock-info is a JSON {found}, not an object")]
    NotAnObject {
        /// JSON type of the top-level value.
        found: &'static str,
    },
    /// A string field holds a number, bool, object or array.
    #[error("lock-info field {field} is a JSON {found}, not a string")]
    WrongType {
        /// Go field name (`ID`, `Operation`, `Who`, `Version`).
        field: &'static str,
        /// JSON type found.
        found: &'static str,
    },
    /// `Created` is not a JSON string holding an RFC 3339 time as Go parses it.
    #[error("lock-info Created is not an RFC 3339 time string ({found})")]
    BadCreated {
        /// JSON type found (`string` when the text itself is invalid).
        found: &'static str,
    },
}

/// The struct fields Go decodes into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Field {
    Id,
    Operation,
    Who,
    Version,
    Created,
}

impl Field {
    const ALL: [Field; 5] = [
        Field::Id,
        Field::Operation,
        Field::Who,
        Field::Version,
        Field::Created,
    ];

    /// The Go field name (also its json tag).
    fn go_name(self) -> &'static str {
        match self {
            Field::Id => "ID",
            Field::Operation => "Operation",
            Field::Who => "Who",
            Field::Version => "Version",
            Field::Created => "Created",
        }
    }
}

/// Decodes a lock-info annotation the way Go's `json.Unmarshal` does into
/// CAPTF's `locks.Info`; `Err` exactly when Go returns an error.
pub fn parse_lock_info(raw: &[u8]) -> Result<LockInfo, LockInfoError> {
    let mut p = Parser { b: raw, pos: 0 };
    let mut d = Decoded::default();
    p.skip_ws();
    match p.peek() {
        Some(b'{') => p.top_object(&mut d)?,
        Some(b'n') => p.literal(b"null")?,
        Some(c) => {
            let found = json_type(c);
            p.skip_value(0)?;
            d.saved.get_or_insert(LockInfoError::NotAnObject { found });
        }
        None => return Err(p.syntax("unexpected end of JSON input")),
    }
    p.skip_ws();
    if p.pos < raw.len() {
        return Err(p.syntax("invalid character after top-level value"));
    }
    // Go checks syntax first; then an UnmarshalJSON error (Created) aborts
    // decoding and wins over a type error saved earlier.
    if let Some(e) = d.fatal.or(d.saved) {
        return Err(e);
    }
    let mut info = d.info;
    info.created = info.created.filter(|t| !is_go_zero_time(t));
    Ok(info)
}

/// The hostname in Who: the text after the LAST `@` (Go's
/// `strings.LastIndex`). `None` when there is no `@` or nothing after it.
pub fn holder_host(who: &str) -> Option<&str> {
    who.rsplit_once('@')
        .map(|(_, host)| host)
        .filter(|host| !host.is_empty())
}

/// Parses `s` as Go 1.26's `time.Time.UnmarshalJSON` parses the bytes
/// between the quotes: `time.Parse(time.RFC3339, s)` (the strict checks in
/// `parseStrictRFC3339` are disabled in Go). Accepted:
/// `YYYY-MM-DDTh[h]:MM:SS[(.|,)digits](Z|±HH:MM)` with year 0000-9999, a
/// valid day of month, hour 0-23 (one or two digits), minute and second
/// 0-59, fraction digits beyond 9 truncated, offset hour 0-24 and offset
/// minute 0-60 (Go tolerates 24 and 60 on purpose). `T` and `Z` are
/// upper-case only.
pub fn parse_go_rfc3339(s: &[u8]) -> Option<DateTime<Utc>> {
    let mut c = Cursor { s, pos: 0 };
    let year = c.fixed_digits(4)?;
    c.byte(b'-')?;
    let month = c.fixed_digits(2)?;
    if !(1..=12).contains(&month) {
        return None;
    }
    c.byte(b'-')?;
    let day = c.fixed_digits(2)?;
    c.byte(b'T')?;
    // Go's layout engine reads the "15" hour with getnum(value, false).
    let hour = c.one_or_two_digits()?;
    if hour > 23 {
        return None;
    }
    c.byte(b':')?;
    let minute = c.fixed_digits(2)?;
    if minute > 59 {
        return None;
    }
    c.byte(b':')?;
    let second = c.fixed_digits(2)?;
    if second > 59 {
        return None;
    }
    let nanos = c.fraction();
    let offset_seconds = c.zone()?;
    if c.pos != s.len() {
        return None;
    }
    if day < 1 || day > days_in_month(month, year) {
        return None;
    }
    let date = NaiveDate::from_ymd_opt(i32::try_from(year).ok()?, month, day)?;
    let local = date.and_hms_nano_opt(hour, minute, second, nanos)?;
    local
        .and_utc()
        .checked_sub_signed(TimeDelta::try_seconds(offset_seconds)?)
}

/// Go's zero `time.Time` instant, 0001-01-01T00:00:00Z (`IsZero`).
fn is_go_zero_time(t: &DateTime<Utc>) -> bool {
    NaiveDate::from_ymd_opt(1, 1, 1)
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .is_some_and(|zero| zero.and_utc() == *t)
}

/// Go's `daysIn`, with its leap-year rule (year 0 is a leap year).
fn days_in_month(month: u32, year: u32) -> u32 {
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    match month {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// A byte cursor for [`parse_go_rfc3339`].
struct Cursor<'a> {
    s: &'a [u8],
    pos: usize,
}

impl Cursor<'_> {
    fn peek_at(&self, ahead: usize) -> Option<u8> {
        self.s.get(self.pos + ahead).copied()
    }

    fn byte(&mut self, want: u8) -> Option<()> {
        (self.peek_at(0) == Some(want)).then(|| self.pos += 1)
    }

    fn digit(&mut self) -> Option<u32> {
        let c = self.peek_at(0).filter(u8::is_ascii_digit)?;
        self.pos += 1;
        Some(u32::from(c - b'0'))
    }

    fn fixed_digits(&mut self, n: usize) -> Option<u32> {
        let mut v = 0;
        for _ in 0..n {
            v = v * 10 + self.digit()?;
        }
        Some(v)
    }

    fn one_or_two_digits(&mut self) -> Option<u32> {
        let first = self.digit()?;
        Some(match self.digit() {
            Some(second) => first * 10 + second,
            None => first,
        })
    }

    /// An optional fraction: `.` or `,` followed by at least one digit.
    /// Returns nanoseconds, truncating digits beyond the ninth.
    fn fraction(&mut self) -> u32 {
        let sep = matches!(self.peek_at(0), Some(b'.' | b','));
        if !sep || !self.peek_at(1).is_some_and(|c| c.is_ascii_digit()) {
            return 0;
        }
        self.pos += 1;
        let mut nanos = 0;
        let mut scale = 100_000_000;
        while let Some(d) = self.digit() {
            nanos += d * scale;
            scale /= 10;
        }
        nanos
    }

    /// `Z`, or `±HH:MM`; returns the offset east of UTC in seconds.
    fn zone(&mut self) -> Option<i64> {
        let sign = match self.peek_at(0)? {
            b'Z' => {
                self.pos += 1;
                return Some(0);
            }
            b'+' => 1,
            b'-' => -1,
            _ => return None,
        };
        self.pos += 1;
        let hh = self.fixed_digits(2)?;
        self.byte(b':')?;
        let mm = self.fixed_digits(2)?;
        // Go's layout parser rejects only hh > 24 or mm > 60.
        if hh > 24 || mm > 60 {
            return None;
        }
        Some(sign * i64::from(hh * 3600 + mm * 60))
    }
}

/// Decoder state besides the cursor: what has been assigned and the first
/// errors of each kind Go would report.
#[derive(Default)]
struct Decoded {
    info: LockInfo,
    /// First type error (Go's `saveError`): decoding goes on.
    saved: Option<LockInfoError>,
    /// First `Created` error (returned by UnmarshalJSON): decoding stops.
    fatal: Option<LockInfoError>,
}

/// Iterative JSON scanner/decoder over the raw bytes.
struct Parser<'a> {
    b: &'a [u8],
    pos: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.pos).copied()
    }

    fn syntax(&self, reason: &'static str) -> LockInfoError {
        LockInfoError::Syntax {
            reason,
            offset: self.pos,
        }
    }

    fn eof_or(&self, reason: &'static str) -> LockInfoError {
        if self.pos >= self.b.len() {
            self.syntax("unexpected end of JSON input")
        } else {
            self.syntax(reason)
        }
    }

    /// Skips JSON whitespace: exactly space, tab, CR and LF, as Go.
    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\r' | b'\n')) {
            self.pos += 1;
        }
    }

    fn literal(&mut self, lit: &[u8]) -> Result<(), LockInfoError> {
        for &want in lit {
            if self.peek() != Some(want) {
                return Err(self.eof_or("invalid character in literal"));
            }
            self.pos += 1;
        }
        Ok(())
    }

    /// Scans a string starting at its opening quote; returns the byte
    /// range of its raw content (without the quotes).
    fn string(&mut self) -> Result<(usize, usize), LockInfoError> {
        if self.peek() != Some(b'"') {
            return Err(self.eof_or("expected string"));
        }
        self.pos += 1;
        let start = self.pos;
        loop {
            match self.peek() {
                None => return Err(self.syntax("unexpected end of JSON input")),
                Some(b'"') => {
                    let end = self.pos;
                    self.pos += 1;
                    return Ok((start, end));
                }
                Some(b'\\') => {
                    self.pos += 1;
                    match self.peek() {
                        Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => {
                            self.pos += 1;
                        }
                        Some(b'u') => {
                            self.pos += 1;
                            for _ in 0..4 {
                                if !self.peek().is_some_and(|c| c.is_ascii_hexdigit()) {
                                    return Err(self.eof_or("invalid character in \\u escape"));
                                }
                                self.pos += 1;
                            }
                        }
                        _ => return Err(self.eof_or("invalid character in string escape")),
                    }
                }
                Some(c) if c < 0x20 => {
                    return Err(self.syntax("invalid control character in string literal"))
                }
                Some(_) => self.pos += 1,
            }
        }
    }

    /// Scans a number with Go's grammar:
    /// `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`.
    fn number(&mut self) -> Result<(), LockInfoError> {
        if self.peek() == Some(b'-') {
            self.pos += 1;
        }
        match self.peek() {
            Some(b'0') => self.pos += 1,
            Some(b'1'..=b'9') => self.digits(),
            _ => return Err(self.eof_or("invalid character in numeric literal")),
        }
        if self.peek() == Some(b'.') {
            self.pos += 1;
            if !self.peek().is_some_and(|c| c.is_ascii_digit()) {
                return Err(self.eof_or("invalid character after decimal point"));
            }
            self.digits();
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.pos += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.pos += 1;
            }
            if !self.peek().is_some_and(|c| c.is_ascii_digit()) {
                return Err(self.eof_or("invalid character in exponent"));
            }
            self.digits();
        }
        Ok(())
    }

    fn digits(&mut self) {
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.pos += 1;
        }
    }

    /// Scans an object key and the `:` after it; returns the key's raw range.
    fn key(&mut self) -> Result<(usize, usize), LockInfoError> {
        self.skip_ws();
        if self.peek() != Some(b'"') {
            return Err(self.eof_or("invalid character looking for beginning of object key"));
        }
        let range = self.string()?;
        self.skip_ws();
        if self.peek() != Some(b':') {
            return Err(self.eof_or("invalid character after object key"));
        }
        self.pos += 1;
        Ok(range)
    }

    /// Validates and skips one value without recursion. `depth` is the
    /// number of containers already open around it.
    fn skip_value(&mut self, depth: usize) -> Result<(), LockInfoError> {
        // One entry per open container: true for an object.
        let mut stack: Vec<bool> = Vec::new();
        loop {
            // Expecting a value.
            self.skip_ws();
            match self.peek() {
                Some(open @ (b'{' | b'[')) => {
                    self.pos += 1;
                    if depth + stack.len() + 1 > MAX_DEPTH {
                        return Err(self.syntax("exceeded max depth"));
                    }
                    let is_object = open == b'{';
                    self.skip_ws();
                    let close = if is_object { b'}' } else { b']' };
                    if self.peek() == Some(close) {
                        self.pos += 1;
                    } else {
                        stack.push(is_object);
                        if is_object {
                            self.key()?;
                        }
                        continue;
                    }
                }
                Some(b'"') => {
                    self.string()?;
                }
                Some(b't') => self.literal(b"true")?,
                Some(b'f') => self.literal(b"false")?,
                Some(b'n') => self.literal(b"null")?,
                Some(b'-' | b'0'..=b'9') => self.number()?,
                _ => return Err(self.eof_or("invalid character looking for beginning of value")),
            }
            // A value is complete: close containers or move to the next element.
            loop {
                let Some(&is_object) = stack.last() else {
                    return Ok(());
                };
                self.skip_ws();
                match self.peek() {
                    Some(b',') => {
                        self.pos += 1;
                        if is_object {
                            self.key()?;
                        }
                        break;
                    }
                    Some(b'}') if is_object => {
                        self.pos += 1;
                        stack.pop();
                    }
                    Some(b']') if !is_object => {
                        self.pos += 1;
                        stack.pop();
                    }
                    _ => return Err(self.eof_or("invalid character after value")),
                }
            }
        }
    }

    /// Decodes the top-level object into `d` (depth 1).
    fn top_object(&mut self, d: &mut Decoded) -> Result<(), LockInfoError> {
        self.pos += 1; // '{'
        self.skip_ws();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            return Ok(());
        }
        loop {
            let (ks, ke) = self.key()?;
            let field = self.b.get(ks..ke).and_then(match_field);
            self.skip_ws();
            match field {
                None => self.skip_value(1)?,
                Some(Field::Created) => self.created(d)?,
                Some(f) => self.string_field(f, d)?,
            }
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    return Ok(());
                }
                _ => return Err(self.eof_or("invalid character after object key:value pair")),
            }
        }
    }

    fn string_field(&mut self, f: Field, d: &mut Decoded) -> Result<(), LockInfoError> {
        match self.peek() {
            Some(b'"') => {
                let (s, e) = self.string()?;
                if let Some(slot) = string_slot(&mut d.info, f) {
                    *slot = decode_go_string(self.b.get(s..e).unwrap_or_default());
                }
            }
            // Go ignores null for a string: the field keeps its value.
            Some(b'n') => self.literal(b"null")?,
            Some(c) => {
                let found = json_type(c);
                self.skip_value(1)?;
                d.saved.get_or_insert(LockInfoError::WrongType {
                    field: f.go_name(),
                    found,
                });
            }
            None => return Err(self.syntax("unexpected end of JSON input")),
        }
        Ok(())
    }

    fn created(&mut self, d: &mut Decoded) -> Result<(), LockInfoError> {
        match self.peek() {
            Some(b'"') => {
                let (s, e) = self.string()?;
                // UnmarshalJSON sees the raw bytes: escapes are not decoded.
                match self.b.get(s..e).and_then(parse_go_rfc3339) {
                    Some(t) => d.info.created = Some(t),
                    None => {
                        d.fatal
                            .get_or_insert(LockInfoError::BadCreated { found: "string" });
                    }
                }
            }
            // time.Time.UnmarshalJSON("null") is a no-op.
            Some(b'n') => self.literal(b"null")?,
            Some(c) => {
                let found = json_type(c);
                self.skip_value(1)?;
                d.fatal.get_or_insert(LockInfoError::BadCreated { found });
            }
            None => return Err(self.syntax("unexpected end of JSON input")),
        }
        Ok(())
    }
}

/// The string a field decodes into; `None` for `Created` (not a string).
fn string_slot(info: &mut LockInfo, f: Field) -> Option<&mut String> {
    match f {
        Field::Id => Some(&mut info.id),
        Field::Operation => Some(&mut info.operation),
        Field::Who => Some(&mut info.who),
        Field::Version => Some(&mut info.version),
        Field::Created => None,
    }
}

/// JSON type named by a value's first byte (for error messages).
fn json_type(first: u8) -> &'static str {
    match first {
        b'{' => "object",
        b'[' => "array",
        b'"' => "string",
        b't' | b'f' => "bool",
        b'n' => "null",
        _ => "number",
    }
}

/// Matches a raw (still escaped) key to a field as Go does: exact name
/// first, then Go's case fold.
fn match_field(raw_key: &[u8]) -> Option<Field> {
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
fn decode_go_string(raw: &[u8]) -> String {
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
    use chrono::TimeZone;

    fn ok(raw: &str) -> LockInfo {
        match parse_lock_info(raw.as_bytes()) {
            Ok(i) => i,
            Err(e) => panic!("{raw:?}: {e}"),
        }
    }

    fn err(raw: &[u8]) -> LockInfoError {
        match parse_lock_info(raw) {
            Ok(i) => panic!("{:?} accepted: {i:?}", String::from_utf8_lossy(raw)),
            Err(e) => e,
        }
    }

    fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32, ns: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(y, mo, d, h, mi, s).unwrap() + TimeDelta::nanoseconds(i64::from(ns))
    }

    fn t(s: &str) -> Option<DateTime<Utc>> {
        parse_go_rfc3339(s.as_bytes())
    }

    #[test]
    fn real_sample() {
        let raw = r#"{"ID":"3b1c2f7e-2d5a-4c1e-9a0b-6f1d2e3c4b5a","Operation":"OperationTypeApply","Info":"","Who":"@captf-m-web-apply-a1-abc123-x7k2p","Version":"1.9.0","Created":"2026-09-26T15:53:38.315668626Z","Path":""}"#;
        let info = ok(raw);
        assert_eq!(info.id, "3b1c2f7e-2d5a-4c1e-9a0b-6f1d2e3c4b5a");
        assert_eq!(info.operation, "OperationTypeApply");
        assert_eq!(info.who, "@captf-m-web-apply-a1-abc123-x7k2p");
        assert_eq!(info.version, "1.9.0");
        assert_eq!(
            info.created,
            Some(utc(2026, 9, 26, 15, 53, 38, 315_668_626))
        );
        assert_eq!(
            holder_host(&info.who),
            Some("captf-m-web-apply-a1-abc123-x7k2p")
        );
    }

    #[test]
    fn case_insensitive_keys() {
        assert_eq!(ok(r#"{"who":"a@b"}"#).who, "a@b");
        assert_eq!(ok(r#"{"WHO":"a@b"}"#).who, "a@b");
        assert_eq!(ok(r#"{"wHo":"a@b"}"#).who, "a@b");
        assert_eq!(ok(r#"{"id":"x"}"#).id, "x");
        assert_eq!(ok(r#"{"operation":"op"}"#).operation, "op");
        assert_eq!(
            ok(r#"{"created":"2026-01-02T03:04:05Z"}"#).created,
            Some(utc(2026, 1, 2, 3, 4, 5, 0))
        );
        // Go folds ſ (U+017F) to S, ı (U+0131) and İ (U+0130) to I.
        assert_eq!(ok("{\"Ver\u{017F}ion\":\"1.9\"}").version, "1.9");
        assert_eq!(ok("{\"\u{0131}D\":\"x\"}").id, "x");
        assert_eq!(ok("{\"\u{0130}d\":\"x\"}").id, "x");
        assert_eq!(ok("{\"Operat\u{0131}on\":\"o\"}").operation, "o");
        // Escaped keys are decoded before matching.
        assert_eq!(ok(r#"{"\u0057ho":"a@b"}"#).who, "a@b");
        assert_eq!(ok(r#"{"W\u0068O":"a@b"}"#).who, "a@b");
        // Near misses are unknown keys.
        assert_eq!(ok(r#"{"Who ":"a@b"}"#).who, "");
        assert_eq!(ok(r#"{"Whoo":"a@b","Wh":"x"}"#).who, "");
        assert_eq!(ok("{\"W\u{00F6}\":\"x\"}").who, "");
    }

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
    fn duplicates_later_wins() {
        assert_eq!(ok(r#"{"Who":"a@x","who":"b@y"}"#).who, "b@y");
        assert_eq!(ok(r#"{"who":"b@y","Who":"a@x"}"#).who, "a@x");
        // null does not reset an earlier value.
        assert_eq!(ok(r#"{"Who":"a@x","Who":null}"#).who, "a@x");
        let c = ok(r#"{"Created":"2026-01-02T03:04:05Z","created":null}"#);
        assert_eq!(c.created, Some(utc(2026, 1, 2, 3, 4, 5, 0)));
        let c = ok(r#"{"Created":"2026-01-02T03:04:05Z","CREATED":"2027-01-02T03:04:05Z"}"#);
        assert_eq!(c.created, Some(utc(2027, 1, 2, 3, 4, 5, 0)));
    }

    #[test]
    fn unknown_keys_are_ignored_whatever_their_type() {
        let raw = r#"{"Info":{"a":[1,2,{"b":null}]},"Path":[true,false],"X":1.5e3,"Y":-0,"Z":null,"Who":"u@h","":"","Ident":"x"}"#;
        let info = ok(raw);
        assert_eq!(info.who, "u@h");
        assert_eq!(info.id, "");
        assert_eq!(ok(r#"{"Info":"","Path":""}"#), LockInfo::default());
    }

    #[test]
    fn wrong_types_reject_the_document() {
        assert_eq!(
            err(br#"{"Who":1}"#),
            LockInfoError::WrongType {
                field: "Who",
                found: "number"
            }
        );
        assert_eq!(
            err(br#"{"ID":true}"#),
            LockInfoError::WrongType {
                field: "ID",
                found: "bool"
            }
        );
        assert!(matches!(
            err(br#"{"version":{}}"#),
            LockInfoError::WrongType {
                field: "Version",
                found: "object"
            }
        ));
        assert!(matches!(
            err(br#"{"Operation":[]}"#),
            LockInfoError::WrongType {
                field: "Operation",
                found: "array"
            }
        ));
        // Even when a later duplicate is a valid string.
        assert!(parse_lock_info(br#"{"Who":1,"Who":"a@b"}"#).is_err());
    }

    #[test]
    fn nulls_are_fine() {
        let info = ok(r#"{"ID":null,"Operation":null,"Who":null,"Version":null,"Created":null}"#);
        assert_eq!(info, LockInfo::default());
        assert_eq!(ok("{}"), LockInfo::default());
        assert_eq!(ok(" \t\r\n{ } \n"), LockInfo::default());
    }

    #[test]
    fn top_level_values() {
        assert_eq!(ok("null"), LockInfo::default());
        assert_eq!(ok("  null  "), LockInfo::default());
        assert_eq!(err(b"[]"), LockInfoError::NotAnObject { found: "array" });
        assert_eq!(
            err(b"\"x\""),
            LockInfoError::NotAnObject { found: "string" }
        );
        assert_eq!(err(b"1"), LockInfoError::NotAnObject { found: "number" });
        assert_eq!(err(b"true"), LockInfoError::NotAnObject { found: "bool" });
    }

    #[test]
    fn syntax_errors() {
        for raw in [
            &b""[..],
            b"   ",
            b"{",
            b"{\"Who\"",
            b"{\"Who\":",
            b"{\"Who\":\"a\"",
            b"{\"Who\":\"a\",}",
            b"{\"Who\":\"a\"} x",
            b"{}{}",
            b"{\"Who\" \"a\"}",
            b"{Who:\"a\"}",
            b"{'Who':'a'}",
            b"{\"Who\":\"a\nb\"}",
            b"{\"Who\":\"\\x\"}",
            b"{\"Who\":\"\\'\"}",
            b"{\"Who\":\"\\u12\"}",
            b"{\"Who\":\"\\u12G4\"}",
            b"{\"X\":01}",
            b"{\"X\":1.}",
            b"{\"X\":.5}",
            b"{\"X\":1e}",
            b"{\"X\":+1}",
            b"{\"X\":-}",
            b"{\"X\":tru}",
            b"{\"X\":True}",
            b"{\"X\":nul}",
            b"{\"X\":[1,]}",
            b"{\"X\":[1 2]}",
            b"{\"X\":{\"a\"}}",
            b"{\"X\":NaN}",
            b"\xEF\xBB\xBF{}",
            b"{}\x00",
            b"{\"Who\":\"a\"}\x0c",
            b"nulll",
        ] {
            assert!(
                matches!(parse_lock_info(raw), Err(LockInfoError::Syntax { .. })),
                "{:?}",
                String::from_utf8_lossy(raw)
            );
        }
    }

    #[test]
    fn syntax_error_wins_over_type_error() {
        assert!(matches!(
            err(br#"{"Who":1} x"#),
            LockInfoError::Syntax { .. }
        ));
        assert!(matches!(err(b"[1,]"), LockInfoError::Syntax { .. }));
        assert!(matches!(
            err(br#"{"Created":"bad","X":}"#),
            LockInfoError::Syntax { .. }
        ));
    }

    #[test]
    fn created_error_wins_over_earlier_type_error() {
        assert_eq!(
            err(br#"{"Who":1,"Created":"bad"}"#),
            LockInfoError::BadCreated { found: "string" }
        );
        assert_eq!(
            err(br#"{"Created":5}"#),
            LockInfoError::BadCreated { found: "number" }
        );
        assert_eq!(
            err(br#"{"Created":{}}"#),
            LockInfoError::BadCreated { found: "object" }
        );
    }

    #[test]
    fn bad_created_rejects_the_document() {
        for c in [
            "yesterday",
            "",
            "2026-13-01T00:00:00Z",
            "2026-02-30T00:00:00Z",
            "2026-02-29T00:00:00Z",
            "2026-04-31T00:00:00Z",
            "2026-00-01T00:00:00Z",
            "2026-01-00T00:00:00Z",
            "2026\\u002d01-01T00:00:00Z",
            "2026-01-01T00:00:00\\u005a",
            "2026-01-01T00:00:00.5\\/",
            "2026-01-01t00:00:00Z",
            "2026-01-01T00:00:00z",
            "2026-01-01 00:00:00Z",
            "2026-01-01T00:00:00",
            "2026-01-01T24:00:00Z",
            "2026-01-01T00:60:00Z",
            "2026-01-01T00:00:60Z",
            "2026-01-01T00:00:00.Z",
            "2026-01-01T00:00:00+0200",
            "2026-01-01T00:00:00+02",
            "2026-01-01T00:00:00+25:00",
            "2026-01-01T00:00:00+00:61",
            "2026-01-01T00:00:00Z ",
            " 2026-01-01T00:00:00Z",
            "26-01-01T00:00:00Z",
            "+2026-01-01T00:00:00Z",
            "2026-1-01T00:00:00Z",
            "2026-01-1T00:00:00Z",
            "2026-01-01T00:0:00Z",
            "2026-01-01T00:00:0Z",
            "2026-01-01T00:00:00+00:44:30",
            "2026-01-01T00:00:00Z[UTC]",
            "2026-01-01",
        ] {
            let raw = format!("{{\"Who\":\"a@b\",\"Created\":\"{c}\"}}");
            assert_eq!(
                parse_lock_info(raw.as_bytes()),
                Err(LockInfoError::BadCreated { found: "string" }),
                "{c:?}"
            );
        }
        // Non-string, non-null Created.
        for v in ["1", "true", "[]", "{}", "\"\"", "0"] {
            let raw = format!("{{\"Created\":{v}}}");
            assert!(
                matches!(
                    parse_lock_info(raw.as_bytes()),
                    Err(LockInfoError::BadCreated { .. })
                ),
                "{v}"
            );
        }
    }

    #[test]
    fn good_created_values() {
        let cases = [
            ("2026-09-26T15:53:38Z", utc(2026, 9, 26, 15, 53, 38, 0)),
            (
                "2026-09-26T15:53:38.315668626Z",
                utc(2026, 9, 26, 15, 53, 38, 315_668_626),
            ),
            // Beyond nine digits Go truncates, never rounds.
            (
                "2026-09-26T15:53:38.999999999999Z",
                utc(2026, 9, 26, 15, 53, 38, 999_999_999),
            ),
            (
                "2026-09-26T15:53:38.5Z",
                utc(2026, 9, 26, 15, 53, 38, 500_000_000),
            ),
            ("2026-09-26T17:53:38+02:00", utc(2026, 9, 26, 15, 53, 38, 0)),
            ("2026-09-26T10:23:38-05:30", utc(2026, 9, 26, 15, 53, 38, 0)),
            ("2026-09-26T15:53:38-00:00", utc(2026, 9, 26, 15, 53, 38, 0)),
            // Go's lenient layout parser: one-digit hour, comma fraction.
            ("2026-09-26T5:53:38Z", utc(2026, 9, 26, 5, 53, 38, 0)),
            (
                "2026-09-26T15:53:38,25Z",
                utc(2026, 9, 26, 15, 53, 38, 250_000_000),
            ),
            // Offset hour 24 and minute 60 are accepted by Go.
            ("2026-09-24T12:00:00+24:00", utc(2026, 9, 23, 12, 0, 0, 0)),
            ("2026-09-24T12:00:00+23:60", utc(2026, 9, 23, 12, 0, 0, 0)),
            ("2026-09-24T12:00:00+24:60", utc(2026, 9, 23, 11, 0, 0, 0)),
            ("2024-02-29T00:00:00Z", utc(2024, 2, 29, 0, 0, 0, 0)),
            ("2000-02-29T00:00:00Z", utc(2000, 2, 29, 0, 0, 0, 0)),
            ("0000-02-29T00:00:00Z", utc(0, 2, 29, 0, 0, 0, 0)),
            ("9999-12-31T23:59:59Z", utc(9999, 12, 31, 23, 59, 59, 0)),
            ("0099-01-01T00:00:00Z", utc(99, 1, 1, 0, 0, 0, 0)),
        ];
        for (s, want) in cases {
            assert_eq!(t(s), Some(want), "{s}");
            let raw = format!("{{\"Created\":\"{s}\"}}");
            assert_eq!(ok(&raw).created, Some(want), "{s}");
        }
        assert_eq!(t("1900-02-29T00:00:00Z"), None);
        assert_eq!(t("2100-02-29T00:00:00Z"), None);
    }

    #[test]
    fn zero_created_is_not_usable() {
        assert_eq!(t("0001-01-01T00:00:00Z"), Some(utc(1, 1, 1, 0, 0, 0, 0)));
        assert_eq!(ok(r#"{"Created":"0001-01-01T00:00:00Z"}"#).created, None);
        // The same instant written with an offset is still Go's zero time.
        assert_eq!(
            ok(r#"{"Created":"0001-01-01T01:00:00+01:00"}"#).created,
            None
        );
        // One nanosecond later is a real time.
        assert!(ok(r#"{"Created":"0001-01-01T00:00:00.000000001Z"}"#)
            .created
            .is_some());
        assert!(ok(r#"{"Created":"0000-12-31T23:59:59Z"}"#)
            .created
            .is_some());
        assert_eq!(ok(r#"{"Who":"a@b"}"#).created, None);
    }

    #[test]
    fn holder_hosts() {
        assert_eq!(holder_host("@pod"), Some("pod"));
        assert_eq!(holder_host("user@pod"), Some("pod"));
        assert_eq!(holder_host("a@b@pod"), Some("pod"));
        assert_eq!(holder_host("user@"), None);
        assert_eq!(holder_host("@"), None);
        assert_eq!(holder_host("nouser"), None);
        assert_eq!(holder_host(""), None);
    }

    #[test]
    fn large_inputs() {
        let who = "w".repeat(1 << 20);
        let raw = format!("{{\"Who\":\"u@{who}\"}}");
        let info = ok(&raw);
        assert_eq!(info.who.len(), (1 << 20) + 2);
        // A 1 MiB unknown key is skipped without decoding.
        let raw = format!("{{\"{who}\":1,\"ID\":\"x\"}}");
        assert_eq!(ok(&raw).id, "x");
    }

    #[test]
    fn deep_nesting_is_bounded_and_matches_go() {
        // 64 KiB of '{': a syntax error, no stack overflow.
        let raw = vec![b'{'; 64 * 1024];
        assert!(matches!(err(&raw), LockInfoError::Syntax { .. }));
        let raw = vec![b'['; 64 * 1024];
        assert!(matches!(err(&raw), LockInfoError::Syntax { .. }));
        let mut raw = b"{\"Info\":".to_vec();
        raw.extend(std::iter::repeat_n(b'[', 64 * 1024));
        assert!(matches!(err(&raw), LockInfoError::Syntax { .. }));

        // Go allows exactly 10 000 levels: the object is level 1.
        let nested = |levels: usize| {
            let mut s = String::from("{\"Info\":");
            s.push_str(&"[".repeat(levels - 1));
            s.push_str(&"]".repeat(levels - 1));
            s.push_str(",\"Who\":\"u@h\"}");
            s
        };
        assert_eq!(ok(&nested(MAX_DEPTH)).who, "u@h");
        assert_eq!(
            err(nested(MAX_DEPTH + 1).as_bytes()),
            LockInfoError::Syntax {
                reason: "exceeded max depth",
                offset: 8 + MAX_DEPTH
            }
        );
        let mut objs = String::from("{\"Info\":");
        for _ in 0..MAX_DEPTH {
            objs.push_str("{\"a\":");
        }
        objs.push('1');
        objs.push_str(&"}".repeat(MAX_DEPTH + 1));
        assert!(matches!(err(objs.as_bytes()), LockInfoError::Syntax { .. }));
    }

    #[test]
    fn invalid_utf8_is_replaced_per_byte() {
        let raw = b"{\"Who\":\"u@p\xffo\xe2\x82d\"}";
        assert_eq!(
            parse_lock_info(raw).unwrap().who,
            "u@p\u{FFFD}o\u{FFFD}\u{FFFD}d"
        );
        // An encoded surrogate (ED A0 80) is three bad bytes in Go too.
        let raw = b"{\"Who\":\"\xed\xa0\x80\"}";
        assert_eq!(parse_lock_info(raw).unwrap().who, "\u{FFFD}".repeat(3));
        // Valid multi-byte text passes through.
        assert_eq!(
            ok("{\"Who\":\"h\u{e9}@p\u{1F600}\"}").who,
            "h\u{e9}@p\u{1F600}"
        );
        // Invalid bytes in a key never match a field.
        assert_eq!(parse_lock_info(b"{\"Wh\xff\":\"x\"}").unwrap().who, "");
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

    #[test]
    fn surrogate_escapes() {
        assert_eq!(ok(r#"{"Who":"\ud800"}"#).who, "\u{FFFD}");
        assert_eq!(ok(r#"{"Who":"\udc00"}"#).who, "\u{FFFD}");
        assert_eq!(ok(r#"{"Who":"\ud83d\ude00"}"#).who, "\u{1F600}");
        assert_eq!(ok(r#"{"Who":"\uD83D\uDE00"}"#).who, "\u{1F600}");
        // High then high: the first is replaced, the second stands alone.
        assert_eq!(ok(r#"{"Who":"\ud800\ud800"}"#).who, "\u{FFFD}\u{FFFD}");
        // High then a high+low pair: replacement, then the pair.
        assert_eq!(
            ok(r#"{"Who":"\ud800\ud83d\ude00"}"#).who,
            "\u{FFFD}\u{1F600}"
        );
        // Low then high: both replaced.
        assert_eq!(ok(r#"{"Who":"\ude00\ud83d"}"#).who, "\u{FFFD}\u{FFFD}");
        // High followed by a non-\u escape or plain text.
        assert_eq!(ok(r#"{"Who":"\ud800\n"}"#).who, "\u{FFFD}\n");
        assert_eq!(ok(r#"{"Who":"\ud800x"}"#).who, "\u{FFFD}x");
        // Other escapes.
        assert_eq!(
            ok(r#"{"Who":"\"\\\/\b\f\n\r\t\u0041\u00e9\u0000"}"#).who,
            "\"\\/\u{8}\u{c}\n\r\tA\u{e9}\u{0}"
        );
    }

    #[test]
    fn errors_never_echo_input() {
        let secret = "SECRET-TOKEN";
        for raw in [
            format!("{{\"Who\":\"{secret}\"}} junk"),
            format!("[\"{secret}\"]"),
            format!("{{\"Who\":{secret}}}"),
            format!("{{\"Created\":\"{secret}\"}}"),
            format!("{{\"ID\":1,\"{secret}\":2}}"),
        ] {
            let e = parse_lock_info(raw.as_bytes()).unwrap_err();
            assert!(!e.to_string().contains(secret), "{e}");
            assert!(e.to_string().len() < 120, "{e}");
        }
    }

    #[test]
    fn error_messages() {
        assert_eq!(
            LockInfoError::WrongType {
                field: "Who",
                found: "number"
            }
            .to_string(),
            "lock-info field Who is a JSON number, not a string"
        );
        assert_eq!(
            err(b"").to_string(),
            "lock-info is not valid JSON: unexpected end of JSON input at byte 0"
        );
    }
}
