//! The HTML status page at `/`: readiness, index sizes, held locks per
//! class and the state of every watch, for a human with a browser.

use std::fmt::Write as _;

use crate::index::Resource;
use crate::shared::Shared;

/// A short HTML status page for `/`.
pub fn status_page(shared: &Shared) -> String {
    let (per_class, sizes) = shared.read(|ix| (ix.held_per_class(), ix.sizes()));
    let mut rows = String::new();
    for (c, n) in per_class {
        let _ = write!(rows, "<tr><td>{}</td><td>{}</td></tr>", c.as_str(), n);
    }
    let mut watches = String::new();
    for r in Resource::ALL
        .into_iter()
        .filter(|r| shared.health.is_watched(*r))
    {
        let state = if shared.health.watch_up(r) {
            "up"
        } else {
            "down: data may be stale (see /readyz and the log)"
        };
        let _ = write!(
            watches,
            "<tr><td>{}</td><td>{}</td></tr>",
            r.as_str(),
            state
        );
    }
    format!(
        "<!doctype html><html><head><title>captf-lock-exporter</title></head><body>\
         <h1>captf-lock-exporter {}</h1>\
         <p>Read-only exporter of CAPTF state locks. Endpoints: \
         <a href=\"/metrics\">/metrics</a>, <a href=\"/healthz\">/healthz</a>, <a href=\"/readyz\">/readyz</a>.</p>\
         <p>Ready: {}. Lock Leases: {}, objects: {}, runner pods cached: {}.</p>\
         <table><tr><th>class</th><th>held locks</th></tr>{}</table>\
         <table><tr><th>watch</th><th>state</th></tr>{}</table></body></html>\n",
        shared.version,
        shared.health.ready(),
        sizes.0,
        sizes.1,
        sizes.2,
        rows,
        watches
    )
}
