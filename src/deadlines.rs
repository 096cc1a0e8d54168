//! The clock's verdicts: one log line per lock when a foreign or unknown
//! lock outlives its object's effective lockTimeoutSeconds (the metric
//! `captf_state_lock_overdue` needs no task; the log line does), and
//! `captf_state_lock_verdict_mismatch` turning 1 with a log line when a
//! disagreement with CAPTF outlasts `--verdict-grace`.
//!
//! It starts judging once the exporter is ready, and says then what the
//! start found (see `await_start`).
//!
//! The checker sleeps until the index's next clock deadline, or until a
//! write moves that deadline earlier: an exporter at rest whose locks are
//! all released, or already reported, wakes for nothing (it used to look
//! once a second, the largest part of its CPU at rest).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::core::classify::HolderClass;
use crate::shared::Shared;

/// The longest sleep without looking: a wall clock stepped forward (the
/// deadlines are Unix times, the sleep is monotonic) is caught up within
/// this.
const LONGEST_SLEEP: Duration = Duration::from_secs(300);

/// Checks for newly overdue locks and newly outlasted disagreements, and
/// logs each once: when their deadlines come, at most once per `least_gap`.
pub async fn run(shared: Arc<Shared>, least_gap: Duration) {
    run_counted(&shared, least_gap, &AtomicU64::new(0)).await;
}

/// [`run`], counting its checks in `checks` (for tests).
pub async fn run_counted(shared: &Shared, least_gap: Duration, checks: &AtomicU64) {
    await_start(shared).await;
    loop {
        let checked = tokio::time::Instant::now();
        checks.fetch_add(1, Ordering::Relaxed);
        check_mismatches(shared);
        log_overdue(shared);
        // A terminating holder pod whose grace ended: its lost-node
        // evidence turns with the clock alone.
        shared.write(|ix, now| ix.node_lost_due(now));
        let next = shared.read(|ix| ix.next_clock_deadline());
        let wait = next.map_or(LONGEST_SLEEP, |ms| {
            until_unix_ms(ms, SystemTime::now()).min(LONGEST_SLEEP)
        });
        tokio::select! {
            () = shared.clock_moved() => {}
            () = tokio::time::sleep(wait) => {}
        }
        // A stream of writes, each moving a deadline earlier, is checked
        // once per gap, as the old fixed tick did.
        tokio::time::sleep_until(checked + least_gap).await;
    }
}

/// Waits until the exporter is ready (every watch synced, or settled on an
/// error a retry will not fix soon), then ends the index's start
/// (`Index::finish_start`: locks judged overdue, class changes recorded
/// from then on) and logs what the start found, counted in that same
/// write. Before that a lock's object, or the TerraformCluster its timeout
/// is inherited from, may not be listed yet, and the lock would be judged
/// against the wrong timeout (a warning logged, and
/// `captf_state_lock_overdue` 1 for a moment, that the object's longer
/// timeout does not bear out).
async fn await_start(shared: &Shared) {
    let mut health = shared.health.subscribe();
    while !shared.health.ready() {
        if health.changed().await.is_err() {
            // The sender lives in `shared`, which outlives this task.
            break;
        }
    }
    let ((leases, objects, pods), held) = shared.write(|ix, now| {
        ix.finish_start(now);
        (ix.sizes(), ix.held_per_class())
    });
    let count = |class: HolderClass| {
        held.iter()
            .find(|(c, _)| *c == class)
            .map_or(0, |(_, n)| *n)
    };
    tracing::info!(
        lock_leases = leases,
        objects,
        pods_cached = pods,
        held = held.iter().map(|(_, n)| n).sum::<u64>(),
        own_live = count(HolderClass::OwnLive),
        own_stale = count(HolderClass::OwnStale),
        own_unverified = count(HolderClass::OwnUnverified),
        foreign = count(HolderClass::Foreign),
        unknown = count(HolderClass::Unknown),
        "ready: every watch has listed; state locks held now, by class (class changes are logged from here on)"
    );
}

/// How long from `now` until the Unix time `ms`; zero when it has passed.
fn until_unix_ms(ms: i64, now: SystemTime) -> Duration {
    let now_ms = crate::index::unix_ms(now);
    // Deadlines are floored to whole ms and popped strictly before now:
    // one ms more finds the lock due on the first look.
    Duration::from_millis(u64::try_from(ms.saturating_sub(now_ms).saturating_add(1)).unwrap_or(0))
}

fn log_overdue(shared: &Shared) {
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

/// Flags disagreements with CAPTF that outlasted the grace. The check is
/// a read; only a flag to set takes the write lock and re-renders.
fn check_mismatches(shared: &Shared) {
    let due = shared.read(|ix| ix.verdict_mismatch_due(SystemTime::now()));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::fixtures::workstation_lock;
    use crate::index::IndexResource;

    #[tokio::test(start_paused = true)]
    async fn sleeps_at_rest_and_wakes_when_a_write_brings_a_deadline() {
        let (shared, _rx) = Shared::new();
        let leases = shared.health.register(crate::index::Resource::Leases, "");
        shared.health.on_synced(leases);
        let checks = Arc::new(AtomicU64::new(0));
        let task = tokio::spawn({
            let (shared, checks) = (shared.clone(), checks.clone());
            async move { run_counted(&shared, Duration::from_secs(1), &checks).await }
        });
        // An hour at rest (the paused clock jumps from sleep to sleep): the
        // old checker looked 3600 times.
        tokio::time::sleep(Duration::from_secs(3600)).await;
        let at_rest = checks.load(Ordering::Relaxed);
        assert!(
            (1..=1 + 3600 / LONGEST_SLEEP.as_secs()).contains(&at_rest),
            "{at_rest} checks in an hour at rest"
        );
        // Taken long before any lockTimeoutSeconds: overdue at once.
        let (key, lease) = workstation_lock("web", "alice@laptop", "2020-01-01T00:00:00Z");
        shared.update(|ix, now| ix.apply(key, lease, now));
        assert!(shared.read(|ix| ix.next_clock_deadline()).is_some());
        let written = tokio::time::Instant::now();
        let deadline = written + Duration::from_secs(10);
        while shared.read(|ix| ix.next_clock_deadline()).is_some() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the overdue lock was not reported within 10 s"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(
            written.elapsed() <= Duration::from_secs(1),
            "reported {:?} after the write",
            written.elapsed()
        );
        assert!(checks.load(Ordering::Relaxed) > at_rest);
        task.abort();
    }

    /// (overdue as `/metrics` shows it, overdue warning logged) of every lock.
    fn overdue_seen(shared: &Shared) -> Vec<(bool, bool)> {
        let now = SystemTime::now();
        let mut seen = Vec::new();
        shared.read(|ix| {
            ix.for_each_lock(|v| {
                let shown = match (v.state.class, v.age(now)) {
                    (Some(class), Some((age, _))) => v.overdue(class, age),
                    _ => false,
                };
                seen.push((shown, v.state.overdue_logged));
            });
        });
        seen
    }

    #[tokio::test(start_paused = true)]
    async fn judges_no_lock_overdue_until_every_watch_has_synced() {
        use crate::index::Resource;
        let (shared, _rx) = Shared::new();
        shared.write(|ix, _| ix.begin_start());
        let leases = shared.health.register(Resource::Leases, "");
        let machines = shared.health.register(Resource::TerraformMachines, "");
        let task = tokio::spawn({
            let shared = shared.clone();
            async move { run(shared, Duration::from_secs(1)).await }
        });
        // The Leases have synced; the TerraformMachine that may give this
        // lock a timeout longer than six years has not.
        let (key, lease) = workstation_lock("web", "alice@laptop", "2020-01-01T00:00:00Z");
        shared.update(|ix, now| ix.apply(key, lease, now));
        shared.health.on_synced(leases);
        tokio::time::sleep(Duration::from_secs(600)).await;
        assert_eq!(overdue_seen(&shared), vec![(false, false)]);
        assert_eq!(shared.read(|ix| ix.next_clock_deadline()), None);

        shared.health.on_synced(machines);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while overdue_seen(&shared) != vec![(true, true)] {
            assert!(
                tokio::time::Instant::now() < deadline,
                "not judged overdue within 10 s of the last sync: {:?}",
                overdue_seen(&shared)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        task.abort();
    }

    #[test]
    fn waits_until_one_ms_past_a_deadline_and_never_negative() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_millis(10_000);
        assert_eq!(until_unix_ms(12_500, now), Duration::from_millis(2_501));
        assert_eq!(until_unix_ms(10_000, now), Duration::from_millis(1));
        assert_eq!(until_unix_ms(9_000, now), Duration::ZERO);
        assert_eq!(until_unix_ms(i64::MIN, now), Duration::ZERO);
    }
}
