//! Confirms "holder pod not live" verdicts with a live read before a lock is
//! reported stale, as CAPTF's own stale check reads the pod uncached.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use kube::api::Api;
use kube::Client;
use tokio::sync::{mpsc, Semaphore};

use crate::core::classify::is_terminal_phase;
use crate::health::ReadResult;
use crate::index::{ObjectKey, PodRead, Resource};
use crate::shared::Shared;
use crate::watch::trim::PodObject;

/// Reads a pod once, uncached: `GET pods/<name>` (also used by the
/// one-shot commands).
pub async fn read_pod(client: &Client, namespace: &str, name: &str) -> PodRead {
    let api: Api<PodObject> = crate::watch::api_of(client, Some(namespace), Resource::Pods, "v1");
    // The client retries 429/503/504 on its own for minutes; a verdict that
    // late is no verdict: call it a failed read.
    let got = match tokio::time::timeout(READ_TIMEOUT, api.get(name)).await {
        Ok(r) => r,
        Err(_) => {
            tracing::debug!(namespace, pod = name, "live pod read timed out");
            return PodRead::Failed;
        }
    };
    match got {
        Ok(pod) => {
            let phase = pod.status.as_ref().map_or("", |s| s.phase.as_str());
            if is_terminal_phase(phase) {
                PodRead::Finished
            } else {
                PodRead::Live
            }
        }
        Err(kube::Error::Api(s)) if s.code == 404 => PodRead::Gone,
        Err(err) => {
            tracing::debug!(namespace, pod = name, error = %err, "live pod read failed");
            PodRead::Failed
        }
    }
}

/// How long one live read may take, retries included.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Most live reads in flight at once.
const MAX_IN_FLIGHT: usize = 8;

/// Runs the verifier: reads each queued pod through `client`, at most
/// `reads_per_second` a second and one read per pod at a time, and
/// re-queues unresolved ones every `recheck`.
pub async fn run(
    shared: Arc<Shared>,
    client: Client,
    mut queue: mpsc::UnboundedReceiver<ObjectKey>,
    recheck: Duration,
    reads_per_second: u32,
) {
    // One read per period: after a quiet spell the pace does not burst,
    // so a thousand locks turning stale at once reach the API server as a
    // steady trickle.
    let mut pace = tokio::time::interval(Duration::from_secs(1) / reads_per_second.max(1));
    pace.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let in_flight = Arc::new(std::sync::Mutex::new(HashSet::<ObjectKey>::new()));
    let permits = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    let mut tick = tokio::time::interval(recheck);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let pod = tokio::select! {
            p = queue.recv() => match p { Some(p) => p, None => return },
            _ = tick.tick() => {
                let again = shared.write_unrendered(|ix, _| { ix.gc_pod_reads(); ix.pods_to_recheck() });
                for p in again {
                    let _ = shared.confirm_tx.send(p);
                }
                continue;
            }
        };
        let useful = shared.read(|ix| ix.needs_read(&pod));
        if !useful {
            continue;
        }
        let fresh = in_flight
            .lock()
            .map(|mut s| s.insert(pod.clone()))
            .unwrap_or(false);
        if !fresh {
            continue;
        }
        pace.tick().await;
        let Ok(permit) = permits.clone().acquire_owned().await else {
            return;
        };
        let (shared, client, in_flight) = (shared.clone(), client.clone(), in_flight.clone());
        tokio::spawn(async move {
            let read = read_pod(&client, &pod.namespace, &pod.name).await;
            shared.health.on_pod_read(match read {
                PodRead::Live | PodRead::Finished => ReadResult::Found,
                PodRead::Gone => ReadResult::NotFound,
                PodRead::Failed => ReadResult::Error,
            });
            if let Ok(mut s) = in_flight.lock() {
                s.remove(&pod);
            }
            shared.update(|ix, now| ix.record_pod_read(pod, read, now));
            drop(permit);
        });
    }
}
