//! The requests of the watch loop: what a watch yields ([`Events`]), how they fail: [`Failed`], its closed-set
//! reason ([`reason_of`]), and [`bounded`], which makes a request that
//! never answers a failure too.
//!
//! Apart from the loop because both halves of a watch share it: the loop
//! ([`super::list_watch`]) lists and opens watches with it, and
//! [`super::follow`] ends a watch with it; the reasons are what health
//! counts and backs off on.

use std::time::Duration;

use futures::stream::BoxStream;
use kube::api::WatchEvent;

use crate::health::ErrorReason;

/// The events of one open watch.
pub(super) type Events<K> = BoxStream<'static, Result<WatchEvent<K>, kube::Error>>;

/// Maps a client error to its closed-set reason.
pub fn reason_of(err: &kube::Error) -> ErrorReason {
    match err {
        kube::Error::Api(status) => ErrorReason::from_status(status.code),
        kube::Error::SerdeError(_)
        | kube::Error::FromUtf8(_)
        | kube::Error::LinesCodecMaxLineLengthExceeded => ErrorReason::Decode,
        kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_) => {
            ErrorReason::Transport
        }
        _ => ErrorReason::Other,
    }
}

/// A failed request.
#[derive(Debug, thiserror::Error)]
pub(super) enum Failed {
    #[error("{0}")]
    Api(#[source] kube::Error),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("API error {code}: {message}")]
    Status { code: u16, message: String },
    #[error("watch closed {0:?} after it opened, before any event or bookmark")]
    ClosedAtOnce(Duration),
}

impl Failed {
    /// The reason counted, logged and backed off on.
    pub(super) fn reason(&self) -> ErrorReason {
        match self {
            Failed::Api(e) => reason_of(e),
            Failed::Timeout(_) => ErrorReason::Timeout,
            Failed::Status { code, .. } => ErrorReason::from_status(*code),
            // The stream gave nothing and ended: to us, a broken stream.
            Failed::ClosedAtOnce(_) => ErrorReason::Transport,
        }
    }

    /// The server refused the connection: nothing listens (a restart), so
    /// nothing was missed that a watch from the last version cannot ask
    /// for. client-go's `isWatchErrorRetriable` resumes on exactly this and
    /// on a 429.
    pub(super) fn connection_refused(&self) -> bool {
        let Failed::Api(e) = self else { return false };
        let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
        while let Some(err) = cause {
            if let Some(io) = err.downcast_ref::<std::io::Error>() {
                if io.kind() == std::io::ErrorKind::ConnectionRefused {
                    return true;
                }
            }
            cause = err.source();
        }
        false
    }
}

/// The answer of `f`, or [`Failed::Timeout`] when none came within
/// `limit`: a request that gets no answer is a failure to count and back
/// off on, not a wait.
pub(super) async fn bounded<F: std::future::Future<Output = Result<O, kube::Error>>, O>(
    limit: Duration,
    f: F,
) -> Result<O, Failed> {
    match tokio::time::timeout(limit, f).await {
        Ok(Ok(o)) => Ok(o),
        Ok(Err(e)) => Err(Failed::Api(e)),
        Err(_) => Err(Failed::Timeout(limit)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::coordination::v1::Lease;

    /// The error kube gives for a port where nothing listens, through the
    /// real client stack, is a refused connection; other failures are not.
    #[tokio::test]
    async fn a_port_nothing_listens_on_is_a_refused_connection() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
            l.local_addr().expect("its address").port()
        };
        let url = format!("http://127.0.0.1:{port}").parse().expect("a URL");
        let client = kube::Client::try_from(kube::Config::new(url)).expect("a client");
        let err = kube::Api::<Lease>::all(client)
            .list(&Default::default())
            .await
            .expect_err("nothing listens");
        let failed = Failed::Api(err);
        assert_eq!(failed.reason(), ErrorReason::Transport);
        assert!(failed.connection_refused(), "{failed:?}");

        let reset = Failed::Api(kube::Error::Service(Box::new(std::io::Error::from(
            std::io::ErrorKind::ConnectionReset,
        ))));
        assert!(!reset.connection_refused());
        assert!(!Failed::Timeout(Duration::from_secs(1)).connection_refused());
        let unavailable = Failed::Status {
            code: 503,
            message: String::new(),
        };
        assert!(!unavailable.connection_refused());
    }
}
