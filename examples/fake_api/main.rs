//! A fast fake Kubernetes API server for scale runs of the exporter
//! (issue 9; driven by `scripts/bench.sh`).
//!
//! ```text
//! cargo run --release --example fake_api -- --objects 100000 --held-fraction 0.1 --port 0
//! ```
//!
//! It builds a CAPTF fleet once, serialises every object once (with the
//! metadata a real API server returns, managedFields included, so decoding
//! costs what it costs against a cluster) and pre-assembles the list pages
//! of the exporter's page size, so a list page is a copy of shared bytes.
//! What it serves, for every resource of the exporter's resource table:
//!
//! - `GET <collection>` (all namespaces or one): a list, paginated by `limit`
//!   and `continue` (the token is the list's resourceVersion and an offset;
//!   every page carries the first page's resourceVersion);
//! - `GET <collection>?watch=true&sendInitialEvents=true`: a watch-list, every
//!   live object as ADDED, then the `k8s.io/initial-events-end` bookmark, then
//!   the changes, as kube-apiserver 1.34+ streams it;
//! - `GET <collection>?watch=true&resourceVersion=R`: the changes after `R`,
//!   then changes as they are made, a BOOKMARK every `--bookmark-seconds`,
//!   closed after `timeoutSeconds`;
//! - `GET .../namespaces/<ns>/pods/<name>`: the pod, or a 404 Status.
//!
//! Selectors are not evaluated: every object served already matches the
//! exporter's selectors (`tfstate=true,!captf.io/lease`,
//! `captf.io/managed=true`, `reason=ForceUnlocked`).
//!
//! Control endpoints (not Kubernetes):
//!
//! - `GET /_stats`: requests counted by verb and resource (and pod GETs
//!   answered 404, list starts, watches ended by timeout and by 410), as JSON;
//! - `GET /_info`: the fleet: object counts and bytes per resource, and the
//!   held locks with their holder type;
//! - `POST /_change/release?lease=<ns>/<name>`: releases a held lock;
//! - `POST /_change/lock?lease=<ns>/<name>&id=<lock ID>&who=<Who>[&created=<unix s>]`:
//!   takes a free lock (lock-info with that ID and `Who`, `holderIdentity`
//!   the ID; 409 when held);
//! - `POST /_change/pod-failed?pod=<ns>/<name>`: turns a pod Failed
//!   (`/_change/pod-phase?pod=…&phase=Running|Succeeded|Failed`: any phase);
//! - `POST /_change/pod-create?i=<object>&attempt=<n>`: a Running runner pod
//!   of object `i` (`captf-<k>-<name>-apply-a<n>-abc123-x7k2p`);
//!   `POST /_change/pod-delete?pod=<ns>/<name>` deletes a pod;
//! - `POST /_change/create?i=<object>`: object `i` of the fleet's generator
//!   (`i` at or past `--objects` gives a new TerraformMachine) and its free
//!   lock Lease; `POST /_change/delete?i=<object>` deletes both;
//!   every change is delivered on open watches (MODIFIED, ADDED, DELETED)
//!   with a new resourceVersion;
//! - `POST /_change/gone`: every open watch ends with an ERROR event 410
//!   Expired, so the client relists (a watch whose subscriber lags behind
//!   the changes ends the same way);
//! - `GET /_objects`: the live Terraform objects with their Lease and lock
//!   (holder `Who`, lock ID), and the live pods with their phase;
//! - `POST /_change/tc-job`, `/_change/tc-label`, `/_change/lease-add`:
//!   a Job starting or ending on a Terraform object (its status as CAPTF
//!   writes it), its cluster label changed, a lock Lease under any name
//!   (module `churn`);
//! - `PUT /_static` stores a body that `GET /_static` then serves as is (the
//!   bench's static-bytes anchor).
//!
//! It prints `listening on 127.0.0.1:<port>` once the fleet is built.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use hyper_util::rt::TokioIo;

mod churn;
mod control;
mod fleet;
mod http;
mod objects;
mod reads;
mod store;

pub(crate) use churn::*;
pub(crate) use fleet::*;
pub(crate) use http::*;
pub(crate) use objects::*;
pub(crate) use store::*;

/// Command line.
#[derive(Debug, Parser)]
#[command(about = "Fast fake Kubernetes API server for exporter scale runs")]
struct Args {
    /// Terraform objects (TerraformClusters and TerraformMachines), one
    /// lock Lease each.
    #[arg(long, default_value_t = 1000)]
    objects: usize,
    /// Fraction of the locks that are held.
    #[arg(long, default_value_t = 0.1)]
    held_fraction: f64,
    /// Port on 127.0.0.1 (0: any free port; the line printed says which).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// Seconds between BOOKMARK events on an open watch.
    #[arg(long, default_value_t = 30)]
    bookmark_seconds: u64,
    /// Every Terraform object starts with the status CAPTF would have
    /// written: a StateReadable condition agreeing with its lock, and
    /// status.activeJob where its runner pod is Running (a real fleet's
    /// objects carry them; without this flag they carry neither).
    #[arg(long)]
    captf_status: bool,
    /// List page size whose pages are assembled at start (the exporter's).
    #[arg(long, default_value_t = 500)]
    page_size: usize,
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let args = Args::parse();
    let t = Instant::now();
    let fleet = Fleet::new(args.objects, args.held_fraction, args.captf_status);
    let store = Arc::new(build(
        fleet,
        args.page_size.max(1),
        Duration::from_secs(args.bookmark_seconds.max(1)),
    ));
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", args.port)).await?;
    let addr = listener.local_addr()?;
    eprintln!(
        "fake API: {} objects built and serialised in {:.2} s",
        args.objects,
        t.elapsed().as_secs_f64()
    );
    println!("listening on {addr}");
    use std::io::Write;
    std::io::stdout().flush()?;
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                eprintln!("accept: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let store = store.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let store = store.clone();
                async move { Ok::<_, Infallible>(store.handle(req).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
