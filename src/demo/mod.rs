//! `demo`: the exporter run against a simulated cluster, in process.
//!
//! The simulation keeps API objects as JSON in a [`store::Store`] and
//! changes them on a schedule ([`sim`]); [`api`] answers a real
//! `kube::Client` from that store as an API server would (lists, watches
//! with bookmarks and timeouts, single GETs, Status errors). The exporter
//! gets that client where it would get one built from a kubeconfig, so the
//! watchers, trimming, the index, the pod verifier and `/metrics` all run
//! the production code; only the API server is simulated.

pub mod api;
pub mod objects;
pub mod query;
pub mod sim;
pub mod store;

use std::future::Future;
use std::sync::Arc;

/// Creates the simulated cluster, already holding what exists before the
/// exporter starts. Returns a client of its API and the simulation, to be
/// spawned. Must be called within a Tokio runtime.
pub fn start() -> (kube::Client, impl Future<Output = ()> + Send + 'static) {
    let store = Arc::new(store::Store::new());
    sim::seed(&store);
    (api::client(store.clone()), sim::run(store))
}
