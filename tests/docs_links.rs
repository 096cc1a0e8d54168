//! The documentation's links hold: every alert of `alerts/*.rules.yaml` has
//! its page `docs/runbooks/<alert>.md`; every `runbook_url` (the rules, the
//! alert unit tests, the chart's rule files and its template's prefix) opens
//! the page of its own alert; and every relative link and `#anchor` in
//! `README.md`, `chart/README.md` and `docs/**/*.md` resolves, anchors by
//! GitHub's rules (lowercase, spaces to '-', punctuation dropped, a repeated
//! heading numbered). Links inside code and HTML comments are not links.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Where every alert's `runbook_url` points: the folder of the pages.
const RUNBOOKS_URL: &str =
    "https://github.com/captf-io/captf-lock-exporter/blob/main/docs/runbooks";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The files of `dir` whose names end in `suffix`, sorted; below it too when
/// `deep`.
fn files(dir: &Path, suffix: &str, deep: bool) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            if deep {
                out.extend(files(&path, suffix, deep));
            }
        } else if path.to_string_lossy().ends_with(suffix) {
            out.push(path);
        }
    }
    out.sort();
    out
}

/// The Markdown files whose links are checked.
fn markdown_files() -> Vec<PathBuf> {
    let mut out = vec![root().join("README.md"), root().join("chart/README.md")];
    out.extend(files(&root().join("docs"), ".md", true));
    out
}

/// `text` with fenced code blocks, inline code spans and HTML comments
/// blanked (newlines kept, so line numbers stay right).
fn prose(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut fenced = false;
    for line in text.split_inclusive('\n') {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            out.push('\n');
        } else if fenced {
            out.push('\n');
        } else {
            out.push_str(&blank_spans(line));
        }
    }
    blank_between(&out, "<!--", "-->")
}

/// A line without its `code spans`.
fn blank_spans(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut in_code = false;
    for c in line.chars() {
        if c == '`' {
            in_code = !in_code;
            out.push(' ');
        } else {
            out.push(if in_code && c != '\n' { ' ' } else { c });
        }
    }
    out
}

/// `text` with everything from `open` to `close` blanked but newlines.
fn blank_between(text: &str, open: &str, close: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find(open) {
        out.push_str(&rest[..start]);
        let end = rest[start..]
            .find(close)
            .map_or(rest.len(), |e| start + e + close.len());
        out.extend(rest[start..end].chars().filter(|&c| c == '\n'));
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// The targets of the inline links and images of `text`, with their line.
fn links(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (n, line) in prose(text).lines().enumerate() {
        let mut rest = line;
        while let Some(i) = rest.find("](") {
            let tail = &rest[i + 2..];
            let Some(end) = tail.find(')') else { break };
            let target = tail[..end].split_whitespace().next().unwrap_or_default();
            out.push((n + 1, target.to_string()));
            rest = &tail[end..];
        }
    }
    out
}

/// GitHub's anchor of a heading: link text kept, lowercase, every character
/// but letters, digits, '-', '_' and spaces dropped, spaces to '-'.
fn slug(heading: &str) -> String {
    let mut text = String::new();
    let mut rest = heading;
    // [text](url) renders as text.
    while let Some(open) = rest.find('[') {
        let Some(mid) = rest[open..].find("](") else {
            break;
        };
        let Some(close) = rest[open + mid..].find(')') else {
            break;
        };
        text.push_str(&rest[..open]);
        text.push_str(&rest[open + 1..open + mid]);
        rest = &rest[open + mid + close + 1..];
    }
    text.push_str(rest);
    text.trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// Every anchor a Markdown file offers: its headings (a repeated one gets
/// `-1`, `-2`, ...) and its `<a id="...">` / `<a name="...">` tags.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if (1..=6).contains(&hashes) && line[hashes..].starts_with(' ') {
            let base = slug(&line[hashes..]);
            let mut anchor = base.clone();
            let mut n = 0;
            while found.contains(&anchor) {
                n += 1;
                anchor = format!("{base}-{n}");
            }
            found.insert(anchor);
        }
        for attr in ["<a id=\"", "<a name=\""] {
            for part in line.split(attr).skip(1) {
                if let Some(end) = part.find('"') {
                    found.insert(part[..end].to_string());
                }
            }
        }
    }
    found
}

/// Why `target`, linked from `file`, does not resolve; None when it does.
fn broken(file: &Path, target: &str) -> Option<String> {
    if target.contains("://") || target.starts_with("mailto:") || target.is_empty() {
        return None;
    }
    let (path, fragment) = target.split_once('#').unwrap_or((target, ""));
    let dest = if path.is_empty() {
        file.to_path_buf()
    } else {
        file.parent().unwrap_or(root()).join(path)
    };
    if !dest.exists() {
        return Some(format!("{} does not exist", dest.display()));
    }
    if fragment.is_empty() {
        return None;
    }
    if !dest.to_string_lossy().ends_with(".md") {
        return Some(format!(
            "#{fragment} into {}, which is no Markdown page",
            dest.display()
        ));
    }
    let offered = anchors(&read(&dest));
    (!offered.contains(fragment))
        .then(|| format!("no heading or anchor #{fragment} in {}", dest.display()))
}

/// Every link of the Markdown files that does not resolve, as `file:line: target: why`.
fn broken_links(paths: &[PathBuf]) -> Vec<String> {
    let mut out = Vec::new();
    for file in paths {
        for (line, target) in links(&read(file)) {
            if let Some(why) = broken(file, &target) {
                let rel = file.strip_prefix(root()).unwrap_or(file);
                out.push(format!("{}:{line}: {target}: {why}", rel.display()));
            }
        }
    }
    out
}

#[test]
fn every_relative_link_and_anchor_resolves() {
    let paths = markdown_files();
    assert!(
        paths.len() > 20,
        "only {} Markdown files found",
        paths.len()
    );
    let checked: usize = paths.iter().map(|p| links(&read(p)).len()).sum();
    assert!(checked > 100, "only {checked} links found");
    let broken = broken_links(&paths);
    assert!(
        broken.is_empty(),
        "{} broken links:\n{}",
        broken.len(),
        broken.join("\n")
    );
}

/// The checker can fail: a missing file, a missing anchor, a link into a
/// non-Markdown file's anchor; and it passes what GitHub resolves.
#[test]
fn the_link_checker_catches_what_github_would_not_resolve() {
    let dir = std::env::temp_dir().join(format!("docs-links-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    let page = dir.join("page.md");
    let text =
        "# Page\n\n## What to do: step 2 (`force-unlock`)\n\n## Page\n\n<a id=\"tag\"></a>\n\n\
        [ok](#what-to-do-step-2-force-unlock) [ok](#page-1) [ok](#tag) [ok](page.md) [ok](./)\n\
        [bad](#what-to-do) [bad](missing.md) [bad](page.md#nowhere) [bad](./#x)\n\
        `[code](missing-in-code.md)` <!-- [comment](missing-in-comment.md) -->\n\
        ```\n[fenced](missing-in-fence.md)\n```\n";
    std::fs::write(&page, text).unwrap_or_else(|e| panic!("{e}"));
    let broken = broken_links(std::slice::from_ref(&page));
    let _ = std::fs::remove_dir_all(&dir);
    let targets: Vec<&str> = broken.iter().filter_map(|b| b.split(": ").nth(1)).collect();
    assert_eq!(
        targets,
        ["#what-to-do", "missing.md", "page.md#nowhere", "./#x"],
        "{broken:#?}"
    );
}

/// Every alert name of `alerts/*.rules.yaml`, and each `runbook_url` of the
/// file with the alert it belongs to (the last `alert:` or `alertname:` line
/// above it).
fn alerts_and_urls(text: &str) -> (BTreeSet<String>, Vec<(String, String)>) {
    let (mut alerts, mut urls, mut current) = (BTreeSet::new(), Vec::new(), String::new());
    for line in text.lines() {
        let line = line.trim().trim_start_matches("- ");
        if let Some(name) = line
            .strip_prefix("alert:")
            .or_else(|| line.strip_prefix("alertname:"))
        {
            current = scalar(name);
            if line.starts_with("alert:") {
                alerts.insert(current.clone());
            }
        } else if let Some(url) = line.strip_prefix("runbook_url:") {
            urls.push((current.clone(), scalar(url)));
        }
    }
    (alerts, urls)
}

/// A plain or quoted one-line YAML scalar as its value: the mixin's
/// generated rules quote every string, the alert unit tests do not.
fn scalar(raw: &str) -> String {
    let raw = raw.trim();
    ['"', '\'']
        .iter()
        .find_map(|q| raw.strip_prefix(*q).and_then(|r| r.strip_suffix(*q)))
        .unwrap_or(raw)
        .to_string()
}

fn rule_files(dir: &str) -> Vec<PathBuf> {
    files(&root().join(dir), ".rules.yaml", false)
}

#[test]
fn every_alert_has_its_runbook_page() {
    let mut alerts = BTreeSet::new();
    for file in rule_files("alerts") {
        alerts.extend(alerts_and_urls(&read(&file)).0);
    }
    assert!(alerts.len() >= 8, "only {alerts:?}");
    let missing: Vec<_> = alerts
        .iter()
        .filter(|a| !root().join(format!("docs/runbooks/{a}.md")).is_file())
        .collect();
    assert!(
        missing.is_empty(),
        "alerts without docs/runbooks/<alert>.md: {missing:?}"
    );
    let index = read(&root().join("docs/runbooks/README.md"));
    let readme = read(&root().join("README.md"));
    for alert in &alerts {
        let link = format!("[{alert}](docs/runbooks/{alert}.md)");
        assert!(readme.contains(&link), "README's alert table lacks {link}");
        let link = format!("[{alert}]({alert}.md)");
        assert!(
            index.contains(&link),
            "docs/runbooks/README.md lacks {link}"
        );
    }
}

/// Every page answers the same five questions, in this order.
#[test]
fn every_runbook_page_has_the_five_sections() {
    let sections = [
        "What it means",
        "Impact",
        "Confirm",
        "What to do",
        "What not to do",
    ];
    for file in rule_files("alerts") {
        for alert in alerts_and_urls(&read(&file)).0 {
            let page = read(&root().join(format!("docs/runbooks/{alert}.md")));
            assert!(
                page.starts_with(&format!("# {alert}\n")),
                "{alert}.md: title"
            );
            let at: Vec<Option<usize>> = sections
                .iter()
                .map(|s| page.find(&format!("\n## {s}\n")))
                .collect();
            assert!(
                at.iter().all(Option::is_some) && at.windows(2).all(|w| w[0] < w[1]),
                "{alert}.md: sections {sections:?} not all there in order: {at:?}"
            );
        }
    }
}

#[test]
fn every_runbook_url_opens_its_alerts_page() {
    let template = read(&root().join("chart/templates/prometheusrule.yaml"));
    assert!(
        template.contains(&format!("$runbookPrefix := \"{RUNBOOKS_URL}\"")),
        "the chart's runbookBaseUrl replaces {RUNBOOKS_URL}, the prefix of every runbook_url"
    );
    let mut sources = rule_files("alerts");
    sources.extend(rule_files("chart/files/alerts"));
    sources.extend(files(&root().join("alerts/tests"), ".yaml", false));
    sources.extend(rule_files("tools/chart/fixtures/alerts"));
    let mut seen = 0;
    let mut wrong = Vec::new();
    for file in &sources {
        for (alert, url) in alerts_and_urls(&read(file)).1 {
            seen += 1;
            let want = format!("{RUNBOOKS_URL}/{alert}.md");
            let page = root().join(format!("docs/runbooks/{alert}.md"));
            if url != want || !page.is_file() {
                let rel = file.strip_prefix(root()).unwrap_or(file);
                wrong.push(format!(
                    "{}: {alert}: {url} (want {want}, a page that exists)",
                    rel.display()
                ));
            }
        }
    }
    assert!(
        seen >= 80,
        "only {seen} runbook_url lines found in {sources:?}"
    );
    assert!(
        wrong.is_empty(),
        "{} runbook_url lines wrong:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

/// The front page stays a front page: at most 300 lines, and the two
/// commands that matter (the demo, and every test, which is what CI runs)
/// on its first screen.
#[test]
fn the_readme_is_short_and_starts_with_the_two_commands() {
    let readme = read(&root().join("README.md"));
    let lines = readme.lines().count();
    assert!(
        lines <= 300,
        "README.md has {lines} lines; the rest belongs in docs/"
    );
    let first_screen: Vec<&str> = readme.lines().take(25).collect();
    for command in [
        "cargo run -- demo --listen-address 127.0.0.1:9820",
        "./scripts/test.sh",
    ] {
        assert!(
            first_screen.iter().any(|l| l.starts_with(command)),
            "{command} is not on the README's first screen"
        );
    }
    let ci = read(&root().join(".ci/run"));
    assert!(
        ci.lines().any(|l| l.trim() == "exec ./scripts/test.sh"),
        ".ci/run no longer runs the README's test command:\n{ci}"
    );
}
