//! Query strings and selectors of the simulated API.
//!
//! Selectors are honoured loosely: equality, inequality and existence
//! terms are applied; set-based terms (`in`, `notin`) are ignored, which
//! only lets more through. The exporter checks what it receives anyway.

use std::collections::HashMap;

use serde_json::Value;

/// Decodes `application/x-www-form-urlencoded` text (`+` is a space).
/// A malformed escape is kept as written.
pub fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = bytes
                    .get(i + 1..i + 3)
                    .and_then(|h| std::str::from_utf8(h).ok())
                    .and_then(|h| u8::from_str_radix(h, 16).ok());
                if let Some(b) = hex {
                    out.push(b);
                    i += 3;
                    continue;
                }
                out.push(b'%');
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The decoded parameters of a query string (the last of repeated keys).
pub fn params(query: &str) -> HashMap<String, String> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (decode(k), decode(v)),
            None => (decode(p), String::new()),
        })
        .collect()
}

/// Splits at the commas outside parentheses (`k in (a,b)` is one term).
fn split_terms(text: &str) -> Vec<&str> {
    let mut terms = Vec::new();
    let (mut depth, mut start) = (0usize, 0);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                terms.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    terms.push(&text[start..]);
    terms
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Term {
    Equals(String, String),
    Differs(String, String),
    Exists(String),
    Absent(String),
}

/// A parsed label or field selector.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selector {
    terms: Vec<Term>,
}

impl Selector {
    /// Parses `a=b,c!=d,e,!f`; unsupported terms are skipped.
    pub fn parse(text: &str) -> Selector {
        let terms = split_terms(text)
            .into_iter()
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .filter_map(|t| {
                if let Some((k, v)) = t.split_once("!=") {
                    Some(Term::Differs(k.trim().into(), v.trim().into()))
                } else if let Some((k, v)) = t.split_once("==").or_else(|| t.split_once('=')) {
                    Some(Term::Equals(k.trim().into(), v.trim().into()))
                } else if let Some(k) = t.strip_prefix('!') {
                    Some(Term::Absent(k.trim().into()))
                } else if t.contains(' ') || t.contains('(') {
                    None
                } else {
                    Some(Term::Exists(t.into()))
                }
            })
            .collect();
        Selector { terms }
    }

    /// Whether every term holds, looking values up with `value_of`.
    fn holds(&self, value_of: impl Fn(&str) -> Option<String>) -> bool {
        self.terms.iter().all(|t| match t {
            Term::Equals(k, v) => value_of(k).as_deref() == Some(v.as_str()),
            // Kubernetes: `k!=v` also matches objects without `k`.
            Term::Differs(k, v) => value_of(k).as_deref() != Some(v.as_str()),
            Term::Exists(k) => value_of(k).is_some(),
            Term::Absent(k) => value_of(k).is_none(),
        })
    }

    /// Matches an object's `metadata.labels`.
    pub fn matches_labels(&self, object: &Value) -> bool {
        let labels = object.pointer("/metadata/labels");
        self.holds(|k| {
            labels
                .and_then(|l| l.get(k))
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
    }

    /// Matches dotted field paths (`reason`, `metadata.name`); a missing
    /// field reads as empty, as the API server's field sets do.
    pub fn matches_fields(&self, object: &Value) -> bool {
        self.holds(|path| {
            let pointer = format!("/{}", path.replace('.', "/"));
            let text = match object.pointer(&pointer) {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Null) | None => String::new(),
                Some(other) => other.to_string(),
            };
            Some(text)
        })
    }
}

/// Both selectors of a list or watch request.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    labels: Selector,
    fields: Selector,
}

impl Filter {
    /// The selectors named in the query parameters.
    pub fn from_params(params: &HashMap<String, String>) -> Filter {
        let get = |k: &str| params.get(k).map(String::as_str).unwrap_or_default();
        Filter {
            labels: Selector::parse(get("labelSelector")),
            fields: Selector::parse(get("fieldSelector")),
        }
    }

    /// Whether the object passes both.
    pub fn keeps(&self, object: &Value) -> bool {
        self.labels.matches_labels(object) && self.fields.matches_fields(object)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn decodes_form_encoding() {
        assert_eq!(
            decode("tfstate%3Dtrue%2C%21captf.io%2Flease"),
            "tfstate=true,!captf.io/lease"
        );
        assert_eq!(decode("a+b%zz%4"), "a b%zz%4");
        let p = params("watch=true&labelSelector=a%3Db&limit");
        assert_eq!(p["watch"], "true");
        assert_eq!(p["labelSelector"], "a=b");
        assert_eq!(p["limit"], "");
    }

    #[test]
    fn label_selectors_as_the_exporter_sends_them() {
        let lease = |labels: Value| json!({"metadata": {"labels": labels}});
        let sel = Selector::parse("tfstate=true,!captf.io/lease");
        assert!(sel.matches_labels(&lease(json!({"tfstate": "true"}))));
        assert!(!sel.matches_labels(&lease(json!({"tfstate": "true", "captf.io/lease": "run"}))));
        assert!(!sel.matches_labels(&lease(json!({}))));
        assert!(Selector::parse("a!=b,c").matches_labels(&lease(json!({"c": ""}))));
        assert!(Selector::parse("x in (a,b),c").matches_labels(&lease(json!({"c": "1"}))));
    }

    #[test]
    fn field_selectors_read_dotted_paths() {
        let ev = json!({"reason": "ForceUnlocked", "metadata": {"name": "e1"}});
        assert!(Selector::parse("reason=ForceUnlocked").matches_fields(&ev));
        assert!(Selector::parse("metadata.name==e1").matches_fields(&ev));
        assert!(!Selector::parse("reason=Other").matches_fields(&ev));
        assert!(Selector::parse("note=").matches_fields(&ev));
    }
}
