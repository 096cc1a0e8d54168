//! A socket that tells an observer about its writes: the fair slots want to
//! know that an answer moves (bytes written), the response deadline that
//! hyper's buffer reached the socket (a flush succeeded).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// What a socket tells its observer; both default to nothing.
pub(super) trait Observer {
    /// Some bytes were written.
    fn wrote(&self) {}
    /// A flush succeeded: nothing is left in the socket's write path.
    fn flushed(&self) {}
}

/// `io`, with `observer` told of each write that moved bytes and each flush
/// that succeeded. Reads pass through untouched.
#[derive(Debug)]
pub(super) struct Observed<I, O> {
    pub(super) io: I,
    pub(super) observer: O,
}

impl<I: AsyncRead + Unpin, O: Unpin> AsyncRead for Observed<I, O> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<I: AsyncWrite + Unpin, O: Observer + Unpin> Observed<I, O> {
    fn after_write(&self, r: Poll<io::Result<usize>>) -> Poll<io::Result<usize>> {
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.observer.wrote();
        }
        r
    }
}

impl<I: AsyncWrite + Unpin, O: Observer + Unpin> AsyncWrite for Observed<I, O> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write(cx, buf);
        self.after_write(r)
    }

    // Forwarded so that hyper keeps writing the cached chunks with
    // writev instead of copying them into one buffer.
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.after_write(r)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let r = Pin::new(&mut self.io).poll_flush(cx);
        if let Poll::Ready(Ok(())) = r {
            self.observer.flushed();
        }
        r
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}
