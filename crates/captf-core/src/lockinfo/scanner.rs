//! The JSON walk: Go's scanner rules (grammar, whitespace, nesting limit)
//! and its decoder's assignment rules (first error of each kind, later
//! duplicates win, `null` is a no-op), without recursion.

use super::go_string::{decode_go_string, match_field};
use super::go_time::{is_go_zero_time, parse_go_rfc3339};
use super::{Field, LockInfo, LockInfoError, MAX_DEPTH};

/// Decodes `raw` as Go's `json.Unmarshal` into CAPTF's `locks.Info`.
pub(super) fn decode(raw: &[u8]) -> Result<LockInfo, LockInfoError> {
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
