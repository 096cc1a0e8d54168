//! Certificates from files and self-signed; reloads and their log.

use super::*;

/// A certificate and key for `name`, PEM.
fn pem_pair(name: &str) -> (String, String) {
    match rcgen::generate_simple_self_signed(vec![name.to_string()]) {
        Ok(c) => (c.cert.pem(), c.signing_key.serialize_pem()),
        Err(e) => panic!("rcgen: {e}"),
    }
}

fn files(dir: &Path, cert: &str, key: &str) -> Source {
    let (c, k) = (dir.join("tls.crt"), dir.join("tls.key"));
    std::fs::write(&c, cert).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(&k, key).unwrap_or_else(|e| panic!("{e}"));
    Source::Files { cert: c, key: k }
}

fn tempdir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("captf-tls-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    dir
}

#[test]
fn bad_files_name_their_flag() {
    let dir = tempdir("bad");
    let (cert, key) = pem_pair("a.example");
    let (_, other_key) = pem_pair("b.example");
    let cases = [
        (files(&dir, "not pem", &key), "--tls-cert-file"),
        (files(&dir, &cert, "not pem"), "--tls-key-file"),
        (files(&dir, &cert, &other_key), "--tls-key-file"),
    ];
    for (source, flag) in cases {
        match Certificates::load(source) {
            Ok(_) => panic!("loaded a bad pair"),
            Err(e) => assert!(e.to_string().contains(flag), "{e}"),
        }
    }
    let missing = Source::Files {
        cert: dir.join("absent.crt"),
        key: dir.join("absent.key"),
    };
    match Certificates::load(missing) {
        Ok(_) => panic!("loaded absent files"),
        Err(e) => assert!(
            e.to_string().starts_with("cannot read --tls-cert-file"),
            "{e}"
        ),
    }
}

#[test]
fn a_changed_pair_replaces_the_certificate_and_a_bad_one_keeps_it() {
    let dir = tempdir("reload");
    let (cert, key) = pem_pair("one.example");
    let certs = match Certificates::load(files(&dir, &cert, &key)) {
        Ok(c) => c,
        Err(e) => panic!("{e}"),
    };
    let first = certs.leaf();
    assert_eq!(certs.reload().ok(), Some(Reload::Unchanged));
    // A half-rotated pair (new cert, old key) is refused; the old one stays.
    let (cert2, key2) = pem_pair("two.example");
    files(&dir, &cert2, &key);
    assert!(certs.reload().is_err());
    assert_eq!(certs.leaf(), first);
    // The same bad content again is not a second error.
    assert_eq!(certs.reload().ok(), Some(Reload::Failed));
    files(&dir, &cert2, &key2);
    assert_eq!(certs.reload().ok(), Some(Reload::Replaced));
    assert_ne!(certs.leaf(), first);
}

#[test]
fn self_signed_is_made_and_never_reloads() {
    let certs = match Certificates::load(Source::SelfSigned {
        names: vec!["exporter.ns.svc".into()],
    }) {
        Ok(c) => c,
        Err(e) => panic!("{e}"),
    };
    assert!(certs.leaf().is_some_and(|c| !c.is_empty()));
    assert_eq!(certs.reload().ok(), Some(Reload::Unchanged));
    assert!(certs.server_config().is_ok());
}

/// Lines logged about the certificate files, with their fields, while it
/// is the default subscriber.
#[derive(Clone, Default)]
struct FileLines(Arc<std::sync::Mutex<Vec<(tracing::Level, String)>>>);

struct Fields(String);

impl tracing::field::Visit for Fields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.push_str(&format!("{}={value:?} ", field.name()));
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for FileLines {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        let mut fields = Fields(String::new());
        event.record(&mut fields);
        if fields.0.contains("TLS certificate") {
            if let Ok(mut lines) = self.0.lock() {
                lines.push((*event.metadata().level(), fields.0));
            }
        }
    }
}

impl FileLines {
    fn at(&self, level: tracing::Level) -> Vec<String> {
        self.0
            .lock()
            .map(|l| {
                l.iter()
                    .filter(|(lv, _)| *lv == level)
                    .map(|(_, s)| s.clone())
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// Replaces the file at `path` at once: written aside, then renamed.
fn replace(path: &Path, text: &str) {
    let aside = path.with_extension("new");
    std::fs::write(&aside, text).unwrap_or_else(|e| panic!("{e}"));
    std::fs::rename(&aside, path).unwrap_or_else(|e| panic!("{e}"));
}

/// Waits (at most 10 s) until `done`.
async fn until(what: &str, done: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(tokio::time::Instant::now() < deadline, "waited for {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A deleted or unreadable certificate file was a
/// warning on every look (every 10 s), for as long as it stayed away.
/// Now: one warning when the looks start failing, every failed look
/// counted, and one line with their number when the files are usable
/// again.
#[tokio::test]
async fn a_missing_file_is_one_warning_then_one_line_with_the_count() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tracing_subscriber::layer::SubscriberExt;
    let capture = FileLines::default();
    let subscriber = tracing_subscriber::registry().with(capture.clone());
    let _default = tracing::subscriber::set_default(subscriber);
    let dir = tempdir("missing");
    let (cert, key) = pem_pair("one.example");
    let source = files(&dir, &cert, &key);
    let certs = match Certificates::load(source.clone()) {
        Ok(c) => c,
        Err(e) => panic!("{e}"),
    };
    let errors = Arc::new(AtomicUsize::new(0));
    let counted = errors.clone();
    let watch = tokio::spawn(certs.clone().watch(Duration::from_millis(10), move |r| {
        if r == Reload::Failed {
            counted.fetch_add(1, Ordering::SeqCst);
        }
    }));
    let Source::Files {
        cert: cert_path, ..
    } = &source
    else {
        panic!("files")
    };
    std::fs::remove_file(cert_path).unwrap_or_else(|e| panic!("{e}"));
    until("five failed looks", || errors.load(Ordering::SeqCst) >= 5).await;
    let warnings = capture.at(tracing::Level::WARN);
    assert_eq!(warnings.len(), 1, "one warning per episode: {warnings:#?}");
    assert!(warnings[0].contains("--tls-cert-file"), "{warnings:#?}");
    // Back, as it was (written aside and renamed, as the kubelet swaps a
    // Secret's files, so no look reads it half-written): one line ends
    // the episode, with the count.
    replace(cert_path, &cert);
    until("the episode's end", || {
        capture
            .at(tracing::Level::INFO)
            .iter()
            .any(|l| l.contains("usable again"))
    })
    .await;
    let failed = errors.load(Ordering::SeqCst);
    let info = capture.at(tracing::Level::INFO);
    assert!(
        info.iter()
            .any(|l| l.contains(&format!("failed_looks={failed} "))),
        "the count ({failed}) in {info:#?}"
    );
    // A second episode (now a bad pair) is a second warning.
    let (_, other_key) = pem_pair("two.example");
    replace(&dir.join("tls.key"), &other_key);
    until("a failed look", || {
        errors.load(Ordering::SeqCst) > failed + 2
    })
    .await;
    assert_eq!(capture.at(tracing::Level::WARN).len(), 2);
    watch.abort();
}
