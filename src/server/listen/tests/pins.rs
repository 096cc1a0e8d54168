//! How many superseded bodies slow readers may keep alive.

use super::*;

use crate::server::pins::Pins;

const SUPERSEDED: usize = Pins::SUPERSEDED;

/// One more held lock, `extra-<i>`: the next render publishes a new
/// snapshot with new bytes.
fn one_more_lock(shared: &Shared, i: usize) {
    hold_lock_of(shared, &format!("extra-{i}"), "id-2", "bob@laptop");
}

/// Reads on after `got` until the whole response is there or the server
/// closes; None if neither happens within `limit`.
async fn read_on(io: &mut DuplexStream, mut got: Vec<u8>, limit: Duration) -> Option<Vec<u8>> {
    let read = async {
        let mut buf = vec![0u8; 64 * 1024];
        while content_length(&got).is_none_or(|whole| got.len() < whole) {
            match io.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
        got
    };
    tokio::time::timeout(limit, read).await.ok()
}

/// Waits (real time) until the cache has rendered more than `seen` times.
async fn rendered_after(cache: &ScrapeCache, seen: u64) {
    let start = std::time::Instant::now();
    while cache.renders() <= seen {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no new snapshot rendered"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A reader that asks for `/metrics` and reads slowly
/// kept the body it was given, and the snapshot bytes behind it, until its
/// 30 s deadline, however many newer snapshots came; a reader per
/// snapshot kept one superseded snapshot each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_readers_keep_at_most_a_few_superseded_bodies() {
    let h = Harness::start(Config::DEFAULT);
    hold_locks(&h.shared, 1000);
    let mut readers = Vec::new();
    for i in 0..SUPERSEDED + 2 {
        // 1 KiB of room and nobody reading: the body stays in flight.
        let mut io = h.connect_with(1024);
        let req = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
        assert!(io.write_all(req.as_bytes()).await.is_ok());
        let mut first = [0u8; 1];
        let began = tokio::time::timeout(Duration::from_secs(20), io.read(&mut first)).await;
        assert!(
            matches!(began, Ok(Ok(1))),
            "reader {i} not answered: {began:?}"
        );
        readers.push(io);
        let seen = h.cache.renders();
        one_more_lock(&h.shared, i);
        rendered_after(&h.cache, seen).await;
    }
    // The newest reader came with one generation too many: the oldest
    // had to go, well before its 30 s deadline.
    let Some(oldest) = read_on(&mut readers[0], b"H".to_vec(), Duration::from_secs(5)).await else {
        panic!("the oldest slow reader still holds its superseded body after 5 s");
    };
    let whole = content_length(&oldest);
    assert!(
        whole.is_some_and(|w| oldest.len() < w),
        "the oldest reader got its whole body ({} bytes of {whole:?})",
        oldest.len()
    );
    // The others keep theirs and get them whole.
    for (i, io) in readers.iter_mut().enumerate().skip(1) {
        let Some(got) = read_on(io, b"H".to_vec(), Duration::from_secs(20)).await else {
            panic!("reader {i}: not answered");
        };
        assert_eq!(
            content_length(&got),
            Some(got.len()),
            "reader {i} was cut: {} bytes",
            got.len()
        );
    }
}
