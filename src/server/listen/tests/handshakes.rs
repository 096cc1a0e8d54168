//! TLS handshakes that fail: counted, and summed up in the log.

use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;
use crate::server::tls::{Certificates, Source};

/// Lines the server logs about TLS handshakes, at any level, while it is
/// the default subscriber; each with the fields it carried.
#[derive(Clone, Default)]
struct HandshakeLines(Arc<Mutex<Vec<String>>>);

struct Fields(String);

impl tracing::field::Visit for Fields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.push_str(&format!("{}={value:?} ", field.name()));
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for HandshakeLines {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        let mut fields = Fields(String::new());
        event.record(&mut fields);
        if fields.0.contains("TLS handshake") {
            if let Ok(mut lines) = self.0.lock() {
                lines.push(fields.0);
            }
        }
    }
}

impl HandshakeLines {
    fn lines(&self) -> Vec<String> {
        self.0.lock().map(|l| l.clone()).unwrap_or_default()
    }
}

/// Every failed handshake was a line of its own, so a
/// client retrying every 10 s (or a scanner) wrote the log full.
#[tokio::test(start_paused = true)]
async fn failed_handshakes_are_one_summary_per_interval_with_the_count() {
    use tracing_subscriber::layer::SubscriberExt;
    let capture = HandshakeLines::default();
    let subscriber = tracing_subscriber::registry().with(capture.clone());
    let _default = tracing::subscriber::set_default(subscriber);
    let certs = match Certificates::load(Source::SelfSigned { names: Vec::new() }) {
        Ok(c) => c,
        Err(e) => panic!("no self-signed certificate: {e}"),
    };
    let h = Harness::start_with(
        Config::DEFAULT,
        Endpoint {
            transport: Transport::Tls(certs),
            guard: Guard::Open,
        },
    );
    let failures = 20;
    let closed_count = Arc::new(AtomicUsize::new(0));
    for _ in 0..failures {
        // Plain HTTP to the TLS port: not a ClientHello.
        let mut io = h.connect();
        assert!(io
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .is_ok());
        if closed(&mut io).await {
            closed_count.fetch_add(1, Ordering::Relaxed);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert_eq!(closed_count.load(Ordering::Relaxed), failures);
    let within = capture.lines();
    assert!(
        within.len() <= 1,
        "{} lines for {failures} failed handshakes within a minute: {within:?}",
        within.len()
    );
    // Past the interval: one line that counts them all.
    tokio::time::sleep(Duration::from_secs(61)).await;
    let lines = capture.lines();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines
            .iter()
            .any(|l| l.contains(&format!("failed={failures} "))),
        "no count of {failures}: {lines:?}"
    );
}
