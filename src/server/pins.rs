//! How many superseded snapshots slow readers may keep alive.
//!
//! A `/metrics` answer is the snapshot's own bytes, shared, never copied:
//! while a response is in flight it keeps every chunk it has not yet sent
//! alive, also once a newer snapshot replaced them in the cache. A reader
//! that asks and then reads slowly therefore keeps a superseded snapshot
//! (every bucket that was rendered again since) until its answer is
//! written or its 30 s deadline; one slow reader per render kept one
//! snapshot each, up to one per connection.
//!
//! So every answer in flight is registered with the generation of its
//! body (how many renders the cache had made when it was taken), and at
//! most [`Pins::SUPERSEDED`] generations older than the newest may be
//! held: a new answer that would make one more closes the connections of
//! the oldest generation. A fast reader is done long before a few more
//! renders come; the answers closed are the slowest ones, on bytes no
//! scraper should still want.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::slots::Conn;

/// Per generation, each answer in flight (its id) and its connection.
type ByGeneration = BTreeMap<u64, Vec<(u64, Arc<Conn>)>>;

/// The answers in flight, by the generation of their bodies.
#[derive(Debug, Default)]
pub(super) struct Pins {
    held: Mutex<ByGeneration>,
    next_id: AtomicU64,
}

/// One answer's hold on its body's generation; dropped with the body.
#[derive(Debug)]
pub(super) struct Pin {
    pins: Arc<Pins>,
    generation: u64,
    id: u64,
}

impl Pins {
    /// Generations older than the newest held that answers in flight may
    /// keep. Memory for bodies is then at most this many snapshots more
    /// than the current one, whatever the number of readers (the bound in
    /// bytes at 100k objects, and that it stays under the chart's limit,
    /// are in docs/contract.md, "Slow clients"); a
    /// reader is closed only when answers of three newer generations
    /// began during its own. A scrape lasts well under the second between
    /// two renders with `--export-lock-age`, so Prometheus replicas and a
    /// person with curl fit; 128 slow readers no longer keep 128.
    pub(super) const SUPERSEDED: usize = 2;

    fn lock(&self) -> std::sync::MutexGuard<'_, ByGeneration> {
        match self.held.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// Registers an answer of `generation` on `conn`; closes the
    /// connections of the oldest generations past the bound.
    pub(super) fn hold(self: &Arc<Self>, generation: u64, conn: &Arc<Conn>) -> Pin {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut held = self.lock();
        held.entry(generation).or_default().push((id, conn.clone()));
        while held.len() > Self::SUPERSEDED + 1 {
            let Some((_, oldest)) = held.pop_first() else {
                break;
            };
            for (_, c) in oldest {
                c.cut();
            }
        }
        Pin {
            pins: self.clone(),
            generation,
            id,
        }
    }

    /// Generations held now.
    #[cfg(test)]
    fn generations(&self) -> usize {
        self.lock().len()
    }
}

impl Drop for Pin {
    fn drop(&mut self) {
        let mut held = self.pins.lock();
        if let Some(answers) = held.get_mut(&self.generation) {
            answers.retain(|(id, _)| *id != self.id);
            if answers.is_empty() {
                held.remove(&self.generation);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::slots::Slots;

    #[tokio::test]
    async fn past_the_bound_the_oldest_generation_is_cut_and_answers_done_leave() {
        let slots = Slots::new();
        let pins = Arc::new(Pins::default());
        let conns: Vec<_> = (0..Pins::SUPERSEDED + 3)
            .map(|_| slots.register())
            .collect();
        // Two answers of generation 1, then one each of 2, 3, ...
        let mut held = vec![pins.hold(1, &conns[0].conn), pins.hold(1, &conns[1].conn)];
        for (g, c) in (2..).zip(&conns[2..conns.len() - 1]) {
            held.push(pins.hold(g, &c.conn));
        }
        assert_eq!(pins.generations(), Pins::SUPERSEDED + 1);
        assert!(conns.iter().all(|c| !c.conn.is_cut()), "nobody cut yet");
        // The next generation: both answers of generation 1 go.
        let last = conns.len() - 1;
        held.push(pins.hold(Pins::SUPERSEDED as u64 + 2, &conns[last].conn));
        let cut: Vec<bool> = conns.iter().map(|c| c.conn.is_cut()).collect();
        let mut expected = vec![false; conns.len()];
        expected[0] = true;
        expected[1] = true;
        assert_eq!(cut, expected);
        assert_eq!(pins.generations(), Pins::SUPERSEDED + 1);
        // Answers written whole leave; a generation no answer holds goes.
        drop(held);
        assert_eq!(pins.generations(), 0);
    }
}
