//! Fair connection slots: at the cap, the connection that has made the
//! least recent progress gives its slot to the newcomer.
//!
//! A cap alone lets whoever opens connections first keep them: 256 clients
//! that send `GET /metrics` and never read (or never finish a TLS
//! handshake) would hold every slot until their deadlines, and a real
//! scrape would wait in the listen backlog behind them. Each open
//! connection here records when bytes last moved on its socket, either way
//! ([`Progressing`]); when a connection is accepted with every slot taken,
//! the one whose bytes moved longest ago is closed, provided that was at
//! least `stalled_after` ago. A connection that is being written to, or
//! that asked for something a moment ago, is never the one closed; an idle
//! keep-alive connection or a client that stopped reading is.

use std::collections::HashMap;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;
use tokio::time::Instant;

/// The open connections and when each last moved bytes.
#[derive(Debug)]
pub(super) struct Slots {
    epoch: Instant,
    open: Mutex<HashMap<u64, Arc<Conn>>>,
    next_id: AtomicU64,
    evicted: AtomicU64,
}

/// One open connection as the slots see it.
#[derive(Debug)]
pub(super) struct Conn {
    /// Milliseconds since the epoch of the last byte moved (or the accept).
    last: AtomicU64,
    epoch: Instant,
    evict: Notify,
}

impl Conn {
    fn touch(&self) {
        self.last.store(millis(self.epoch), Ordering::Relaxed);
    }

    /// Resolves when the slots take this connection's slot back.
    pub(super) async fn evicted(&self) {
        self.evict.notified().await;
    }
}

fn millis(epoch: Instant) -> u64 {
    u64::try_from(Instant::now().saturating_duration_since(epoch).as_millis()).unwrap_or(u64::MAX)
}

/// Removes the connection from the slots when its task ends.
#[derive(Debug)]
pub(super) struct Registered {
    slots: Arc<Slots>,
    id: u64,
    pub(super) conn: Arc<Conn>,
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.slots.lock().remove(&self.id);
    }
}

impl Slots {
    pub(super) fn new() -> Arc<Slots> {
        Arc::new(Slots {
            epoch: Instant::now(),
            open: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
            evicted: AtomicU64::new(0),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<Conn>>> {
        match self.open.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// A connection just accepted: it counts as having moved bytes now.
    pub(super) fn register(self: &Arc<Self>) -> Registered {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let conn = Arc::new(Conn {
            last: AtomicU64::new(millis(self.epoch)),
            epoch: self.epoch,
            evict: Notify::new(),
        });
        self.lock().insert(id, conn.clone());
        Registered {
            slots: self.clone(),
            id,
            conn,
        }
    }

    /// Closes the connection whose bytes moved longest ago, if that was at
    /// least `stalled_after` ago; true when one was told to close.
    pub(super) fn evict_stalest(&self, stalled_after: Duration) -> bool {
        let now = millis(self.epoch);
        let limit = u64::try_from(stalled_after.as_millis()).unwrap_or(u64::MAX);
        let mut open = self.lock();
        let victim = open
            .iter()
            .map(|(id, c)| (*id, c.last.load(Ordering::Relaxed)))
            .filter(|(_, last)| now.saturating_sub(*last) >= limit)
            .min_by_key(|(id, last)| (*last, *id))
            .map(|(id, _)| id);
        let Some(id) = victim.and_then(|id| open.remove(&id).map(|c| (id, c))) else {
            return false;
        };
        // notify_one keeps a permit: the connection sees it even if it is
        // not waiting at this moment.
        id.1.evict.notify_one();
        self.evicted.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Connections closed to make room so far.
    #[cfg(test)]
    pub(super) fn evictions(&self) -> u64 {
        self.evicted.load(Ordering::Relaxed)
    }
}

/// A socket that tells its [`Conn`] whenever bytes move on it.
#[derive(Debug)]
pub(super) struct Progressing<I> {
    pub(super) io: I,
    pub(super) conn: Arc<Conn>,
}

impl<I: AsyncRead + Unpin> AsyncRead for Progressing<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.io).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.conn.touch();
        }
        r
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Progressing<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write(cx, buf);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.conn.touch();
        }
        r
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.conn.touch();
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_connection_idle_longest_goes_first_and_a_busy_one_never() {
        let slots = Slots::new();
        let a = slots.register();
        tokio::time::advance(Duration::from_secs(3)).await;
        let b = slots.register();
        tokio::time::advance(Duration::from_secs(3)).await;
        let c = slots.register();
        // a moved bytes last 6 s ago, b 3 s ago, c just now.
        a.conn.touch();
        // Now b is the stalest.
        tokio::time::advance(Duration::from_millis(1500)).await;
        assert!(slots.evict_stalest(Duration::from_secs(1)));
        let gone = tokio::time::timeout(Duration::from_millis(1), b.conn.evicted()).await;
        assert!(gone.is_ok(), "b was not told to close");
        assert_eq!(slots.lock().len(), 2);
        // Nobody else has been still for 5 s.
        assert!(!slots.evict_stalest(Duration::from_secs(5)));
        assert_eq!(slots.evictions(), 1);
        drop(c);
        drop(b);
        assert_eq!(
            slots.lock().len(),
            1,
            "a closed connection leaves the slots"
        );
    }
}
