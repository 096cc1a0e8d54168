//! Replays the fuzz corpus (`fuzz/corpus/<target>/`) through the fuzz
//! entry points, as a regression test: every input the fuzzers kept, and
//! every crash they found (added to the corpus once fixed), must pass.
//! No fuzzing happens here; `fuzz/README.md` says how to fuzz.

use std::path::Path;

use captf_lock_exporter::fuzzing;

fn replay(target: &str, run: fn(&[u8])) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{dir:?}: {e}")) {
        let path = entry.expect("corpus entry").path();
        let data = std::fs::read(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
        let outcome = std::panic::catch_unwind(|| run(&data));
        assert!(outcome.is_ok(), "{target}: {path:?} panics");
        n += 1;
    }
    assert!(n >= 5, "{target}: only {n} corpus inputs in {dir:?}");
    println!("{target}: {n} inputs replayed");
}

#[test]
fn lock_info_corpus() {
    replay("lock_info", fuzzing::lock_info);
}

#[test]
fn own_pod_corpus() {
    replay("own_pod", fuzzing::own_pod);
}

#[test]
fn watch_line_corpus() {
    replay("watch_line", fuzzing::watch_line);
}

#[test]
fn watch_frame_corpus() {
    replay("watch_frame", fuzzing::watch_frame);
}
