//! The pure core of the exporter: CAPTF's naming, lock-info decoding,
//! timeout inheritance and holder classification.
//!
//! Nothing here does I/O, async work or talks to Kubernetes. Every function
//! is a deterministic mapping from values to values, so each rule that must
//! match CAPTF (a Go program) byte for byte can be unit-tested in isolation,
//! and the watchers and the metrics layer stay thin.

pub mod captf_verdict;
pub mod classify;
pub mod jobname;
pub mod kind;
pub mod lockinfo;
pub mod node_lost;
pub mod podname;
pub mod shown;
pub mod suffix;
pub mod timeouts;
