//! The watch loop's rules as one table: each row is a state, what the
//! scope knows, the outcome of the last action, and the state and action
//! `step` must answer. Times are offsets from a fixed instant; the backoff
//! has jitter (80-100 %), so pauses are checked as ranges.

use std::time::Duration;

use kube::core::Status;

use super::*;

const T: Timing = Timing::DEFAULT;

fn api(code: u16, message: &str) -> Failed {
    Failed::Api(kube::Error::Api(Box::new(Status {
        code,
        message: message.into(),
        ..Status::default()
    })))
}

fn refused() -> Failed {
    Failed::Api(kube::Error::Service(Box::new(std::io::Error::from(
        std::io::ErrorKind::ConnectionRefused,
    ))))
}

fn reset() -> Failed {
    Failed::Api(kube::Error::Service(Box::new(std::io::Error::from(
        std::io::ErrorKind::ConnectionReset,
    ))))
}

fn failure(failed: Failed) -> Failure {
    Failure {
        failed,
        gives_up: false,
        retry_after: None,
    }
}

fn giving_up(failed: Failed) -> Failure {
    Failure {
        gives_up: true,
        ..failure(failed)
    }
}

fn asked(failed: Failed, retry_after: Duration) -> Failure {
    Failure {
        retry_after: Some(retry_after),
        ..failure(failed)
    }
}

/// A watch that ended so, the server having asked for no pause.
fn ended(end: WatchEnd) -> Outcome {
    Outcome::Ended(end, None)
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn watching(rv: &str) -> State {
    State::Watching {
        rv: rv.into(),
        streaming: false,
    }
}

fn watch_list() -> State {
    State::Watching {
        rv: String::new(),
        streaming: true,
    }
}

fn resume(rv: &str) -> State {
    State::Resume { rv: rv.into() }
}

/// The action a row expects.
#[derive(Debug)]
enum Want {
    List {
        after: bool,
    },
    Open {
        rv: &'static str,
        not_before: Option<Duration>,
    },
    Pause {
        what: &'static str,
        drop: bool,
        wait: (Duration, Duration),
    },
    FallBack,
    GiveUp,
}

/// One rule: its name; the state; what the scope knows before the step;
/// the outcome of the last action; how long its request took (the step
/// runs that long after `started`); whether the server streams
/// watch-lists; then the state and the action `step` must answer.
type Row = (
    &'static str,
    State,
    fn(&mut Scope),
    fn() -> Outcome,
    Duration,
    bool,
    State,
    Want,
);

fn nothing(_: &mut Scope) {}

fn synced(s: &mut Scope) {
    s.synced = true;
}

fn relist_pending(s: &mut Scope) {
    s.synced = true;
    s.relist_by = Some(Instant::now());
}

/// Synced, then failed often: the backoff is at its cap.
fn failing(s: &mut Scope) {
    synced(s);
    failed_often(s);
}

fn failed_often(s: &mut Scope) {
    for _ in 0..10 {
        s.backoff.next(ErrorReason::ServerError);
    }
}

/// The first pause of a transient failure: backoff_min less jitter.
const FIRST: (Duration, Duration) = (Duration::from_millis(800), Duration::from_secs(1));

fn paused(what: &'static str) -> Want {
    Want::Pause {
        what,
        drop: false,
        wait: FIRST,
    }
}

/// A watch from `rv`, paced a `watch_min_interval` after the last start.
fn paced(rv: &'static str) -> Want {
    Want::Open {
        rv,
        not_before: Some(T.watch_min_interval),
    }
}

fn listing() -> State {
    State::Listing { may_give_up: true }
}

#[rustfmt::skip]
fn rows() -> Vec<Row> {
    vec![
        ("start, the server streams watch-lists: a watch-list, no LIST", State::Start, nothing, || Outcome::Done, ms(0), true, watch_list(), Want::Open { rv: "", not_before: None }),
        ("start, paged (--watch-list=false or fallen back): a paged list", State::Start, nothing, || Outcome::Done, ms(0), false, listing(), Want::List { after: false }),
        ("listed: a watch from the list's version, paced after the last watch", listing(), |s| s.last_watch = Some(Instant::now()), || Outcome::Listed("7".into()), ms(100), false, watching("7"), paced("7")),
        ("watch-list refused 429 'initializing': this sync paged, at once", watch_list(), nothing, || Outcome::OpenFailed(failure(api(429, "storage is (re)initializing"))), ms(5), true, State::Listing { may_give_up: false }, Want::List { after: true }),
        ("watch-list refused 422: paged for this server", watch_list(), nothing, || Outcome::OpenFailed(giving_up(api(422, "sendInitialEvents is forbidden"))), ms(5), true, State::Start, Want::FallBack),
        ("watch-list refused 400 naming resourceVersionMatch: paged for this server", watch_list(), nothing, || Outcome::OpenFailed(giving_up(api(400, "resourceVersionMatch: Forbidden"))), ms(5), true, State::Start, Want::FallBack),
        ("watch-list refused 400 for a field selector, not synced: the caller's give_up", watch_list(), nothing, || Outcome::OpenFailed(giving_up(api(400, "field label not supported"))), ms(5), true, State::Start, Want::GiveUp),
        ("list failed 404, not synced, give_up accepts: give up", listing(), nothing, || Outcome::ListFailed(giving_up(api(404, "not found"))), ms(5), false, State::Start, Want::GiveUp),
        ("list failed 404 after the first sync: no give up, a pause", listing(), synced, || Outcome::ListFailed(giving_up(api(404, "not found"))), ms(0), false, State::Start, paused("list")),
        ("the list standing in for an initializing watch-list never gives up", State::Listing { may_give_up: false }, nothing, || Outcome::ListFailed(giving_up(api(404, "not found"))), ms(0), true, State::Start, paused("list")),
        ("watch start failed 410: a whole state, after the backoff", watching("5"), synced, || Outcome::OpenFailed(failure(api(410, "too old resource version"))), ms(0), false, State::Start, paused("watch")),
        ("watch start failed 429: resume from the version, after Retry-After", watching("5"), synced, || Outcome::OpenFailed(asked(api(429, "too many requests"), ms(5000))), ms(0), false, resume("5"), Want::Pause { what: "watch", drop: false, wait: (ms(5000), ms(5000)) }),
        ("watch-list failed 429 (not initializing): a whole state again, it had no version", watch_list(), nothing, || Outcome::OpenFailed(failure(api(429, "too many requests"))), ms(0), true, State::Start, paused("watch")),
        ("watch start failed 503 with Retry-After: a whole state, after Retry-After", watching("5"), synced, || Outcome::OpenFailed(asked(api(503, "unavailable"), ms(4000))), ms(0), false, State::Start, Want::Pause { what: "watch", drop: false, wait: (ms(4000), ms(4000)) }),
        ("Retry-After is only heeded on a 429 or 503", watching("5"), synced, || Outcome::OpenFailed(asked(api(403, "forbidden"), ms(4000))), ms(0), false, State::Start, paused("watch")),
        ("watch start timed out: pooled connections dropped, backoff less the time taken", watching("5"), synced, || Outcome::OpenFailed(failure(Failed::Timeout(T.request))), T.request, false, State::Start, Want::Pause { what: "watch", drop: true, wait: (ms(0), ms(0)) }),
        ("list timed out early: the backoff less the time taken", listing(), nothing, || Outcome::ListFailed(failure(Failed::Timeout(T.request))), ms(500), false, State::Start, Want::Pause { what: "list", drop: true, wait: (ms(300), ms(500)) }),
        ("403 backs off up to backoff_max_config", listing(), failing, || Outcome::ListFailed(failure(api(403, "forbidden"))), ms(0), false, State::Start, Want::Pause { what: "list", drop: false, wait: (T.backoff_max_config * 8 / 10, T.backoff_max_config) }),
        ("404 backs off up to backoff_max_config", watching("5"), failing, || Outcome::OpenFailed(failure(api(404, "not found"))), ms(0), false, State::Start, Want::Pause { what: "watch", drop: false, wait: (T.backoff_max_config * 8 / 10, T.backoff_max_config) }),
        ("a transient failure backs off up to backoff_max", watching("5"), failing, || Outcome::OpenFailed(failure(api(500, "internal error"))), ms(0), false, State::Start, Want::Pause { what: "watch", drop: false, wait: (T.backoff_max * 8 / 10, T.backoff_max) }),
        ("watch start failed on a reset connection: a whole state", watching("5"), synced, || Outcome::OpenFailed(failure(reset())), ms(0), false, State::Start, paused("watch")),
        ("watch start refused (nothing listens): resume from the version", watching("5"), synced, || Outcome::OpenFailed(failure(refused())), ms(0), false, resume("5"), paused("watch")),
        ("watch start failed, give_up accepts but the scope synced: a pause", watching("5"), synced, || Outcome::OpenFailed(giving_up(api(404, "not found"))), ms(0), false, State::Start, paused("watch")),
        ("watch ended (timeout, silence): resume, backoff reset, paced", watching("5"), failing, || ended(WatchEnd::Resume("9".into())), ms(300_000), true, watching("9"), paced("9")),
        ("watch ended after delivering, however soon: resume", watching("5"), synced, || ended(clean_end("9".into(), true, ms(10), T)), ms(10), false, watching("9"), paced("9")),
        ("watch closed at once, nothing delivered: a transport failure, resumed after the backoff", watching("5"), synced, || ended(clean_end("5".into(), false, ms(10), T)), ms(10), false, resume("5"), Want::Pause { what: "watch", drop: false, wait: (ms(790), ms(990)) }),
        ("watch ended empty but not at once: resume", watching("5"), synced, || ended(clean_end("5".into(), false, T.watch_min_interval, T)), T.watch_min_interval, false, watching("5"), paced("5")),
        ("watch-list answered as an ordinary watch: paged for this server", watch_list(), nothing, || ended(WatchEnd::NotStreaming("ignored")), ms(10), true, State::Start, Want::FallBack),
        ("watch-list cut short (early end, silence): this sync paged, at once; the server still streams", watch_list(), nothing, || ended(WatchEnd::CutShort("ended")), ms(10), true, State::Listing { may_give_up: false }, Want::List { after: true }),
        ("watch ended with an ERROR 410: a whole state, after the backoff", watching("5"), synced, || { let gone = Failed::Status { code: 410, message: "too old".into() }; ended(WatchEnd::Failed(gone, Some("8".into()))) }, ms(0), false, State::Start, paused("watch")),
        ("open watch broken (transport): resume from its last version", watching("5"), synced, || ended(WatchEnd::Failed(reset(), Some("8".into()))), ms(0), false, resume("8"), paused("watch")),
        ("open watch throttled (429): resume from its last version", watching("5"), synced, || ended(WatchEnd::Failed(api(429, "slow down"), Some("8".into()))), ms(0), false, resume("8"), paused("watch")),
        ("open watch ERROR 503 with Retry-After: a whole state, after Retry-After", watching("5"), synced, || { let err = Failed::Status { code: 503, message: "unavailable".into() }; Outcome::Ended(WatchEnd::Failed(err, Some("8".into())), Some(ms(3000))) }, ms(0), false, State::Start, Want::Pause { what: "watch", drop: false, wait: (ms(3000), ms(3000)) }),
        ("open watch failed otherwise (ERROR 500): a whole state", watching("5"), synced, || { let err = Failed::Status { code: 500, message: "etcd".into() }; ended(WatchEnd::Failed(err, Some("8".into()))) }, ms(0), false, State::Start, paused("watch")),
        ("watch-list broken during its initial events: a whole state", watch_list(), nothing, || ended(WatchEnd::Failed(reset(), None)), ms(0), true, State::Start, paused("watch")),
        ("after a pause: the watch from the version", resume("5"), synced, || Outcome::Done, ms(0), true, watching("5"), Want::Open { rv: "5", not_before: None }),
        ("a relist pending (undecodable event), watch ended: a whole state", watching("5"), relist_pending, || ended(WatchEnd::Resume("9".into())), ms(0), true, watch_list(), paced("")),
        ("a relist pending, after a pause that would resume: a whole state", resume("5"), relist_pending, || Outcome::Done, ms(0), false, listing(), Want::List { after: false }),
    ]
}

fn check((rule, state, given, outcome, took, streams, want_next, want): Row) {
    let t0 = Instant::now();
    let mut scope = Scope::new(T, Backoff::new(T));
    given(&mut scope);
    if scope.last_watch.is_some() {
        scope.last_watch = Some(t0);
    }
    let (next, action) = step(state, &mut scope, outcome(), t0, streams, t0 + took);
    assert_eq!(next, want_next, "{rule}");
    match (want, action) {
        (Want::List { after }, Action::List { after: a }) => {
            assert_eq!(after, a.is_some(), "{rule}")
        }
        (
            Want::Open { rv, not_before },
            Action::Open {
                rv: r,
                streaming,
                not_before: n,
                seconds,
            },
        ) => {
            assert_eq!(r, rv, "{rule}");
            assert_eq!(streaming, rv.is_empty(), "{rule}");
            assert_eq!(n.map(|n| n - t0), not_before, "{rule}");
            assert!((300..600).contains(&seconds), "{rule}: {seconds}");
        }
        (
            Want::Pause {
                what,
                drop,
                wait: (lo, hi),
            },
            Action::Pause {
                what: w,
                drop_connections,
                wait,
                ..
            },
        ) => {
            assert_eq!(w, what, "{rule}");
            assert_eq!(drop_connections, drop, "{rule}");
            assert!(
                wait >= lo && wait <= hi,
                "{rule}: waits {wait:?}, not {lo:?}..={hi:?}"
            );
        }
        (Want::FallBack, Action::FallBack(_)) | (Want::GiveUp, Action::GiveUp(_)) => {}
        (want, action) => panic!("{rule}: wanted {want:?}, got {action:?}"),
    }
}

/// Every row is checked, and every row that fails is named.
#[test]
fn every_rule_of_the_loop() {
    assert!(failure(refused()).failed.connection_refused());
    assert!(!failure(reset()).failed.connection_refused());
    let failed: Vec<&str> = rows()
        .into_iter()
        .filter_map(|row| {
            let rule = row.0;
            let checked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(row)));
            checked.is_err().then_some(rule)
        })
        .collect();
    assert!(failed.is_empty(), "rules not kept: {failed:#?}");
}

#[test]
fn a_whole_sync_clears_the_relist_and_resets_the_backoff() {
    let t0 = Instant::now();
    let mut scope = Scope::new(T, Backoff::new(T));
    relist_pending(&mut scope);
    failed_often(&mut scope);
    let listing = listing();
    step(
        listing,
        &mut scope,
        Outcome::Listed("7".into()),
        t0,
        false,
        t0,
    );
    assert!(scope.synced);
    assert_eq!(scope.relist_by, None);
    assert!(scope.backoff.next(ErrorReason::ServerError) <= T.backoff_min);
}

#[test]
fn a_resumed_watch_resets_the_backoff() {
    let t0 = Instant::now();
    let mut scope = Scope::new(T, Backoff::new(T));
    failed_often(&mut scope);
    let end = ended(WatchEnd::Resume("9".into()));
    step(watching("5"), &mut scope, end, t0, false, t0);
    assert!(scope.backoff.next(ErrorReason::ServerError) <= T.backoff_min);
    assert_eq!(scope.last_watch, Some(t0), "paced from this watch's start");
}
