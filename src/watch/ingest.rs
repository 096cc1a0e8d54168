//! Where watch events enter the index: a (re)list is buffered and replaces
//! the index content of its scope atomically at its end, so a scrape never
//! sees a half-listed resource; single changes apply at once.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::SystemTime;

use kube::runtime::watcher::Event;

use crate::health::{Success, WatchId};
use crate::index::{
    Effects, Index, IndexResource, Resource, MAX_UNKNOWN_OBJECT_EVENTS_PER_NAMESPACE,
};
use crate::shared::Shared;
use crate::watch::trim::Trimmed;

/// The ingest of one watch of items `T`.
pub struct Ingest<T>
where
    Index: IndexResource<T>,
{
    resource: Resource,
    namespace: Option<String>,
    scope: <Index as IndexResource<T>>::Scope,
    watch: WatchId,
    buffer: Option<Vec<(<Index as IndexResource<T>>::Key, T)>>,
    /// Dropped Events have been logged for this watch.
    dropped_logged: AtomicBool,
    /// An invalid node name has been logged for this watch.
    invalid_node_logged: AtomicBool,
}

impl<T> Ingest<T>
where
    Index: IndexResource<T>,
{
    /// An ingest for one watch, registered with health. `namespace` is the
    /// watch's namespace (None for all); `scope` what its lists replace.
    pub fn new(
        shared: &Shared,
        resource: Resource,
        namespace: Option<String>,
        scope: <Index as IndexResource<T>>::Scope,
    ) -> Self {
        let watch = shared
            .health
            .register(resource, namespace.as_deref().unwrap_or(""));
        Ingest {
            resource,
            namespace,
            scope,
            watch,
            buffer: None,
            dropped_logged: AtomicBool::new(false),
            invalid_node_logged: AtomicBool::new(false),
        }
    }

    /// The namespace label used in health ("" for all namespaces).
    pub fn namespace(&self) -> &str {
        self.namespace.as_deref().unwrap_or("")
    }

    /// The watched resource.
    pub fn resource(&self) -> Resource {
        self.resource
    }

    /// This watch's health entry.
    pub fn watch_id(&self) -> WatchId {
        self.watch
    }

    /// One write of the index, and what it asks: the shared effects
    /// (logs, live reads), and ForceUnlocked Events it did not keep
    /// counted (and said once per watch).
    fn update(&self, shared: &Shared, f: impl FnOnce(&mut Index, SystemTime) -> Effects) {
        let fx = shared.write(f);
        if fx.events_dropped > 0 {
            shared.health.count_events_dropped(fx.events_dropped);
            if !self.dropped_logged.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    resource = self.resource.as_str(),
                    namespace = self.namespace(),
                    max_per_namespace = MAX_UNKNOWN_OBJECT_EVENTS_PER_NAMESPACE,
                    "ForceUnlocked Events about objects the exporter does not know were dropped (their namespace holds the most kept); counted in captf_lock_exporter_force_unlock_events_dropped_total, logged once per watch"
                );
            }
        }
        if fx.invalid_node_names > 0 {
            shared
                .health
                .count_invalid_node_names(fx.invalid_node_names);
            if !self.invalid_node_logged.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    resource = self.resource.as_str(),
                    namespace = self.namespace(),
                    "a runner pod's spec.nodeName is not a name a Node can have: kept without node evidence, its lock's class unchanged; counted in captf_lock_exporter_invalid_node_names_total, logged once per watch"
                );
            }
        }
        shared.act(fx);
    }

    /// Feeds one trimmed watch event into the index; the end of a list
    /// marks the watch synced.
    pub fn event(
        &mut self,
        shared: &Shared,
        event: Event<Trimmed<<Index as IndexResource<T>>::Key, T>>,
    ) {
        shared.health.on_event(self.resource);
        match event {
            Event::Init => self.buffer = Some(Vec::new()),
            Event::InitApply((key, item)) => match (&mut self.buffer, item) {
                (Some(b), Some(item)) => b.push((key, item)),
                (Some(_), None) => {}
                (None, Some(item)) => self.update(shared, |ix, now| {
                    IndexResource::<T>::apply(ix, key, item, now)
                }),
                (None, None) => {
                    self.update(shared, |ix, now| IndexResource::<T>::delete(ix, key, now))
                }
            },
            Event::InitDone => {
                let listed = self.buffer.take().unwrap_or_default();
                let scope = &self.scope;
                self.update(shared, |ix, now| {
                    IndexResource::<T>::reset(ix, scope, listed, now)
                });
                let resource = self.resource.as_str();
                match shared.health.on_synced(self.watch) {
                    Success::Recovered(after) => tracing::info!(
                        resource,
                        namespace = self.namespace(),
                        down_seconds = after.as_secs(),
                        "watch recovered with a relist"
                    ),
                    Success::Steady => {
                        tracing::debug!(resource, namespace = self.namespace(), "watch listed")
                    }
                }
            }
            Event::Apply((key, Some(item))) => self.update(shared, |ix, now| {
                IndexResource::<T>::apply(ix, key, item, now)
            }),
            Event::Apply((key, None)) | Event::Delete((key, _)) => {
                self.update(shared, |ix, now| IndexResource::<T>::delete(ix, key, now))
            }
        }
    }
}
