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
    // b moves bytes: a request answered.
    let reply = get(&mut b, "/healthz", "").await;
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
    let again = get(&mut b, "/healthz", "").await;
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
    let reply = get(&mut a, "/healthz", "").await;
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
