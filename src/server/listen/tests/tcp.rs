//! The limits over real loopback sockets, where kernel buffers matter.

use super::*;

/// A real TCP server over 10,000 held locks (about 12 MB of plain
/// exposition: more than the kernel buffers of both ends hold, so a write
/// to a client that does not read blocks). Dropping the sender stops it.
async fn big_tcp_server(config: Config) -> (std::net::SocketAddr, watch::Sender<bool>) {
    let (shared, _rx) = Shared::new();
    hold_locks(&shared, 10_000);
    let cache = ScrapeCache::new(shared.clone());
    let Ok(listener) = TcpListener::bind("127.0.0.1:0").await else {
        panic!("cannot bind a loopback port");
    };
    let Ok(addr) = listener.local_addr() else {
        panic!("no local address");
    };
    let (stop, stop_rx) = watch::channel(false);
    tokio::spawn(serve_with(
        listener,
        shared,
        cache,
        config,
        Endpoint::open_plain(),
        stop_rx,
    ));
    // The first /metrics waits for the first render (10,000 keys, seconds
    // in a debug build on a busy machine, past a short response deadline):
    // asked for until one answer comes whole, so that the tests' clients
    // meet a rendered body and their deadlines measure what they are about.
    let warm = async {
        loop {
            let Ok(mut c) = TcpStream::connect(addr).await else {
                panic!("cannot connect the warm-up client");
            };
            let req = b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
            assert!(c.write_all(req).await.is_ok());
            let mut body = Vec::new();
            let whole = c.read_to_end(&mut body).await.is_ok();
            if whole && body.starts_with(b"HTTP/1.1 200") {
                return;
            }
        }
    };
    let warmed = tokio::time::timeout(Duration::from_secs(300), warm).await;
    assert!(warmed.is_ok(), "no whole /metrics answer within 300 s");
    (addr, stop)
}

/// A client with a 4 KiB receive buffer that asks for /metrics and never
/// reads.
async fn never_reading_client(addr: std::net::SocketAddr) -> TcpStream {
    let Ok(socket) = TcpSocket::new_v4() else {
        panic!("no socket");
    };
    assert!(socket.set_recv_buffer_size(4096).is_ok());
    let Ok(mut s) = socket.connect(addr).await else {
        panic!("cannot connect");
    };
    assert!(s
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .is_ok());
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tcp_client_that_never_reads_is_dropped_at_the_deadline_and_frees_its_slot() {
    // A short deadline on real sockets; the production 30 s is checked in
    // virtual time below.
    let deadline = Duration::from_secs(2);
    let config = Config {
        max_connections: 1,
        response_timeout: deadline,
        // The deadline alone is under test here: nobody takes its slot.
        stalled_after: Duration::from_secs(3600),
        ..Config::DEFAULT
    };
    let (addr, _stop) = big_tcp_server(config).await;

    // The client that asks and never reads, with a small receive buffer.
    let mut slow = never_reading_client(addr).await;
    let sent = std::time::Instant::now();

    // With one slot, the next client is served only once the first is gone.
    let Ok(mut next) = TcpStream::connect(addr).await else {
        panic!("cannot connect the second client");
    };
    let req = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    assert!(next.write_all(req).await.is_ok());
    let mut answer = Vec::new();
    let limit = deadline * 5;
    let read = tokio::time::timeout(limit, next.read_to_end(&mut answer)).await;
    assert!(
        read.is_ok(),
        "no answer within {limit:?}: the client that never reads still holds the only slot"
    );
    let waited = sent.elapsed();
    assert!(
        answer.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    assert!(
        waited >= deadline * 9 / 10 && waited < deadline + Duration::from_secs(3),
        "slot freed after {waited:?}, deadline {deadline:?}"
    );

    // The slow connection was closed with its body cut: reading now gives
    // what the kernel had buffered, then the end.
    let mut got = Vec::new();
    let drained = tokio::time::timeout(Duration::from_secs(20), slow.read_to_end(&mut got)).await;
    assert!(drained.is_ok(), "the slow connection is still open");
    let Some(whole) = content_length(&got) else {
        panic!(
            "no response head: {:?}",
            String::from_utf8_lossy(&got[..got.len().min(200)])
        );
    };
    assert!(
        got.len() < whole,
        "the whole response ({whole} bytes) was delivered: the server kept writing"
    );
}

/// A response is many chunks: accepted TCP connections send each at once
/// instead of holding a small tail for the client's delayed ACK.
#[tokio::test]
async fn accepted_tcp_connections_have_nagle_off() {
    let mut listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let client = tokio::spawn(async move { tokio::net::TcpStream::connect(addr).await });
    let stream = Listener::accept(&mut listener).await.expect("accept");
    assert!(stream.nodelay().expect("reads the option"));
    drop(client.await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_clients_that_never_read_cannot_keep_a_scraper_out() {
    // Every slot taken by a client that asked for 12 MB and reads nothing;
    // the production deadline (30 s) would free one only much later.
    let config = Config {
        max_connections: 4,
        ..Config::DEFAULT
    };
    let (addr, _stop) = big_tcp_server(config).await;
    let mut slow = Vec::new();
    for _ in 0..config.max_connections {
        slow.push(never_reading_client(addr).await);
    }
    let Ok(mut scraper) = TcpStream::connect(addr).await else {
        panic!("cannot connect the scraper");
    };
    let req = b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    assert!(scraper.write_all(req).await.is_ok());
    let mut answer = Vec::new();
    // Well inside the 30 s deadline: a slot was given up, not timed out.
    let bound = Config::DEFAULT.response_timeout / 3;
    let read = tokio::time::timeout(bound, scraper.read_to_end(&mut answer)).await;
    assert!(
        read.is_ok(),
        "the scraper was not answered within {bound:?}"
    );
    assert!(
        answer.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&answer[..answer.len().min(200)])
    );
    assert_eq!(
        content_length(&answer),
        Some(answer.len()),
        "the whole body arrived"
    );
}

/// Sends `request` as it is on a new TCP connection; the whole answer,
/// read until the server closes.
async fn raw(addr: std::net::SocketAddr, request: &str) -> String {
    let Ok(mut s) = TcpStream::connect(addr).await else {
        panic!("cannot connect");
    };
    assert!(s.write_all(request.as_bytes()).await.is_ok());
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut answer)).await;
    assert!(read.is_ok(), "{request:?}: not answered and closed");
    String::from_utf8_lossy(&answer).into_owned()
}

/// `GET x HTTP/1.1` (a target that is not a path) was
/// reviewed for the path "" and answered as `/`, the locks page, rendered
/// outside the page-render bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_that_is_not_a_path_is_a_400_before_any_review() {
    let (shared, _rx) = Shared::new();
    hold_a_lock(&shared);
    let cache = ScrapeCache::new(shared.clone());
    let Ok(listener) = TcpListener::bind("127.0.0.1:0").await else {
        panic!("cannot bind a loopback port");
    };
    let Ok(addr) = listener.local_addr() else {
        panic!("no local address");
    };
    let recording = Arc::new(Recording::default());
    let (_stop, stop_rx) = watch::channel(false);
    let endpoint = Endpoint {
        transport: Transport::Plain,
        guard: Guard::kubernetes(recording.clone()),
    };
    tokio::spawn(serve_with(
        listener,
        shared,
        cache,
        Config::DEFAULT,
        endpoint,
        stop_rx,
    ));
    let headers = "Host: x\r\nAuthorization: Bearer prometheus\r\nConnection: close\r\n\r\n";
    for target in [
        "GET x",
        "GET x:80",
        "GET *",
        "OPTIONS *",
        "GET metrics",
        "HEAD locks/ns/TerraformMachine/web",
    ] {
        let answer = raw(addr, &format!("{target} HTTP/1.1\r\n{headers}")).await;
        assert!(
            answer.starts_with("HTTP/1.1 400"),
            "{target:?}: {}",
            answer.lines().next().unwrap_or("")
        );
    }
    // Absolute-form is HTTP/1.1 (RFC 9112 3.2.2): reviewed and routed on
    // its path alone.
    let absolute = raw(addr, &format!("GET http://x/metrics HTTP/1.1\r\n{headers}")).await;
    assert!(absolute.starts_with("HTTP/1.1 200"), "{absolute}");
    assert!(absolute.contains("# EOF"), "not the exposition: {absolute}");
    let probe = raw(
        addr,
        "GET http://x/healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(probe.starts_with("HTTP/1.1 200"), "{probe}");
    let anonymous = raw(
        addr,
        "GET http://x/metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(anonymous.starts_with("HTTP/1.1 401"), "{anonymous}");
    let paths = recording
        .paths
        .lock()
        .map(|p| p.clone())
        .unwrap_or_default();
    assert_eq!(paths, ["/metrics"], "the paths reviewed");
}
