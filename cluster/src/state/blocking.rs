//! Blocking queries, as Nomad does them: a read with `min_index` and
//! `max_wait` returns at once if its data's index is above `min_index`;
//! otherwise it parks until what it watches changes, or the wait (plus a
//! little jitter) ends, and then answers with the current data and index.
//!
//! A query watches one [`WatchKey`] (each reads one table, or the rows of
//! one job or node). Applying an entry notifies only the keys it changed, so
//! a write to one node's allocations wakes only the queries on that node,
//! however many are parked.
//!
//! Every node keeps a query parked, so what a parked query holds is
//! multiplied by the fleet: it keeps its key, one registration and the
//! future it waits in, and nothing it could drop before parking.
//!
//! A query's read comes in two parts: the index its data last changed at,
//! cheap, and its answer, a copy of rows. A wake asks only the index; the
//! answer is built once, when the query returns. And a change at raft index
//! `i` wakes only the queries waiting to pass an index below `i`: a query
//! parked far above the current index costs a write nothing.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus::{HistogramVec, IntCounterVec, IntGaugeVec, Registry};
use rand::Rng;
use smallvec::SmallVec;
use stampede_proto::metric_defs::{histogram_vec, int_counter_vec, int_gauge_vec};
use stampede_proto::metric_names;
use stampede_proto::QueryOptions;
use stampede_proto::{lock, JobStage, QuerySource};
use tokio::sync::Notify;

use crate::model::JobStages;
use crate::state::contact::Contact;
use crate::state::parking::{ParkRefused, Parker, Parking, Permit};
use crate::state::{State, StateStore, WatchKey};

/// Longest wait a query may ask for; Nomad's limit too.
pub const MAX_WAIT: Duration = Duration::from_secs(600);
/// The wait when a query gives `min_index` but no `max_wait_ms`.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(300);

/// How long a query with these options may wait: its own `max_wait_ms`, capped.
pub fn wait_of(opts: &QueryOptions) -> Duration {
    match opts.max_wait_ms {
        0 => DEFAULT_WAIT,
        ms => Duration::from_millis(ms).min(MAX_WAIT),
    }
}

pub struct BlockingMetrics {
    pub started: IntCounterVec,
    pub inflight: IntGaugeVec,
    pub wakeups: IntCounterVec,
    /// From the apply of the entry a parked query answers with to its answer.
    pub delivery: HistogramVec,
    /// This server's `stampede_job_stage_seconds`, made here because the
    /// blocking queries are the one part every other holder reaches.
    pub stages: JobStages,
}

impl BlockingMetrics {
    pub fn new(registry: &Registry) -> Self {
        // Every source from the start, so a dashboard shows zeros, not gaps.
        let sources = QuerySource::ALL.map(QuerySource::label);
        Self {
            started: int_counter_vec(
                registry,
                metric_names::BLOCKING_QUERIES_STARTED_TOTAL,
                "Blocking queries started, by kind of caller.",
                "source",
                &sources,
            ),
            inflight: int_gauge_vec(
                registry,
                metric_names::BLOCKING_QUERIES_INFLIGHT,
                "Blocking queries parked or running now, by kind of caller.",
                "source",
                &sources,
            ),
            wakeups: int_counter_vec(
                registry,
                "stampede_blocking_query_wakeups_total",
                "Times a parked blocking query was woken by a change to what it watches.",
                "source",
                &sources,
            ),
            delivery: {
                let h = histogram_vec(
                    registry,
                    metric_names::BLOCKING_QUERY_DELIVERY_SECONDS,
                    "From the apply of the raft entry a parked blocking query answers with to its answer leaving this server, by kind of caller.",
                    "source",
                    (0.00005, 2.0, 20),
                );
                for s in &sources {
                    h.with_label_values(&[s]);
                }
                h
            },
            stages: JobStages::new(registry),
        }
    }
}

/// Parked queries, by what they watch and by the index they wait to pass.
///
/// A change at raft index `i` can move only a query waiting to pass an index
/// below `i` (what any query reads last changed at `i` or before), so only
/// those are woken: a query parked far above the current index (a caller
/// that means to hold a place, not to read) costs a write nothing.
#[derive(Default)]
pub struct Watchers {
    keys: Mutex<HashMap<WatchKey, Waiting>>,
}

/// One key's parked queries, grouped by the index they wait to pass, in
/// order of it. Most keys (a node's allocations) have one group: inline.
type Waiting = SmallVec<[(u64, Arc<Notify>); 1]>;

impl Watchers {
    fn register(&self, key: &WatchKey, min_index: u64) -> Arc<Notify> {
        let mut keys = lock(&self.keys);
        let waiting = keys.entry(key.clone()).or_default();
        match waiting.binary_search_by_key(&min_index, |(m, _)| *m) {
            Ok(at) => waiting[at].1.clone(),
            Err(at) => {
                let notify = Arc::new(Notify::new());
                waiting.insert(at, (min_index, notify.clone()));
                notify
            }
        }
    }

    fn release(&self, key: &WatchKey, min_index: u64, notify: &Arc<Notify>) {
        let mut keys = lock(&self.keys);
        // The map's reference and ours: nobody else waits in this group.
        if Arc::strong_count(notify) != 2 {
            return;
        }
        let Some(waiting) = keys.get_mut(key) else {
            return;
        };
        if let Ok(at) = waiting.binary_search_by_key(&min_index, |(m, _)| *m) {
            waiting.remove(at);
        }
        if waiting.is_empty() {
            keys.remove(key);
        }
    }

    /// Wakes every query watching any of `keys` that waits to pass an index
    /// below `index`, the batch's last; returns how many it woke.
    pub fn notify(&self, keys: &[WatchKey], index: u64) -> usize {
        let map = lock(&self.keys);
        if map.is_empty() {
            return 0;
        }
        let mut woken = 0;
        for k in keys {
            let Some(waiting) = map.get(k) else { continue };
            let below = waiting.partition_point(|(m, _)| *m < index);
            for (_, n) in &waiting[..below] {
                // The map's reference and one per parked query.
                woken += Arc::strong_count(n) - 1;
                n.notify_waiters();
            }
        }
        woken
    }

    /// Wakes every parked query, whatever it watches: this server lost
    /// touch with the cluster, and each asks whether it may go on.
    pub fn notify_all(&self) -> usize {
        let map = lock(&self.keys);
        let mut woken = 0;
        for waiting in map.values() {
            for (_, n) in waiting {
                woken += Arc::strong_count(n) - 1;
                n.notify_waiters();
            }
        }
        woken
    }

    /// Keys with at least one parked query (for tests and metrics).
    pub fn watched(&self) -> usize {
        lock(&self.keys).len()
    }
}

/// A parked query's registration on its key, released when it is dropped:
/// also when the query is, a call whose caller went away.
struct Watch<'a> {
    watchers: &'a Watchers,
    key: WatchKey,
    min_index: u64,
    notify: Arc<Notify>,
}

impl<'a> Watch<'a> {
    fn new(watchers: &'a Watchers, key: WatchKey, min_index: u64) -> Self {
        let notify = watchers.register(&key, min_index);
        Self {
            watchers,
            key,
            min_index,
            notify,
        }
    }
}

impl Drop for Watch<'_> {
    fn drop(&mut self) {
        self.watchers
            .release(&self.key, self.min_index, &self.notify);
    }
}

/// Runs blocking queries against a state store. Cheap to clone.
#[derive(Clone)]
pub struct Blocking {
    pub store: Arc<StateStore>,
    pub watchers: Arc<Watchers>,
    pub metrics: Arc<BlockingMetrics>,
    /// Callers' parked queries, counted against their bounds.
    pub parking: Arc<Parking>,
    /// Whether this server's state may be read as current: a caller's
    /// query does not park (or stay parked) on a server out of touch.
    pub contact: Contact,
}

/// Whether a query may park (`admit`, which may hold a place for it) and,
/// each time it wakes, stay parked (`stay`).
struct Gate<A, S> {
    admit: A,
    stay: S,
}

struct Inflight<'a>(&'a BlockingMetrics, &'static str);

impl Drop for Inflight<'_> {
    fn drop(&mut self) {
        self.0.inflight.with_label_values(&[self.1]).dec();
    }
}

/// How a query looks at the state each time it asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Look {
    /// On a copy: for a read long enough (a list of every node, a job's
    /// allocations) that holding the lock through it would hold up the
    /// entries waiting to apply, and raft's thread with them.
    Copy,
    /// Under the state's read lock, with no copy (`StateStore::read`): for
    /// a short read asked all the time (a node's allocations). A copy alive
    /// while an entry applies makes the apply copy what it touches.
    Locked,
}

impl Blocking {
    /// Notes how long after the apply of `index` a parked query of
    /// `source` answers with it (now: its answer is on its way out).
    fn delivered(&self, source: &'static str, index: u64) {
        if !self.metrics.stages.on() {
            return;
        }
        let Some(applied) = self.store.applied_at_us(index) else {
            return;
        };
        let seconds = stampede_proto::unix_us().saturating_sub(applied) as f64 / 1e6;
        self.metrics
            .delivery
            .with_label_values(&[source])
            .observe(seconds);
        // A node's and loadgen's queries end stages of a job's path.
        match QuerySource::parse(source) {
            QuerySource::ClientAllocs => self.metrics.stages.observe(JobStage::Deliver, seconds),
            QuerySource::Loadgen => self.metrics.stages.observe(JobStage::Observe, seconds),
            _ => {}
        }
    }

    /// Answers with `answer` of the current state; if its `index` is not
    /// above `opts.min_index`, waits for a change to `key` and asks again,
    /// until the index moves or the wait ends. Returns the answer and its
    /// index.
    pub async fn query<T>(
        &self,
        opts: Option<&QueryOptions>,
        key: WatchKey,
        index: impl Fn(&State) -> u64,
        answer: impl Fn(&State) -> T,
    ) -> (T, u64) {
        self.query_as(Look::Copy, opts, key, index, answer).await
    }

    /// The answer and its index, from one view of the state, looked at as
    /// `how` says.
    fn look<T>(
        &self,
        how: Look,
        index: &impl Fn(&State) -> u64,
        answer: &impl Fn(&State) -> T,
    ) -> (T, u64) {
        let run = |s: &State| (answer(s), index(s));
        match how {
            Look::Copy => run(&self.store.snapshot()),
            Look::Locked => self.store.read(run),
        }
    }

    /// [`Blocking::query`], looking at the state as `how` says: the
    /// server's own queries, which no bound limits.
    pub async fn query_as<T>(
        &self,
        how: Look,
        opts: Option<&QueryOptions>,
        key: WatchKey,
        index: impl Fn(&State) -> u64,
        answer: impl Fn(&State) -> T,
    ) -> (T, u64) {
        let admit = || Ok::<_, std::convert::Infallible>(None);
        let stay = || Ok::<_, std::convert::Infallible>(());
        match self
            .ask(how, opts, key, index, answer, Gate { admit, stay })
            .await
        {
            Ok(answer) => answer,
            Err(never) => match never {},
        }
    }

    /// A caller's query: as [`Blocking::query_as`], but it parks only if
    /// `parker` has room (`ResourceExhausted` otherwise, see [`Parking`]),
    /// and only while this server is in touch with the cluster: one that
    /// is not ends the wait with `OutOfTouch`, so the caller asks a server
    /// whose state moves. (Not an `async fn` around [`Blocking::ask`]: that
    /// would keep its arguments a second time in every parked node query.)
    pub fn query_for<'a, T: 'a>(
        &'a self,
        parker: &'a Parker,
        how: Look,
        opts: Option<&'a QueryOptions>,
        key: WatchKey,
        index: impl Fn(&State) -> u64 + 'a,
        answer: impl Fn(&State) -> T + 'a,
    ) -> impl Future<Output = Result<(T, u64), ParkRefused>> + 'a {
        let stay = || match self.contact.lost() {
            None => Ok(()),
            Some(why) => Err(ParkRefused::OutOfTouch(why)),
        };
        let admit = move || {
            stay()?;
            self.parking.admit(parker).map(Some)
        };
        self.ask(how, opts, key, index, answer, Gate { admit, stay })
    }

    async fn ask<T, E>(
        &self,
        how: Look,
        opts: Option<&QueryOptions>,
        key: WatchKey,
        index: impl Fn(&State) -> u64,
        answer: impl Fn(&State) -> T,
        gate: Gate<impl FnOnce() -> Result<Option<Permit>, E>, impl Fn() -> Result<(), E>>,
    ) -> Result<(T, u64), E> {
        let Gate { admit, stay } = gate;
        let Some(opts) = opts.filter(|o| o.min_index > 0) else {
            // A plain read.
            return Ok(self.look(how, &index, &answer));
        };
        let min_index = opts.min_index;
        // Every blocking query counts, also one answered at once: each is a
        // request the caller made in its watch loop.
        let source = QuerySource::parse(&opts.source).label();
        self.metrics.started.with_label_values(&[source]).inc();
        // The index alone, under the lock: no answer is built to be dropped.
        let moved = || self.store.read(&index) > min_index;
        if moved() {
            return Ok(self.look(how, &index, &answer));
        }
        let _permit = admit()?;
        self.metrics.inflight.with_label_values(&[source]).inc();
        let _inflight = Inflight(&self.metrics, source);

        let wait = wait_of(opts);
        // Up to 1/16 more, so queries parked together do not all return together.
        let jitter = rand::thread_rng().gen_range(0..=wait.as_millis() as u64 / 16);
        let deadline = tokio::time::Instant::now() + wait + Duration::from_millis(jitter);

        let watch = Watch::new(&self.watchers, key, min_index);
        loop {
            let notified = watch.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            // Asked after registering, so a change in between is not missed.
            if moved() {
                let (answer, index) = self.look(how, &index, &answer);
                self.delivered(source, index);
                return Ok((answer, index));
            }
            tokio::select! {
                _ = notified => {
                    self.metrics.wakeups.with_label_values(&[source]).inc();
                    stay()?;
                }
                _ = tokio::time::sleep_until(deadline) => {
                    return Ok(self.look(how, &index, &answer));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::contact::Touch;
    use crate::state::Changes;
    use stampede_proto::{log_entry::Msg, Allocation, LogEntry, PlanApplyEntry};

    fn blocking() -> Blocking {
        Blocking {
            store: Arc::default(),
            watchers: Arc::default(),
            metrics: Arc::new(BlockingMetrics::new(&Registry::new())),
            parking: Arc::default(),
            contact: Contact::always(),
        }
    }

    fn place(b: &Blocking, index: u64, node: &str) {
        let entry = LogEntry {
            msg: Some(Msg::PlanApply(PlanApplyEntry {
                allocs: vec![Allocation {
                    id: format!("a{index}"),
                    node_id: node.into(),
                    job_id: "j".into(),
                    ..Default::default()
                }],
                ..Default::default()
            })),
        };
        let mut changes = Changes::default();
        b.store.write(|s| s.apply(index, &entry, &mut changes));
        b.watchers.notify(&changes.keys, changes.index);
    }

    fn allocs_index(node: &str) -> impl Fn(&State) -> u64 + '_ {
        move |s| s.node_alloc_index(node)
    }

    fn allocs_count(node: &str) -> impl Fn(&State) -> usize + '_ {
        move |s| s.node_allocs(node).len()
    }

    fn opts(min_index: u64, max_wait_ms: u64) -> QueryOptions {
        QueryOptions {
            min_index,
            max_wait_ms,
            source: "client_allocs".into(),
        }
    }

    /// Node n1's allocation count, as a caller asks it.
    fn n1_allocs<'a>(
        b: &'a Blocking,
        parker: &'a Parker,
        opts: Option<&'a QueryOptions>,
    ) -> impl Future<Output = Result<(usize, u64), ParkRefused>> + 'a {
        b.query_for(
            parker,
            Look::Locked,
            opts,
            WatchKey::NodeAllocs("n1".into()),
            allocs_index("n1"),
            allocs_count("n1"),
        )
    }

    #[tokio::test]
    async fn a_callers_query_does_not_park_or_stay_parked_on_a_server_out_of_touch() {
        let (touch, contact) = Contact::channel();
        let b = Blocking {
            contact,
            ..blocking()
        };
        place(&b, 5, "n1");
        let parker = Parker::Node("n1".into());
        let parked_opts = opts(5, 60_000);
        let parked = n1_allocs(&b, &parker, Some(&parked_opts));
        tokio::pin!(parked);
        // Parked: nothing changes for it.
        assert!(futures::poll!(parked.as_mut()).is_pending());
        touch.send_replace(Touch::Lost("server 1 is cut off".into()));
        assert_eq!(b.watchers.notify_all(), 1);
        let refused = parked.await.expect_err("woken out of touch");
        assert_eq!(
            refused,
            ParkRefused::OutOfTouch("server 1 is cut off".into())
        );
        assert!(
            refused.to_string().contains("ask another server"),
            "{refused}"
        );
        // A new one is refused before it parks; a plain read still answers.
        let again = n1_allocs(&b, &parker, Some(&parked_opts)).await;
        assert!(matches!(again, Err(ParkRefused::OutOfTouch(_))));
        assert_eq!(b.parking.parked(), 0, "nothing holds a place");
        let plain = n1_allocs(&b, &parker, None).await;
        assert_eq!(plain, Ok((1, 5)));
        touch.send_replace(Touch::InTouch);
        let back = n1_allocs(&b, &parker, Some(&opts(4, 60_000))).await;
        assert_eq!(back, Ok((1, 5)), "in touch again, it answers");
    }

    #[tokio::test]
    async fn answers_at_once_when_the_data_is_newer() {
        let b = blocking();
        place(&b, 5, "n1");
        let (n, index) = b
            .query(
                Some(&opts(4, 60_000)),
                WatchKey::NodeAllocs("n1".into()),
                allocs_index("n1"),
                allocs_count("n1"),
            )
            .await;
        assert_eq!((n, index), (1, 5));
        assert_eq!(
            b.metrics
                .started
                .with_label_values(&["client_allocs"])
                .get(),
            1,
            "a query with a min_index counts even when answered at once"
        );
        assert_eq!(
            b.metrics
                .inflight
                .with_label_values(&["client_allocs"])
                .get(),
            0
        );
    }

    #[tokio::test(start_paused = true)]
    async fn wakes_on_its_node_only_and_times_out_otherwise() {
        wakes_on_its_node_only(Look::Copy).await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_query_under_the_lock_wakes_and_times_out_the_same() {
        wakes_on_its_node_only(Look::Locked).await;
    }

    async fn wakes_on_its_node_only(how: Look) {
        let b = Arc::new(blocking());
        place(&b, 1, "n1");
        place(&b, 2, "n2");
        let b2 = b.clone();
        let parked = tokio::spawn(async move {
            b2.query_as(
                how,
                Some(&opts(1, 60_000)),
                WatchKey::NodeAllocs("n1".into()),
                allocs_index("n1"),
                allocs_count("n1"),
            )
            .await
        });
        // Let the query park, then change other nodes many times.
        while b.watchers.watched() == 0 {
            tokio::task::yield_now().await;
        }
        for i in 3..103 {
            place(&b, i, "n2");
        }
        tokio::task::yield_now().await;
        assert_eq!(
            b.metrics
                .wakeups
                .with_label_values(&["client_allocs"])
                .get(),
            0
        );
        assert_eq!(
            b.metrics
                .inflight
                .with_label_values(&["client_allocs"])
                .get(),
            1
        );
        place(&b, 200, "n1");
        let (n, index) = parked.await.unwrap();
        assert_eq!((n, index), (2, 200));
        assert_eq!(
            b.metrics
                .wakeups
                .with_label_values(&["client_allocs"])
                .get(),
            1
        );
        assert_eq!(
            b.metrics
                .started
                .with_label_values(&["client_allocs"])
                .get(),
            1
        );
        assert_eq!(
            b.metrics
                .inflight
                .with_label_values(&["client_allocs"])
                .get(),
            0
        );
        assert_eq!(b.watchers.watched(), 0, "no waiter left behind");

        // Nothing changes: the wait ends and returns the same index.
        let (_, index) = b
            .query_as(
                how,
                Some(&opts(200, 1_000)),
                WatchKey::NodeAllocs("n1".into()),
                allocs_index("n1"),
                allocs_count("n1"),
            )
            .await;
        assert_eq!(index, 200);
    }

    /// The probe of issue 41: queries parked far above the current index,
    /// on a key every write touches. No write below their index wakes them
    /// or builds their answer (a copy of a table); the first above does,
    /// once each.
    #[tokio::test(start_paused = true)]
    async fn a_query_parked_above_the_index_sleeps_through_writes_below_it() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let b = Arc::new(blocking());
        place(&b, 1, "n1");
        let built = Arc::new(AtomicUsize::new(0));
        let parked: Vec<_> = (0..10)
            .map(|_| {
                let (b, built) = (b.clone(), built.clone());
                tokio::spawn(async move {
                    b.query(
                        Some(&opts(150, 60_000)),
                        WatchKey::NodeAllocs("n1".into()),
                        allocs_index("n1"),
                        |s| {
                            built.fetch_add(1, Ordering::SeqCst);
                            s.node_allocs("n1").len()
                        },
                    )
                    .await
                })
            })
            .collect();
        let inflight = || {
            b.metrics
                .inflight
                .with_label_values(&["client_allocs"])
                .get()
        };
        let wakeups = || {
            b.metrics
                .wakeups
                .with_label_values(&["client_allocs"])
                .get()
        };
        while inflight() < 10 {
            tokio::task::yield_now().await;
        }
        for i in 2..=150 {
            place(&b, i, "n1");
            tokio::task::yield_now().await;
        }
        assert_eq!(wakeups(), 0, "no write below their index woke them");
        assert_eq!(built.load(Ordering::SeqCst), 0, "no answer built");
        assert_eq!(inflight(), 10);
        place(&b, 151, "n1");
        for p in parked {
            assert_eq!(
                p.await.unwrap(),
                (151, 151),
                "every allocation, at the new index"
            );
        }
        assert_eq!(wakeups(), 10);
        assert_eq!(built.load(Ordering::SeqCst), 10, "one answer per query");
        assert_eq!(b.watchers.watched(), 0, "no waiter left behind");
    }

    #[test]
    fn a_change_wakes_the_groups_below_its_index_and_release_keeps_the_others() {
        let w = Watchers::default();
        let key = WatchKey::Jobs;
        let high = w.register(&key, 100);
        let low = w.register(&key, 5);
        let low_too = w.register(&key, 5);
        assert!(Arc::ptr_eq(&low, &low_too), "one group per index");
        assert_eq!(w.notify(std::slice::from_ref(&key), 5), 0, "not above 5");
        assert_eq!(w.notify(std::slice::from_ref(&key), 6), 2, "the two at 5");
        assert_eq!(w.notify(std::slice::from_ref(&key), 101), 3, "all");
        assert_eq!(w.notify(&[WatchKey::Nodes], 101), 0, "another key");
        w.release(&key, 5, &low_too);
        drop(low_too);
        w.release(&key, 5, &low);
        drop(low);
        assert_eq!(
            w.notify(std::slice::from_ref(&key), 101),
            1,
            "the one at 100"
        );
        w.release(&key, 100, &high);
        assert_eq!(w.watched(), 0);
    }

    #[test]
    fn no_max_wait_means_the_default_wait_and_long_waits_are_capped() {
        assert_eq!(wait_of(&opts(7, 0)), DEFAULT_WAIT);
        assert_eq!(
            DEFAULT_WAIT,
            Duration::from_secs(300),
            "stampede.proto says so"
        );
        assert_eq!(wait_of(&opts(7, 2_500)), Duration::from_millis(2_500));
        assert_eq!(wait_of(&opts(7, 600_001)), MAX_WAIT);
        assert_eq!(wait_of(&opts(7, u64::MAX)), MAX_WAIT);
        assert_eq!(MAX_WAIT, Duration::from_secs(600), "stampede.proto says so");
    }
}
