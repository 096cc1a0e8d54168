//! The HTML pages of the exporter: `/` (held locks, most urgent first, and
//! watch health) and `/locks/<namespace>/<kind>/<name>` (one lock's
//! evidence chain). Server-rendered from the index alone (no API call),
//! no external assets, no script; every value is escaped.

use std::fmt::Write as _;
use std::time::SystemTime;

use crate::core::classify::HolderClass;
use crate::core::shown::is_hidden;
use crate::index::{Index, LockFacts, LockFilter, Resource};
use crate::oncall::model::{source_text, CaptfReport, LockReport, OwnVerdict};
use crate::oncall::render::{at, human_duration, next_short};
use crate::oncall::report::sort_by_urgency;
use crate::shared::Shared;

/// Most rows `/` shows; the rest is counted.
pub const MAX_ROWS: usize = 500;

/// HTML-escapes text for element content and quoted attributes; hidden
/// characters ([`is_hidden`]) in the shown form of docs/contract.md 7.5.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            // Bidi and zero-width characters too: the page's own line
            // breaks and tabs are the only hidden characters kept.
            c if is_hidden(c) && c != '\n' && c != '\t' => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out
}

/// Percent-encodes one path segment or query value.
pub fn encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// Decodes percent-escapes (and `+` as space when `plus`).
pub fn decode(s: &str, plus: bool) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                match std::str::from_utf8(&bytes[i + 1..i + 3])
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                {
                    Some(v) => {
                        out.push(v);
                        i += 3;
                        continue;
                    }
                    None => out.push(b'%'),
                }
            }
            b'+' if plus => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn query_param(query: &str, name: &str) -> Option<String> {
    query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| decode(v, true))
        .filter(|v| !v.is_empty())
}

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}\
table{border-collapse:collapse;margin:.8em 0}td,th{border:1px solid #ccc;padding:.25em .5em;text-align:left;vertical-align:top}\
th{background:#f3f3f3}tr.u0 td{background:#fde2e2}tr.u1 td{background:#fff1d6}tr.u2 td{background:#fff8e1}\
.holder{max-width:28em;overflow-wrap:anywhere}pre{background:#f6f6f6;padding:.5em;overflow-x:auto;white-space:pre-wrap;overflow-wrap:anywhere}\
dt{font-weight:bold;margin-top:.4em}dd{margin-left:1.5em;overflow-wrap:anywhere}";

/// What a page may load: nothing but its inline style, no `<base>`, no
/// form target. The `<meta>` tag keeps it in a copy saved to disk.
macro_rules! page_policy {
    () => {
        "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"
    };
}

/// The `Content-Security-Policy` header of every answer: the pages' policy
/// and no framing, which only a header can say.
pub const CONTENT_SECURITY_POLICY: &str = concat!(page_policy!(), "; frame-ancestors 'none'");

fn head(title: &str) -> String {
    format!(
        concat!(
            "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">",
            "<meta http-equiv=\"Content-Security-Policy\" content=\"",
            page_policy!(),
            "\"><title>{}</title><style>{}</style></head><body>"
        ),
        escape(title),
        STYLE
    )
}

/// The path of a lock's page.
pub fn lock_path(namespace: &str, kind: &str, name: &str) -> String {
    let kind = if kind.is_empty() { "-" } else { kind };
    format!(
        "/locks/{}/{}/{}",
        encode(namespace),
        encode(kind),
        encode(name)
    )
}

fn watch_table(shared: &Shared) -> String {
    let mut rows = String::new();
    for r in Resource::ALL
        .into_iter()
        .filter(|r| shared.health.is_watched(*r))
    {
        let state = if shared.health.watch_up(r) {
            "up"
        } else {
            "down: data may be stale (see /readyz and the log)"
        };
        let _ = write!(rows, "<tr><td>{}</td><td>{state}</td></tr>", r.as_str());
    }
    format!("<table id=\"watches\"><tr><th>watch</th><th>state</th></tr>{rows}</table>")
}

/// Held locks whose facts one read of the index copies: a watch event
/// waits for at most this many (at 100k objects a page copies 10k).
const FACTS_PER_READ: usize = 16;

/// What `/` copies from the index: the facts of the held locks it lists,
/// the count per class, and the index's sizes.
type HeldFacts = (
    Vec<LockFacts>,
    [(HolderClass, u64); 5],
    (usize, usize, usize),
);

/// The facts of every held lock that passes `filter`, the count per class
/// and the index's sizes, copied a few locks per read of the index so a
/// page never holds a writer back for the whole copy; everything else the
/// page does (reports, sorting, HTML) runs with no lock at all. The page
/// is then not one instant: a lock released between two reads is left out
/// (a lock taken in between is not listed), as a reload a moment later
/// would show.
fn held_facts(shared: &Shared, filter: &LockFilter) -> HeldFacts {
    let ((keys, per_class), sizes) = read(shared, |ix| (ix.held_lock_keys(filter), ix.sizes()));
    let mut facts = Vec::with_capacity(keys.len());
    for chunk in keys.chunks(FACTS_PER_READ) {
        read(shared, |ix| {
            facts.extend(chunk.iter().filter_map(|k| ix.facts(k)));
        });
    }
    (facts, per_class, sizes)
}

/// One read of the index by a page. The tests measure how long each holds
/// the lock ([`tests::ReadHold`]).
fn read<T>(shared: &Shared, f: impl FnOnce(&Index) -> T) -> T {
    #[cfg(test)]
    let _hold = tests::ReadHold::start();
    shared.read(f)
}

/// `/`: the held locks, most urgent first, filtered by `?namespace=` and
/// `?class=`, at most [`MAX_ROWS`] rows; then watch health.
pub fn locks_page(shared: &Shared, query: &str) -> String {
    let filter = LockFilter {
        namespace: query_param(query, "namespace"),
        class: query_param(query, "class"),
    };
    let now = SystemTime::now();
    let (facts, per_class, sizes) = held_facts(shared, &filter);
    let mut reports: Vec<LockReport> = facts.iter().map(|f| LockReport::build(f, now)).collect();
    sort_by_urgency(&mut reports);
    let total = reports.len();
    let mut o = head("captf-lock-exporter: held state locks");
    let _ = write!(
        o,
        "<h1>Held state locks</h1><p>captf-lock-exporter {} &middot; ready: {} &middot; lock Leases: {}, objects: {}, runner pods cached: {} &middot; \
         <a href=\"/metrics\">/metrics</a> <a href=\"/readyz\">/readyz</a></p>",
        escape(crate::VERSION),
        shared.health.ready(),
        sizes.0,
        sizes.1,
        sizes.2
    );
    let mut classes = String::new();
    for (c, n) in per_class {
        let _ = write!(
            classes,
            " <a href=\"/?class={}\">{}: {n}</a>",
            c.as_str(),
            c.as_str()
        );
    }
    let _ = write!(
        o,
        "<p>Held per class:{classes} &middot; <a href=\"/\">all</a></p>"
    );
    if filter.namespace.is_some() || filter.class.is_some() {
        let _ = write!(
            o,
            "<p id=\"filter\">Filter: namespace={} class={}</p>",
            escape(filter.namespace.as_deref().unwrap_or("*")),
            escape(filter.class.as_deref().unwrap_or("*"))
        );
    }
    let _ = write!(
        o,
        "<table id=\"locks\"><tr><th>namespace</th><th>kind</th><th>name</th><th>class</th><th>holder</th>\
         <th>operation</th><th>age</th><th>timeout</th><th>overdue</th><th>what CAPTF does next</th></tr>"
    );
    for r in reports.iter().take(MAX_ROWS) {
        let holder = r.info.as_ref().map_or("", |i| i.who.as_str());
        let op = r.info.as_ref().map_or("", |i| i.operation.as_str());
        let _ = write!(
            o,
            "<tr class=\"lock u{}\" data-class=\"{}\"><td><a href=\"/?namespace={}\">{}</a></td><td>{}</td>\
             <td><a href=\"{}\">{}</a></td><td>{}</td><td class=\"holder\">{}</td><td>{}</td><td>{}</td>\
             <td>{} s</td><td>{}</td><td>{}</td></tr>",
            r.urgency,
            r.class,
            encode(&r.namespace),
            escape(&r.namespace),
            escape(r.kind),
            escape(&lock_path(&r.namespace, r.kind, &r.name)),
            escape(&r.name),
            r.class,
            escape(holder),
            escape(op),
            human_duration(r.age_seconds),
            r.lock_timeout.seconds,
            if r.overdue { "yes" } else { "no" },
            next_short(r)
        );
    }
    o.push_str("</table>");
    if total > MAX_ROWS {
        let _ = write!(
            o,
            "<p id=\"more\">{} more held locks not shown; filter by namespace or class.</p>",
            total - MAX_ROWS
        );
    } else if total == 0 {
        o.push_str("<p id=\"none\">No held state locks.</p>");
    }
    o.push_str(&watch_table(shared));
    o.push_str("</body></html>\n");
    o
}

/// `/locks/<namespace>/<kind>/<name>` (`rest` is what follows `/locks/`):
/// the evidence chain of one held lock; None when no such lock is held.
pub fn lock_page(shared: &Shared, rest: &str) -> Option<String> {
    let parts: Vec<String> = rest.split('/').map(|p| decode(p, false)).collect();
    let [ns, kind, name] = parts.as_slice() else {
        return None;
    };
    let kind = if kind == "-" { "" } else { kind.as_str() };
    let facts = read(shared, |ix| ix.lock_facts(ns, kind, name))?;
    let r = LockReport::build(&facts, SystemTime::now());
    Some(evidence_html(&r))
}

fn dd(o: &mut String, term: &str, value: &str) {
    let _ = write!(o, "<dt>{term}</dt><dd>{value}</dd>");
}

/// CAPTF's own verdict beside the exporter's: its condition, whether a Job
/// runs, whether the two agree, and the plans the object's apply waits for.
fn captf_rows(c: &CaptfReport, o: &mut String) {
    let said = match &c.condition {
        Some(cond) => format!(
            "<span id=\"captf-condition\"><b>{}/{}</b></span>{}: {}",
            escape(cond.status),
            escape(&cond.reason),
            cond.since
                .as_deref()
                .map_or(String::new(), |s| format!(" since {}", escape(s))),
            escape(&cond.message)
        ),
        None if c.object_known => {
            "<span id=\"captf-condition\">no StateReadable condition</span>".into()
        }
        None => "<span id=\"captf-condition\">unknown (the object is not watched)</span>".into(),
    };
    dd(o, "CAPTF's verdict (StateReadable)", &said);
    if c.active_job {
        dd(
            o,
            "Active Job",
            "yes: CAPTF checks the lock only between Jobs, so its condition may lag",
        );
    }
    let verdict = match c.agreement {
        "differs" => {
            let when = if c.mismatch_reported {
                " (reported: longer than --verdict-grace)".to_string()
            } else {
                c.differs_since.map_or(String::new(), |t| {
                    format!(" (since {}, within --verdict-grace)", at(t))
                })
            };
            format!("<b>differ</b>: {}{when}", escape(&c.text))
        }
        "agrees" => "<b>agrees</b>".into(),
        _ => escape(&c.text),
    };
    dd(
        o,
        "CAPTF and the exporter",
        &format!(
            "<span id=\"captf-agreement\" data-agreement=\"{}\">{verdict}</span>",
            c.agreement
        ),
    );
    for p in &c.pending_plans {
        dd(
            o,
            "Waits for approval",
            &format!(
                "TerraformPlan <code class=\"pending-plan\">{}</code> is Pending: no Job starts until it is approved, and approving applies its changes (the exporter never approves). Review it first: <code>{}</code>",
                escape(&p.name),
                escape(&p.review)
            ),
        );
    }
}

/// One lock's evidence chain as HTML.
pub fn evidence_html(r: &LockReport) -> String {
    let kind = if r.kind.is_empty() { "-" } else { r.kind };
    let mut o = head(&format!("{kind} {}/{}: state lock", r.namespace, r.name));
    let _ = write!(
        o,
        "<p><a href=\"/\">&larr; all held locks</a></p><h1>{} {}/{}</h1><p id=\"verdict\">class <b>{}</b>{}</p><dl>",
        escape(kind),
        escape(&r.namespace),
        escape(&r.name),
        r.class,
        if r.overdue { ", <b>overdue</b>" } else { "" }
    );
    dd(
        &mut o,
        "Lease",
        &format!("{} (suffix {})", escape(&r.lease), escape(&r.suffix)),
    );
    dd(
        &mut o,
        "Lock ID",
        &format!("<code id=\"lock-id\">{}</code>", escape(&r.lock_id)),
    );
    match (&r.info, &r.info_error) {
        (Some(i), _) => dd(
            &mut o,
            "lock-info",
            &format!(
                "ID <code>{}</code>, Operation <code>{}</code>, Who <code id=\"who\">{}</code>, Version <code>{}</code>, Created <code>{}</code>",
                escape(&i.id),
                escape(&i.operation),
                escape(&i.who),
                escape(&i.version),
                escape(i.created.as_deref().unwrap_or("unusable"))
            ),
        ),
        (None, Some(e)) => dd(&mut o, "lock-info", &format!("rejected: {}", escape(e))),
        (None, None) => dd(&mut o, "lock-info", "absent"),
    }
    dd(
        &mut o,
        "Host from Who",
        &r.host
            .as_deref()
            .map_or("none".into(), |h| format!("<code>{}</code>", escape(h))),
    );
    let verdict = match &r.own {
        OwnVerdict::Own { pod } => format!(
            "yes: <code>{}</code> is a Job pod of this object",
            escape(pod)
        ),
        OwnVerdict::NotOwn { why } => format!("no: {}", escape(&why.text())),
    };
    dd(&mut o, "Own runner pod", &verdict);
    if let Some(p) = &r.pod {
        let read = p.read_at.map_or("never read live".into(), |t| {
            format!("last read live at {}", at(t))
        });
        dd(
            &mut o,
            "Holder pod",
            &format!(
                "<code>{}</code>: {} ({read})",
                escape(&p.name),
                escape(&p.state)
            ),
        );
    }
    if let Some(n) = &r.node {
        let now = crate::index::unix_seconds(SystemTime::now());
        let node = format!(
            "<code>{}</code>: {}",
            escape(&n.name),
            escape(&n.node_line())
        );
        dd(&mut o, "Node", &node);
        dd(&mut o, "Pod deletion", &escape(&n.pod_line()));
        let lost = format!(
            "<span id=\"node-lost\">{}</span>",
            escape(&n.lost_line(now))
        );
        dd(&mut o, "Node lost", &lost);
    }
    let kind_opt = crate::core::kind::Kind::from_kind(r.kind);
    dd(
        &mut o,
        "lockTimeoutSeconds",
        &format!(
            "<span id=\"lock-timeout\">{}</span> s, from <span id=\"lock-timeout-source\">{}</span>",
            r.lock_timeout.seconds,
            source_text(r.lock_timeout.source, kind_opt)
        ),
    );
    dd(
        &mut o,
        "activeDeadlineSeconds",
        &format!(
            "{} s, from {}",
            r.active_deadline.seconds,
            source_text(r.active_deadline.source, kind_opt)
        ),
    );
    dd(
        &mut o,
        "Age",
        &format!("{} (from {})", human_duration(r.age_seconds), r.age_source),
    );
    let overdue = if r.overdue {
        "yes: older than lockTimeoutSeconds; the object's Jobs fail until a person releases it"
            .to_string()
    } else if r.starting {
        "not judged yet: the exporter is still listing the objects and clusters its timeout comes from"
            .into()
    } else if let Some(left) = r.overdue_in() {
        format!("no; becomes overdue in {}", human_duration(left))
    } else {
        "no (only foreign and unknown locks can be)".into()
    };
    dd(&mut o, "OverdueLog", &overdue);
    let history = match r.last_force_unlock {
        Some(t) => format!(
            "{} counted since the exporter started; last ForceUnlocked Event at {}",
            r.force_unlocks_counted,
            at(t)
        ),
        None => format!(
            "{} counted since the exporter started; no ForceUnlocked Event seen",
            r.force_unlocks_counted
        ),
    };
    dd(&mut o, "Force-unlocks", &history);
    dd(&mut o, "What CAPTF does next", &escape(&r.captf_next));
    captf_rows(&r.captf, &mut o);
    o.push_str("</dl><h2>Next commands</h2><pre id=\"commands\">");
    let _ = writeln!(o, "# inspect the Lease\n{}", escape(&r.commands.lease));
    if let Some(p) = &r.commands.pod {
        let _ = writeln!(
            o,
            "# the holder pod (named like a CAPTF runner pod): a row with its STATUS, or\n# \"No resources found\" once it is gone\n{}",
            escape(p)
        );
    }
    let _ = writeln!(
        o,
        "# spec.holderIdentity: the ID force-unlock takes (Unlock compares it, not lock-info's ID);\n# empty output: the lock is clear\n{}",
        escape(&r.commands.confirm)
    );
    if r.lock_info_id_differs {
        let _ = writeln!(
            o,
            "# lock-info's ID is not spec.holderIdentity: something other than terraform/tofu wrote\n# this Lease. force-unlock with lock-info's ID (the alert's lock_id) fails, CAPTF's too."
        );
    }
    if let Some(release) = &r.commands.release {
        let _ = writeln!(
            o,
            "# lock-info does not parse: force-unlock fails with any ID (Unlock parses it first).\n# Once nothing holds the lock, release it as Unlock would; refused if the holder changed\n# (kubectl then prints \"The request is invalid\": the test failed, nothing changed):\n{}",
            escape(release)
        );
    }
    if r.class == HolderClass::OwnStale {
        let _ = writeln!(
            o,
            "# CAPTF's next Job force-unlocks it; make CAPTF reconcile now (metadata is never rendered)\n{}",
            escape(&r.commands.nudge)
        );
    }
    if let Some(n) = r.node.as_ref().filter(|_| r.class == HolderClass::OwnLive) {
        let mut fix = String::new();
        crate::oncall::node::fix_text(n, &mut fix);
        if !fix.is_empty() {
            let _ = writeln!(o, "# the runbook's fix for a lost node\n{}", escape(&fix));
        }
    }
    let _ = writeln!(
        o,
        "# the runbook's fix for this lock, every value filled in (pinned image, backend labels)\n{}",
        escape(&r.commands.explain)
    );
    o.push_str("</pre></body></html>\n");
    o
}

#[cfg(test)]
mod tests;
