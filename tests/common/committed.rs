//! A file the code makes, committed: compared with what the code makes
//! now, or rewritten when the named environment variable is set.

use std::path::Path;

/// Compares `text` with the committed file at `rel` (from the crate root);
/// with `bless_var` set, writes `text` there instead. A difference panics
/// with the first differing line of each and `hint`.
pub fn check_or_bless(rel: &str, text: &str, bless_var: &str, hint: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
    if std::env::var_os(bless_var).is_some() {
        std::fs::write(&path, text).unwrap_or_else(|e| panic!("write {path:?}: {e}"));
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    if committed != text {
        let line = text
            .lines()
            .zip(committed.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(text.lines().count().min(committed.lines().count()));
        panic!(
            "{rel} differs at line {}:\n  code makes: {:?}\n  committed:  {:?}\n{hint}",
            line + 1,
            text.lines().nth(line),
            committed.lines().nth(line),
        );
    }
}
