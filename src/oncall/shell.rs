//! Quoting for the commands the reports print: values come from the
//! cluster (lock-info is untrusted), so every one is quoted for a POSIX
//! shell unless it is made of characters no shell treats specially.

/// `s` as one POSIX shell word: unchanged when it is made only of
/// `A-Z a-z 0-9 . _ - / : @ = + ,`, else single-quoted (a `'` inside becomes
/// `'\''`). Control characters are replaced by `?` so that a printed
/// command can never move the cursor or hide text; a value that needed
/// that is marked by [`has_control`].
pub fn shq(s: &str) -> String {
    let clean: String = s
        .chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    let plain = !clean.is_empty()
        && clean
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-/:@=+,".contains(&b));
    if plain {
        clean
    } else {
        format!("'{}'", clean.replace('\'', r"'\''"))
    }
}

/// Whether a value holds control characters (shown as `?` by [`shq`]).
pub fn has_control(s: &str) -> bool {
    s.chars().any(char::is_control)
}

/// A value for display on a terminal: control characters escaped.
pub fn show(s: &str) -> String {
    s.chars()
        .flat_map(|c| {
            if c.is_control() {
                c.escape_default().collect::<Vec<_>>()
            } else {
                vec![c]
            }
        })
        .collect()
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
        assert_eq!(shq("a\u{1b}[2J"), "'a?[2J'");
        assert!(has_control("a\nb"));
        assert_eq!(show("a\nb"), "a\\nb");
    }
}
