//! SIGTERM drains: the real binary in demo mode, scraped without pause by
//! several clients, gets SIGTERM; every response that had begun arrives
//! whole, an idle keep-alive connection is closed at once (not left to the
//! end of the drain period), and the process exits 0.
//! (The in-process test in src/server/listen/tests.rs holds one response
//! in flight deterministically; this one checks the wiring in main.)

#![cfg(unix)]

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[path = "common/process.rs"]
mod process;

use captf_lock_exporter::server::Config;
use process::{demo, free_port, Running};

/// The `Content-Length` of a response head, if it has one.
fn content_length(head: &str) -> Option<usize> {
    head.lines().find_map(|l| {
        let (n, v) = l.split_once(':')?;
        n.eq_ignore_ascii_case("content-length")
            .then(|| v.trim().parse::<usize>().ok())?
    })
}

/// True when a response head says `Connection: close`.
fn says_close(head: &str) -> bool {
    head.lines().any(|l| {
        l.split_once(':').is_some_and(|(n, v)| {
            n.trim().eq_ignore_ascii_case("connection")
                && v.split(',').any(|t| t.trim().eq_ignore_ascii_case("close"))
        })
    })
}

/// One response off a keep-alive connection: its head, and its body of
/// exactly `Content-Length` bytes (more bytes than that is an error: the
/// client sent one request). Bounded by the socket's read timeout.
fn read_response(s: &mut TcpStream) -> Result<(String, Vec<u8>), String> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).into_owned();
            let len = content_length(&head).ok_or_else(|| format!("no length: {head}"))?;
            let body = end + 4;
            if buf.len() > body + len {
                return Err(format!(
                    "{} bytes past the body: {head}",
                    buf.len() - body - len
                ));
            }
            if buf.len() == body + len {
                return Ok((head, buf.split_off(body)));
            }
        }
        match s.read(&mut chunk) {
            Ok(0) => return Err(format!("closed after {} bytes", buf.len())),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(err) => return Err(format!("after {} bytes: {err}", buf.len())),
        }
    }
}

/// Scrapes `/metrics` over the keep-alive connection `s` and checks the
/// answer leaves it open: a whole exposition without `Connection: close`.
/// (The demo has no authentication, so the guard lets `/metrics` in and
/// the server keeps the connection; a probe's answer or a refusal would
/// close it, and shutdown would have nothing left to close.)
fn scrape_kept(s: &mut TcpStream, which: &str) {
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap_or_else(|err| panic!("{which}: cannot write: {err}"));
    let (head, body) = read_response(s).unwrap_or_else(|why| panic!("{which}: {why}"));
    assert!(head.starts_with("HTTP/1.1 200"), "{which}: {head}");
    assert!(
        body.ends_with(b"# EOF\n"),
        "{which}: not a whole exposition"
    );
    assert!(
        !says_close(&head),
        "{which}: the answer closes the connection, so it cannot stand for an idle keep-alive one: {head}"
    );
}

/// What one scrape got.
enum Scrape {
    /// Connection refused or closed before a response began.
    NoResponse,
    /// A response with a body of exactly its Content-Length.
    Whole,
    /// A response that began and was cut.
    Cut(String),
}

fn scrape(port: u16) -> Scrape {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return Scrape::NoResponse;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(20)));
    let req = "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    if s.write_all(req.as_bytes()).is_err() {
        return Scrape::NoResponse;
    }
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    if buf.is_empty() {
        return Scrape::NoResponse;
    }
    let text = String::from_utf8_lossy(&buf);
    let Some((head, body)) = text.split_once("\r\n\r\n") else {
        return Scrape::Cut(format!("head cut: {text:?}"));
    };
    match content_length(head) {
        Some(n) if n == body.len() && body.ends_with("# EOF\n") => Scrape::Whole,
        _ => Scrape::Cut(format!(
            "{head}: {} body bytes, ends {:?}",
            body.len(),
            &body[body.len().saturating_sub(20)..]
        )),
    }
}

const PIPELINED: usize = 320;

/// The number of whole responses in `bytes`, or what is wrong with its tail.
fn whole_responses(bytes: &[u8]) -> Result<usize, String> {
    let text = String::from_utf8_lossy(bytes);
    let mut rest: &str = &text;
    let mut n = 0;
    while !rest.is_empty() {
        let Some((head, after)) = rest.split_once("\r\n\r\n") else {
            return Err(format!("after {n} responses, a cut head: {rest:?}"));
        };
        if !head.starts_with("HTTP/1.1 200") {
            return Err(format!("response {n}: {head}"));
        }
        let len =
            content_length(head).ok_or_else(|| format!("response {n} has no length: {head}"))?;
        if after.len() < len {
            return Err(format!("response {n}: {} of {len} body bytes", after.len()));
        }
        rest = &after[len..];
        n += 1;
    }
    Ok(n)
}

#[test]
fn sigterm_lets_responses_in_flight_finish_and_exits_0() {
    let port = free_port();
    let child = demo(port);
    let pid = child.id();
    let mut running = Running(child);
    let start = Instant::now();
    while !matches!(scrape(port), Scrape::Whole) {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no /metrics within a minute"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // A keep-alive connection that sits idle: shutdown must close it
    // rather than wait for it. It asks for /metrics, which keeps the
    // connection (a probe's answer says `Connection: close` and would end
    // it here, long before the signal).
    let mut idle = TcpStream::connect(("127.0.0.1", port)).expect("connects");
    idle.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("sets a timeout");
    scrape_kept(&mut idle, "the idle connection's first scrape");
    // A response held in flight: 320 pipelined scrapes in one 8,000-byte
    // write (hyper reads it whole, so no unread request makes the close a
    // reset), never read until after the signal. 320 bodies of ~17 KB
    // are more than the socket buffers hold, so the server is blocked
    // mid-response when the signal comes.
    let mut pipelined = TcpStream::connect(("127.0.0.1", port)).expect("connects");
    pipelined
        .write_all("GET /metrics HTTP/1.1\r\n\r\n".repeat(PIPELINED).as_bytes())
        .expect("writes");
    let stop = Arc::new(AtomicBool::new(false));
    let whole = Arc::new(AtomicUsize::new(0));
    let scrapers: Vec<_> = (0..6)
        .map(|_| {
            let (stop, whole) = (stop.clone(), whole.clone());
            std::thread::spawn(move || -> Result<(), String> {
                while !stop.load(Ordering::Relaxed) {
                    match scrape(port) {
                        Scrape::Whole => {
                            whole.fetch_add(1, Ordering::Relaxed);
                        }
                        Scrape::NoResponse => {}
                        Scrape::Cut(why) => return Err(why),
                    }
                }
                Ok(())
            })
        })
        .collect();
    // Scrapes are in flight when the signal comes.
    while whole.load(Ordering::Relaxed) < 50 {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "scrapes stalled"
        );
        std::thread::yield_now();
    }
    // Let the server fill the pipelined connection's buffers (not a
    // condition: the check below holds whether or not it got that far).
    std::thread::sleep(Duration::from_millis(500));
    // The idle connection is still served (and its header timeout starts
    // again), then open and quiet when the signal comes.
    scrape_kept(&mut idle, "the idle connection's second scrape");
    idle.set_nonblocking(true).expect("nonblocking");
    match idle.peek(&mut [0u8; 1]) {
        Err(err) if err.kind() == ErrorKind::WouldBlock => {}
        other => panic!("the idle connection is not open and quiet before the signal: {other:?}"),
    }
    idle.set_nonblocking(false).expect("blocking");
    let status = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success());
    let signalled = Instant::now();
    // The idle connection, read from the signal on: when did it end?
    let idle = std::thread::spawn(move || {
        let _ = idle.set_read_timeout(Some(Duration::from_secs(20)));
        let mut rest = Vec::new();
        let read = idle.read_to_end(&mut rest).map(|_| rest);
        (read, signalled.elapsed())
    });
    // Now the client reads, as a scraper would, while the server drains.
    let reader = std::thread::spawn(move || {
        let _ = pipelined.set_read_timeout(Some(Duration::from_secs(20)));
        let mut all = Vec::new();
        let _ = pipelined.read_to_end(&mut all);
        all
    });
    let exit = loop {
        if let Some(code) = running.0.try_wait().expect("waits") {
            break code;
        }
        assert!(
            signalled.elapsed() < Duration::from_secs(20),
            "still running 20 s after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    stop.store(true, Ordering::Relaxed);
    for s in scrapers {
        if let Err(why) = s.join().expect("scraper thread") {
            panic!("a response was cut by the shutdown: {why}");
        }
    }
    assert_eq!(exit.code(), Some(0), "{exit:?}");
    // The pipelined connection: whole responses only, then EOF.
    let all = reader.join().expect("reader thread");
    let responses = whole_responses(&all);
    let responses = match responses {
        Ok(n) => n,
        Err(why) => panic!("the response in flight was cut: {why}"),
    };
    assert!(
        (1..PIPELINED).contains(&responses),
        "{responses} of {PIPELINED} pipelined responses: none was in flight at the signal"
    );
    // The idle connection was closed by the shutdown, with EOF and nothing
    // more, before the drain period could have run out. A connection the
    // server left open would end only when the drain gives up and the
    // process exits (no sooner than `drain` after the signal), or by its
    // header timeout (10 s, which cannot start before its second request):
    // any deadline under `drain` tells the two apart.
    let closed_within = Config::DEFAULT.drain - Duration::from_secs(1);
    let (idle_read, idle_after) = idle.join().expect("idle thread");
    match idle_read {
        Ok(rest) => assert!(
            rest.is_empty(),
            "the idle connection got {} bytes at shutdown",
            rest.len()
        ),
        Err(err) => panic!("the idle connection did not end with EOF: {err}"),
    }
    assert!(
        idle_after < closed_within,
        "the idle keep-alive connection ended {idle_after:?} after SIGTERM, not within {closed_within:?}: shutdown did not close it"
    );
    println!(
        "{} whole scrapes, {responses} of {PIPELINED} pipelined responses whole; idle connection closed after {idle_after:?}; exited 0 after {:?}",
        whole.load(Ordering::Relaxed),
        signalled.elapsed()
    );
}
