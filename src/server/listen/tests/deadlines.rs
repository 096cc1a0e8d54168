//! Timeouts and deadlines in virtual time: the header timeout, the
//! response deadline, the drain on shutdown.

use super::*;

#[tokio::test(start_paused = true)]
async fn half_sent_and_idle_connections_are_closed_by_the_header_timeout() {
    let h = Harness::start(Config::DEFAULT);
    // Half a request head, never finished.
    let mut half = h.connect();
    let start = Instant::now();
    assert!(half.write_all(b"GET /metrics HTTP/1.1\r\nHo").await.is_ok());
    assert!(closed(&mut half).await);
    assert!(
        start.elapsed() >= Config::DEFAULT.header_read_timeout,
        "closed by the timeout, not before"
    );
    // A keep-alive connection that answered once and then sits idle.
    let mut idle = h.connect();
    let reply = get(&mut idle, "/metrics", "").await;
    assert!(reply.is_some_and(|r| r.head.starts_with("HTTP/1.1 200")));
    let served = Instant::now();
    assert!(closed(&mut idle).await);
    assert!(served.elapsed() >= Config::DEFAULT.header_read_timeout);
    // A connection that never says anything.
    let mut silent = h.connect();
    assert!(closed(&mut silent).await);
}

#[tokio::test(start_paused = true)]
async fn shutdown_lets_the_response_in_flight_finish_and_closes_idle_connections() {
    let h = Harness::start(Config::DEFAULT);
    hold_a_lock(&h.shared);
    // A 1 KiB pipe: the server blocks writing the body until we read.
    let mut slow = h.connect_with(1024);
    let mut idle = h.connect();
    assert!(get(&mut idle, "/metrics", "").await.is_some());
    let req = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
    assert!(slow.write_all(req.as_bytes()).await.is_ok());
    // Wait (in virtual time) until the response has started.
    let mut first = [0u8; 1];
    assert!(matches!(slow.read(&mut first).await, Ok(1)));
    assert!(h.stop.send(true).is_ok());
    // The idle connection is closed at once, not after the header timeout.
    let asked = Instant::now();
    assert!(closed(&mut idle).await);
    assert!(asked.elapsed() < Config::DEFAULT.header_read_timeout);
    // The response in flight completes, then its connection closes.
    let mut rest = Vec::new();
    assert!(slow.read_to_end(&mut rest).await.is_ok());
    let mut all = first.to_vec();
    all.extend_from_slice(&rest);
    let text = String::from_utf8_lossy(&all);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.ends_with("# EOF\n"), "cut short: {text}");
    // And serve returns.
    assert!(h.server.await.is_ok());
    assert!(
        h.tx.send(Ok(tokio::io::duplex(1).0)).is_err(),
        "listener dropped"
    );
}

#[tokio::test(start_paused = true)]
async fn a_response_unread_past_the_default_deadline_is_cut_and_busy_keep_alive_is_not() {
    let h = Harness::start(Config {
        max_connections: 2,
        ..Config::DEFAULT
    });
    hold_a_lock(&h.shared);
    // A 1 KiB pipe, never read: the server's write blocks at once.
    let mut slow = h.connect_with(1024);
    let req = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
    assert!(slow.write_all(req.as_bytes()).await.is_ok());
    tokio::time::sleep(Config::DEFAULT.response_timeout + Duration::from_secs(1)).await;
    let mut got = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(1), slow.read_to_end(&mut got)).await;
    assert!(read.is_ok(), "not closed by the response deadline");
    let Some(whole) = content_length(&got) else {
        panic!("no response head");
    };
    assert!(
        got.len() < whole,
        "{} of {whole} bytes: read after the deadline, the response still came whole",
        got.len()
    );
    // A keep-alive client that asks every 5 s and reads its answers is
    // never cut: each response's deadline ends when it is written.
    let mut busy = h.connect();
    for i in 0..14 {
        let Some(r) = get(&mut busy, "/metrics", "").await else {
            panic!("request {i} of a busy keep-alive connection got no answer");
        };
        assert!(r.head.starts_with("HTTP/1.1 200"), "{}", r.head);
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    // HEAD sends no body (hyper drops it unread): its deadline ends too.
    for i in 0..8 {
        let req = "HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
        assert!(busy.write_all(req.as_bytes()).await.is_ok());
        let Some(r) = read_reply(&mut busy, true).await else {
            panic!("HEAD {i} got no answer");
        };
        assert!(r.head.starts_with("HTTP/1.1 200"), "{}", r.head);
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
}
