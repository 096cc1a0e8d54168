//! The accept loop over a fake listener of in-memory connections, on a
//! paused clock: timeouts and backoff are checked in virtual time, so no
//! assertion depends on how fast the machine is.

use std::io::Read as _;
use std::sync::Mutex;

use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::net::TcpSocket;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::*;
use crate::core::kind::Kind;
use crate::core::lockinfo::parse_lock_info;
use crate::core::suffix::{lock_lease_name, state_suffix};
use crate::index::{IndexResource, LockLease, ObjectKey, TfObject};
use crate::server::auth::Guard;

/// Connections (or errors) handed out in order; pends when none is queued.
struct Fake {
    rx: mpsc::UnboundedReceiver<io::Result<DuplexStream>>,
    calls: Arc<Mutex<Vec<Instant>>>,
}

impl Listener for Fake {
    type Io = DuplexStream;
    async fn accept(&mut self) -> io::Result<DuplexStream> {
        {
            if let Ok(mut calls) = self.calls.lock() {
                calls.push(Instant::now());
            }
            match self.rx.recv().await {
                Some(r) => r,
                None => std::future::pending().await,
            }
        }
    }
}

struct Harness {
    tx: mpsc::UnboundedSender<io::Result<DuplexStream>>,
    calls: Arc<Mutex<Vec<Instant>>>,
    shared: Arc<Shared>,
    cache: Arc<ScrapeCache>,
    pages: Arc<Semaphore>,
    stop: watch::Sender<bool>,
    server: JoinHandle<()>,
}

impl Harness {
    fn start(config: Config) -> Harness {
        Harness::start_with(config, Endpoint::open_plain())
    }

    fn start_with(config: Config, endpoint: Endpoint) -> Harness {
        let (shared, _rx) = Shared::new();
        let cache = ScrapeCache::new(shared.clone());
        let (tx, rx) = mpsc::unbounded_channel();
        let calls = Arc::new(Mutex::new(Vec::new()));
        let (stop, stop_rx) = watch::channel(false);
        let fake = Fake {
            rx,
            calls: calls.clone(),
        };
        let pages = page_renders(config);
        let server = tokio::spawn(serve_limited(
            fake,
            shared.clone(),
            cache.clone(),
            pages.clone(),
            config,
            endpoint,
            stop_rx,
        ));
        Harness {
            tx,
            calls,
            shared,
            cache,
            pages,
            stop,
            server,
        }
    }

    /// A new connection with `buffer` bytes of room each way.
    fn connect_with(&self, buffer: usize) -> DuplexStream {
        let (client, server) = tokio::io::duplex(buffer);
        assert!(self.tx.send(Ok(server)).is_ok(), "the listener is gone");
        client
    }

    fn connect(&self) -> DuplexStream {
        self.connect_with(1 << 20)
    }

    fn accepts(&self) -> usize {
        self.calls.lock().map_or(0, |c| c.len())
    }
}

/// One held lock, so that the exposition shows an age.
fn hold_a_lock(shared: &Shared) {
    hold_locks(shared, 1);
}

/// `n` held locks (objects `web`, `web-1`, ...): about 1.2 kB of
/// exposition each.
fn hold_locks(shared: &Shared, n: usize) {
    for i in 0..n {
        let name = if i == 0 {
            "web".to_string()
        } else {
            format!("web-{i}")
        };
        hold_lock_of(shared, &name, "id-1", "alice@laptop");
    }
}

/// A TerraformMachine `name` in `ns` and its lock, held by `who` with
/// lock ID `id`.
fn hold_lock_of(shared: &Shared, name: &str, id: &str, who: &str) {
    let info = format!(
        r#"{{"ID":"{id}","Operation":"OperationTypeApply","Info":"","Who":"{who}","Version":"1.9.0","Created":"2026-09-26T15:53:38.315668626Z","Path":""}}"#
    );
    let (ns, kind) = ("ns", Kind::TerraformMachine);
    let suffix = state_suffix(ns, kind, name);
    let lease = LockLease::new(
        ns.into(),
        suffix.clone(),
        Some("TerraformMachine"),
        Some(name.to_owned()),
        id.into(),
        parse_lock_info(&info).map(Some),
    );
    let obj = TfObject::new(kind, name.to_owned());
    shared.update(|ix, now| {
        ix.apply((obj.kind, ObjectKey::new(ns, name)), obj, now);
        ix.apply(ObjectKey::new(ns, lock_lease_name(&suffix)), lease, now)
    });
}

/// A response: status line and headers (lower-cased names), and body.
struct Reply {
    head: String,
    body: Vec<u8>,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.eq_ignore_ascii_case(name).then_some(v.trim())
        })
    }
}

/// Reads one response; None on EOF before a whole head.
async fn read_reply(io: &mut DuplexStream, head_only: bool) -> Option<Reply> {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        if io.read(&mut byte).await.ok()? == 0 {
            return None;
        }
        buf.push(byte[0]);
    }
    let head = String::from_utf8(buf).ok()?;
    let mut reply = Reply {
        head,
        body: Vec::new(),
    };
    let len: usize = reply.header("content-length")?.parse().ok()?;
    if !head_only {
        reply.body = vec![0; len];
        io.read_exact(&mut reply.body).await.ok()?;
    }
    Some(reply)
}

async fn get(io: &mut DuplexStream, path: &str, headers: &str) -> Option<Reply> {
    let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\n{headers}\r\n");
    io.write_all(req.as_bytes()).await.ok()?;
    read_reply(io, false).await
}

/// True when the peer closes the connection (EOF or reset) within a
/// minute of virtual time.
async fn closed(io: &mut DuplexStream) -> bool {
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(60), io.read_to_end(&mut rest))
        .await
        .is_ok()
}

#[test]
fn backoff_doubles_to_a_second_logs_once_per_episode_and_resets() {
    let mut b = AcceptBackoff::default();
    assert_eq!(b.on_success(), None, "no episode yet");
    let delays: Vec<(u64, bool)> = (0..10)
        .map(|_| {
            let (d, first) = b.on_error();
            (d.as_millis() as u64, first)
        })
        .collect();
    assert_eq!(
        delays,
        [
            (10, true),
            (20, false),
            (40, false),
            (80, false),
            (160, false),
            (320, false),
            (640, false),
            (1000, false),
            (1000, false),
            (1000, false)
        ]
    );
    assert_eq!(b.on_success(), Some(10));
    assert_eq!(b.on_error(), (AcceptBackoff::FIRST, true), "a new episode");
}

#[tokio::test(start_paused = true)]
async fn accept_errors_back_off_instead_of_spinning() {
    let h = Harness::start(Config::DEFAULT);
    for _ in 0..9 {
        let emfile = io::Error::from_raw_os_error(24);
        assert!(h.tx.send(Err(emfile)).is_ok());
    }
    // Ten virtual seconds: a busy loop would call accept() without end.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let calls = h.calls.lock().map(|c| c.clone()).unwrap_or_default();
    let gaps: Vec<u128> = calls
        .windows(2)
        .map(|w| (w[1] - w[0]).as_millis())
        .collect();
    assert_eq!(
        gaps,
        [10, 20, 40, 80, 160, 320, 640, 1000, 1000],
        "9 errors, then one accept() waiting for a connection"
    );
    // A success ends the episode: the next error waits 10 ms again.
    let _client = h.connect();
    assert!(h.tx.send(Err(io::Error::from_raw_os_error(24))).is_ok());
    tokio::time::sleep(Duration::from_secs(1)).await;
    let calls = h.calls.lock().map(|c| c.clone()).unwrap_or_default();
    let n = calls.len();
    assert_eq!(n, 12);
    assert_eq!((calls[n - 1] - calls[n - 2]).as_millis(), 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_concurrent_scrapes_share_one_render() {
    let h = Harness::start(Config::DEFAULT);
    hold_a_lock(&h.shared);
    let mut clients = Vec::new();
    for _ in 0..16 {
        let mut io = h.connect();
        clients.push(tokio::spawn(async move {
            get(&mut io, "/metrics", "Accept-Encoding: gzip\r\n").await
        }));
    }
    let mut bodies = Vec::new();
    for c in clients {
        let reply = c.await.ok().flatten();
        let Some(reply) = reply else {
            panic!("a scrape got no answer");
        };
        assert!(reply.head.starts_with("HTTP/1.1 200"), "{}", reply.head);
        bodies.push(reply.body);
    }
    assert!(bodies.windows(2).all(|w| w[0] == w[1]), "one body for all");
    assert_eq!(
        h.cache.renders(),
        1,
        "16 scrapes, one render and compression"
    );
}

#[tokio::test]
async fn gzip_round_trips_to_the_plain_exposition_and_head_has_no_body() {
    let h = Harness::start(Config::DEFAULT);
    hold_a_lock(&h.shared);
    let mut io = h.connect();
    let Some(plain) = get(&mut io, "/metrics", "").await else {
        panic!("no plain answer");
    };
    assert_eq!(plain.header("content-encoding"), None);
    assert_eq!(plain.header("vary"), Some("Accept-Encoding"));
    let Some(zipped) = get(&mut io, "/metrics", "Accept-Encoding: gzip\r\n").await else {
        panic!("no gzip answer");
    };
    assert_eq!(zipped.header("content-encoding"), Some("gzip"));
    assert_eq!(zipped.header("vary"), Some("Accept-Encoding"));
    assert_eq!(
        zipped.header("content-type"),
        Some(crate::server::negotiate::OPENMETRICS_CONTENT_TYPE)
    );
    let mut text = String::new();
    // One gzip member: a reader that stops after the first member (as
    // many do) still gets the whole exposition.
    let decoded = flate2::read::GzDecoder::new(zipped.body.as_slice()).read_to_string(&mut text);
    assert!(decoded.is_ok(), "{decoded:?}");
    // Both published from the same render (nothing changed between).
    assert!(text == String::from_utf8_lossy(&plain.body), "same render");
    assert!(
        text.contains("captf_state_lock_acquired_timestamp_seconds{"),
        "{text}"
    );
    assert!(text.ends_with("# EOF\n"), "a whole exposition");
    // HEAD: the headers of the gzip answer, no body.
    let req = "HEAD /metrics HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\n\r\n";
    assert!(io.write_all(req.as_bytes()).await.is_ok());
    let Some(head) = read_reply(&mut io, true).await else {
        panic!("no HEAD answer");
    };
    assert!(head.head.starts_with("HTTP/1.1 200"), "{}", head.head);
    assert_eq!(head.header("content-encoding"), Some("gzip"));
    // The next answer on the connection comes right after the head: HEAD
    // sent no body.
    let Some(after) = get(&mut io, "/nope", "").await else {
        panic!("no answer after HEAD");
    };
    assert!(after.head.starts_with("HTTP/1.1 404"), "{}", after.head);
    assert_eq!(after.body, b"not found\n");
    // The Prometheus text format comes from the same render: only the
    // family headers differ.
    let Some(prom) = get(&mut io, "/metrics", "Accept: text/plain; version=0.0.4\r\n").await else {
        panic!("no 0.0.4 answer");
    };
    assert_eq!(
        prom.header("content-type"),
        Some(crate::server::negotiate::PROMETHEUS_CONTENT_TYPE)
    );
    assert!(String::from_utf8_lossy(&prom.body)
        .contains("# TYPE captf_state_lock_force_unlocks_total counter"));
    assert_eq!(h.cache.renders(), 1, "one render serves both formats");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn page_renders_over_the_bound_get_503_with_retry_after() {
    let h = Harness::start(Config {
        max_page_renders: 2,
        ..Config::DEFAULT
    });
    hold_a_lock(&h.shared);
    // Hold the index's write lock: page renders wait for its read lock.
    let (release, released) = std::sync::mpsc::channel::<()>();
    let (held_tx, held) = std::sync::mpsc::channel::<()>();
    let shared = h.shared.clone();
    let holder = std::thread::spawn(move || {
        shared.write(|_, _| {
            let _ = held_tx.send(());
            let _ = released.recv();
        })
    });
    assert!(held.recv().is_ok());
    let mut renders = Vec::new();
    for _ in 0..2 {
        let mut io = h.connect();
        renders.push(tokio::spawn(async move { get(&mut io, "/", "").await }));
    }
    // Both renders have their permits (and wait for the lock).
    let waiting = std::time::Instant::now();
    while h.pages.available_permits() > 0 {
        assert!(
            waiting.elapsed() < Duration::from_secs(5),
            "the renders did not start"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut third = h.connect();
    let over = tokio::time::timeout(
        Duration::from_secs(5),
        get(&mut third, "/locks/ns/TerraformMachine/web", ""),
    )
    .await;
    let Ok(Some(over)) = over else {
        panic!("a page over the bound got no answer within 5 s: it queued behind the renders");
    };
    assert!(over.head.starts_with("HTTP/1.1 503"), "{}", over.head);
    assert_eq!(over.header("retry-after"), Some("1"));
    // What is not a page is not bounded by it.
    let Some(health) = get(&mut h.connect(), "/healthz", "").await else {
        panic!("no /healthz answer");
    };
    assert!(health.head.starts_with("HTTP/1.1 200"), "{}", health.head);
    // The lock goes: the two renders finish and give their permits back.
    assert!(release.send(()).is_ok());
    assert!(holder.join().is_ok());
    for r in renders {
        let Ok(Some(reply)) = r.await else {
            panic!("a render got no answer");
        };
        assert!(reply.head.starts_with("HTTP/1.1 200"), "{}", reply.head);
    }
    let Some(again) = get(&mut third, "/locks/ns/TerraformMachine/web", "").await else {
        panic!("no answer after the renders finished");
    };
    assert!(again.head.starts_with("HTTP/1.1 200"), "{}", again.head);
    assert_eq!(h.pages.available_permits(), 2);
}

/// The pages set their policy only in a `<meta>` tag (no
/// `frame-ancestors`, no `nosniff`, nothing against caches keeping lock
/// IDs). Every answer now carries the headers.
#[tokio::test]
async fn every_answer_carries_the_security_headers() {
    let h = Harness::start(Config::DEFAULT);
    hold_a_lock(&h.shared);
    for path in [
        "/",
        "/locks/ns/TerraformMachine/web",
        "/metrics",
        "/healthz",
        "/readyz",
        "/nope",
    ] {
        // A probe's answer closes its connection: one connection each.
        let Some(r) = get(&mut h.connect(), path, "").await else {
            panic!("{path}: no answer");
        };
        let csp = r.header("content-security-policy").unwrap_or("");
        assert!(csp.contains("frame-ancestors 'none'"), "{path}: {csp:?}");
        assert!(csp.contains("default-src 'none'"), "{path}: {csp:?}");
        assert_eq!(
            r.header("x-content-type-options"),
            Some("nosniff"),
            "{path}"
        );
        assert_eq!(r.header("cache-control"), Some("no-store"), "{path}");
        assert_eq!(r.header("referrer-policy"), Some("no-referrer"), "{path}");
    }
    let Some(page) = get(&mut h.connect(), "/", "").await else {
        panic!("no page");
    };
    let html = String::from_utf8_lossy(&page.body);
    assert!(
        html.contains("http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'"),
        "the page lost its <meta> policy"
    );
}

/// The Content-Length of the response that `bytes` begin with.
fn content_length(bytes: &[u8]) -> Option<usize> {
    let end = bytes.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&bytes[..end]);
    head.lines()
        .find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .map(|len: usize| len + end + 4)
}

/// Token `prometheus` may get every path (every other token is rejected);
/// the paths asked about are kept.
#[derive(Default)]
struct Recording {
    paths: Mutex<Vec<String>>,
}

impl crate::server::auth::Reviewer for Recording {
    fn token<'a>(&'a self, token: &'a str) -> Answer<'a, Identity> {
        Box::pin(async move {
            Ok(match token {
                "prometheus" => Identity::Authenticated(User {
                    name: "system:serviceaccount:monitoring:prometheus".into(),
                    ..User::default()
                }),
                _ => Identity::Rejected,
            })
        })
    }

    fn access<'a>(&'a self, _user: &'a User, _verb: &'a str, path: &'a str) -> Answer<'a, bool> {
        if let Ok(mut paths) = self.paths.lock() {
            paths.push(path.to_owned());
        }
        Box::pin(async { Ok(true) })
    }
}

use crate::server::auth::review::Answer;
use crate::server::auth::{Identity, User};

mod deadlines;
mod fair;
mod handshakes;
mod limits;
mod pins;
mod tcp;
