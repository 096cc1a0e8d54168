//! Failures that repeat (an `accept()` that keeps failing, an API server
//! that does not answer reviews) are logged once per episode: the first
//! failure, then the count when a success ends it. Counters still count
//! every failure; the log says only when something starts and stops.

/// Consecutive failures since the last success.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Episode {
    errors: u64,
}

impl Episode {
    /// A failure: true when it starts an episode (the one worth a warning).
    pub fn on_error(&mut self) -> bool {
        self.errors += 1;
        self.errors == 1
    }

    /// A success: the number of failures of the episode it ends, if any.
    pub fn on_success(&mut self) -> Option<u64> {
        let errors = std::mem::take(&mut self.errors);
        (errors > 0).then_some(errors)
    }
}
