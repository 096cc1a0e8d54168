//! The accept loop and what bounds it.
//!
//! - A request head must arrive within `header_read_timeout` of the
//!   connection becoming ready for one: a half-sent request, or an idle
//!   keep-alive connection, is closed after it (hyper starts the timer
//!   whenever it waits for a head, so both are covered by one setting).
//! - At most `max_connections` are open. A connection accepted with every
//!   slot taken takes the slot of one that is not using it: owed nothing
//!   and open for `stalled_after`, or owed an answer that has not moved
//!   for `stalled_after` (see [`super::slots`] for which goes first):
//!   clients that never read, never finish a TLS handshake, sit idle or
//!   ask for `/healthz` over and over cannot keep a scraper or a probe
//!   out. When every open connection is new or being answered, the new
//!   one waits for a slot and the ones behind it wait in the kernel's
//!   listen backlog.
//! - Only an answer to a protected path the guard let in keeps a slot
//!   while it moves: a client that pipelines probes and reads slowly may
//!   be closed at the cap like an idle one. Refusals say `Connection:
//!   close` (see [`super::respond`]).
//! - Over TLS, the handshake must finish within `header_read_timeout`;
//!   handshakes that fail or time out are counted and summed up for all
//!   clients in one line a minute at most (see [`super::handshakes`]).
//! - An `accept()` error (EMFILE, ENFILE, ENOBUFS...) sleeps 10 ms doubling
//!   to 1 s, and is logged once per episode, not once per attempt.
//! - Every response must be written whole within `response_timeout` of its
//!   request head being read, or its connection is dropped: the header
//!   timeout covers only the head, and a client that sends `GET /metrics`
//!   and never reads would otherwise keep its slot and the rendered body
//!   it pins for as long as it likes (see [`ResponseClock`]).
//! - At most `max_page_renders` on-call pages (`/`, `/locks/...`) render at
//!   once; a request over that bound is answered 503 with `Retry-After`
//!   instead of queueing behind the others (see [`super::respond`]).
//! - On shutdown the loop stops accepting and closes the listener, idle
//!   connections are closed, and responses in flight get `drain` to
//!   finish before `serve` returns.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::Request;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};

use super::auth::MAX_TOKEN_BYTES;
use super::deadline::{ResponseClock, Tracked};
use super::episode::Episode;
use super::handshakes::Handshakes;
use super::observed::Observed;
use super::pins::Pins;
use super::respond::Answers;
use super::slots::{Registered, Slots};
use crate::metrics::{Exposition, ScrapeCache};
use crate::shared::Shared;

mod config;
pub use config::{Config, Endpoint, Transport};

/// What every connection is served from.
struct App {
    answers: Answers,
    handshakes: Handshakes,
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
        let (stream, _) = TcpListener::accept(self).await?;
        // A response is many chunks; with Nagle on, a small tail waits for
        // the client's delayed ACK (tens of ms on loopback).
        if let Err(err) = stream.set_nodelay(true) {
            tracing::debug!(error = %err, "TCP_NODELAY not set");
        }
        Ok(stream)
    }
}

/// The delay after consecutive `accept()` errors: 10 ms doubling to 1 s,
/// back to 10 ms after a success.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AcceptBackoff {
    episode: Episode,
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
        (delay, self.episode.on_error())
    }

    /// A success: the number of errors of the episode it ends, if any.
    pub fn on_success(&mut self) -> Option<u64> {
        self.next = None;
        self.episode.on_success()
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
pub async fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    exposition: Exposition,
    endpoint: Endpoint,
    shutdown: watch::Receiver<bool>,
) {
    let cache = ScrapeCache::with_exposition(shared.clone(), exposition);
    serve_with(listener, shared, cache, Config::DEFAULT, endpoint, shutdown).await;
}

/// [`serve`] with any listener, cache and limits.
pub async fn serve_with<L: Listener>(
    listener: L,
    shared: Arc<Shared>,
    cache: Arc<ScrapeCache>,
    config: Config,
    endpoint: Endpoint,
    shutdown: watch::Receiver<bool>,
) {
    let pages = page_renders(config);
    serve_limited(listener, shared, cache, pages, config, endpoint, shutdown).await;
}

/// The bound on on-call page renders in flight.
fn page_renders(config: Config) -> Arc<Semaphore> {
    Arc::new(Semaphore::new(
        config.max_page_renders.clamp(1, Semaphore::MAX_PERMITS),
    ))
}

/// A slot for a connection just accepted: a free one, else the slot of a
/// connection not using its own (see [`super::slots`]), else the first to
/// free up, looking again for one to close every 100 ms.
async fn slot(
    slots: &Arc<Semaphore>,
    open: &Slots,
    stalled_after: Duration,
) -> Option<tokio::sync::OwnedSemaphorePermit> {
    loop {
        match slots.clone().try_acquire_owned() {
            Ok(p) => return Some(p),
            Err(tokio::sync::TryAcquireError::Closed) => return None,
            Err(tokio::sync::TryAcquireError::NoPermits) => {}
        }
        let evicted = open.evict_stalest(stalled_after);
        let wait = if evicted {
            // Its task ends at once and gives the slot back.
            Duration::from_secs(1)
        } else {
            Duration::from_millis(100)
        };
        if let Ok(p) = tokio::time::timeout(wait, slots.clone().acquire_owned()).await {
            return p.ok();
        }
    }
}

/// [`serve_with`] with the page-render bound given (tests watch it). The
/// cache's refresher runs beside the accept loop, in this task.
async fn serve_limited<L: Listener>(
    listener: L,
    shared: Arc<Shared>,
    cache: Arc<ScrapeCache>,
    pages: Arc<Semaphore>,
    config: Config,
    endpoint: Endpoint,
    shutdown: watch::Receiver<bool>,
) {
    let refresh = cache.clone().refresh();
    let app = Arc::new(App {
        answers: Answers {
            shared,
            cache,
            pages,
            guard: endpoint.guard,
            pins: Arc::default(),
        },
        handshakes: Handshakes::default(),
    });
    tokio::select! {
        () = accept_loop(listener, app.clone(), endpoint.transport, config, shutdown) => {}
        () = refresh => tracing::error!("the exposition stopped being rendered"),
        () = app.handshakes.summaries() => {}
    }
    // What failed since the last summary is not lost at shutdown.
    app.handshakes.summarize();
}

async fn accept_loop<L: Listener>(
    mut listener: L,
    app: Arc<App>,
    transport: Transport,
    config: Config,
    mut shutdown: watch::Receiver<bool>,
) {
    let max = config.max_connections.clamp(1, Semaphore::MAX_PERMITS);
    let slots = Arc::new(Semaphore::new(max));
    let open = Slots::new();
    let tls = match &transport {
        Transport::Plain => None,
        Transport::Tls(certs) => match certs.server_config() {
            Ok(c) => Some(tokio_rustls::TlsAcceptor::from(c)),
            Err(err) => {
                // Checked at start (main builds the same settings first);
                // refusing to serve beats serving in the clear.
                tracing::error!(error = %err, "cannot build the TLS settings; not serving");
                return;
            }
        },
    };
    let mut backoff = AcceptBackoff::default();
    loop {
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
                tokio::select! {
                    () = tokio::time::sleep(delay) => continue,
                    () = stopping(&mut shutdown) => break,
                }
            }
        };
        if let Some(errors) = backoff.on_success() {
            tracing::info!(errors, "accept recovered");
        }
        // Accepted first, then given a slot: only a connection that is
        // really waiting may take a stalled one's slot. While this one
        // waits, nothing more is accepted.
        let permit = tokio::select! {
            p = slot(&slots, &open, config.stalled_after) => match p {
                Some(p) => p,
                None => break,
            },
            () = stopping(&mut shutdown) => break,
        };
        let registered = open.register();
        let (app, tls, shutdown) = (app.clone(), tls.clone(), shutdown.clone());
        tokio::spawn(async move {
            connection(io, app, tls, registered, config, shutdown).await;
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

/// The most hyper buffers per connection, of a request head as it arrives
/// and of response bytes queued for the socket: a GET with the longest
/// bearer token the guard looks at and 16 KiB of other headers. A head
/// past it is answered 431 and its connection closed. hyper's default
/// (about 408 KiB) let each of the 128 connections hold that much of a
/// head nobody needs; response bytes are shared chunks, so a smaller
/// queue only batches fewer of them into one write.
pub(super) const MAX_BUFFER: usize = MAX_TOKEN_BYTES + 16 * 1024;

/// The most TLS output a connection buffers: one full record (16 KiB of
/// plaintext) and its overhead.
const TLS_BUFFER_LIMIT: usize = 17 * 1024;

/// One connection: the TLS handshake if any (bounded by the header
/// timeout), then HTTP/1.1.
async fn connection<I>(
    io: I,
    app: Arc<App>,
    tls: Option<tokio_rustls::TlsAcceptor>,
    registered: Registered,
    config: Config,
    mut shutdown: watch::Receiver<bool>,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let conn = registered.conn.clone();
    let io = Observed {
        io,
        observer: conn.clone(),
    };
    let Some(acceptor) = tls else {
        return http(io, app, &registered, config, shutdown).await;
    };
    let handshake = tokio::select! {
        r = tokio::time::timeout(config.header_read_timeout, acceptor.accept(io)) => r,
        () = conn.evicted() => return,
        () = stopping(&mut shutdown) => return,
    };
    match handshake {
        Ok(Ok(mut stream)) => {
            // rustls buffers up to 64 KiB of records per connection by
            // default; a client that stops reading would pin all of it.
            // One full record is enough to keep a reading client busy.
            stream.get_mut().1.set_buffer_limit(Some(TLS_BUFFER_LIMIT));
            http(stream, app, &registered, config, shutdown).await
        }
        // Counted, and logged for all clients once a minute at most.
        Ok(Err(err)) => app.handshakes.failed(&err),
        Err(_) => app.handshakes.timed_out(),
    }
}

async fn http<I>(
    io: I,
    app: Arc<App>,
    registered: &Registered,
    config: Config,
    mut shutdown: watch::Receiver<bool>,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let clock = Arc::new(ResponseClock::new(config.response_timeout));
    registered.conn.answers_by(clock.clone());
    let svc = {
        let clock = clock.clone();
        let conn = registered.conn.clone();
        service_fn(move |req: Request<Incoming>| {
            let app = app.clone();
            let conn = conn.clone();
            // The head has been read: from here the response is owed.
            let guard = clock.start();
            conn.asked();
            async move {
                let r = app.answers.respond(&req, &conn).await;
                Ok::<_, Infallible>(r.map(|body| Tracked { body, guard }.boxed()))
            }
        })
    };
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(config.header_read_timeout)
        .max_buf_size(MAX_BUFFER);
    let io = Observed {
        io,
        observer: clock.clone(),
    };
    let conn = builder.serve_connection(TokioIo::new(io), svc);
    tokio::pin!(conn);
    let result = tokio::select! {
        r = conn.as_mut() => r,
        () = clock.overdue() => {
            overdue(config.response_timeout);
            return;
        }
        () = registered.conn.evicted() => {
            tracing::debug!("connection closed to give its slot to a new one (at the cap, it was not using it)");
            return;
        }
        () = registered.conn.cut_off() => {
            tracing::debug!(
                superseded = Pins::SUPERSEDED,
                "connection closed: its answer kept a body more renders old than the bound (a slow reader)"
            );
            return;
        }
        () = stopping(&mut shutdown) => {
            // Closes the connection now if idle, else after the response
            // in flight; `serve` bounds how long that may take, and the
            // response deadline still holds.
            conn.as_mut().graceful_shutdown();
            tokio::select! {
                r = conn.as_mut() => r,
                () = clock.overdue() => {
                    overdue(config.response_timeout);
                    return;
                }
            }
        }
    };
    if let Err(err) = result {
        tracing::debug!(error = %err, "connection closed with an error");
    }
}

/// Dropping the connection future closes the socket; this only says why.
fn overdue(limit: Duration) {
    tracing::debug!(
        response_timeout = ?limit,
        "response not written within its deadline (a client that does not read); connection dropped"
    );
}

#[cfg(test)]
mod tests;
