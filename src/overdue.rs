//! The overdue warning: one log line per lock when a foreign or unknown
//! lock outlives its object's effective lockTimeoutSeconds. The metric
//! `captf_state_lock_overdue` needs no task; the log line does.

use std::sync::Arc;
use std::time::Duration;

use crate::shared::Shared;

/// Checks every `every` for newly overdue locks and logs each once.
pub async fn run(shared: Arc<Shared>, every: Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let overdue = shared.write_unrendered(|ix, now| ix.newly_overdue(now));
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
