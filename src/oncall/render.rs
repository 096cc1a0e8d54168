//! Terminal output of `locks` (table, wide, json) and of `explain`'s
//! evidence chain. Every value from the cluster goes through [`show`].

use std::fmt::Write as _;

use chrono::{DateTime, SecondsFormat, Utc};

use crate::index::ObjectKnown;

use super::model::{source_text, CaptfReport, LockReport, OwnVerdict};
use super::shell::show;

/// Output format of `locks`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    /// Aligned columns.
    Table,
    /// Aligned columns with lock ID, Lease, deadline and sources.
    Wide,
    /// A JSON array of reports.
    Json,
}

const HOLDER_WIDTH: usize = 40;

fn cut(s: &str, max: usize) -> String {
    let s = show(s);
    if s.chars().count() <= max {
        return s;
    }
    let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

fn holder_of(r: &LockReport) -> String {
    match &r.info {
        Some(i) if !i.who.is_empty() => i.who.clone(),
        _ => "<none>".into(),
    }
}

fn operation_of(r: &LockReport) -> String {
    r.info
        .as_ref()
        .map(|i| i.operation.trim_start_matches("OperationType").to_string())
        .filter(|o| !o.is_empty())
        .unwrap_or_else(|| "<none>".into())
}

/// A short "what CAPTF does next" for the table.
pub fn next_short(r: &LockReport) -> &'static str {
    use crate::core::classify::HolderClass::*;
    match r.class {
        OwnLive => "waits for its runner",
        OwnStale => "next Job force-unlocks",
        OwnUnverified => "pod unreadable: check it",
        Foreign | Unknown if r.overdue => "never unlocks: Jobs failing",
        Foreign | Unknown => "never unlocks",
    }
}

/// Renders the `locks` output.
pub fn locks_output(reports: &[LockReport], output: Output) -> String {
    if output == Output::Json {
        return serde_json::to_string_pretty(reports).unwrap_or_else(|_| "[]".into()) + "\n";
    }
    let wide = output == Output::Wide;
    let mut rows: Vec<Vec<String>> = Vec::with_capacity(reports.len() + 1);
    let mut head = vec![
        "NAMESPACE",
        "KIND",
        "NAME",
        "CLASS",
        "HOLDER",
        "OPERATION",
        "AGE",
        "TIMEOUT",
        "OVERDUE",
        "CAPTF NEXT",
    ];
    if wide {
        head.extend([
            "LOCK ID",
            "LEASE",
            "DEADLINE",
            "TIMEOUT FROM",
            "NODE",
            "NODE LOST",
        ]);
    }
    rows.push(head.into_iter().map(String::from).collect());
    for r in reports {
        let mut row = vec![
            show(&r.namespace),
            if r.kind.is_empty() {
                "-".into()
            } else {
                r.kind.to_string()
            },
            show(&r.name),
            r.class.to_string(),
            cut(&holder_of(r), if wide { 128 } else { HOLDER_WIDTH }),
            cut(&operation_of(r), 24),
            if r.age_known {
                human_duration(r.age_seconds)
            } else {
                "?".into()
            },
            format!("{}s", r.lock_timeout.seconds),
            if r.overdue { "yes".into() } else { "no".into() },
            next_short(r).to_string(),
        ];
        if wide {
            row.extend([
                cut(&r.lock_id, 128),
                r.lease.clone(),
                format!("{}s", r.active_deadline.seconds),
                r.lock_timeout.source.to_string(),
                r.node.as_ref().map_or("-".into(), |n| cut(&n.name, 64)),
                r.node
                    .as_ref()
                    .and_then(|n| n.lost_reason)
                    .unwrap_or("-")
                    .to_string(),
            ]);
        }
        rows.push(row);
    }
    let cols = rows[0].len();
    let widths: Vec<usize> = (0..cols)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in &rows {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            if c + 1 == cols {
                line.push_str(cell);
            } else {
                let pad = widths[c] - cell.chars().count();
                let _ = write!(line, "{cell}{}   ", " ".repeat(pad));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// Unix seconds as RFC 3339.
pub fn at(unix: f64) -> String {
    #[allow(clippy::cast_possible_truncation)]
    let secs = unix.floor() as i64;
    DateTime::<Utc>::from_timestamp(secs, 0)
        .map(|t| t.to_rfc3339_opts(SecondsFormat::Secs, true))
        .unwrap_or_else(|| "?".into())
}

/// A duration in seconds for people: `95 s`, `12m 5s`, `3h 2m`, `2d 4h`.
pub fn human_duration(seconds: f64) -> String {
    if !seconds.is_finite() || seconds < 0.0 {
        return "0s".into();
    }
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let s = seconds.floor() as u64;
    match s {
        0..=119 => format!("{s}s"),
        120..=7199 => format!("{}m{}s", s / 60, s % 60),
        7200..=172_799 => format!("{}h{}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d{}h", s / 86400, (s % 86400) / 3600),
    }
}

/// The evidence chain, as `explain` prints it.
pub fn evidence_text(r: &LockReport) -> String {
    let mut o = String::new();
    let kind = if r.kind.is_empty() { "-" } else { r.kind };
    let _ = writeln!(
        o,
        "{kind} {}/{}: {} lock{}",
        show(&r.namespace),
        show(&r.name),
        r.class,
        if r.overdue { ", OVERDUE" } else { "" }
    );
    let object = match r.object {
        ObjectKnown::Watched => "known (listed)",
        ObjectKnown::ProvenByLabels => "not listed; its name is proven by the Lease's owner labels",
        ObjectKnown::Unknown => "not known (deleted with Retain, CRD missing, or hidden by RBAC)",
    };
    let _ = writeln!(o, "  Object:        {object}");
    let _ = writeln!(o, "  Lease:         {} (suffix {})", r.lease, r.suffix);
    let _ = writeln!(o, "  Lock ID:       {}", show(&r.lock_id));
    let _ = writeln!(
        o,
        "  holderIdentity: {}{}",
        show(&r.holder_identity),
        if r.lock_info_id_differs {
            " (not lock-info's ID; force-unlock takes this one)"
        } else {
            ""
        }
    );
    match (&r.info, &r.info_error) {
        (Some(i), _) => {
            let _ = writeln!(
                o,
                "  lock-info:     ID={} Operation={} Who={} Version={} Created={}",
                show(&i.id),
                show(&i.operation),
                show(&i.who),
                show(&i.version),
                i.created.as_deref().unwrap_or("<unusable>")
            );
        }
        (None, Some(e)) => {
            let _ = writeln!(o, "  lock-info:     rejected: {e}");
        }
        (None, None) => {
            let _ = writeln!(o, "  lock-info:     absent");
        }
    }
    let _ = writeln!(
        o,
        "  Host (Who):    {}",
        r.host.as_deref().map_or("<none>".into(), show)
    );
    let verdict = match &r.own {
        OwnVerdict::Own { pod } => format!("yes: {} is a Job pod of this object", show(pod)),
        OwnVerdict::NotOwn { why } => format!("no: {}", show(&why.text())),
    };
    let _ = writeln!(o, "  Own runner pod: {verdict}");
    if let Some(p) = &r.pod {
        let read = p
            .read_at
            .map_or(String::new(), |t| format!(", read at {}", at(t)));
        let _ = writeln!(o, "  Pod {}: {}{read}", show(&p.name), p.state);
    }
    if let Some(n) = &r.node {
        let now = crate::index::unix_seconds(std::time::SystemTime::now());
        let _ = writeln!(o, "  Node {}: {}", show(&n.name), show(&n.node_line()));
        let _ = writeln!(o, "  Pod deletion:  {}", n.pod_line());
        let _ = writeln!(o, "  Node lost:     {}", n.lost_line(now));
    }
    let kind_opt = crate::core::kind::Kind::from_kind(r.kind);
    let _ = writeln!(
        o,
        "  lockTimeoutSeconds:    {} (from {})",
        r.lock_timeout.seconds,
        source_text(r.lock_timeout.source, kind_opt)
    );
    let _ = writeln!(
        o,
        "  activeDeadlineSeconds: {} (from {})",
        r.active_deadline.seconds,
        source_text(r.active_deadline.source, kind_opt)
    );
    let overdue = if r.overdue {
        "yes: older than lockTimeoutSeconds, the object's Jobs fail".to_string()
    } else if !r.age_known {
        "unknown (no age; the exporter's CAPTFStateLockForeignOverdue counts from when it first saw the lock)".into()
    } else if let Some(left) = r.overdue_in() {
        format!("no; becomes overdue in {}", human_duration(left))
    } else {
        "no (only foreign and unknown locks can be)".into()
    };
    if r.age_known {
        let _ = writeln!(
            o,
            "  Age:           {} (from {})",
            human_duration(r.age_seconds),
            r.age_source
        );
    } else {
        let _ = writeln!(
            o,
            "  Age:           unknown (lock-info has no usable Created, and this command read the
                 lock once: it has observed nothing; the exporter's page shows how long it saw it held)"
        );
    }
    let _ = writeln!(o, "  OverdueLog:       {overdue}");
    let history = match (r.force_unlock_events_present, r.last_force_unlock) {
        (Some(n), Some(t)) => format!("{n} ForceUnlocked Event(s) present, last at {}", at(t)),
        (Some(0), None) | (None, None) => "no ForceUnlocked Event seen".into(),
        (Some(n), None) => format!("{n} ForceUnlocked Event(s) present"),
        (None, Some(t)) => format!(
            "{} counted since the exporter started, last Event at {}",
            r.force_unlocks_counted,
            at(t)
        ),
    };
    let _ = writeln!(o, "  Force-unlocks: {history}");
    let _ = writeln!(o, "  CAPTF next:    {}", r.captf_next);
    captf_text(&r.captf, &mut o);
    let _ = writeln!(o, "\nInspect:\n  {}", r.commands.lease);
    if let Some(p) = &r.commands.pod {
        let _ = writeln!(
            o,
            "  {p}\n  (the holder pod: a row with its STATUS, or \"No resources found\" once it is gone)"
        );
    }
    let _ = writeln!(
        o,
        "spec.holderIdentity, the ID force-unlock takes (empty output: the lock is clear):\n  {}",
        r.commands.confirm
    );
    o
}

/// CAPTF's own verdict beside the exporter's, as `explain` prints it.
pub fn captf_text(c: &CaptfReport, o: &mut String) {
    let said = match &c.condition {
        Some(cond) => format!(
            "{}/{}{}: {}",
            cond.status,
            show(&cond.reason),
            cond.since
                .as_deref()
                .map_or(String::new(), |s| format!(" since {s}")),
            show(&cond.message)
        ),
        None if c.object_known => "no StateReadable condition".into(),
        None => "unknown (the object is not watched)".into(),
    };
    let _ = writeln!(o, "  CAPTF says:    {said}");
    if c.active_job {
        let _ = writeln!(
            o,
            "  Active Job:    yes (CAPTF checks the lock only between Jobs)"
        );
    }
    let verdict = match c.agreement {
        "differs" => {
            let mut t = format!("DIFFER: {}", c.text);
            if c.mismatch_reported {
                t.push_str(" (verdict_mismatch is 1: longer than --verdict-grace)");
            } else if let Some(since) = c.differs_since {
                t.push_str(&format!(" (since {}, within --verdict-grace)", at(since)));
            }
            t
        }
        _ => c.text.clone(),
    };
    let _ = writeln!(o, "  Verdicts:      {verdict}");
    for p in &c.pending_plans {
        let _ = writeln!(
            o,
            "  Pending plan:  {} (review: {})",
            show(&p.name),
            p.review
        );
    }
}
