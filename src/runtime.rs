//! The shared state between watchers, the verifier and the HTTP server, and
//! the one place where watch events enter the index.

use std::sync::{Arc, RwLock};
use std::time::SystemTime;

use kube::runtime::watcher::Event;
use tokio::sync::mpsc;

use crate::health::{Health, Success, WatchId};
use crate::index::{Change, ClassChange, Effects, Index, NsName, Resource};

/// State shared by every task of the exporter.
#[derive(Debug)]
pub struct Shared {
    /// The index; writers hold the lock only to apply a change.
    pub index: RwLock<Index>,
    /// Watch health and self-metrics.
    pub health: Health,
    /// Holder pods to confirm with a live read.
    pub confirm_tx: mpsc::UnboundedSender<NsName>,
    /// The version reported by build_info.
    pub version: &'static str,
}

impl Shared {
    /// New shared state and the receiving end of the confirmation queue.
    pub fn new() -> (Arc<Shared>, mpsc::UnboundedReceiver<NsName>) {
        let (confirm_tx, confirm_rx) = mpsc::unbounded_channel();
        let shared = Shared {
            index: RwLock::new(Index::new()),
            health: Health::new(),
            confirm_tx,
            version: env!("CARGO_PKG_VERSION"),
        };
        (Arc::new(shared), confirm_rx)
    }

    /// Runs `f` on the index under the write lock and acts on its effects.
    pub fn update(&self, f: impl FnOnce(&mut Index, SystemTime) -> Effects) {
        let now = SystemTime::now();
        let fx = match self.index.write() {
            Ok(mut index) => f(&mut index, now),
            Err(poisoned) => f(&mut poisoned.into_inner(), now),
        };
        self.act(fx);
    }

    /// Logs class changes and queues live reads.
    pub fn act(&self, fx: Effects) {
        for c in &fx.class_changes {
            log_class_change(c);
        }
        for pod in fx.confirm {
            // The receiver lives as long as the process; a send error only
            // happens during shutdown.
            let _ = self.confirm_tx.send(pod);
        }
    }
}

fn log_class_change(c: &ClassChange) {
    let from = c.from.map_or("released", |x| x.as_str());
    let to = c.to.map_or("released", |x| x.as_str());
    tracing::info!(
        namespace = %c.namespace,
        kind = c.kind,
        name = %c.name,
        from,
        to,
        holder = %c.holder.escape_debug(),
        age_seconds = c.age_seconds.map(|a| a.round()),
        "state lock holder class changed"
    );
}

/// Buffers a (re)list so it replaces the index content atomically at its end.
#[derive(Debug)]
pub struct Ingest {
    resource: Resource,
    scope: Option<String>,
    watch: WatchId,
    buffer: Option<Vec<Change>>,
}

impl Ingest {
    /// An ingest for one watch, registered with health: `scope` is its
    /// namespace, None for all.
    pub fn new(shared: &Shared, resource: Resource, scope: Option<String>) -> Self {
        let watch = shared
            .health
            .register(resource, scope.as_deref().unwrap_or(""));
        Ingest {
            resource,
            scope,
            watch,
            buffer: None,
        }
    }

    /// The scope label used in health ("" for all namespaces).
    pub fn scope(&self) -> &str {
        self.scope.as_deref().unwrap_or("")
    }

    /// The watched resource.
    pub fn resource(&self) -> Resource {
        self.resource
    }

    /// This watch's health entry.
    pub fn watch_id(&self) -> WatchId {
        self.watch
    }

    /// Feeds one trimmed watch event into the index; the end of a list
    /// marks the watch synced.
    pub fn event(&mut self, shared: &Shared, event: Event<Change>) {
        let resource = self.resource;
        shared.health.on_event(resource);
        match event {
            Event::Init => self.buffer = Some(Vec::new()),
            Event::InitApply(c) => match &mut self.buffer {
                Some(b) => b.push(c),
                None => shared.update(|ix, now| ix.apply(resource, c, now)),
            },
            Event::InitDone => {
                let listed = self.buffer.take().unwrap_or_default();
                let scope = self.scope.clone();
                shared.update(|ix, now| ix.resync(resource, scope.as_deref(), listed, now));
                match shared.health.on_synced(self.watch) {
                    Success::Recovered(after) => tracing::info!(
                        resource = resource.as_str(),
                        scope = self.scope(),
                        down_seconds = after.as_secs(),
                        "watch recovered with a relist"
                    ),
                    Success::Steady => tracing::debug!(
                        resource = resource.as_str(),
                        scope = self.scope(),
                        "watch listed"
                    ),
                }
            }
            Event::Apply(c) => shared.update(|ix, now| ix.apply(resource, c, now)),
            Event::Delete(c) => {
                let gone = Change {
                    key: c.key,
                    entry: None,
                };
                shared.update(|ix, now| ix.apply(resource, gone, now));
            }
        }
    }
}

/// Logs one warning per lock when a foreign or unknown lock outlives its
/// effective lockTimeoutSeconds (checked every `every`, not per scrape).
pub async fn watch_overdue(shared: std::sync::Arc<Shared>, every: std::time::Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let overdue = match shared.index.write() {
            Ok(mut ix) => ix.newly_overdue(SystemTime::now()),
            Err(p) => p.into_inner().newly_overdue(SystemTime::now()),
        };
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
