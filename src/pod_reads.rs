//! Confirms "holder pod not live" verdicts with a live read before a lock is
//! reported stale, as CAPTF's own stale check reads the pod uncached.
//!
//! A read RBAC refuses (403: `get pods` never granted, or revoked) leaves
//! its lock `own_unverified`; it is logged at warn once per namespace and
//! episode ([`RefusedReads`]), naming the verb, the resource and the
//! namespace as the watch errors do, and the end of the episode (a read
//! there answered again) is one line with the number refused.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::api::Api;
use kube::Client;
use tokio::sync::{mpsc, Semaphore};

use crate::client::ApiLink;
use crate::core::classify::is_terminal_phase;
use crate::core::podname::{check_pod_name, PodName};
use crate::health::ReadResult;
use crate::index::{ObjectKey, PodRead, Resource};
use crate::shared::Shared;
use crate::watch::trim::PodObject;

/// Reads a pod once, uncached: `GET pods/<name>` (also used by the
/// one-shot commands).
pub async fn read_pod(client: &Client, namespace: &str, name: &str) -> PodRead {
    read_pod_on(client, None, namespace, name).await
}

/// [`read_pod`], dropping `link`'s pooled connections when the read times
/// out (the connection that did not answer may be half-open).
pub async fn read_pod_on(
    client: &Client,
    link: Option<&ApiLink>,
    namespace: &str,
    name: &str,
) -> PodRead {
    fetch_pod(client, link, namespace, name).await.0
}

/// A read that RBAC refused (403), with the API server's message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refused(pub String);

/// [`read_pod_on`], also saying whether a failed read was refused by RBAC.
async fn fetch_pod(
    client: &Client,
    link: Option<&ApiLink>,
    namespace: &str,
    name: &str,
) -> (PodRead, Option<Refused>) {
    // The name comes from lock-info: only a DNS-1123 name goes into a path
    // (kube pastes it unescaped, so `/` or `?` would steer the request).
    // What CAPTF's own read of any other name gives is known without one.
    match check_pod_name(name) {
        PodName::Valid => {}
        PodName::RefusedByClient => return (PodRead::Failed, None),
        PodName::CannotExist => return (PodRead::Gone, None),
    }
    let api: Api<PodObject> = crate::watch::api_of(client, Some(namespace), Resource::Pods, "v1");
    // The client retries 429/503/504 on its own for minutes; a verdict that
    // late is no verdict: call it a failed read.
    let got = match tokio::time::timeout(READ_TIMEOUT, api.get(name)).await {
        Ok(r) => r,
        Err(_) => {
            tracing::debug!(namespace, pod = name, "live pod read timed out");
            if let Some(link) = link {
                link.reset_connections();
            }
            return (PodRead::Failed, None);
        }
    };
    match got {
        Ok(pod) => {
            let phase = pod.status.as_ref().map_or("", |s| s.phase.as_str());
            if is_terminal_phase(phase) {
                (PodRead::Finished, None)
            } else {
                (PodRead::Live, None)
            }
        }
        Err(kube::Error::Api(s)) if s.code == 404 => (PodRead::Gone, None),
        Err(kube::Error::Api(s)) if s.code == 403 => {
            tracing::debug!(namespace, pod = name, error = %s.message, "live pod read refused");
            (PodRead::Failed, Some(Refused(s.message)))
        }
        Err(err) => {
            tracing::debug!(namespace, pod = name, error = %err, "live pod read failed");
            (PodRead::Failed, None)
        }
    }
}

/// Namespaces whose live pod reads RBAC refuses, each with the reads
/// refused since the episode began. Bounded by the namespaces holder pods
/// are read in (those with held locks in the watched namespaces).
#[derive(Debug, Default)]
pub struct RefusedReads {
    refused: HashMap<String, u64>,
}

impl RefusedReads {
    /// One read's answer in `namespace`: a refusal starts an episode there
    /// (one warning) or adds to it; a read the API server answered (the
    /// pod found, finished or gone) ends it (one line with the count).
    /// A failure that is not a refusal (timeout, 5xx) changes nothing.
    pub fn record(&mut self, namespace: &str, read: PodRead, refused: Option<&Refused>) {
        match (read, refused) {
            (_, Some(Refused(message))) => {
                if let Some(n) = self.refused.get_mut(namespace) {
                    *n += 1;
                    return;
                }
                self.refused.insert(namespace.to_string(), 1);
                tracing::warn!(
                    verb = "get",
                    resource = "pods",
                    namespace,
                    error = %message,
                    "access denied: RBAC does not let this exporter's identity get pods in {namespace}, so holder pods there cannot be read live and their locks stay own_unverified; grant get on pods (the chart's ClusterRole, or a Role in the namespace). Logged once until a read there is answered again"
                );
            }
            (PodRead::Failed, None) => {}
            (PodRead::Live | PodRead::Finished | PodRead::Gone, None) => {
                if let Some(refused) = self.refused.remove(namespace) {
                    tracing::info!(
                        resource = "pods",
                        namespace,
                        refused,
                        "live pod reads in {namespace} are answered again"
                    );
                }
            }
        }
    }
}

/// How long one live read may take, retries included.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Most live reads in flight at once.
const MAX_IN_FLIGHT: usize = 8;

/// Pods waiting for a live read and pods being read, each at most once:
/// however often a pod is asked for (every re-check tick, every cache
/// change), the queue holds it once, so under a hung API server it stays
/// as long as the number of holder pods and after recovery nothing is read
/// twice.
#[derive(Debug, Default)]
pub struct ReadQueue {
    waiting: VecDeque<ObjectKey>,
    queued: HashSet<ObjectKey>,
    reading: HashSet<ObjectKey>,
}

impl ReadQueue {
    /// Queues `pod` unless it is queued or being read; true when queued.
    /// A request for a pod being read is dropped: the index asks again
    /// when that read's answer turns out older than a cache change.
    pub fn push(&mut self, pod: ObjectKey) -> bool {
        if self.queued.contains(&pod) || self.reading.contains(&pod) {
            return false;
        }
        self.queued.insert(pod.clone());
        self.waiting.push_back(pod);
        true
    }

    /// The next pod to read, now marked as being read.
    pub fn start_next(&mut self) -> Option<ObjectKey> {
        let pod = self.waiting.pop_front()?;
        self.queued.remove(&pod);
        self.reading.insert(pod.clone());
        Some(pod)
    }

    /// A read of `pod` ended (or was not started after all).
    pub fn done(&mut self, pod: &ObjectKey) {
        self.reading.remove(pod);
    }

    /// Pods waiting.
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// Pods being read.
    pub fn reading(&self) -> usize {
        self.reading.len()
    }
}

fn lock_queue<T>(q: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Nothing panics while holding it; recover the one way if it ever did.
    match q.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// Runs the verifier: reads each queued pod through `client` (whose
/// connection state is `api`), at most `reads_per_second` a second and one
/// read per pod at a time, and re-queues unresolved ones every `recheck`.
pub async fn run(
    shared: Arc<Shared>,
    client: Client,
    api: Arc<ApiLink>,
    mut requests: mpsc::UnboundedReceiver<ObjectKey>,
    recheck: Duration,
    reads_per_second: u32,
) {
    // One read per period: after a quiet spell the pace does not burst,
    // so a thousand locks turning stale at once reach the API server as a
    // steady trickle.
    let mut pace = tokio::time::interval(Duration::from_secs(1) / reads_per_second.max(1));
    pace.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let queue = Arc::new(Mutex::new(ReadQueue::default()));
    let refusals = Arc::new(Mutex::new(RefusedReads::default()));
    let permits = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    let mut tick = tokio::time::interval(recheck);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let has_waiting = lock_queue(&queue).waiting() > 0;
        tokio::select! {
            // Requests are drained even while every permit is taken (a hung
            // API server), so the channel never holds more than a burst.
            p = requests.recv() => {
                let Some(pod) = p else { return };
                if shared.read(|ix| ix.needs_read(&pod)) {
                    lock_queue(&queue).push(pod);
                }
            }
            _ = tick.tick() => {
                let again = shared.write(|ix, _| { ix.gc_pod_reads(); ix.pods_to_recheck() });
                let mut q = lock_queue(&queue);
                for pod in again {
                    q.push(pod);
                }
            }
            permit = permits.clone().acquire_owned(), if has_waiting => {
                let Ok(permit) = permit else { return };
                pace.tick().await;
                // The API server asked to wait (429/503 with Retry-After).
                if let Some(wait) = api.retry_after_remaining() {
                    tokio::time::sleep(wait).await;
                }
                let Some(pod) = lock_queue(&queue).start_next() else { continue };
                // The ticket is taken before the request goes out: a cache
                // change from here on makes its answer too old to record.
                let ticket = shared.write(|ix, _| {
                    ix.needs_read(&pod).then(|| ix.begin_pod_read(pod.clone()))
                });
                let Some(ticket) = ticket else {
                    lock_queue(&queue).done(&pod);
                    continue;
                };
                let (shared, client, queue) = (shared.clone(), client.clone(), queue.clone());
                let (api, refusals) = (api.clone(), refusals.clone());
                tokio::spawn(async move {
                    let (read, refused) =
                        fetch_pod(&client, Some(&api), &pod.namespace, &pod.name).await;
                    lock_queue(&refusals).record(&pod.namespace, read, refused.as_ref());
                    shared.health.on_pod_read(match read {
                        PodRead::Live | PodRead::Finished => ReadResult::Found,
                        PodRead::Gone => ReadResult::NotFound,
                        PodRead::Failed => ReadResult::Error,
                    });
                    // Marked done first, so a re-read the index asks for
                    // below is queued, not dropped as a duplicate.
                    lock_queue(&queue).done(&pod);
                    shared.update(|ix, now| ix.finish_pod_read(ticket, read, now));
                    drop(permit);
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(n: &str) -> ObjectKey {
        ObjectKey::new("ns", n)
    }

    #[test]
    fn a_pod_is_queued_at_most_once() {
        let mut q = ReadQueue::default();
        assert!(q.push(pod("a")));
        for _ in 0..100 {
            assert!(!q.push(pod("a")));
        }
        assert!(q.push(pod("b")));
        assert_eq!(q.waiting(), 2);
        assert_eq!(q.start_next(), Some(pod("a")));
        // While it is read it is not queued again.
        assert!(!q.push(pod("a")));
        assert_eq!(q.waiting(), 1);
        q.done(&pod("a"));
        assert!(q.push(pod("a")));
        assert_eq!(q.start_next(), Some(pod("b")));
        assert_eq!(q.start_next(), Some(pod("a")));
        assert_eq!(q.start_next(), None);
        assert_eq!(q.reading(), 2);
    }
}
