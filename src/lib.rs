//! captf-lock-exporter: a read-only Prometheus exporter for the state-lock
//! Leases of CAPTF (Cluster API Provider Terraform).
//!
//! The flow is one-way: `watch` turns API objects into trimmed entries and
//! feeds them to the `index`; the `pod_reads` task confirms stale verdicts with
//! live pod reads; `metrics` keeps the exposition rendered as the index
//! changes (a scrape copies the newest rendering); `server`
//! serves it. `core` holds the pure rules mirrored from CAPTF. `shared` is
//! the state those tasks share, `supervise` keeps them running, `deadlines`
//! logs overdue locks. See docs/architecture.md.
#![warn(missing_docs)]

/// CAPTF's rules as plain functions (the `captf-core` crate).
pub use captf_core as core;
/// The in-memory index (the `captf-index` crate).
pub use captf_index as index;

pub mod cli;
pub mod client;
pub mod deadlines;
pub mod demo;
pub mod fuzzing;
pub mod health;
pub mod metrics;
pub mod oncall;
pub mod pages;
pub mod pod_reads;
pub mod server;
pub mod shared;
pub mod supervise;
pub mod watch;

/// The version reported by build_info, the pages and the logs.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
