//! A hung, failing or throttling API server is visible within two minutes,
//! and the exporter recovers within seconds of the first good answer.
//!
//! The scripted API runs in process with tokio's clock paused, so the
//! production time limits (`Timing::DEFAULT`) are exercised exactly, with
//! virtual time standing in for minutes of waiting. The detection and
//! recovery times are printed (`cargo test --test api_faults -- --nocapture`).

mod support;

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use captf_lock_exporter::server::handle;
use captf_lock_exporter::shared::Shared;
use captf_lock_exporter::watch::Timing;
use http_body_util::BodyExt;
use serde_json::{json, Value};
use support::*;
use tokio::time::Instant;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Fault {
    None,
    Hang,
    Status(u16),
}

/// The API's state: the current Leases, changes not yet sent on a watch,
/// and the fault in force.
#[derive(Clone)]
struct World {
    fault: Arc<Mutex<Fault>>,
    leases: Arc<Mutex<Vec<Value>>>,
    pending: Arc<Mutex<Vec<Value>>>,
    rv: Arc<Mutex<u32>>,
    /// When the first Lease request after the last fault change got an answer.
    first_good: Arc<Mutex<Option<Instant>>>,
}

impl World {
    fn new() -> Self {
        World {
            fault: Arc::new(Mutex::new(Fault::None)),
            leases: Arc::new(Mutex::new(vec![
                lease("a", Some("alice@laptop"), 1),
                lease("b", None, 2),
            ])),
            pending: Default::default(),
            rv: Arc::new(Mutex::new(10)),
            first_good: Default::default(),
        }
    }

    fn set_fault(&self, f: Fault) {
        *self.fault.lock().unwrap() = f;
        *self.first_good.lock().unwrap() = None;
    }

    /// Replaces one Lease, as a real server would: in the list and as a
    /// MODIFIED event for the next watch.
    fn modify(&self, machine: &str, who: Option<&str>) {
        let rv = {
            let mut rv = self.rv.lock().unwrap();
            *rv += 1;
            *rv
        };
        let new = lease(machine, who, rv);
        let mut leases = self.leases.lock().unwrap();
        let name = new["metadata"]["name"].clone();
        leases.retain(|l| l["metadata"]["name"] != name);
        leases.push(new.clone());
        self.pending
            .lock()
            .unwrap()
            .push(json!({"type": "MODIFIED", "object": new}));
    }

    fn api(&self) -> FakeApi {
        let w = self.clone();
        FakeApi::new(move |path, is_watch, _| {
            let fault = *w.fault.lock().unwrap();
            if fault == Fault::None && path == LEASES {
                w.first_good
                    .lock()
                    .unwrap()
                    .get_or_insert_with(Instant::now);
            }
            match (path, is_watch, fault) {
                (_, _, Fault::Hang) => Reply::Hang,
                (_, _, Fault::Status(code)) => Reply::Json(code, status(code, "Unavailable")),
                (LEASES, false, Fault::None) => {
                    let items = w.leases.lock().unwrap().clone();
                    Reply::Json(200, list(items, *w.rv.lock().unwrap()))
                }
                (LEASES, true, Fault::None) => {
                    let events = std::mem::take(&mut *w.pending.lock().unwrap());
                    Reply::Watch(events, true)
                }
                (PODS, false, Fault::None) => Reply::Json(200, list(vec![], 1)),
                (PODS, true, Fault::None) => open_watch(),
                _ => not_served(),
            }
        })
    }
}

/// Log lines written while the test runs.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

fn start_world(world: &World) -> (Arc<Shared>, FakeApi) {
    let api = world.api();
    (start(&api), api)
}

const LEASES_UP: &str = "captf_lock_exporter_watch_up{resource=\"leases\"} 1";
const LEASES_DOWN: &str = "captf_lock_exporter_watch_up{resource=\"leases\"} 0";

fn held(text: &str, name: &str) -> Option<f64> {
    value(
        text,
        &format!(
            "captf_state_lock_held{{namespace=\"{NS}\",kind=\"TerraformMachine\",name=\"{name}\"}}"
        ),
    )
}

/// Scrapes once per virtual second until `cond` holds; returns the time it
/// took and the scrape. Fails past `limit`.
async fn until(
    shared: &Arc<Shared>,
    what: &str,
    limit: Duration,
    mut cond: impl FnMut(&str) -> bool,
) -> (Duration, String) {
    let start = Instant::now();
    loop {
        let text = scrape(shared);
        if cond(&text) {
            return (start.elapsed(), text);
        }
        assert!(
            start.elapsed() <= limit,
            "{what}: not within {limit:?}; last scrape:\n{text}"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

async fn readyz(shared: &Arc<Shared>) -> (u16, String) {
    let r = handle(shared, &http::Method::GET, "/readyz");
    let status = r.status().as_u16();
    let body = r.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// Synced, then the fault; checks detection, then clears it, changes the
/// data meanwhile, and checks recovery and convergence.
async fn fault_then_recovery(fault: Fault, hold_for: Duration, reason: &str) {
    let logs = Logs::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let world = World::new();
    let (shared, api) = start_world(&world);
    until(&shared, "first sync", Duration::from_secs(30), |t| {
        t.contains(LEASES_UP) && held(t, "a") == Some(1.0)
    })
    .await;

    world.set_fault(fault);
    let fault_start = Instant::now();
    let (detected, text) = until(
        &shared,
        "watch_up 0 under the fault",
        Duration::from_secs(120),
        |t| t.contains(LEASES_DOWN),
    )
    .await;
    assert!(leases_errors(&text, reason) >= 1.0, "{text}");
    let log = logs.text();
    assert!(
        log.lines()
            .any(|l| l.contains("WARN") && l.contains("leases") && l.contains(reason)),
        "a warning names the resource and the reason:\n{log}"
    );
    let (code, body) = readyz(&shared).await;
    assert_eq!(code, 200, "readiness is start-up only");
    assert!(
        body.contains("watch leases (all namespaces) down"),
        "{body}"
    );

    // The truth changes while the API is unreachable.
    world.modify("a", None);
    world.modify("b", Some("bob@desk"));

    // For as long as the fault lasts, every scrape says the data is stale,
    // and every failed request counts.
    let mut counted = leases_errors(&text, reason);
    let mut rising = 0;
    while fault_start.elapsed() < hold_for {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let t = scrape(&shared);
        assert!(t.contains(LEASES_DOWN), "up during the fault:\n{t}");
        let now = leases_errors(&t, reason);
        assert!(now >= counted);
        if now > counted {
            rising += 1;
        }
        counted = now;
    }
    if fault != Fault::Hang {
        // Backoff is capped at 8 s: a 200 s fault is retried ~20 times.
        assert!(
            rising as f64 >= hold_for.as_secs_f64() / 10.0 - 10.0,
            "only {rising} counted retries in {hold_for:?}"
        );
    }

    world.set_fault(Fault::None);
    let cleared = Instant::now();
    // A request sent during the fault may still wait out its own timeout;
    // from the first answered request on, recovery takes seconds.
    let (_, text) = until(
        &shared,
        "recovery and convergence",
        Timing::DEFAULT.request + Timing::DEFAULT.backoff_max + Duration::from_secs(10),
        |t| t.contains(LEASES_UP) && held(t, "a") == Some(0.0) && held(t, "b") == Some(1.0),
    )
    .await;
    let since_clear = cleared.elapsed();
    let first_good = world
        .first_good
        .lock()
        .unwrap()
        .expect("a request was answered");
    let recovered = first_good.elapsed();
    assert!(
        recovered <= Duration::from_secs(10),
        "metrics true {recovered:?} after the first good answer"
    );
    assert!(text.contains(&format!(
        "captf_state_lock_info{{namespace=\"{NS}\",kind=\"TerraformMachine\",name=\"b\",class=\"foreign\""
    )));
    let (_, body) = readyz(&shared).await;
    assert!(
        body.starts_with("ready\n") && !body.contains("watch leases"),
        "{body}"
    );
    assert!(
        logs.text().contains("watch recovered"),
        "the recovery is logged"
    );
    api.assert_only_get();
    println!(
        "{fault:?}: watch_up 0 after {:.0} s, {} {reason} errors counted over {:.0} s; watch_up 1 and metrics true {:.0} s after the fault cleared, {:.0} s after the first answered request",
        detected.as_secs_f64(),
        counted,
        hold_for.as_secs_f64(),
        since_clear.as_secs_f64(),
        recovered.as_secs_f64()
    );
}

#[tokio::test(start_paused = true)]
async fn a_hung_api_is_visible_within_two_minutes() {
    fault_then_recovery(Fault::Hang, Duration::from_secs(320), "timeout").await;
}

#[tokio::test(start_paused = true)]
async fn a_sustained_503_keeps_watch_up_0_and_counts_server_errors() {
    fault_then_recovery(Fault::Status(503), Duration::from_secs(200), "server_error").await;
}

#[tokio::test(start_paused = true)]
async fn a_sustained_429_keeps_watch_up_0_and_counts_throttling() {
    fault_then_recovery(Fault::Status(429), Duration::from_secs(200), "throttled").await;
}
