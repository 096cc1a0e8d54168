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
//!
//! Layout: `scanner` walks the JSON and assigns fields, `go_string`
//! copies Go's string decoding and key folding, `go_time` copies Go's
//! RFC 3339 parser. `tools/go-compat/` compares this decoder with real Go
//! (opt-in, see docs/decisions/core-parity.md).

mod go_string;
mod go_time;
mod scanner;
#[cfg(test)]
mod tests;

use chrono::{DateTime, Utc};

pub use go_time::parse_go_rfc3339;

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
///
/// The annotation is a Kubernetes string, so it is always valid UTF-8; use
/// [`parse_lock_info_bytes`] for arbitrary bytes.
///
/// ```
/// use captf_core::lockinfo::parse_lock_info;
///
/// let info = parse_lock_info(r#"{"ID":"4f2c","Who":"alice@laptop","Created":"0001-01-01T00:00:00Z"}"#)
///     .expect("valid lock-info");
/// assert_eq!((info.id.as_str(), info.who.as_str()), ("4f2c", "alice@laptop"));
/// assert_eq!(info.created, None); // Go's zero time is no lock time
/// // Go's encoding/json refuses a number where a string is declared.
/// assert!(parse_lock_info(r#"{"ID":7}"#).is_err());
/// ```
pub fn parse_lock_info(raw: &str) -> Result<LockInfo, LockInfoError> {
    scanner::decode(raw.as_bytes())
}

/// [`parse_lock_info`] over arbitrary bytes, as Go's `json.Unmarshal` takes
/// a `[]byte`: invalid UTF-8 inside strings is replaced as Go replaces it.
/// Used by the robustness tests and the comparison with Go
/// (`tools/go-compat/`), which feed it bytes no annotation can hold.
pub fn parse_lock_info_bytes(raw: &[u8]) -> Result<LockInfo, LockInfoError> {
    scanner::decode(raw)
}

/// The hostname in Who: the text after the LAST `@` (Go's
/// `strings.LastIndex`). `None` when there is no `@` or nothing after it.
pub fn holder_host(who: &str) -> Option<&str> {
    who.rsplit_once('@')
        .map(|(_, host)| host)
        .filter(|host| !host.is_empty())
}
