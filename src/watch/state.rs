//! The watch loop's rules as a state machine: [`State`], what the loop
//! knows of its scope ([`Scope`]) and one pure transition, [`step`].
//!
//! Shaped after kube-runtime's `watcher` (`enum State` advanced by a step
//! function), but `step` does no I/O and reads no clock: the driver
//! ([`super::list_watch::run`]) performs each [`Action`], then feeds back
//! what came of it as an [`Outcome`] with the instants it saw. So every
//! fallback, backoff and resume rule is a row of the table test beside
//! this file, run without a server or a timer.

use std::time::Duration;

use tokio::time::Instant;

use super::request::Failed;
use super::timing::{Backoff, Timing};
use crate::health::ErrorReason;

/// Where the loop is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum State {
    /// A whole state of the scope is next: a watch-list where the server
    /// streams them, else a paged list.
    Start,
    /// A paged list is in flight. `may_give_up`: the caller's `give_up`
    /// is asked about its failure (not for a list that stands in for a
    /// watch-list the server answered: the resource is served).
    Listing { may_give_up: bool },
    /// A watch from `rv` is next (unless a relist is pending).
    Resume { rv: String },
    /// A watch is opening or open: from `rv`, or (`streaming`) a
    /// watch-list that begins with the whole state.
    Watching { rv: String, streaming: bool },
}

/// What the loop has learned of its scope, kept across watches.
#[derive(Debug)]
pub(super) struct Scope {
    /// A whole state has been synced once.
    pub(super) synced: bool,
    /// When the scope must be listed again because a watch event could not
    /// be decoded (set by `follow`, cleared by a whole sync). A watch-list
    /// in its initial events is that sync: it does not end them.
    pub(super) relist_by: Option<Instant>,
    /// A watch of this scope has had a bookmark that was not the end of
    /// initial events: the server sends them, so a silence is a fault.
    pub(super) bookmarks_seen: bool,
    /// A watch line too long to read has been logged for this scope.
    pub(super) long_line_logged: bool,
    /// The pause after the next failure.
    pub(super) backoff: Backoff,
    /// When the last watch of the scope started.
    pub(super) last_watch: Option<Instant>,
    pub(super) timing: Timing,
}

impl Scope {
    pub(super) fn new(timing: Timing, backoff: Backoff) -> Self {
        Scope {
            synced: false,
            relist_by: None,
            bookmarks_seen: false,
            long_line_logged: false,
            backoff,
            last_watch: None,
            timing,
        }
    }

    /// A whole state was synced (a paged list, or a watch-list's initial
    /// events): nothing is pending, the next failure pauses the least.
    pub(super) fn synced_whole(&mut self) {
        self.synced = true;
        self.relist_by = None;
        self.backoff.reset();
    }
}

/// A failed list or watch start, as the driver saw it.
#[derive(Debug)]
pub(super) struct Failure {
    pub(super) failed: Failed,
    /// The caller's `give_up` accepted the error.
    pub(super) gives_up: bool,
    /// What is left of the API server's Retry-After, if it asked.
    pub(super) retry_after: Option<Duration>,
}

/// How a watch ended.
#[derive(Debug)]
pub(super) enum WatchEnd {
    /// The stream ended or went quiet: watch again from this version.
    Resume(String),
    /// A request or the stream failed; resume from the version if any.
    Failed(Failed, Option<String>),
    /// A watch-list was answered with an ordinary watch (a change, or a
    /// bookmark without initial-events-end, before that bookmark): the
    /// server ignores `sendInitialEvents`, and every watch lists in pages
    /// from now on.
    NotStreaming(&'static str),
    /// A watch-list ended, or went silent, before its initial-events-end
    /// bookmark. That says nothing definite of the server (one that
    /// restarts or is slow does the same): this sync is listed in pages,
    /// the next one streams again.
    CutShort(&'static str),
}

/// Why one sync is a paged list on a server that streams watch-lists.
#[derive(Debug)]
pub(super) enum PagedOnce {
    /// The watch-list was refused while the watch cache fills.
    CacheInitializing(Failed),
    /// The watch-list was cut short ([`WatchEnd::CutShort`]).
    CutShort(&'static str),
}

/// What came of the last [`Action`]. `started` (given to [`step`]) is when
/// its request was sent.
#[derive(Debug)]
pub(super) enum Outcome {
    /// The action asked for no answer (a pause, a fallback): go on.
    Done,
    /// A paged list ended at this resourceVersion.
    Listed(String),
    ListFailed(Failure),
    /// The watch was not opened.
    OpenFailed(Failure),
    /// The watch opened and ended so; what was left of the API server's
    /// Retry-After then.
    Ended(WatchEnd, Option<Duration>),
}

/// What the driver does next.
#[derive(Debug)]
pub(super) enum Action {
    /// A paged list; `after` says why, when it stands in for a watch-list.
    List { after: Option<PagedOnce> },
    /// Open a watch (see [`State::Watching`]) with `timeoutSeconds` of
    /// `seconds`, not before `not_before`.
    Open {
        rv: String,
        streaming: bool,
        seconds: u32,
        not_before: Option<Instant>,
    },
    /// Report `failed` (of a `what`: "list" or "watch"), drop the pooled
    /// connections if `drop_connections`, then sleep `wait`.
    Pause {
        what: &'static str,
        failed: Failed,
        drop_connections: bool,
        wait: Duration,
    },
    /// The server does not stream watch-lists: every watch lists in pages.
    FallBack(String),
    /// Return to the caller, who tries another way.
    GiveUp(kube::Error),
}

/// The next state and action, after `outcome` of the action taken in
/// `state`. `streams`: the server is still thought to stream watch-lists.
pub(super) fn step(
    state: State,
    scope: &mut Scope,
    outcome: Outcome,
    started: Instant,
    streams: bool,
    now: Instant,
) -> (State, Action) {
    match (state, outcome) {
        (State::Listing { .. }, Outcome::Listed(rv)) => {
            scope.synced_whole();
            open(scope, rv, false)
        }
        (State::Listing { may_give_up }, Outcome::ListFailed(f)) => match f.failed {
            Failed::Api(err) if may_give_up && !scope.synced && f.gives_up => {
                (State::Start, Action::GiveUp(err))
            }
            failed => pause(
                scope,
                State::Start,
                "list",
                failed,
                f.retry_after,
                started,
                now,
            ),
        },
        (State::Watching { rv, streaming }, Outcome::OpenFailed(f)) => {
            scope.last_watch = Some(started);
            open_failed(scope, rv, streaming, f, started, now)
        }
        (State::Watching { .. }, Outcome::Ended(end, retry_after)) => {
            scope.last_watch = Some(started);
            match end {
                WatchEnd::Resume(rv) => {
                    scope.backoff.reset();
                    next(State::Resume { rv }, scope, streams)
                }
                WatchEnd::NotStreaming(why) => (State::Start, Action::FallBack(why.to_string())),
                // As client-go's reflector does for any watch-list that
                // fails: this one sync is a list.
                WatchEnd::CutShort(why) => (
                    State::Listing { may_give_up: false },
                    Action::List {
                        after: Some(PagedOnce::CutShort(why)),
                    },
                ),
                WatchEnd::Failed(failed, resume) => {
                    let then = match resume {
                        Some(rv) if resumes_after(&failed, true) => State::Resume { rv },
                        _ => State::Start,
                    };
                    pause(scope, then, "watch", failed, retry_after, started, now)
                }
            }
        }
        // Done, or an outcome that does not belong to the state (none
        // the driver gives): the next request from where the loop is.
        (state, _) => next(state, scope, streams),
    }
}

/// A watch start failed (`f`): a refused watch-list is replaced by a
/// paged list, or makes every watch page; else the usual pause.
fn open_failed(
    scope: &mut Scope,
    rv: String,
    streaming: bool,
    f: Failure,
    started: Instant,
    now: Instant,
) -> (State, Action) {
    match f.failed {
        // A watch cache still filling answers a watch-list 429 ("storage
        // is (re)initializing", Retry-After 1 s) while a LIST, which it
        // hands to etcd, is answered: this one sync is paged, at once.
        Failed::Api(err) if streaming && cache_initializing(&err) => (
            State::Listing { may_give_up: false },
            Action::List {
                after: Some(PagedOnce::CacheInitializing(Failed::Api(err))),
            },
        ),
        Failed::Api(err) if streaming && rejects_streaming(&err) => (
            State::Start,
            Action::FallBack(format!("the watch-list was refused: {err}")),
        ),
        Failed::Api(err) if !scope.synced && f.gives_up => (State::Start, Action::GiveUp(err)),
        failed => {
            let then = if !streaming && resumes_after(&failed, false) {
                State::Resume { rv }
            } else {
                State::Start
            };
            pause(scope, then, "watch", failed, f.retry_after, started, now)
        }
    }
}

/// The request `state` calls for: a watch from its version unless a
/// relist is pending, else a whole state.
fn next(state: State, scope: &mut Scope, streams: bool) -> (State, Action) {
    match state {
        State::Resume { rv } if scope.relist_by.is_none() => open(scope, rv, false),
        // The watch-list is the list: no LIST request at all.
        _ if streams => open(scope, String::new(), true),
        _ => (
            State::Listing { may_give_up: true },
            Action::List { after: None },
        ),
    }
}

/// Opens a watch, paced: two watch starts of a scope are at least
/// `watch_min_interval` apart, whatever the last watch did.
fn open(scope: &mut Scope, rv: String, streaming: bool) -> (State, Action) {
    let not_before = scope
        .last_watch
        .map(|at| at + scope.timing.watch_min_interval);
    let seconds = scope.backoff.watch_seconds();
    let action = Action::Open {
        rv: rv.clone(),
        streaming,
        seconds,
        not_before,
    };
    (State::Watching { rv, streaming }, action)
}

/// The pause after `failed`: the backoff, less the time the failed request
/// already took (a request that timed out has waited long enough: the
/// server is not asked more often than the backoff says, and a server that
/// comes back is seen within one connect timeout), or longer when the API
/// server asked for it (Retry-After on a 429 or 503, capped). A timeout
/// drops the pooled connections: the one that did not answer may be
/// half-open, and the next try must dial.
fn pause(
    scope: &mut Scope,
    then: State,
    what: &'static str,
    failed: Failed,
    retry_after: Option<Duration>,
    started: Instant,
    now: Instant,
) -> (State, Action) {
    let reason = failed.reason();
    let took = now.saturating_duration_since(started);
    let mut wait = scope.backoff.next(reason).saturating_sub(took);
    if matches!(reason, ErrorReason::Throttled | ErrorReason::ServerError) {
        if let Some(asked) = retry_after {
            wait = wait.max(asked);
        }
    }
    let action = Action::Pause {
        what,
        failed,
        drop_connections: reason == ErrorReason::Timeout,
        wait,
    };
    (then, action)
}

/// How a watch whose stream ended cleanly ended: one that lasted less than
/// `watch_min_interval` without delivering anything (a proxy that answers
/// 200 and closes) is a failure, else it resumes from `rv`.
pub(super) fn clean_end(rv: String, delivered: bool, lasted: Duration, timing: Timing) -> WatchEnd {
    if !delivered && lasted < timing.watch_min_interval {
        WatchEnd::Failed(Failed::ClosedAtOnce(lasted), Some(rv))
    } else {
        WatchEnd::Resume(rv)
    }
}

/// Whether the next watch may start from the last version after the
/// failure `f` of a watch start (`opened` false) or of an open watch,
/// rather than from a whole new state. As client-go's reflector does: a
/// watch start that failed resumes only after a 429 (the server answered
/// and asked to wait) or a refused connection (nothing listens: a restart,
/// whose missed changes the watch from the last version asks for, or
/// answers 410 for); an open watch resumes after a 429, a broken stream
/// (client-go takes a reset or a cut body for the watch's end) and a
/// watch the server closed at once (relisting once a second for a proxy
/// that closes every watch would be a list a second). After any other
/// failure (no answer in time, a connection that failed otherwise, a 5xx,
/// a refusal, an ERROR event) what happened meanwhile is read whole: a
/// watch from a version is only as good as the server's memory of the
/// changes since it, and a server that hung, restarted or failed over may
/// have none (an HTTP/1.1 server that came back never sent the
/// changes made while it hung).
fn resumes_after(f: &Failed, opened: bool) -> bool {
    match f.reason() {
        ErrorReason::Throttled => true,
        ErrorReason::Transport => opened || f.connection_refused(),
        _ => false,
    }
}

/// True when the server refused a watch-list for its parameters: 422
/// (`sendInitialEvents` is forbidden while the server's WatchList feature
/// is off), or a 400 that names them. Anything else (403, 404, a 400 for
/// a field selector) is the request's own answer.
pub(super) fn rejects_streaming(err: &kube::Error) -> bool {
    match err {
        kube::Error::Api(s) => {
            s.code == 422
                || s.code == 400
                    && (s.message.contains("sendInitialEvents")
                        || s.message.contains("resourceVersionMatch"))
        }
        _ => false,
    }
}

/// True for the 429 of a watch cache that is still being filled (a CRD
/// just created, a kube-apiserver just started): kube-apiserver hands a
/// LIST to etcd meanwhile, but refuses a watch-list.
pub(super) fn cache_initializing(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(s) if s.code == 429 && s.message.contains("initializing"))
}

#[cfg(test)]
mod tests;
