//! The clock's verdicts: one log line per lock when a foreign or unknown
//! lock outlives its object's effective lockTimeoutSeconds (the metric
//! `captf_state_lock_overdue` needs no task; the log line does), and
//! `captf_state_lock_verdict_mismatch` turning 1 with a log line when a
//! disagreement with CAPTF outlasts `--verdict-grace`.

use std::sync::Arc;
use std::time::Duration;

use crate::shared::Shared;

/// Checks every `every` for newly overdue locks and logs each once.
pub async fn run(shared: Arc<Shared>, every: Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        check_mismatches(&shared);
        let overdue = shared.write(|ix, now| ix.newly_overdue(now));
        for o in overdue {
            tracing::warn!(
                namespace = %o.namespace,
                kind = o.kind,
                name = %o.name,
                class = o.class.as_str(),
                holder = %o.holder.escape_debug(),
                operation = %o.operation.escape_debug(),
                age_seconds = o.age_seconds.round(),
                timeout_seconds = o.timeout_seconds,
                "state lock held by a foreign or unknown holder is overdue: every Job of this object now waits lockTimeoutSeconds and fails until a person releases it"
            );
        }
    }
}

/// Flags disagreements with CAPTF that outlasted the grace. The check is
/// a read; only a flag to set takes the write lock and re-renders.
fn check_mismatches(shared: &Shared) {
    let due = shared.read(|ix| ix.verdict_mismatch_due(std::time::SystemTime::now()));
    if !due {
        return;
    }
    for m in shared.write(|ix, now| ix.newly_mismatched(now)) {
        let lasted = m.disagreement.since.elapsed().map_or(0, |d| d.as_secs());
        tracing::warn!(
            namespace = %m.namespace,
            kind = m.kind,
            name = %m.name,
            direction = m.disagreement.difference.as_str(),
            captf_reason = %m.captf_reason.escape_debug(),
            seconds = lasted,
            "CAPTF's own verdict on this lock disagrees with the exporter's: {}; run `captf-lock-exporter explain` on it",
            m.disagreement.difference.text()
        );
    }
}
