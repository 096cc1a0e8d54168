//! No import circle between the binary's modules: between top-level modules
//! (`watch`, `shared`, `metrics`, ...) and between the files of one module.
//! Between crates a circle is a compile error; inside a crate it is not, so
//! this test reads the `use` paths of every non-test file under `src/`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Graph = BTreeMap<String, BTreeSet<String>>;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// `src/watch/follow.rs` -> ["watch", "follow"]; `src/watch/mod.rs` ->
/// ["watch"]; None for test files, `lib.rs` and `main.rs`.
fn module_of(src: &Path, file: &Path) -> Option<Vec<String>> {
    let rel = file.strip_prefix(src).ok()?.with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    let test = parts
        .iter()
        .any(|p| p == "tests" || p.ends_with("_tests") || p == "fixtures");
    if parts.is_empty() || test || parts == ["lib"] || parts == ["main"] {
        return None;
    }
    Some(parts)
}

/// The code of a file without its comments and its `#[cfg(test)]` tail.
fn code_of(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests {") {
        Some(i) => &text[..i],
        None => text,
    };
    text.lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every `<prefix>name` in `code`, as `name`.
fn names_after<'a>(code: &'a str, prefix: &'a str) -> impl Iterator<Item = (&'a str, &'a str)> {
    code.match_indices(prefix).filter_map(move |(i, _)| {
        let before = code[..i].chars().last();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            return None;
        }
        let rest = &code[i + prefix.len()..];
        let end = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        let first = &rest[..end];
        let after = rest[end..].strip_prefix("::").unwrap_or("");
        let end2 = after
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(after.len());
        (!first.is_empty()).then_some((first, &after[..end2]))
    })
}

fn graphs() -> (Graph, Graph) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let (mut top, mut inner) = (Graph::new(), Graph::new());
    for f in files {
        let Some(m) = module_of(&src, &f) else {
            continue;
        };
        let code = code_of(&std::fs::read_to_string(&f).expect("reads a source file"));
        let here = m[0].clone();
        let file = m[..m.len().min(2)].join("/");
        for (first, second) in names_after(&code, "crate::") {
            if first != here {
                top.entry(here.clone())
                    .or_default()
                    .insert(first.to_string());
            } else if m.len() > 1 && !second.is_empty() {
                let to = format!("{here}/{second}");
                if to != file {
                    inner.entry(file.clone()).or_default().insert(to);
                }
            }
        }
        if m.len() == 2 {
            for (first, _) in names_after(&code, "super::") {
                let to = format!("{here}/{first}");
                if to != file {
                    inner.entry(file.clone()).or_default().insert(to);
                }
            }
        }
    }
    (top, inner)
}

/// One circle of `g`, if it has any.
fn a_circle(g: &Graph) -> Option<Vec<String>> {
    fn visit(
        g: &Graph,
        n: &str,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == n) {
            let mut c = path[i..].to_vec();
            c.push(n.to_string());
            return Some(c);
        }
        if done.contains(n) {
            return None;
        }
        path.push(n.to_string());
        for next in g.get(n).into_iter().flatten() {
            if let Some(c) = visit(g, next, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(n.to_string());
        None
    }
    let mut done = BTreeSet::new();
    g.keys()
        .find_map(|n| visit(g, n, &mut Vec::new(), &mut done))
}

#[test]
fn no_import_circle_between_top_level_modules() {
    let (top, _) = graphs();
    assert!(
        top.contains_key("server"),
        "the graph read nothing: {top:?}"
    );
    if let Some(c) = a_circle(&top) {
        panic!("import circle: {}", c.join(" -> "));
    }
}

#[test]
fn no_import_circle_between_the_files_of_a_module() {
    let (_, inner) = graphs();
    if let Some(c) = a_circle(&inner) {
        panic!("import circle: {}", c.join(" -> "));
    }
}

#[test]
fn the_circle_finder_finds_a_circle() {
    let mut g = Graph::new();
    g.entry("a".into()).or_default().insert("b".into());
    g.entry("b".into()).or_default().insert("c".into());
    assert_eq!(a_circle(&g), None);
    g.entry("c".into()).or_default().insert("a".into());
    assert_eq!(
        a_circle(&g),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
}
