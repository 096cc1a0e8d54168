//! The accept loop and what bounds it.
//!
//! - A request head must arrive within `header_read_timeout` of the
//!   connection becoming ready for one: a half-sent request, or an idle
//!   keep-alive connection, is closed after it (hyper starts the timer
//!   whenever it waits for a head, so both are covered by one setting).
//! - At most `max_connections` are open. When all are taken the loop stops
//!   accepting: new connections wait in the kernel's listen backlog until
//!   one closes (at the latest when its header timeout fires), instead of
//!   being accepted only to be dropped, which a scraper would see as a
//!   reset rather than a slow answer.
//! - An `accept()` error (EMFILE, ENFILE, ENOBUFS...) sleeps 10 ms doubling
//!   to 1 s, and is logged once per episode, not once per attempt.
//! - On shutdown the loop stops accepting and closes the listener, idle
//!   connections are closed, and responses in flight get `drain` to
//!   finish before `serve` returns.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::Request;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};

use super::respond;
use crate::metrics::ScrapeCache;
use crate::shared::Shared;

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
}

impl Config {
    /// The production limits. 256 connections leave room for several
    /// Prometheus replicas and humans; 10 s is Prometheus' default scrape
    /// timeout; 5 s of drain fits in Kubernetes' default 30 s grace period.
    pub const DEFAULT: Config = Config {
        header_read_timeout: Duration::from_secs(10),
        max_connections: 256,
        drain: Duration::from_secs(5),
    };
}

impl Default for Config {
    fn default() -> Self {
        Config::DEFAULT
    }
}

/// Where connections come from: a TCP listener, or a test's fake.
pub trait Listener: Send + 'static {
    /// A connection.
    type Io: AsyncRead + AsyncWrite + Unpin + Send + 'static;
    /// The next connection.
    fn accept(&mut self) -> impl Future<Output = io::Result<Self::Io>> + Send;
}

impl Listener for TcpListener {
    type Io = TcpStream;
    async fn accept(&mut self) -> io::Result<TcpStream> {
        {
            TcpListener::accept(self).await.map(|(s, _)| s)
        }
    }
}

/// The delay after consecutive `accept()` errors: 10 ms doubling to 1 s,
/// back to 10 ms after a success.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AcceptBackoff {
    /// Errors since the last success.
    errors: u64,
    next: Option<Duration>,
}

impl AcceptBackoff {
    /// The first delay.
    pub const FIRST: Duration = Duration::from_millis(10);
    /// The longest delay.
    pub const MAX: Duration = Duration::from_secs(1);

    /// An error: how long to sleep, and whether it starts an episode (the
    /// one error worth logging).
    pub fn on_error(&mut self) -> (Duration, bool) {
        let delay = self.next.unwrap_or(Self::FIRST);
        self.next = Some((delay * 2).min(Self::MAX));
        self.errors += 1;
        (delay, self.errors == 1)
    }

    /// A success: the number of errors of the episode it ends, if any.
    pub fn on_success(&mut self) -> Option<u64> {
        let errors = std::mem::take(&mut self.errors);
        self.next = None;
        (errors > 0).then_some(errors)
    }
}

/// Resolves once `shutdown` says true; never if its sender is gone
/// without saying it (nobody can ask for a shutdown any more).
async fn stopping(shutdown: &mut watch::Receiver<bool>) {
    if shutdown.wait_for(|stop| *stop).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Serves the admin endpoints on `listener` with the production limits
/// until `shutdown` says true, then drains (see the module documentation).
pub async fn serve(listener: TcpListener, shared: Arc<Shared>, shutdown: watch::Receiver<bool>) {
    let cache = ScrapeCache::new(shared.clone());
    serve_with(listener, shared, cache, Config::DEFAULT, shutdown).await;
}

/// [`serve`] with any listener, cache and limits.
pub async fn serve_with<L: Listener>(
    mut listener: L,
    shared: Arc<Shared>,
    cache: Arc<ScrapeCache>,
    config: Config,
    mut shutdown: watch::Receiver<bool>,
) {
    let max = config.max_connections.clamp(1, Semaphore::MAX_PERMITS);
    let slots = Arc::new(Semaphore::new(max));
    let mut backoff = AcceptBackoff::default();
    loop {
        // A slot first: with every slot taken nothing is accepted.
        let permit = tokio::select! {
            p = slots.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
            () = stopping(&mut shutdown) => break,
        };
        let accepted = tokio::select! {
            a = listener.accept() => a,
            () = stopping(&mut shutdown) => break,
        };
        let io = match accepted {
            Ok(io) => io,
            Err(err) => {
                let (delay, first) = backoff.on_error();
                if first {
                    tracing::warn!(error = %err, "accept failed; retrying with backoff up to 1 s");
                }
                drop(permit);
                tokio::select! {
                    () = tokio::time::sleep(delay) => continue,
                    () = stopping(&mut shutdown) => break,
                }
            }
        };
        if let Some(errors) = backoff.on_success() {
            tracing::info!(errors, "accept recovered");
        }
        let (shared, cache, shutdown) = (shared.clone(), cache.clone(), shutdown.clone());
        tokio::spawn(async move {
            connection(io, shared, cache, config, shutdown).await;
            drop(permit);
        });
    }
    // Refuse new connections from here on.
    drop(listener);
    // Every open connection holds a slot: all slots back means all closed.
    let all = u32::try_from(max).unwrap_or(u32::MAX);
    if tokio::time::timeout(config.drain, slots.acquire_many(all))
        .await
        .is_err()
    {
        tracing::warn!(
            drain = ?config.drain,
            "responses still in flight after the drain period; closing them"
        );
    }
}

async fn connection<I>(
    io: I,
    shared: Arc<Shared>,
    cache: Arc<ScrapeCache>,
    config: Config,
    mut shutdown: watch::Receiver<bool>,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let svc = service_fn(move |req: Request<Incoming>| {
        let (shared, cache) = (shared.clone(), cache.clone());
        async move { Ok::<_, Infallible>(respond(&shared, &cache, &req).await) }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(config.header_read_timeout);
    let conn = builder.serve_connection(TokioIo::new(io), svc);
    tokio::pin!(conn);
    let result = tokio::select! {
        r = conn.as_mut() => r,
        () = stopping(&mut shutdown) => {
            // Closes the connection now if idle, else after the response
            // in flight; `serve` bounds how long that may take.
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(err) = result {
        tracing::debug!(error = %err, "connection closed with an error");
    }
}

#[cfg(test)]
mod tests;
