//! The protobuf wire format, read only and without a schema: a message is
//! a run of (field number, value) pairs, and a reader picks the fields it
//! knows and skips the rest. Only what Kubernetes' generated messages use
//! is accepted (varints, length-delimited bytes, fixed 32/64-bit numbers);
//! the deprecated group encoding, a truncated value or a varint past ten
//! bytes is an error, never a panic or a read past the slice.

use super::ProtoError;

/// One field's value as it sits on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Value<'a> {
    /// Wire type 0: an integer, a bool or an enum.
    Varint(u64),
    /// Wire type 2: a string, bytes, an embedded message or a map entry.
    Bytes(&'a [u8]),
    /// Wire types 1 and 5: a fixed-width number (no Kubernetes field the
    /// exporter reads is one; skipped).
    Fixed,
}

impl<'a> Value<'a> {
    /// The value as length-delimited bytes, or an error naming `field`.
    pub fn bytes(self, field: &'static str) -> Result<&'a [u8], ProtoError> {
        match self {
            Value::Bytes(b) => Ok(b),
            _ => Err(ProtoError::WireType(field)),
        }
    }

    /// The value as a UTF-8 string, or an error naming `field`.
    pub fn string(self, field: &'static str) -> Result<&'a str, ProtoError> {
        std::str::from_utf8(self.bytes(field)?).map_err(|_| ProtoError::Utf8(field))
    }

    /// The value as a varint, or an error naming `field`.
    pub fn varint(self, field: &'static str) -> Result<u64, ProtoError> {
        match self {
            Value::Varint(v) => Ok(v),
            _ => Err(ProtoError::WireType(field)),
        }
    }
}

/// The fields of one message, in wire order.
pub struct Fields<'a> {
    rest: &'a [u8],
}

/// Reads the fields of `message`.
pub fn fields(message: &[u8]) -> Fields<'_> {
    Fields { rest: message }
}

impl<'a> Fields<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], ProtoError> {
        if n > self.rest.len() {
            return Err(ProtoError::Truncated);
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }

    fn next_field(&mut self) -> Result<(u64, Value<'a>), ProtoError> {
        let key = varint(&mut self.rest)?;
        let number = key >> 3;
        let value = match key & 7 {
            0 => Value::Varint(varint(&mut self.rest)?),
            1 => {
                self.take(8)?;
                Value::Fixed
            }
            2 => {
                let len = varint(&mut self.rest)?;
                let len = usize::try_from(len).map_err(|_| ProtoError::Truncated)?;
                Value::Bytes(self.take(len)?)
            }
            5 => {
                self.take(4)?;
                Value::Fixed
            }
            other => return Err(ProtoError::UnknownWireType(other as u8)),
        };
        if number == 0 {
            return Err(ProtoError::FieldZero);
        }
        Ok((number, value))
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<(u64, Value<'a>), ProtoError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let item = self.next_field();
        if item.is_err() {
            // One error ends the message: what follows cannot be framed.
            self.rest = &[];
        }
        Some(item)
    }
}

/// Reads one base-128 varint off the front of `buf`.
fn varint(buf: &mut &[u8]) -> Result<u64, ProtoError> {
    let mut value: u64 = 0;
    for (i, &byte) in buf.iter().enumerate().take(10) {
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            *buf = &buf[i + 1..];
            return Ok(value);
        }
    }
    if buf.len() >= 10 {
        Err(ProtoError::VarintTooLong)
    } else {
        Err(ProtoError::Truncated)
    }
}

/// A protobuf writer for tests: builds the messages a server would send,
/// field by field, so a test states each byte's meaning.
#[cfg(test)]
pub mod write {
    /// Appends `v` as a varint.
    pub fn varint(out: &mut Vec<u8>, mut v: u64) {
        loop {
            let byte = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }

    /// A message under construction.
    #[derive(Default, Clone)]
    pub struct Msg(pub Vec<u8>);

    impl Msg {
        /// An empty message.
        pub fn new() -> Self {
            Msg(Vec::new())
        }
        /// Adds a length-delimited field.
        pub fn bytes(mut self, field: u64, b: &[u8]) -> Self {
            varint(&mut self.0, field << 3 | 2);
            varint(&mut self.0, b.len() as u64);
            self.0.extend_from_slice(b);
            self
        }
        /// Adds a string field.
        pub fn string(self, field: u64, s: &str) -> Self {
            self.bytes(field, s.as_bytes())
        }
        /// Adds an embedded message.
        pub fn msg(self, field: u64, m: Msg) -> Self {
            self.bytes(field, &m.0)
        }
        /// Adds a varint field.
        pub fn varint(mut self, field: u64, v: u64) -> Self {
            varint(&mut self.0, field << 3);
            varint(&mut self.0, v);
            self
        }
        /// Adds a map<string, string> entry.
        pub fn entry(self, field: u64, k: &str, v: &str) -> Self {
            self.msg(field, Msg::new().string(1, k).string(2, v))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::write::Msg;
    use super::*;

    #[test]
    fn reads_each_wire_type_and_skips_fixed_numbers() {
        let mut m = Msg::new().varint(1, 300).string(2, "hi").0;
        m.extend_from_slice(&[3 << 3 | 1, 1, 2, 3, 4, 5, 6, 7, 8]); // fixed64
        m.extend_from_slice(&[4 << 3 | 5, 1, 2, 3, 4]); // fixed32
        let got: Vec<_> = fields(&m).collect::<Result<_, _>>().unwrap();
        assert_eq!(
            got,
            vec![
                (1, Value::Varint(300)),
                (2, Value::Bytes(b"hi")),
                (3, Value::Fixed),
                (4, Value::Fixed)
            ]
        );
    }

    #[test]
    fn a_value_cut_short_is_an_error_not_a_read_past_the_end() {
        let m = Msg::new().string(1, "hello").0;
        for cut in 1..m.len() {
            let r: Result<Vec<_>, _> = fields(&m[..cut]).collect();
            assert_eq!(r.unwrap_err(), ProtoError::Truncated, "cut at {cut}");
        }
        // A length far past the message, and one past usize on 32 bits.
        let mut huge = vec![1 << 3 | 2];
        super::write::varint(&mut huge, u64::MAX);
        assert!(fields(&huge).next().unwrap().is_err());
    }

    #[test]
    fn groups_field_zero_and_overlong_varints_are_errors() {
        assert_eq!(
            fields(&[1 << 3 | 3]).next().unwrap().unwrap_err(),
            ProtoError::UnknownWireType(3)
        );
        assert_eq!(
            fields(&[0, 1]).next().unwrap().unwrap_err(),
            ProtoError::FieldZero
        );
        let long = [0x80u8; 11];
        assert_eq!(
            fields(&long).next().unwrap().unwrap_err(),
            ProtoError::VarintTooLong
        );
    }

    #[test]
    fn an_error_ends_the_message() {
        let mut m = vec![1 << 3 | 3];
        m.extend(Msg::new().varint(2, 1).0);
        let mut it = fields(&m);
        assert!(it.next().unwrap().is_err());
        assert!(it.next().is_none());
    }

    #[test]
    fn typed_reads_name_the_field_on_a_mismatch() {
        assert_eq!(
            Value::Varint(1).string("name").unwrap_err(),
            ProtoError::WireType("name")
        );
        assert_eq!(
            Value::Bytes(&[0xff]).string("name").unwrap_err(),
            ProtoError::Utf8("name")
        );
        assert_eq!(
            Value::Bytes(b"x").varint("code").unwrap_err(),
            ProtoError::WireType("code")
        );
    }
}
