//! Quoting for the commands the reports print: values come from the
//! cluster (lock-info is untrusted), so every one is quoted for a POSIX
//! shell unless it is made of characters no shell treats specially.

use std::fmt::Write as _;

use crate::core::shown::{has_hidden, is_hidden, shown};

/// `s` as one shell word that the shell reads back as exactly `s`:
/// unchanged when it is made only of `A-Z a-z 0-9 . _ - / : @ = + ,`, else
/// single-quoted (a `'` inside becomes `'\''`). A value holding a character
/// [`is_hidden`] escapes is written as a dollar-single-quoted word
/// (`$'…'`, POSIX.1-2024; bash, zsh, ksh and busybox sh read it) with each
/// byte of such a character as a three-digit octal escape: the printed
/// command carries the raw value, and the terminal never receives the
/// character. [`has_hidden`] tells when a note is due.
///
/// ```
/// use captf_lock_exporter::oncall::shell::shq;
///
/// assert_eq!(shq("ns1/lock-tfstate-default-web"), "ns1/lock-tfstate-default-web");
/// assert_eq!(shq("alice's laptop"), r"'alice'\''s laptop'");
/// assert_eq!(shq("a\u{1b}[2Jb"), r"$'a\033[2Jb'");
/// ```
pub fn shq(s: &str) -> String {
    if has_hidden(s) {
        return dollar_quote(s);
    }
    let plain = !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-/:@=+,".contains(&b));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// `$'…'`: backslash and `'` escaped, hidden characters as octal bytes
/// (always three digits, so a digit that follows is never taken in).
fn dollar_quote(s: &str) -> String {
    let mut out = String::from("$'");
    for c in s.chars() {
        match c {
            '\\' => out.push_str(r"\\"),
            '\'' => out.push_str(r"\'"),
            c if is_hidden(c) => {
                let mut buf = [0u8; 4];
                for b in c.encode_utf8(&mut buf).bytes() {
                    let _ = write!(out, "\\{b:03o}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// A value for display on a terminal: hidden characters escaped
/// ([`crate::core::shown::shown`]).
pub fn show(s: &str) -> String {
    shown(s).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting() {
        assert_eq!(
            shq("lock-tfstate-default-abc-m"),
            "lock-tfstate-default-abc-m"
        );
        assert_eq!(shq("3442fe8d-2b45"), "3442fe8d-2b45");
        assert_eq!(shq(""), "''");
        assert_eq!(shq("a b"), "'a b'");
        assert_eq!(shq("$(rm -rf /)"), "'$(rm -rf /)'");
        assert_eq!(shq("it's"), r"'it'\''s'");
        assert!(has_hidden("a\nb"));
        assert_eq!(show("a\nb"), "a\\u{a}b");
    }

    #[test]
    fn hidden_characters_are_octal_in_dollar_quotes() {
        assert_eq!(shq("a\u{1b}[2J"), r"$'a\033[2J'");
        assert_eq!(shq("i\u{202e}d"), r"$'i\342\200\256d'");
        assert_eq!(shq("\u{200b}7"), r"$'\342\200\2137'");
        assert_eq!(shq("it's\\\u{7}"), r"$'it\'s\\\007'");
        for s in ["a\u{1b}b", "x\u{9b}", "\u{2028}", "\u{feff}id"] {
            assert!(!shq(s).chars().any(is_hidden), "{s:?}");
        }
    }
}
