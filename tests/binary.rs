//! The real binary: `demo` shows every class on /metrics within a minute,
//! and bad flags stop the start with a message naming the flag.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[path = "common/process.rs"]
mod process;

use process::{demo, free_port, Running, BIN};

fn get(port: u16, path: &str) -> Option<(String, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: localhost\r\nAccept: text/plain; version=0.0.4\r\nConnection: close\r\n\r\n").ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    let (head, body) = buf.split_once("\r\n\r\n")?;
    Some((head.to_string(), body.to_string()))
}

fn held(body: &str, class: &str) -> f64 {
    let prefix = format!("captf_state_locks_held{{class=\"{class}\"}} ");
    body.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

#[test]
fn demo_shows_every_class_within_a_minute() {
    let port = free_port();
    let child = demo(port);
    let _guard = Running(child);
    let start = Instant::now();
    let classes = [
        "own_live",
        "own_stale",
        "foreign",
        "unknown",
        "own_unverified",
    ];
    loop {
        if let Some((head, body)) = get(port, "/metrics") {
            assert!(head.starts_with("HTTP/1.1 200"), "{head}");
            let all = classes.iter().all(|c| held(&body, c) >= 1.0);
            let overdue = body
                .lines()
                .any(|l| l.starts_with("captf_state_lock_overdue{") && l.ends_with(" 1.0"));
            if all && overdue {
                println!(
                    "demo: every class and an overdue lock after {:?}",
                    start.elapsed()
                );
                let (ready, _) = get(port, "/readyz").expect("readyz answers");
                assert!(ready.starts_with("HTTP/1.1 200"), "{ready}");
                let (page_head, page) = get(port, "/").expect("status page");
                assert!(
                    page_head.starts_with("HTTP/1.1 200") && page.contains("own_stale"),
                    "{page}"
                );
                return;
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the demo did not show every class within a minute"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn start_error(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(BIN)
        .args(args)
        .env_remove("KUBECONFIG")
        .stdout(Stdio::null())
        .output()
        .expect("runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

#[test]
fn bad_flags_stop_the_start_naming_the_flag() {
    for (args, flag) in [
        (
            vec!["--listen-address", "not-an-address", "demo"],
            "--listen-address",
        ),
        (vec!["--log-format", "xml", "demo"], "--log-format"),
        (vec!["--namespaces", "Bad_Name", "demo"], "--namespaces"),
        (
            vec!["--pod-recheck-interval", "0s", "demo"],
            "--pod-recheck-interval",
        ),
        (
            vec!["--kubeconfig", "/nonexistent/kubeconfig"],
            "--kubeconfig",
        ),
        // The locks themselves cannot be skipped, nor a resource not watched.
        (
            vec!["--skip-resources", "leases", "demo"],
            "--skip-resources",
        ),
        (
            vec!["--skip-resources", "pods,terraformthings", "demo"],
            "--skip-resources",
        ),
        (
            vec!["--tls-cert-file", "/nonexistent/tls.crt", "demo"],
            "--tls-cert-file",
        ),
        (vec!["--auth", "basic", "demo"], "--auth"),
        // A certificate needs its key, and plain HTTP takes neither.
        (
            vec!["--tls-cert-file", "Cargo.toml", "demo"],
            "--tls-key-file",
        ),
        (
            vec![
                "--plain-http",
                "--tls-cert-file",
                "Cargo.toml",
                "--tls-key-file",
                "Cargo.toml",
                "demo",
            ],
            "--plain-http",
        ),
    ] {
        let (code, stderr) = start_error(&args);
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains(flag),
            "{args:?} should name {flag}: {stderr}"
        );
    }
    // The flag exists and says why the locks cannot be skipped (an unknown
    // flag would name itself too, with exit code 2).
    let (code, stderr) = start_error(&["--skip-resources", "pods,leases", "demo"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("leases cannot be skipped"), "{stderr}");
    // The demo has no API server to review tokens: asking for it fails at
    // start, naming the flag (exit 1: a start error, not a parse error).
    let (code, stderr) = start_error(&["--auth", "kubernetes", "demo"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("--auth kubernetes"), "{stderr}");
    // A certificate file that is not PEM fails at start naming its flag.
    let (code, stderr) = start_error(&[
        "--tls-cert-file",
        "Cargo.toml",
        "--tls-key-file",
        "Cargo.toml",
        "--kubeconfig",
        "Cargo.toml",
    ]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("--tls-cert-file Cargo.toml: no PEM certificate"),
        "checked before the kubeconfig is read: {stderr}"
    );
    // An address that is taken fails at start too, naming the flag.
    let taken = TcpListener::bind("127.0.0.1:0").expect("binds");
    let addr = taken.local_addr().expect("addr").to_string();
    let (code, stderr) = start_error(&["--listen-address", &addr, "demo"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("--listen-address"), "{stderr}");
    // A kubeconfig that is not one.
    let dir = std::env::temp_dir().join(format!("captf-lock-exporter-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let bad = dir.join("kubeconfig");
    std::fs::write(&bad, "this: [is not a kubeconfig").expect("writes");
    let (code, stderr) = start_error(&[
        "--kubeconfig",
        bad.to_str().expect("utf-8"),
        "--listen-address",
        "127.0.0.1:0",
    ]);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("--kubeconfig"), "{stderr}");
}
