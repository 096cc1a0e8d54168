//! Fair connection slots: who gives a slot to a newcomer at the cap.

use super::*;

#[tokio::test(start_paused = true)]
async fn at_the_cap_a_newcomer_takes_the_slot_of_the_connection_still_longest() {
    let h = Harness::start(Config {
        max_connections: 2,
        ..Config::DEFAULT
    });
    let mut a = h.connect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut b = h.connect();
    // b moves bytes: a request answered (one that keeps the connection).
    let reply = get(&mut b, "/metrics", "").await;
    assert!(reply.is_some_and(|r| r.head.starts_with("HTTP/1.1 200")));
    let mut c = h.connect();
    // Accepted, waiting for a slot; nothing more is accepted meanwhile.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        h.accepts(),
        3,
        "the third is accepted and waits; no fourth accept"
    );
    // Once a has been still for stalled_after, it gives its slot to c.
    assert!(
        closed(&mut a).await,
        "the stillest connection was not closed"
    );
    let reply = get(&mut c, "/healthz", "").await;
    assert!(reply.is_some_and(|r| r.head.starts_with("HTTP/1.1 200")));
    // b stayed: it was served more recently than a.
    let again = get(&mut b, "/metrics", "").await;
    assert!(again.is_some_and(|r| r.head.starts_with("HTTP/1.1 200")));
}

#[tokio::test(start_paused = true)]
async fn below_the_still_limit_nobody_is_closed_and_the_newcomer_waits() {
    let h = Harness::start(Config {
        max_connections: 1,
        stalled_after: Duration::from_secs(3600),
        ..Config::DEFAULT
    });
    let mut a = h.connect();
    let _b = h.connect();
    tokio::time::sleep(Duration::from_secs(5)).await;
    // a is still served: b waits instead of taking its slot.
    let reply = get(&mut a, "/metrics", "").await;
    assert!(reply.is_some_and(|r| r.head.starts_with("HTTP/1.1 200")));
    assert_eq!(h.accepts(), 2);
    // At a's header timeout its slot frees: the next accept happens.
    tokio::time::sleep(Config::DEFAULT.header_read_timeout + Duration::from_secs(1)).await;
    assert_eq!(
        h.accepts(),
        3,
        "b got a's slot; the loop waits for the next connection"
    );
}

/// A new in-memory connection handed to the server's listener.
fn dial(tx: &mpsc::UnboundedSender<io::Result<DuplexStream>>) -> DuplexStream {
    let (client, server) = tokio::io::duplex(1 << 20);
    assert!(tx.send(Ok(server)).is_ok(), "the listener is gone");
    client
}

/// True when a probe on a new connection, as the kubelet sends it (no
/// keep-alive), is answered with `status`.
async fn probe(h: &Harness, path: &str, status: &str) -> bool {
    let mut io = h.connect();
    get(&mut io, path, "Connection: close\r\n")
        .await
        .is_some_and(|r| r.head.starts_with(&format!("HTTP/1.1 {status}")))
}

/// 128 keep-alive clients that each ask for `/healthz`
/// every 0.8 s (and come back at once when closed) were never still for the
/// second that made a connection closable, so at the cap a scraper and the
/// kubelet's probes waited in the backlog for good.
#[tokio::test(start_paused = true)]
async fn chatty_clients_cannot_keep_scrapes_or_probes_out() {
    let config = Config::DEFAULT;
    let reviewed = Guard::kubernetes(Arc::new(Recording::default()));
    let h = Harness::start_with(
        config,
        Endpoint {
            transport: Transport::Plain,
            guard: reviewed,
        },
    );
    let answered = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut chatty = Vec::new();
    for _ in 0..config.max_connections {
        let (tx, answered) = (h.tx.clone(), answered.clone());
        chatty.push(tokio::spawn(async move {
            let mut io = dial(&tx);
            loop {
                match get(&mut io, "/healthz", "").await {
                    Some(_) => {
                        answered.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(800)).await;
                    }
                    None => io = dial(&tx),
                }
            }
        }));
    }
    // Every chatty client holds a slot and has been answered for a while.
    let setup = Instant::now();
    while answered.load(std::sync::atomic::Ordering::Relaxed) < 3 * chatty.len() {
        assert!(
            setup.elapsed() < Duration::from_secs(30),
            "the chatty clients were not served"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let bound = Duration::from_secs(2);
    let mut scraper = h.connect();
    let mut reconnects = 0;
    for round in 0..12 {
        let scrape = async {
            loop {
                match get(
                    &mut scraper,
                    "/metrics",
                    "Authorization: Bearer prometheus\r\n",
                )
                .await
                {
                    Some(r) => return r,
                    // Closed between scrapes: a Go client asks again on a
                    // new connection.
                    None => {
                        reconnects += 1;
                        scraper = h.connect();
                    }
                }
            }
        };
        let Ok(reply) = tokio::time::timeout(bound, scrape).await else {
            panic!("scrape {round} not answered within {bound:?}");
        };
        assert!(reply.head.starts_with("HTTP/1.1 200"), "{}", reply.head);
        let live = tokio::time::timeout(bound, probe(&h, "/healthz", "200")).await;
        assert!(live == Ok(true), "liveness probe {round}: {live:?}");
        // Not ready (no watch here): answered all the same.
        let ready = tokio::time::timeout(bound, probe(&h, "/readyz", "503")).await;
        assert!(ready == Ok(true), "readiness probe {round}: {ready:?}");
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    assert_eq!(
        reconnects, 0,
        "the reviewed scraper's keep-alive connection was closed for an anonymous one"
    );
    for c in chatty {
        c.abort();
    }
}

/// A head (or a TLS handshake) trickled a byte at a time was progress, so
/// such clients kept their slots until the 10 s header timeout.
#[tokio::test(start_paused = true)]
async fn clients_trickling_a_head_cannot_keep_a_scraper_out() {
    let config = Config {
        max_connections: 4,
        ..Config::DEFAULT
    };
    let h = Harness::start(config);
    let mut tricklers = Vec::new();
    for _ in 0..config.max_connections {
        let mut io = h.connect();
        tricklers.push(tokio::spawn(async move {
            for b in b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: "
                .iter()
                .cycle()
            {
                if io.write_all(&[*b]).await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut scraper = h.connect();
    let bound = Duration::from_secs(2);
    let reply = tokio::time::timeout(bound, get(&mut scraper, "/metrics", "")).await;
    assert!(
        matches!(&reply, Ok(Some(r)) if r.head.starts_with("HTTP/1.1 200")),
        "the scraper was not answered within {bound:?}"
    );
    for t in tricklers {
        t.abort();
    }
}

/// Pipelines `GET /healthz` over and over on connections with 1 KiB of
/// room each way, reading 600 bytes every 0.9 s (counted in `read`);
/// comes back at once when closed.
async fn slow_pipeliner(
    tx: mpsc::UnboundedSender<io::Result<DuplexStream>>,
    read: Arc<std::sync::atomic::AtomicUsize>,
) {
    loop {
        let (client, server) = tokio::io::duplex(1024);
        if tx.send(Ok(server)).is_err() {
            return;
        }
        let (mut rd, mut wr) = tokio::io::split(client);
        let writer = tokio::spawn(async move {
            let req = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
            while wr.write_all(req).await.is_ok() {}
        });
        let mut buf = [0u8; 600];
        while let Ok(n @ 1..) = rd.read(&mut buf).await {
            read.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(900)).await;
        }
        writer.abort();
    }
}

/// A client that pipelines `/healthz` and reads a few
/// hundred bytes a second was always owed an answer that moved, and its
/// response deadline began again whenever hyper's buffer emptied, so it
/// kept its slot for good; at the cap the kubelet and Prometheus waited
/// in the backlog.
#[tokio::test(start_paused = true)]
async fn slow_pipeliners_cannot_keep_a_probe_or_a_scraper_out() {
    let config = Config {
        max_connections: 2,
        ..Config::DEFAULT
    };
    let h = Harness::start_with(
        config,
        Endpoint {
            transport: Transport::Plain,
            guard: Guard::kubernetes(Arc::new(Recording::default())),
        },
    );
    let read = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let pipeliners: Vec<_> = (0..config.max_connections)
        .map(|_| tokio::spawn(slow_pipeliner(h.tx.clone(), read.clone())))
        .collect();
    // Both hold their slots and have been answered for a while.
    let setup = Instant::now();
    while read.load(std::sync::atomic::Ordering::Relaxed) < 4 * 600 * pipeliners.len() {
        assert!(
            setup.elapsed() < Duration::from_secs(60),
            "the pipeliners were not answered"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let bound = Duration::from_secs(2);
    let live = tokio::time::timeout(bound, probe(&h, "/healthz", "200")).await;
    assert!(
        live == Ok(true),
        "a liveness probe behind two slow pipeliners: {live:?}"
    );
    let mut scraper = h.connect();
    let scrape = tokio::time::timeout(
        bound,
        get(
            &mut scraper,
            "/metrics",
            "Authorization: Bearer prometheus\r\n",
        ),
    )
    .await;
    let Ok(Some(scrape)) = scrape else {
        panic!("a scrape behind two slow pipeliners was not answered within {bound:?}");
    };
    assert!(scrape.head.starts_with("HTTP/1.1 200"), "{}", scrape.head);
    // The scrape keeps its connection; an anonymous answer does not.
    assert_eq!(scrape.header("connection"), None);
    let mut anonymous = h.connect();
    let refused = tokio::time::timeout(bound, get(&mut anonymous, "/metrics", "")).await;
    let Ok(Some(refused)) = refused else {
        panic!("an anonymous request was not answered within {bound:?}");
    };
    assert!(refused.head.starts_with("HTTP/1.1 401"), "{}", refused.head);
    assert_eq!(refused.header("connection"), Some("close"));
    assert!(closed(&mut anonymous).await, "open after Connection: close");
    for p in pipeliners {
        p.abort();
    }
}
