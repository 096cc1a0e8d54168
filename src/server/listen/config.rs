//! What the accept loop is given: how it speaks ([`Transport`]), who may
//! read ([`Endpoint`]), and its limits ([`Config`]).

use std::sync::Arc;
use std::time::Duration;

use super::super::auth::Guard;
use super::super::tls::Certificates;

/// How connections are spoken to.
#[derive(Clone, Debug)]
pub enum Transport {
    /// Plain HTTP/1.1.
    Plain,
    /// HTTP/1.1 over TLS 1.2 or 1.3, the certificate from [`Certificates`].
    Tls(Arc<Certificates>),
}

/// What the endpoint speaks and who may read it.
#[derive(Clone, Debug)]
pub struct Endpoint {
    /// Plain or TLS.
    pub transport: Transport,
    /// Who may read the protected paths.
    pub guard: Guard,
}

impl Endpoint {
    /// Plain HTTP, everyone allowed: the demo's endpoint and the tests'.
    pub fn open_plain() -> Endpoint {
        Endpoint {
            transport: Transport::Plain,
            guard: Guard::Open,
        }
    }
}

/// Limits of the admin server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// Time for a request head to arrive, on a new or an idle keep-alive
    /// connection.
    pub header_read_timeout: Duration,
    /// Connections open at once.
    pub max_connections: usize,
    /// How long responses in flight may take to finish on shutdown.
    pub drain: Duration,
    /// The longest a response may take, from its request head being read
    /// to its last byte being handed to the socket; past it the connection
    /// is dropped.
    pub response_timeout: Duration,
    /// On-call pages (`/`, `/locks/...`) rendered at once.
    pub max_page_renders: usize,
    /// At the connection cap, how long an owed answer must have been still,
    /// or a connection owed nothing must have been open, before a newcomer
    /// may take its slot.
    pub stalled_after: Duration,
}

impl Config {
    /// The production limits. 128 connections leave room for several
    /// Prometheus replicas and humans, and since a newcomer at the cap takes
    /// the slot of a connection not using it, more slots would only let
    /// clients that never read pin more memory; 10 s is Prometheus' default scrape
    /// timeout; 5 s of drain fits in Kubernetes' default 30 s grace period.
    ///
    /// 30 s per response is three times Prometheus' default scrape timeout
    /// (a scraper has hung up long before) and lets even the uncompressed
    /// exposition of a large fleet through on a slow in-cluster link
    /// (docs/performance.md has the sizes); it bounds how long a reader that stopped reading
    /// keeps its slot and the body it pins. Four page renders at once are
    /// plenty for people; each reads the index a few locks at a time on a
    /// blocking thread and renders with no lock, so more would only take
    /// CPU from the scrapes.
    pub const DEFAULT: Config = Config {
        header_read_timeout: Duration::from_secs(10),
        max_connections: 128,
        drain: Duration::from_secs(5),
        response_timeout: Duration::from_secs(30),
        max_page_renders: 4,
        stalled_after: Duration::from_secs(1),
    };
}

impl Default for Config {
    fn default() -> Self {
        Config::DEFAULT
    }
}
