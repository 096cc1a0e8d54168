//! A small cache of review answers, as kube-rbac-proxy and
//! controller-runtime's metrics filter keep them: bounded in size, each
//! answer fresh for a time-to-live, then kept a while longer only as a
//! fallback for when the API server cannot be asked.
//!
//! Concurrent requests for the same key share one review call (the first
//! asks, the others wait for its answer), so a burst of scrapes with a new
//! token costs the API server one TokenReview, not one per scrape.
//!
//! Allowed answers, identities not yet allowed anything, and refusals are
//! kept apart, each up to the capacity ([`Share`]): anyone can make the API
//! server refuse a random token, any tenant can mint tokens the API server
//! accepts (`kubectl create token` in its own namespace), and a full cache
//! drops answers of the same share only. An identity joins the allowed
//! share only once RBAC has allowed it a path ([`Cache::promote`]), so
//! neither garbage tokens nor a tenant's own accepted-but-denied tokens
//! push an allowed identity out (with it the fast path and the fallback of
//! an API outage).

use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::OnceCell;
use tokio::time::Instant;

/// How long an answer is used without asking again, how long after that
/// it may stand in for an API server that cannot be asked, and which share
/// of the cache keeps it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ttl {
    /// Used as it is until then.
    pub fresh: Duration,
    /// Used only when a new review fails, until fresh + this.
    pub fallback: Duration,
    /// Where it is kept.
    pub share: Share,
}

/// The part of the cache an answer is kept in; each holds up to the
/// capacity, and a full one drops only its own answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Share {
    /// An identity RBAC has allowed a path, or a path the user may get.
    Allowed,
    /// An identity the API server accepts that RBAC has not allowed
    /// anything yet: cheap for any tenant to cause.
    Unproven,
    /// A rejected token or a denied path: cheap for anyone to cause.
    Refused,
}

impl Share {
    const ALL: usize = 3;

    fn index(self) -> usize {
        match self {
            Share::Allowed => 0,
            Share::Unproven => 1,
            Share::Refused => 2,
        }
    }
}

impl Ttl {
    /// An allowed answer: `fresh` and `fallback` in whole seconds.
    pub const fn secs(fresh: u64, fallback: u64) -> Ttl {
        Ttl {
            fresh: Duration::from_secs(fresh),
            fallback: Duration::from_secs(fallback),
            share: Share::Allowed,
        }
    }

    /// An identity not yet allowed anything: like [`Ttl::secs`], kept in
    /// [`Share::Unproven`] until [`Cache::promote`] moves it.
    pub const fn unproven(fresh: u64, fallback: u64) -> Ttl {
        Ttl {
            share: Share::Unproven,
            ..Ttl::secs(fresh, fallback)
        }
    }

    /// A refusal: fresh for `fresh` seconds, never standing in.
    pub const fn refusal(fresh: u64) -> Ttl {
        Ttl {
            fresh: Duration::from_secs(fresh),
            fallback: Duration::ZERO,
            share: Share::Refused,
        }
    }

    fn until(&self, at: Instant) -> Instant {
        at + self.fresh + self.fallback
    }
}

#[derive(Debug)]
struct Entry<V> {
    value: V,
    at: Instant,
    ttl: Ttl,
}

/// What a lookup found, and where it came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Found<V> {
    /// A fresh cached answer: no call made.
    Cached(V),
    /// A new answer from the review.
    Reviewed(V),
    /// The review failed; an older answer within its fallback time is used.
    Fallback(V),
}

impl<V> Found<V> {
    /// The answer.
    pub fn value(&self) -> &V {
        match self {
            Found::Cached(v) | Found::Reviewed(v) | Found::Fallback(v) => v,
        }
    }
}

/// The review in flight for one key, and how many callers wait on it.
type Flights<K, V> = Mutex<HashMap<K, (Arc<OnceCell<V>>, usize)>>;

/// A bounded cache of answers by key, with one review in flight per key.
#[derive(Debug)]
pub struct Cache<K, V> {
    /// Answers per share.
    capacity: usize,
    /// Entries by [`Share::index`]; a key is in one share at most.
    entries: Mutex<[HashMap<K, Entry<V>>; Share::ALL]>,
    in_flight: Flights<K, V>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// One caller's share of a review in flight. Dropping it (the caller
/// finished, or its future was dropped: the client hung up, the response
/// deadline passed) removes the key once no caller waits on it, so a
/// cancelled request leaves nothing behind.
struct Flight<'a, K: Eq + Hash, V> {
    flights: &'a Flights<K, V>,
    key: &'a K,
    cell: Arc<OnceCell<V>>,
}

impl<'a, K: Clone + Eq + Hash, V> Flight<'a, K, V> {
    fn join(flights: &'a Flights<K, V>, key: &'a K) -> Self {
        let mut map = lock(flights);
        let (cell, waiting) = map
            .entry(key.clone())
            .or_insert_with(|| (Arc::new(OnceCell::new()), 0));
        *waiting += 1;
        Flight {
            flights,
            key,
            cell: cell.clone(),
        }
    }
}

impl<K: Eq + Hash, V> Drop for Flight<'_, K, V> {
    fn drop(&mut self) {
        let mut map = lock(self.flights);
        if let Some((cell, waiting)) = map.get_mut(self.key) {
            if Arc::ptr_eq(cell, &self.cell) {
                *waiting -= 1;
                if *waiting == 0 {
                    map.remove(self.key);
                }
            }
        }
    }
}

impl<K: Clone + Eq + Hash, V: Clone> Cache<K, V> {
    /// A cache of at most `capacity` answers in each share.
    pub fn new(capacity: usize) -> Self {
        Cache {
            capacity: capacity.max(1),
            entries: Mutex::new(std::array::from_fn(|_| HashMap::new())),
            in_flight: Mutex::new(HashMap::new()),
        }
    }

    /// Answers held now, both shares.
    pub fn len(&self) -> usize {
        lock(&self.entries).iter().map(HashMap::len).sum()
    }

    /// True when nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keys with a review in flight (each kept by the callers waiting on it).
    pub fn in_flight(&self) -> usize {
        lock(&self.in_flight).len()
    }

    /// The answer for `key`: cached while fresh, else from `review` (one
    /// call shared by every concurrent caller), kept for `ttl_of` its
    /// answer. A failed review falls back to an older answer within its
    /// fallback time when `may_fall_back` says the failure allows it;
    /// otherwise the error is returned.
    pub async fn get<E, F, Fut>(
        &self,
        key: &K,
        ttl_of: impl Fn(&V) -> Ttl,
        may_fall_back: impl FnOnce(&E) -> bool,
        review: F,
    ) -> Result<Found<V>, E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<V, E>>,
    {
        let now = Instant::now();
        let fallback = {
            let entries = lock(&self.entries);
            match entries.iter().find_map(|share| share.get(key)) {
                Some(e) if now < e.at + e.ttl.fresh => return Ok(Found::Cached(e.value.clone())),
                Some(e) if now < e.ttl.until(e.at) => Some(e.value.clone()),
                _ => None,
            }
        };
        let flight = Flight::join(&self.in_flight, key);
        // The first caller runs its review; the others wait for it and
        // share a success. A failure is not stored: each waiter then runs
        // its own review (and the first one sees its own error). A caller
        // dropped while it runs the review hands it to the next waiter.
        let mut reviewed = false;
        let result = flight
            .cell
            .get_or_try_init(|| {
                reviewed = true;
                review()
            })
            .await
            .cloned();
        if let (Ok(v), true) = (&result, reviewed) {
            // Stored before the flight ends, so a caller arriving in
            // between finds it.
            self.insert(key, v, ttl_of(v));
        }
        drop(flight);
        match result {
            Ok(v) if reviewed => Ok(Found::Reviewed(v)),
            Ok(v) => Ok(Found::Cached(v)),
            Err(e) => match fallback {
                Some(v) if may_fall_back(&e) => Ok(Found::Fallback(v)),
                _ => Err(e),
            },
        }
    }

    /// Keeps `value` in its share; a full share first drops its expired
    /// answers, then its oldest. The other shares are never touched but for
    /// the key's older answer (a token once rejected, now accepted).
    fn insert(&self, key: &K, value: &V, ttl: Ttl) {
        let now = Instant::now();
        let mut shares = lock(&self.entries);
        for share in shares.iter_mut() {
            share.remove(key);
        }
        let entries = &mut shares[ttl.share.index()];
        self.make_room(entries, now);
        entries.insert(
            key.clone(),
            Entry {
                value: value.clone(),
                at: now,
                ttl,
            },
        );
    }

    /// Moves the answer for `key` from [`Share::Unproven`] to
    /// [`Share::Allowed`]: RBAC has allowed the identity something, so it
    /// may now displace another allowed one. Nothing else changes (its age
    /// and lifetimes stay); a key in another share, or absent, is left.
    pub fn promote(&self, key: &K) {
        let now = Instant::now();
        let mut shares = lock(&self.entries);
        let [allowed, unproven, _] = &mut *shares;
        if let Some(mut entry) = unproven.remove(key) {
            self.make_room(allowed, now);
            entry.ttl.share = Share::Allowed;
            allowed.insert(key.clone(), entry);
        }
    }

    /// Makes room in a full share for one more answer: its expired answers
    /// go, then its oldest.
    fn make_room(&self, entries: &mut HashMap<K, Entry<V>>, now: Instant) {
        if entries.len() < self.capacity {
            return;
        }
        entries.retain(|_, e| now < e.ttl.until(e.at));
        if entries.len() >= self.capacity {
            let oldest = entries
                .iter()
                .min_by_key(|(_, e)| e.at)
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                entries.remove(&k);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    const TTL: Ttl = Ttl::secs(60, 600);

    async fn ask(
        cache: &Cache<u32, bool>,
        key: u32,
        answer: Result<bool, &'static str>,
    ) -> Result<Found<bool>, &'static str> {
        cache
            .get(&key, |_| TTL, |_| true, || async move { answer })
            .await
    }

    #[tokio::test(start_paused = true)]
    async fn fresh_answers_are_reused_then_asked_again_and_kept_as_a_fallback() {
        let cache = Cache::new(8);
        assert_eq!(ask(&cache, 1, Ok(true)).await, Ok(Found::Reviewed(true)));
        assert_eq!(ask(&cache, 1, Ok(false)).await, Ok(Found::Cached(true)));
        tokio::time::advance(Duration::from_secs(61)).await;
        // Past fresh: asked again; the review fails: the old answer stands in.
        assert_eq!(ask(&cache, 1, Err("down")).await, Ok(Found::Fallback(true)));
        // A new answer replaces it.
        assert_eq!(ask(&cache, 1, Ok(false)).await, Ok(Found::Reviewed(false)));
        tokio::time::advance(Duration::from_secs(61 + 600)).await;
        // Past the fallback time too: the error is the answer.
        assert_eq!(ask(&cache, 1, Err("down")).await, Err("down"));
        // A key never answered has no fallback.
        assert_eq!(ask(&cache, 2, Err("down")).await, Err("down"));
    }

    #[tokio::test(start_paused = true)]
    async fn an_older_answer_stands_in_only_when_the_failure_allows_it() {
        let cache = Cache::new(8);
        assert_eq!(ask(&cache, 1, Ok(true)).await, Ok(Found::Reviewed(true)));
        tokio::time::advance(Duration::from_secs(61)).await;
        let refused = cache
            .get(
                &1,
                |_| TTL,
                |e| *e != "refused",
                || async { Err("refused") },
            )
            .await;
        assert_eq!(refused, Err("refused"));
        let down = cache
            .get(&1, |_| TTL, |e| *e != "refused", || async { Err("down") })
            .await;
        assert_eq!(down, Ok(Found::Fallback(true)));
    }

    #[tokio::test(start_paused = true)]
    async fn the_cache_never_holds_more_than_its_capacity() {
        let cache = Cache::new(4);
        for key in 0..100 {
            assert!(ask(&cache, key, Ok(true)).await.is_ok());
            assert!(cache.len() <= 4, "{} entries", cache.len());
        }
        // The newest stay.
        assert_eq!(ask(&cache, 99, Ok(false)).await, Ok(Found::Cached(true)));
    }

    #[tokio::test(start_paused = true)]
    async fn refusals_fill_their_own_share_and_never_push_out_an_allowed_answer() {
        let cache = Cache::new(4);
        let share = |ok: &bool| if *ok { TTL } else { Ttl::refusal(10) };
        let ask = |key: u32, ok: bool| {
            let cache = &cache;
            async move {
                let answer = cache.get(&key, share, |_: &()| true, || async move { Ok(ok) });
                answer.await
            }
        };
        assert_eq!(ask(0, true).await, Ok(Found::Reviewed(true)));
        for key in 1..100 {
            assert_eq!(ask(key, false).await, Ok(Found::Reviewed(false)));
            assert!(cache.len() <= 4 + 4, "{} entries", cache.len());
        }
        assert_eq!(ask(0, false).await, Ok(Found::Cached(true)));
        assert_eq!(cache.len(), 1 + 4, "one allowed answer, four refusals");
        // A key that changes share leaves the other one.
        assert_eq!(ask(99, false).await, Ok(Found::Cached(false)));
        tokio::time::advance(Duration::from_secs(11)).await;
        assert_eq!(ask(99, true).await, Ok(Found::Reviewed(true)));
        assert_eq!(cache.len(), 2 + 3, "99 is in one share only");
        assert_eq!(ask(0, false).await, Ok(Found::Cached(true)));
    }

    #[tokio::test(start_paused = true)]
    async fn only_a_promoted_answer_enters_the_allowed_share() {
        let cache = Cache::new(4);
        let unproven = |_: &bool| Ttl::unproven(60, 600);
        let ask = |key: u32| {
            let cache = &cache;
            async move {
                let answer = cache.get(&key, unproven, |_: &()| true, || async { Ok(true) });
                answer.await
            }
        };
        assert_eq!(ask(0).await, Ok(Found::Reviewed(true)));
        cache.promote(&0);
        for key in 1..100 {
            // Each younger than the one before: the oldest goes first.
            tokio::time::advance(Duration::from_millis(1)).await;
            assert_eq!(ask(key).await, Ok(Found::Reviewed(true)));
            assert!(cache.len() <= 1 + 4, "{} entries", cache.len());
        }
        assert_eq!(ask(0).await, Ok(Found::Cached(true)), "promoted, kept");
        // Unproven answers displace each other only: the first of the
        // flood is gone.
        assert_eq!(ask(1).await, Ok(Found::Reviewed(true)));
        // A promoted key asked again starts unproven; promoting an absent
        // key does nothing.
        tokio::time::advance(Duration::from_secs(61)).await;
        assert_eq!(ask(0).await, Ok(Found::Reviewed(true)));
        assert_eq!(cache.len(), 4, "0 left the allowed share");
        cache.promote(&12345);
        assert_eq!(cache.len(), 4);
    }

    /// A lookup whose review never ends, told when the review starts.
    fn stuck(
        cache: &Arc<Cache<u32, bool>>,
        key: u32,
    ) -> (
        tokio::task::JoinHandle<()>,
        tokio::sync::oneshot::Receiver<()>,
    ) {
        let (started, rx) = tokio::sync::oneshot::channel();
        let cache = cache.clone();
        let task = tokio::spawn(async move {
            let _ = cache
                .get(
                    &key,
                    |_| TTL,
                    |_| true,
                    || async move {
                        let _ = started.send(());
                        std::future::pending::<Result<bool, ()>>().await
                    },
                )
                .await;
        });
        (task, rx)
    }

    #[tokio::test(start_paused = true)]
    async fn a_cancelled_lookup_leaves_nothing_in_flight() {
        let cache = Arc::new(Cache::<u32, bool>::new(8));
        // The caller that runs the review, and one waiting on it.
        let (first, started) = stuck(&cache, 1);
        assert!(started.await.is_ok(), "the review started");
        let (second, _) = stuck(&cache, 1);
        tokio::task::yield_now().await;
        assert_eq!(cache.in_flight(), 1);
        first.abort();
        assert!(first.await.is_err_and(|e| e.is_cancelled()));
        // The waiter takes the review over: still one key in flight.
        assert_eq!(cache.in_flight(), 1, "kept while a caller waits");
        second.abort();
        assert!(second.await.is_err_and(|e| e.is_cancelled()));
        assert_eq!(cache.in_flight(), 0, "a dropped lookup leaves no entry");
        // A new lookup of the key is not stuck behind the abandoned one.
        assert_eq!(ask(&cache, 1, Ok(true)).await, Ok(Found::Reviewed(true)));
        assert_eq!(cache.in_flight(), 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_callers_share_one_review() {
        let cache = Arc::new(Cache::<u32, bool>::new(8));
        let calls = Arc::new(AtomicUsize::new(0));
        let gate = Arc::new(tokio::sync::Notify::new());
        let mut tasks = Vec::new();
        for _ in 0..16 {
            let (cache, calls, gate) = (cache.clone(), calls.clone(), gate.clone());
            tasks.push(tokio::spawn(async move {
                cache
                    .get(
                        &7,
                        |_| TTL,
                        |_| true,
                        || async move {
                            calls.fetch_add(1, Ordering::SeqCst);
                            // Held until every caller has queued behind it.
                            gate.notified().await;
                            Ok::<bool, ()>(true)
                        },
                    )
                    .await
            }));
        }
        // Whenever the others arrive, they either wait on the one review in
        // flight or find its stored answer: no second call either way.
        gate.notify_one();
        for t in tasks {
            assert!(matches!(t.await, Ok(Ok(f)) if *f.value()));
        }
        assert_eq!(calls.load(Ordering::SeqCst), 1, "one review for 16 callers");
    }
}
