//! One review call: a bounded wait for one of the review slots, then the
//! call itself in its own task, which keeps the slot until the call ends
//! (answered or timed out). A caller that goes away (the client hung up,
//! the response deadline passed, the connection was evicted) stops
//! waiting for the answer, but the call it started still counts against
//! the bound: hanging up cannot make room for more reviews than the API
//! server is meant to bear.
//!
//! Every call is counted in `auth_reviews_total`; failures are logged once
//! per episode (the first, a change of cause, and the count when reviews
//! work again), as accept errors are.

use std::future::Future;
use std::sync::{Arc, Mutex};

use crate::health::{Health, Outcome, Review};
use crate::server::episode::Episode;

use super::review::{Failure, ReviewError};
use super::{Reviews, REVIEW_QUEUE_WAIT, REVIEW_TIMEOUT};

/// Why a call gave no answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum CallError {
    /// No review slot came free within the queue wait.
    Busy,
    /// The call was made and failed.
    Failed(Failure),
}

/// What the log has said about review failures.
#[derive(Debug, Default)]
pub(super) struct ReviewLog {
    /// Calls that failed since the last one answered.
    failed: Episode,
    /// The cause of the last failure: a new cause is logged again.
    cause: Option<Failure>,
    /// Requests that found no slot, since one found a slot at once.
    busy: Episode,
}

fn lock(log: &Mutex<ReviewLog>) -> std::sync::MutexGuard<'_, ReviewLog> {
    match log.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}

impl ReviewLog {
    fn answered(&mut self) {
        self.cause = None;
        if let Some(failed) = self.failed.on_success() {
            tracing::info!(
                failed,
                "the API server answers the endpoint's reviews again"
            );
        }
    }

    fn failed(&mut self, err: &ReviewError) {
        let first = self.failed.on_error();
        if first || self.cause != Some(err.kind) {
            tracing::warn!(
                error = %err,
                "cannot check requests to the endpoint; further failures are counted in auth_reviews_total{{result=\"error\"}} and logged at debug level until a review is answered"
            );
        } else {
            tracing::debug!(error = %err, "cannot check a request to the endpoint");
        }
        self.cause = Some(err.kind);
    }

    fn slot_free(&mut self) {
        if let Some(refused) = self.busy.on_success() {
            tracing::info!(
                refused,
                "review slots free again; requests answered 503 meanwhile"
            );
        }
    }

    fn busy(&mut self, review: Review) {
        if self.busy.on_error() {
            tracing::warn!(
                review = review.as_str(),
                "too many reviews in flight: requests that find no slot within the queue wait are answered 503 until one finds a slot at once"
            );
        } else {
            tracing::debug!(
                review = review.as_str(),
                "too many reviews in flight; request answered 503"
            );
        }
    }
}

impl Reviews {
    /// Runs `call` once a review slot is free (waiting at most the queue
    /// wait), in a task of its own that holds the slot until the call
    /// ends; counts and logs the outcome there, so a call whose caller
    /// left is counted too. The call is given [`REVIEW_TIMEOUT`].
    pub(super) async fn call<T, F>(
        &self,
        health: &Arc<Health>,
        review: Review,
        call: F,
    ) -> Result<T, CallError>
    where
        T: Send + 'static,
        F: Future<Output = Result<T, ReviewError>> + Send + 'static,
    {
        let permit = match self.in_flight.clone().try_acquire_owned() {
            Ok(p) => {
                lock(&self.log).slot_free();
                p
            }
            Err(_) => {
                let waited =
                    tokio::time::timeout(REVIEW_QUEUE_WAIT, self.in_flight.clone().acquire_owned())
                        .await;
                match waited {
                    Ok(Ok(p)) => p,
                    _ => {
                        health.on_review(review, Outcome::Error);
                        lock(&self.log).busy(review);
                        return Err(CallError::Busy);
                    }
                }
            }
        };
        let (health, log) = (health.clone(), self.log.clone());
        let task = tokio::spawn(async move {
            let result = match tokio::time::timeout(REVIEW_TIMEOUT, call).await {
                Ok(r) => r,
                Err(_) => Err(ReviewError {
                    review: match review {
                        Review::Token => "TokenReview",
                        Review::Access => "SubjectAccessReview",
                    },
                    kind: Failure::Unanswered,
                    message: format!("no answer within {REVIEW_TIMEOUT:?}"),
                }),
            };
            drop(permit);
            match &result {
                Ok(_) => {
                    health.on_review(review, Outcome::Ok);
                    lock(&log).answered();
                }
                Err(err) => {
                    health.on_review(review, Outcome::Error);
                    lock(&log).failed(err);
                }
            }
            result.map_err(|e| CallError::Failed(e.kind))
        });
        match task.await {
            Ok(result) => result,
            Err(err) => {
                // The call panicked: a bug of ours, not an outage.
                tracing::error!(error = %err, "a review call failed unexpectedly");
                Err(CallError::Failed(Failure::Refused))
            }
        }
    }
}
