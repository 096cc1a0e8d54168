//! The response deadline of a connection: from a request head being read
//! until hyper has handed the response's last byte to the socket (see
//! [`ResponseClock`]). Split from the accept loop, which only arms it and
//! waits on it.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::body::{Body, Bytes, Frame, SizeHint};
use tokio::sync::Notify;
use tokio::time::Instant;

use super::observed::Observer;
use super::RespBody;

/// The response deadline of one connection.
///
/// A response is owed from the moment its request head has been read (the
/// service is called) until hyper has handed its last byte to the socket.
/// That last moment is seen in two steps, because hyper takes body chunks
/// into its write buffer before it has written them: first the body is
/// dropped by hyper (it ended, or hyper does not send one, as for `HEAD`:
/// [`Tracked`]), then a flush of the socket succeeds (hyper flushes the
/// socket only once its buffer is empty: [`Observer::flushed`]). While anything is
/// owed, `due` is set; requests pipelined behind a response still being
/// written share its deadline instead of extending it, so a client cannot
/// keep a connection busy for ever by asking again.
#[derive(Debug)]
pub(super) struct ResponseClock {
    limit: Duration,
    state: Mutex<Owed>,
    changed: Notify,
}

#[derive(Debug, Default)]
struct Owed {
    /// When everything owed must be written; None while nothing is owed.
    due: Option<Instant>,
    /// Responses begun (requests whose head was read).
    begun: u64,
    /// Responses whose bodies hyper has dropped.
    bodies_done: u64,
}

impl ResponseClock {
    pub(super) fn new(limit: Duration) -> Self {
        ResponseClock {
            limit,
            state: Mutex::new(Owed::default()),
            changed: Notify::new(),
        }
    }

    /// Runs `f` on the state; a poisoned lock (a panic elsewhere while
    /// held, which only this module's short sections could cause) is
    /// taken over as it is: the counters stay meaningful.
    fn with<T>(&self, f: impl FnOnce(&mut Owed) -> T) -> T {
        match self.state.lock() {
            Ok(mut s) => f(&mut s),
            Err(poisoned) => f(&mut poisoned.into_inner()),
        }
    }

    /// A request head was read: a response is owed.
    pub(super) fn start(self: &Arc<Self>) -> BodyGuard {
        let armed = self.with(|s| {
            s.begun += 1;
            if s.due.is_none() {
                s.due = Some(Instant::now() + self.limit);
                true
            } else {
                false
            }
        });
        if armed {
            self.changed.notify_waiters();
        }
        BodyGuard {
            clock: self.clone(),
        }
    }

    /// The socket was flushed: if every response begun has its body
    /// handed over, nothing is owed any more.
    pub(super) fn flushed(&self) {
        self.with(|s| {
            if s.due.is_some() && s.bodies_done == s.begun {
                s.due = None;
            }
        });
    }

    /// True while a response is owed (begun and not all written).
    pub(super) fn owes(&self) -> bool {
        self.with(|s| s.due.is_some())
    }

    /// Resolves once a response is still owed past its deadline.
    pub(super) async fn overdue(&self) {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            // Registered before the state is read: a deadline set in
            // between still wakes this loop.
            changed.as_mut().enable();
            match self.with(|s| s.due) {
                Some(due) if due <= Instant::now() => return,
                Some(due) => {
                    tokio::select! {
                        () = tokio::time::sleep_until(due) => {}
                        () = changed => {}
                    }
                }
                None => changed.await,
            }
        }
    }
}

/// Held by a response body: when hyper drops the body (ended, or never
/// sent), the response's bytes are all in hyper's write buffer.
#[derive(Debug)]
pub(super) struct BodyGuard {
    clock: Arc<ResponseClock>,
}

impl Drop for BodyGuard {
    fn drop(&mut self) {
        self.clock.with(|s| s.bodies_done += 1);
    }
}

/// A response body that carries its [`BodyGuard`].
pub(super) struct Tracked {
    pub(super) body: RespBody,
    // Only dropped, never read: its drop is the signal.
    #[allow(dead_code)]
    pub(super) guard: BodyGuard,
}

impl Body for Tracked {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// The connection's socket tells the clock when a flush succeeded (see
/// [`ResponseClock`]).
impl Observer for Arc<ResponseClock> {
    fn flushed(&self) {
        ResponseClock::flushed(self);
    }
}
