//! docs/metrics.md and docs/cli.md are made from the code: the metric
//! family table (`metrics::family_docs`, plus the self-metric counters as
//! `Health::register_counters` encodes them) and clap's help of every
//! subcommand. Each test fails when its committed page differs from what
//! the code makes now; `UPDATE_DOCS=1 cargo test --test docs_generated`
//! rewrites the pages instead.

#[path = "common/committed.rs"]
mod committed;

use std::collections::BTreeMap;
use std::path::Path;

use captf_lock_exporter::cli::Cli;
use captf_lock_exporter::core::captf_verdict::CaptfReason;
use captf_lock_exporter::core::classify::HolderClass;
use captf_lock_exporter::core::kind::Kind;
use captf_lock_exporter::core::node_lost::LostReason;
use captf_lock_exporter::health::Health;
use captf_lock_exporter::index::Resource;
use captf_lock_exporter::metrics::{family_docs, FamilyDoc};
use clap::CommandFactory;
use prometheus_client::registry::Registry;

const REGENERATE: &str = "UPDATE_DOCS=1 cargo test --test docs_generated";

/// One family with the label values its series may carry (closed sets
/// only; an open label such as `name` has none).
struct Row {
    doc: FamilyDoc,
    values: BTreeMap<String, Vec<String>>,
}

/// The self-metric counters, read from their OpenMetrics encoding with
/// every resource watched: each counter has all its series from the start
/// (at 0), so the series give the label names and every value.
fn counter_rows() -> Vec<Row> {
    let health = Health::new();
    for r in Resource::ALL {
        health.register(r, "");
    }
    let mut registry = Registry::default();
    health.register_counters(&mut registry);
    let mut text = String::new();
    if let Err(e) = prometheus_client::encoding::text::encode(&mut text, &registry) {
        panic!("encoding the counters failed: {e}");
    }
    let mut rows: Vec<Row> = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            // The families outlive the test: the page holds `&'static str`s.
            let help: &'static str = Box::leak(help.to_string().into_boxed_str());
            rows.push(Row {
                doc: FamilyDoc {
                    group: "The exporter itself",
                    name: format!("{name}_total"),
                    kind: "counter",
                    labels: Vec::new(),
                    help,
                },
                values: BTreeMap::new(),
            });
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            assert!(rest.ends_with(" counter"), "not a counter: {line}");
        } else if let (Some(row), Some((_, labels))) = (rows.last_mut(), line.split_once('{')) {
            let labels = labels.split_once('}').map_or(labels, |(l, _)| l);
            for pair in labels.split(',') {
                let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
                let k: &'static str = Box::leak(k.to_string().into_boxed_str());
                if !row.doc.labels.contains(&k) {
                    row.doc.labels.push(k);
                }
                let seen = row.values.entry(k.to_string()).or_default();
                let v = v.trim_matches('"').to_string();
                if !seen.contains(&v) {
                    seen.push(v);
                }
            }
        }
    }
    rows
}

/// The closed label sets of the families in `metrics::families`.
fn gauge_values(doc: &FamilyDoc) -> BTreeMap<String, Vec<String>> {
    let strs = |v: Vec<&str>| v.into_iter().map(String::from).collect::<Vec<_>>();
    let mut values = BTreeMap::new();
    for label in &doc.labels {
        let set = match *label {
            "class" => strs(HolderClass::ALL.map(|c| c.as_str()).to_vec()),
            "kind" => strs(Kind::ALL.map(|k| k.as_str()).to_vec()),
            "resource" => strs(Resource::ALL.map(|r| r.as_str()).to_vec()),
            "reason" if doc.name.contains("node_lost") => {
                strs(LostReason::ALL.map(|r| r.as_str()).to_vec())
            }
            "reason" => strs(CaptfReason::ALL.map(|r| r.as_str()).to_vec()),
            _ => continue,
        };
        values.insert(label.to_string(), set);
    }
    values
}

fn rows() -> Vec<Row> {
    let mut rows: Vec<Row> = family_docs()
        .into_iter()
        .map(|doc| Row {
            values: gauge_values(&doc),
            doc,
        })
        .collect();
    rows.extend(counter_rows());
    rows
}

fn code_list(items: &[impl AsRef<str>]) -> String {
    items
        .iter()
        .map(|s| format!("`{}`", s.as_ref()))
        .collect::<Vec<_>>()
        .join(", ")
}

fn metrics_page() -> String {
    let rows = rows();
    let mut out = String::new();
    out.push_str("# Metrics\n\n");
    out.push_str(&format!(
        "<!-- Generated from src/metrics/families.rs and src/health/counters.rs by\n     `{REGENERATE}`; do not edit. -->\n\n"
    ));
    out.push_str(
        "Every family `/metrics` serves, one line each. The names and labels are part of the\n\
         contract (docs/contract.md); a family that has no series still has its HELP and TYPE.\n",
    );
    let mut group = "";
    for r in &rows {
        if r.doc.group != group {
            group = r.doc.group;
            out.push_str(&format!(
                "\n## {group}\n\n| Family | Type | Labels | Help |\n| --- | --- | --- | --- |\n"
            ));
        }
        out.push_str(&format!(
            "| `{}` | {} | {} | {} |\n",
            r.doc.name,
            r.doc.kind,
            code_list(&r.doc.labels),
            r.doc.help.replace('|', "\\|"),
        ));
    }
    out.push_str("\n## Label values\n\nThe closed label sets; every other label carries what the cluster says (capped in length).\n\n| Label | Values | Families |\n| --- | --- | --- |\n");
    // One line per distinct (label, value set), naming the families with it.
    let mut sets: Vec<(String, Vec<String>, Vec<String>)> = Vec::new();
    for r in &rows {
        for (label, values) in &r.values {
            match sets.iter_mut().find(|(l, v, _)| l == label && v == values) {
                Some((_, _, families)) => families.push(r.doc.name.clone()),
                None => sets.push((label.clone(), values.clone(), vec![r.doc.name.clone()])),
            }
        }
    }
    for (label, values, families) in sets {
        out.push_str(&format!(
            "| `{label}` | {} | {} |\n",
            code_list(&values),
            code_list(&families)
        ));
    }
    out.push_str(
        "\n## Notes\n\n\
         - `captf_state_lock_age_seconds` is exported only with `--export-lock-age`: its value moves with\n  \
         the clock. The shipped rules and dashboards use `time() - captf_state_lock_acquired_timestamp_seconds`.\n\
         - `namespace` is the namespace of the locked object, not of the exporter: scrape with\n  \
         `honor_labels: true` (the chart's ServiceMonitor does).\n\
         - Per-object series carry `namespace`, `kind`, `name` first, so they join with CAPTF's own metrics.\n\
         - Counters count since this exporter started; every counter series exists at 0 from the start,\n  \
         so the first increment is an increase Prometheus sees.\n\
         - The watch families have series only for watched resources (`--skip-resources` removes some).\n",
    );
    out
}

fn cli_page() -> String {
    let mut cmd = Cli::command().term_width(100).max_term_width(100);
    cmd.build();
    // An environment variable set while the page is made must not show.
    let mut cmd = cmd.mut_args(|a| a.hide_env_values(true));
    let mut out = String::new();
    out.push_str("# Command line\n\n");
    out.push_str(&format!(
        "<!-- Generated from src/cli.rs (clap's help) by\n     `{REGENERATE}`; do not edit. -->\n\n"
    ));
    out.push_str(
        "Every flag can also be set by the environment variable shown with it; a flag given on the\n\
         command line wins. The global options apply to every subcommand.\n\n",
    );
    let name = cmd.get_name().to_string();
    let help = cmd.render_long_help().to_string();
    out.push_str(&format!(
        "## `{name}`\n\n```text\n{}\n```\n",
        help.trim_end()
    ));
    for sub in cmd.get_subcommands_mut() {
        if sub.get_name() == "help" {
            continue;
        }
        // The globals are listed once, above.
        let mut sub = sub.clone().mut_args(|a| {
            let hide = a.is_global_set() || a.is_hide_set();
            a.hide(hide)
        });
        let name = sub.get_bin_name().unwrap_or(sub.get_name()).to_string();
        out.push_str(&format!(
            "\n## `{name}`\n\n```text\n{}\n```\n",
            sub.render_long_help().to_string().trim_end()
        ));
    }
    out
}

/// Compares `text` with the committed `page`, or writes it with UPDATE_DOCS.
fn check_page(page: &str, text: &str) {
    // clap pads the blank lines of a long help; the page has no trailing blanks.
    let text: String = text
        .lines()
        .map(|l| format!("{}\n", l.trim_end()))
        .collect();
    let text = text.as_str();
    committed::check_or_bless(
        page,
        text,
        "UPDATE_DOCS",
        &format!("the page is out of date: regenerate it with `{REGENERATE}`"),
    );
}

#[test]
fn metrics_page_is_current() {
    check_page("docs/metrics.md", &metrics_page());
}

#[test]
fn cli_page_is_current() {
    check_page("docs/cli.md", &cli_page());
}

/// The table is the exposition's: every family of the golden exposition
/// (tests/golden, checked byte for byte against the encoder by
/// exposition_golden.rs) is listed with its type, HELP and label names,
/// and the table lists nothing else but the optional lock age.
#[test]
fn the_table_lists_every_family_the_exposition_has() {
    let golden = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/exposition.prom.txt"),
    )
    .unwrap_or_else(|e| panic!("read the golden exposition: {e}"));
    let rows = rows();
    let mut seen = Vec::new();
    for line in golden.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            let row = rows
                .iter()
                .find(|r| r.doc.name == name)
                .unwrap_or_else(|| panic!("{name} is exposed but not in the table"));
            assert_eq!(row.doc.help, help, "HELP of {name}");
            seen.push(name.to_string());
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, ""));
            let row = rows.iter().find(|r| r.doc.name == name);
            assert_eq!(row.map(|r| r.doc.kind), Some(kind), "TYPE of {name}");
        } else if let Some((name, labels)) = line.split_once('{') {
            let row = rows.iter().find(|r| r.doc.name == name);
            let names: Vec<&str> = labels
                .split("\",")
                .filter_map(|p| p.split_once("=\"").map(|(k, _)| k))
                .collect();
            assert_eq!(row.map(|r| r.doc.labels.clone()), Some(names), "{line}");
        }
    }
    let unlisted: Vec<&str> = rows
        .iter()
        .map(|r| r.doc.name.as_str())
        .filter(|n| !seen.iter().any(|s| s == n))
        .collect();
    assert_eq!(unlisted, ["captf_state_lock_age_seconds"]);
}
