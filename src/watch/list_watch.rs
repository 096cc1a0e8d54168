//! One resource's list-then-watch loop, with every request bounded in time
//! and every failure reported.
//!
//! kube-runtime's `watcher` hides what an alerting sidecar must show: the
//! client retries 429/503 on its own, a quiet watch on a hung server is only
//! noticed when the server-side timeout would have closed it, and a resumed
//! watch emits nothing. This loop makes each request itself, so that
//! `watch_up` follows the last request of the watch:
//!
//! - a whole state of the scope comes from one streaming watch-list
//!   (`sendInitialEvents=true`, ended by the `k8s.io/initial-events-end`
//!   bookmark) where the server streams them, else from a paged list; a
//!   definitive answer (a refusal, an ordinary watch) makes the choice for
//!   every watch of the process ([`crate::watch::WatchList`]), a watch-list
//!   cut short pages that sync only; each sync is counted
//!   (`watch_syncs_total{mode}`);
//! - a list page or watch-start request that gets no answer within
//!   [`Timing::request`] is a `timeout` failure;
//! - a watch asks the server to close it after 5-10 min
//!   ([`Timing::watch_timeout`]) and asks for bookmarks; one that delivers
//!   nothing for [`Timing::silence`] is restarted where the server sends
//!   bookmarks or no ping watches the connection (HTTP/1.1), else past its
//!   timeout (the restart's own request is what tells a hung server from a
//!   dead connection);
//! - every failure counts and backs off (capped, with jitter); what follows
//!   it is a whole state unless the failure leaves the watch's version
//!   good (a 429, a broken stream: `resumes_after`);
//! - an event that cannot be decoded is counted (`decode`) and marks the
//!   scope for a relist: the change it carried is lost, and with bookmarks
//!   a watch can resume for ever without listing again, so nothing else
//!   would repair it. The relist happens when the watch ends, and at the
//!   latest [`Timing::relist_within`] after the event;
//! - two watch starts of a scope are at least [`Timing::watch_min_interval`]
//!   apart, and a watch that ends cleanly within that interval without
//!   delivering anything (a proxy that answers 200 and closes) is a
//!   `transport` failure: counted, backed off, `watch_up` 0.
//!
//! This file is the driver ([`run`]): it performs what the rules decide
//! (`state`: which request next, after which pause) and makes the paged
//! list. Beside it: the limits and the backoff (`timing`), how a request
//! fails (`request`), what a watch reports to the index and health and the
//! log (`sink`), and one watch request followed to its end (`follow`).

use kube::api::{Api, ListParams};
use kube::runtime::watcher;
use serde::de::DeserializeOwned;
use tokio::time::Instant;

use crate::health::SyncMode;
use crate::index::{Index, IndexResource};
use crate::watch::follow;
use crate::watch::proto::Protobuf;
use crate::watch::request::{bounded, Failed};
use crate::watch::resources::Selectors;
use crate::watch::sink::{Item, Sink};
use crate::watch::state::{step, Action, Failure, Outcome, PagedOnce, Scope, State};
use crate::watch::timing::{Backoff, Timing};

/// Why the list-then-watch loop returned.
#[derive(Debug)]
pub enum Exit {
    /// The caller's `give_up` accepted this error before the first list.
    GaveUp(kube::Error),
}

/// Lists, then watches, `api` forever, feeding trimmed objects to `sink`.
///
/// A whole state of the scope (the first sync, a relist) comes from one
/// streaming watch-list while the server streams them
/// ([`crate::watch::WatchList::streams`]), else from a paged list followed by a watch.
///
/// Returns only when `give_up` accepts an error met before the first sync
/// succeeded (a version of a resource that is not served, a rejected
/// selector), so the caller can try another way.
pub(super) async fn run<K, T, F>(
    mut sink: Sink<'_, T>,
    api: Api<K>,
    selectors: Selectors,
    timing: Timing,
    trim: F,
    give_up: impl Fn(&kube::Error) -> bool,
) -> Exit
where
    K: kube::Resource + Clone + DeserializeOwned + Protobuf + std::fmt::Debug + Send + 'static,
    Index: IndexResource<T>,
    F: Fn(&K) -> Item<T>,
{
    let ctx = sink.ctx;
    let mut scope = Scope::new(timing, Backoff::new(timing));
    let failure = |failed: Failed| Failure {
        gives_up: matches!(&failed, Failed::Api(e) if give_up(e)),
        retry_after: ctx.api.retry_after_remaining(),
        failed,
    };
    let mut state = State::Start;
    let mut outcome = Outcome::Done;
    let mut started = Instant::now();
    loop {
        let streams = ctx.watch_list.streams();
        let action;
        (state, action) = step(state, &mut scope, outcome, started, streams, Instant::now());
        started = Instant::now();
        outcome = match action {
            Action::List { after } => {
                let resource = sink.ingest.resource().as_str();
                match after {
                    Some(PagedOnce::CacheInitializing(err)) => tracing::debug!(
                        resource,
                        error = %err,
                        "the watch cache is initializing; this sync is a paged list"
                    ),
                    Some(PagedOnce::CutShort(why)) => tracing::info!(
                        resource,
                        scope = sink.ingest.namespace(),
                        reason = why,
                        "a watch-list was cut short; this sync is a paged list, the next one streams again"
                    ),
                    None => {}
                }
                match list(&mut sink, &api, &selectors, timing, &trim).await {
                    Ok(rv) => Outcome::Listed(rv),
                    Err(f) => Outcome::ListFailed(failure(f)),
                }
            }
            Action::Open {
                rv,
                streaming,
                seconds,
                not_before,
            } => {
                // Paced, whatever the last watch did: see `Timing::watch_min_interval`.
                if let Some(at) = not_before {
                    tokio::time::sleep_until(at).await;
                }
                started = Instant::now();
                let opened = follow::open(
                    &api,
                    &selectors,
                    timing,
                    seconds,
                    &rv,
                    streaming,
                    ctx.wire.protobuf(),
                )
                .await;
                match opened {
                    Ok(stream) => {
                        sink.success();
                        let end = follow::follow(
                            &mut sink, stream, &mut scope, seconds, &trim, rv, streaming,
                        )
                        .await;
                        Outcome::Ended(end, ctx.api.retry_after_remaining())
                    }
                    Err(f) => Outcome::OpenFailed(failure(f)),
                }
            }
            Action::Pause {
                what,
                failed,
                drop_connections,
                wait,
            } => {
                sink.failure(failed.reason(), what, &failed);
                if drop_connections {
                    ctx.api.reset_connections();
                }
                tokio::time::sleep(wait).await;
                Outcome::Done
            }
            Action::FallBack(why) => {
                ctx.watch_list.fall_back(sink.ingest.resource(), &why);
                Outcome::Done
            }
            Action::GiveUp(err) => return Exit::GaveUp(err),
        };
    }
}

/// Lists every page and hands the result to the index as one resync.
/// Returns the list's resourceVersion, where the watch starts.
async fn list<K, T, F>(
    sink: &mut Sink<'_, T>,
    api: &Api<K>,
    selectors: &Selectors,
    timing: Timing,
    trim: &F,
) -> Result<String, Failed>
where
    K: kube::Resource + Clone + DeserializeOwned + std::fmt::Debug,
    Index: IndexResource<T>,
    F: Fn(&K) -> Item<T>,
{
    let mut params = ListParams::default().limit(timing.page_size);
    if let Some(l) = selectors.labels {
        params = params.labels(l);
    }
    if let Some(f) = selectors.fields {
        params = params.fields(f);
    }
    let mut started = false;
    loop {
        let page = bounded(timing.request, api.list(&params)).await?;
        if !started {
            sink.event(watcher::Event::Init);
            started = true;
        }
        sink.success();
        for obj in &page.items {
            sink.event(watcher::Event::InitApply(trim(obj)));
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => {
                sink.event(watcher::Event::InitDone);
                sink.synced(SyncMode::Paged);
                return Ok(page.metadata.resource_version.unwrap_or_default());
            }
        }
    }
}
