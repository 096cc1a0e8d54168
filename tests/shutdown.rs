//! SIGTERM drains: the real binary in demo mode, scraped without pause by
//! several clients, gets SIGTERM; every response that had begun arrives
//! whole, an idle keep-alive connection is closed, and the process exits 0.
//! (The in-process test in src/server/listen/tests.rs holds one response
//! in flight deterministically; this one checks the wiring in main.)

#![cfg(unix)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[path = "common/process.rs"]
mod process;

use process::{demo, free_port, Running};

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
    let len = head.lines().find_map(|l| {
        let (n, v) = l.split_once(':')?;
        n.eq_ignore_ascii_case("content-length")
            .then(|| v.trim().parse::<usize>().ok())?
    });
    match len {
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
        let len = head
            .lines()
            .find_map(|l| {
                let (name, v) = l.split_once(':')?;
                name.eq_ignore_ascii_case("content-length")
                    .then(|| v.trim().parse::<usize>().ok())?
            })
            .ok_or_else(|| format!("response {n} has no length: {head}"))?;
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
    // rather than wait for it.
    let mut idle = TcpStream::connect(("127.0.0.1", port)).expect("connects");
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .expect("writes");
    let mut first = [0u8; 64];
    assert!(idle.read(&mut first).expect("reads") > 0);
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
    let status = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success());
    let signalled = Instant::now();
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
    // The idle connection was closed, not left to the header timeout.
    let _ = idle.set_read_timeout(Some(Duration::from_secs(5)));
    let mut rest = Vec::new();
    assert!(idle.read_to_end(&mut rest).is_ok(), "closed with EOF");
    println!(
        "{} whole scrapes, {responses} of {PIPELINED} pipelined responses whole; exited 0 after {:?}",
        whole.load(Ordering::Relaxed),
        signalled.elapsed()
    );
}
