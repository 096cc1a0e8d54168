//! Supervision of the exporter's long-running tasks.
//!
//! Watchers, the verifier, the overdue checker and the HTTP server are meant
//! to run forever. If one panics or returns, the exporter would keep
//! answering `/readyz` and `watch_up` from data nobody updates any more; so
//! the first task to stop ends the process with an error, and Kubernetes
//! restarts it.

use tokio::task::{JoinError, JoinSet};

/// Why a supervised task stopped.
#[derive(Debug, thiserror::Error)]
pub enum Stopped {
    /// The task panicked.
    #[error("task {task:?} panicked: {message}")]
    Panicked {
        /// The task's name.
        task: String,
        /// The panic payload, when it is a string.
        message: String,
    },
    /// The task returned (or was cancelled), which it never should.
    #[error("task {task:?} stopped unexpectedly")]
    Returned {
        /// The task's name.
        task: String,
    },
}

/// A set of named tasks that must all keep running.
#[derive(Debug, Default)]
pub struct Supervisor {
    tasks: JoinSet<()>,
    names: std::collections::HashMap<tokio::task::Id, String>,
}

impl Supervisor {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Spawns `fut` as the task `name`.
    pub fn spawn<F>(&mut self, name: impl Into<String>, fut: F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        let handle = self.tasks.spawn(fut);
        self.names.insert(handle.id(), name.into());
    }

    /// Waits until the first task stops and says which and why. With no
    /// task at all it waits forever.
    pub async fn first_stop(&mut self) -> Stopped {
        loop {
            match self.tasks.join_next_with_id().await {
                Some(Ok((id, ()))) => {
                    return Stopped::Returned {
                        task: self.name(id),
                    }
                }
                Some(Err(e)) => return self.stopped(e),
                None => std::future::pending::<()>().await,
            }
        }
    }

    fn name(&self, id: tokio::task::Id) -> String {
        self.names
            .get(&id)
            .cloned()
            .unwrap_or_else(|| "unnamed".to_string())
    }

    fn stopped(&self, e: JoinError) -> Stopped {
        let task = self.name(e.id());
        if !e.is_panic() {
            return Stopped::Returned { task };
        }
        let payload = e.into_panic();
        let message = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "(no message)".to_string());
        Stopped::Panicked { task, message }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panicking_task_is_named_with_its_message() {
        let mut s = Supervisor::new();
        s.spawn("forever", std::future::pending());
        s.spawn("verifier", async { panic!("boom") });
        match s.first_stop().await {
            Stopped::Panicked { task, message } => {
                assert_eq!(task, "verifier");
                assert_eq!(message, "boom");
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_returning_task_is_a_stop_too() {
        let mut s = Supervisor::new();
        s.spawn("forever", std::future::pending());
        s.spawn("server", async {});
        assert!(matches!(s.first_stop().await, Stopped::Returned { task } if task == "server"));
    }
}
