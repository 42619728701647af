//! Runs the load points of a sweep on a prepared benchmark: [`run_sweep`] is the one loop that
//! `servetune bench`, `servetune demo` and a campaign share.
//!
//! Closed loops dispatch a request whenever one of `concurrency` slots is free, so tasks and
//! memory follow the requests in flight, not the concurrency number. Open loops are paced by a
//! dedicated OS thread that sleeps to each precomputed absolute send time (no relative sleeps, no
//! 1 ms timer-wheel rounding) and then spawns the request on the runtime; a `--max-concurrency`
//! slot is awaited inside the request, so the wait shows as schedule lag and in the corrected
//! latencies. Each finished request goes to the [`SweepObserver`] at once (the CLI streams it to
//! disk), so a stop loses nothing that was measured.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::{watch, Notify, Semaphore};

use crate::api::{build_body, Api, RequestBody};
use crate::client::{since, Exec, HttpClient};
use crate::definitions::Definitions;
use crate::record::{ErrorKind, RequestRecord};
use crate::report::{self, RunContext, RunReport};
use crate::runner::{assemble, unix_now, Outcome, Prepared, Progress};
use crate::schedule;
use crate::scrape::{self, ServerMetrics};
use crate::selfcheck::SelfCheck;
use crate::spec::{Load, Stop};
use crate::tokenizer::Tokenizer;
use crate::workload::Workload;

/// The multi-thread runtime a benchmark runs on: tokio's default of one worker thread per core
/// (`TOKIO_WORKER_THREADS` sets another number). One worker costs less CPU per token where each
/// token is its own read (no worker wakes another to steal a share of a burst: at c=1024 and
/// ITL 10 ms on 2 cores, futex calls fell from 0.07 to 0 and context switches from 0.14 to 0.06 per
/// token), but it read 35% fewer tokens a second where one server thread streams at full speed,
/// and woke the self-check's probe later; docs/bench.md, "Client overhead", has the figures.
pub fn client_runtime() -> std::io::Result<tokio::runtime::Runtime> {
    client_runtime_builder().build()
}

/// [`client_runtime`]'s builder, for a caller that sets its own worker count (the campaign's
/// sweeps).
pub fn client_runtime_builder() -> tokio::runtime::Builder {
    let mut b = tokio::runtime::Builder::new_multi_thread();
    // A request of an open loop is spawned from the pacer's thread into the runtime's shared
    // queue, which a busy worker checks only every so often (tokio aims at about every 200 us);
    // until it does, the request waits, and the wait is schedule lag. Checking every 4 tasks
    // costs an atomic load when the queue is empty.
    b.global_queue_interval(4);
    b.enable_all();
    b
}

/// How far a stop has gone. The CLI raises it on signals: the first stops sending and drains,
/// the second cuts the drain short.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum Stopping {
    /// Sending as planned.
    #[default]
    Running,
    /// No new requests; in-flight ones get `--drain-timeout` to finish.
    Draining,
    /// In-flight requests are cancelled now.
    Abort,
}

/// Told about each finished request and each finished point, as they happen.
pub trait SweepObserver: Send + Sync {
    /// A request finished (any outcome); called from its task, in completion order.
    fn record(&self, run_label: &str, rec: &RequestRecord);
    /// A load point finished.
    fn point_done(&self, _report: &RunReport) {}
}

/// What drives and watches a sweep.
#[derive(Clone)]
pub struct Control {
    /// Raised by signals.
    pub stopping: watch::Receiver<Stopping>,
    /// Live counters for a progress display.
    pub progress: Arc<Progress>,
    /// Gets every record as it finishes.
    pub observer: Option<Arc<dyn SweepObserver>>,
}

impl std::fmt::Debug for Control {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Control").field("stopping", &*self.stopping.borrow()).field("observer", &self.observer.is_some()).finish()
    }
}

/// One point of a sweep: the load and when it stops.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SweepPoint {
    /// The load.
    pub load: Load,
    /// Its stop rule.
    pub stop: Stop,
}

/// One load point's report and its records.
#[derive(Debug)]
pub struct PointOutcome {
    /// The point's report.
    pub report: RunReport,
    /// Its records, sorted by index.
    pub records: Vec<RequestRecord>,
    /// A stop cut it short.
    pub interrupted: bool,
}

/// Runs `points` in order on `p` and assembles the report; stops after an interrupted point.
pub async fn run_sweep(p: &Prepared, points: &[SweepPoint], ctl: &Control, defs: Option<Definitions>) -> Outcome {
    let started_at = unix_now();
    let mut done = Vec::new();
    let mut partial = false;
    let n = points.len() as u64;
    for (i, point) in points.iter().enumerate() {
        if *ctl.stopping.borrow() > Stopping::Running {
            partial = true;
            break;
        }
        let out = run_point(p, point, ctl, (i as u64 + 1, n)).await;
        if let Some(o) = &ctl.observer {
            o.point_done(&out.report);
        }
        let stop = out.interrupted;
        done.push(out);
        if stop {
            partial = true;
            break;
        }
    }
    assemble(p, started_at, done, partial, defs)
}

/// Runs every load point of the configuration (`cfg.loads`, each with `cfg.stop`).
pub async fn run(p: &Prepared, ctl: &Control, defs: Option<Definitions>) -> Outcome {
    let points: Vec<SweepPoint> = p.cfg.loads.iter().map(|&load| SweepPoint { load, stop: p.cfg.stop }).collect();
    run_sweep(p, &points, ctl, defs).await
}

/// Counts spawned requests and wakes a waiter when none is left.
#[derive(Default)]
struct Tracker {
    n: AtomicU64,
    idle: Notify,
    /// Request tasks that ended without finishing (a panic: a bug): their records are lost, and
    /// the report says so.
    panicked: AtomicU64,
}

/// One tracked request task; dropped without [`TrackGuard::finish`], it counts as lost.
struct TrackGuard {
    tracker: Arc<Tracker>,
    finished: bool,
}

impl Tracker {
    fn enter(self: &Arc<Self>) -> TrackGuard {
        self.n.fetch_add(1, Ordering::AcqRel);
        TrackGuard { tracker: Arc::clone(self), finished: false }
    }

    async fn wait_idle(&self) {
        loop {
            let notified = self.idle.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.n.load(Ordering::Acquire) == 0 {
                return;
            }
            notified.await;
        }
    }
}

impl TrackGuard {
    /// The task's request finished and left its record.
    fn finish(mut self) {
        self.finished = true;
    }
}

impl Drop for TrackGuard {
    fn drop(&mut self) {
        if !self.finished {
            self.tracker.panicked.fetch_add(1, Ordering::Relaxed);
        }
        if self.tracker.n.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.tracker.idle.notify_waiters();
        }
    }
}

/// How a request's wait ended.
enum Finish {
    /// The response ended (well or not).
    Done,
    /// `--timeout` passed.
    TimedOut,
    /// The drain deadline passed or a second signal came.
    Aborted,
}

struct Shared {
    client: HttpClient,
    api: Api,
    stream: bool,
    model: Option<String>,
    ignore_eos: bool,
    eos: Option<u32>,
    timeout: Duration,
    warmup: u64,
    t0: Instant,
    label: String,
    workload: Arc<Workload>,
    tokenizer: Option<Arc<Tokenizer>>,
    records: Mutex<Vec<RequestRecord>>,
    progress: Arc<Progress>,
    observer: Option<Arc<dyn SweepObserver>>,
    /// No more sends.
    stop: watch::Sender<bool>,
    /// In-flight requests give up.
    abort: watch::Receiver<bool>,
    tracker: Arc<Tracker>,
}

impl Shared {
    fn stopped(&self) -> bool {
        *self.stop.borrow()
    }

    async fn one(&self, index: u64, intended_ns: u64, slot: Option<&Semaphore>) {
        let _permit = match slot {
            Some(s) => match s.acquire().await {
                Ok(p) => Some(p),
                Err(_) => return,
            },
            None => None,
        };
        if self.stopped() && slot.is_some() {
            return; // stopped while waiting for a slot: never sent, not measured
        }
        let spec = self.workload.get(index);
        let mut rec = RequestRecord::new(index, index < self.warmup, intended_ns, spec.input_tokens, spec.output_tokens);
        let body = build_body(
            self.api,
            &RequestBody {
                model: self.model.as_deref(),
                prompt: &spec.prompt,
                max_tokens: spec.output_tokens,
                stream: self.stream,
                ignore_eos: self.ignore_eos,
                eos_token_id: self.eos,
            },
        );
        self.progress.in_flight.fetch_add(1, Ordering::Relaxed);
        let x = Exec {
            api: self.api,
            stream: self.stream,
            t0: self.t0,
            tokenizer: self.tokenizer.as_deref(),
            tokens_counter: &self.progress.tokens,
        };
        let mut abort = self.abort.clone();
        // Biased: the request is polled first, and the two limits only when it is pending.
        let finish = tokio::select! {
            biased;
            _ = self.client.execute(&x, Bytes::from(body), &mut rec) => Finish::Done,
            _ = tokio::time::sleep(self.timeout) => Finish::TimedOut,
            _ = abort.wait_for(|a| *a) => Finish::Aborted,
        };
        let now = since(self.t0);
        match finish {
            Finish::TimedOut => {
                rec.fail(ErrorKind::Timeout, format!("no complete response within --timeout {:.1}s", self.timeout.as_secs_f64()), now)
            }
            Finish::Aborted => rec.fail(ErrorKind::Cancelled, "still in flight when the drain after the stop ended", now),
            Finish::Done => {}
        }
        self.progress.in_flight.fetch_sub(1, Ordering::Relaxed);
        if rec.error.is_some() {
            self.progress.failed.fetch_add(1, Ordering::Relaxed);
        }
        self.progress.done.fetch_add(1, Ordering::Relaxed);
        if let Some(o) = &self.observer {
            o.record(&self.label, &rec);
        }
        if let Ok(mut r) = self.records.lock() {
            r.push(rec);
        }
    }
}

/// Runs one load point. A stop (see [`Stopping`]) ends sending, drains in-flight requests for
/// `--drain-timeout` (or until a second signal), then cancels the rest; the outcome is then
/// marked partial.
pub async fn run_point(p: &Prepared, point: &SweepPoint, ctl: &Control, index: (u64, u64)) -> PointOutcome {
    let cfg = &p.cfg;
    let load = point.load;
    let planned = point.stop.requests.map(|r| r.saturating_add(cfg.warmup));
    ctl.progress.reset(load.label(), planned.unwrap_or(0), index.0, index.1);
    let t0 = Instant::now();
    let (abort_tx, abort_rx) = watch::channel(false);
    let sh = Arc::new(Shared {
        client: p.client.clone(),
        api: cfg.api,
        stream: cfg.stream,
        model: p.model.clone(),
        ignore_eos: cfg.ignore_eos,
        eos: p.eos_token_id,
        timeout: cfg.limits.request,
        warmup: cfg.warmup,
        t0,
        label: load.label(),
        workload: Arc::clone(&p.workload),
        tokenizer: p.tokenizer.clone(),
        records: Mutex::new(Vec::with_capacity(planned.unwrap_or(1024).min(4096) as usize)),
        progress: Arc::clone(&ctl.progress),
        observer: ctl.observer.clone(),
        stop: watch::channel(false).0,
        abort: abort_rx,
        tracker: Arc::default(),
    });
    let check = SelfCheck::start();
    let (scrape_stop_tx, scraper) = start_scraper(p, t0);
    let interrupted = Arc::new(AtomicBool::new(false));
    // When the stop came, ns from t0 (set with `interrupted`).
    let stopped_at = Arc::new(AtomicU64::new(0));
    let mut loop_failure = None;
    let watcher = tokio::spawn(watch_stop(
        Arc::clone(&sh),
        ctl.stopping.clone(),
        abort_tx,
        cfg.drain_timeout,
        (Arc::clone(&interrupted), Arc::clone(&stopped_at)),
    ));
    let last_intended_ns = match load {
        Load::Closed { concurrency } => {
            // The loop runs as a task on the runtime's workers, not on the thread that awaits
            // the point: each finished request frees a slot and wakes the loop, and a loop on
            // another thread would cost a cross-thread wake-up (a futex and a context switch)
            // and a spawn from outside the workers per request.
            if let Err(e) = tokio::spawn(closed_loop(Arc::clone(&sh), concurrency, point.stop, cfg.ramp_up, planned)).await {
                // The requests it sent are recorded; the point is partial, and says why.
                interrupted.store(true, Ordering::Relaxed);
                loop_failure = Some(format!("BUG: the closed loop stopped early ({e}); the point is partial"));
            }
            0
        }
        Load::Open { rate, arrival, max_concurrency } => {
            let sched = open_schedule(p, rate, arrival, point.stop, planned);
            open_loop(&sh, sched, max_concurrency).await
        }
    };
    sh.tracker.wait_idle().await;
    watcher.abort();
    let _ = scrape_stop_tx.send(true);
    let server_metrics = finish_scraper(p, scraper, load).await;
    let mut records = sh.records.lock().map(|mut r| std::mem::take(&mut *r)).unwrap_or_default();
    records.sort_by_key(|r| r.index);
    // The self-check ends with the requests, before the report's own computing.
    let client = check.finish(records.iter().map(|r| r.output_tokens_chunks).sum()).await;
    let was_interrupted = interrupted.load(Ordering::Relaxed);
    let stopped_ns = Some(stopped_at.load(Ordering::Relaxed)).filter(|_| was_interrupted);
    let ctx = RunContext { load, partial: was_interrupted, ignore_eos: cfg.ignore_eos, slos: &cfg.slos, last_intended_ns, stopped_ns };
    let mut report = report::compute(&records, &ctx, server_metrics);
    let itl = &report.latency_ms.itl;
    report.notes.extend(client.warnings((itl.count > 0).then_some(itl.p50)));
    report.client = Some(client);
    report.notes.extend(loop_failure);
    report.requests.lost = sh.tracker.panicked.load(Ordering::Relaxed);
    if report.requests.lost > 0 {
        report
            .notes
            .push(format!("BUG: {} request task(s) panicked and their records are lost; the counts above miss them", report.requests.lost));
    }
    PointOutcome { report, records, interrupted: was_interrupted }
}

/// The first stop ends sending; the drain deadline or a second stop cancels what is in flight.
async fn watch_stop(
    sh: Arc<Shared>,
    mut stopping: watch::Receiver<Stopping>,
    abort: watch::Sender<bool>,
    drain: Duration,
    (interrupted, stopped_at): (Arc<AtomicBool>, Arc<AtomicU64>),
) {
    if stopping.wait_for(|s| *s >= Stopping::Draining).await.is_err() {
        return;
    }
    stopped_at.store(since(sh.t0), Ordering::Relaxed);
    interrupted.store(true, Ordering::Relaxed);
    // `send_replace`, not `send`: the open loop's pacer reads the value without a receiver of its
    // own, and `send` leaves the value as it was when no receiver is subscribed.
    sh.stop.send_replace(true);
    tokio::select! {
        _ = tokio::time::sleep(drain) => {}
        _ = stopping.wait_for(|s| *s >= Stopping::Abort) => {}
    }
    let _ = abort.send(true);
}

type Scraper = Option<tokio::task::JoinHandle<(scrape::Scraped, Option<scrape::MetricsStyle>)>>;

fn start_scraper(p: &Prepared, t0: Instant) -> (watch::Sender<bool>, Scraper) {
    let (tx, rx) = watch::channel(false);
    let h = p.metrics_url.clone().map(|u| tokio::spawn(scrape::scrape_loop(p.client.clone(), u, p.cfg.scrape_interval, t0, rx)));
    (tx, h)
}

async fn finish_scraper(p: &Prepared, scraper: Scraper, load: Load) -> Option<ServerMetrics> {
    let (scraped, style) = scraper?.await.ok()?;
    let target = match load {
        Load::Closed { concurrency } => Some(f64::from(concurrency)),
        Load::Open { max_concurrency, .. } => max_concurrency.map(f64::from),
    };
    p.metrics_url.clone().map(|u| ServerMetrics::new(u, style, scraped, target))
}

/// Closed loop: a request goes out whenever one of `concurrency` slots is free; the slot's k-th
/// first use waits for its ramp-up start.
async fn closed_loop(sh: Arc<Shared>, concurrency: u32, stop: Stop, ramp: Duration, planned: Option<u64>) {
    let slots = Arc::new(Semaphore::new(concurrency as usize));
    let mut stop_rx = sh.stop.subscribe();
    let mut measure_start: Option<Instant> = None;
    for i in 0u64.. {
        if planned.is_some_and(|n| i >= n) {
            break;
        }
        if i < u64::from(concurrency) && !ramp.is_zero() {
            let at = sh.t0.checked_add(ramp.mul_f64(i as f64 / f64::from(concurrency))).unwrap_or_else(Instant::now);
            tokio::select! {
                _ = tokio::time::sleep_until(at.into()) => {}
                _ = stop_rx.wait_for(|v| *v) => break,
            }
        }
        let permit = tokio::select! {
            p = Arc::clone(&slots).acquire_owned() => match p { Ok(p) => p, Err(_) => break },
            _ = stop_rx.wait_for(|v| *v) => break,
        };
        if sh.stopped() || matches!((stop.duration, measure_start), (Some(d), Some(s)) if s.elapsed() >= d) {
            break;
        }
        if i == sh.warmup {
            measure_start = Some(Instant::now());
        }
        let guard = sh.tracker.enter();
        let sh2 = Arc::clone(&sh);
        tokio::spawn(async move {
            // Closed loop: the slot is free now, so now is the intended time.
            sh2.one(i, since(sh2.t0), None).await;
            drop(permit);
            guard.finish();
        });
    }
}

/// The open loop's send times: `planned` sends, or those inside the measured duration (after the
/// warmup's sends).
fn open_schedule(p: &Prepared, rate: f64, arrival: crate::spec::Arrival, stop: Stop, planned: Option<u64>) -> Vec<u64> {
    let cfg = &p.cfg;
    let Some(d) = stop.duration else {
        return schedule::arrivals(rate, arrival, cfg.ramp_up, cfg.seed, planned, None);
    };
    // The measured part starts at the warmup's end; without warmup, at 0.
    let start = if cfg.warmup > 0 {
        let full = schedule::arrivals(rate, arrival, cfg.ramp_up, cfg.seed, Some(cfg.warmup + 1), None);
        full.last().copied().unwrap_or(0)
    } else {
        0
    };
    let until = start.saturating_add(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    match planned {
        Some(_) => {
            schedule::arrivals(rate, arrival, cfg.ramp_up, cfg.seed, planned, None).into_iter().take_while(|&t| t <= until).collect()
        }
        None => schedule::arrivals(rate, arrival, cfg.ramp_up, cfg.seed, None, Some(until)),
    }
}

/// Open loop: a paced OS thread spawns each request at its send time. Returns the last intended
/// send time.
async fn open_loop(sh: &Arc<Shared>, sched: Vec<u64>, max_concurrency: Option<u32>) -> u64 {
    sh.progress.planned.store(sched.len() as u64, Ordering::Relaxed);
    let last = sched.last().copied().unwrap_or(0);
    let slot = max_concurrency.map(|m| Arc::new(Semaphore::new(m as usize)));
    let handle = tokio::runtime::Handle::current();
    let sh2 = Arc::clone(sh);
    let pacer = tokio::task::spawn_blocking(move || {
        precise_sleeps(true);
        let _default_again = DefaultSlackOnDrop;
        for (i, &t) in sched.iter().enumerate() {
            let target = sh2.t0.checked_add(Duration::from_nanos(t)).unwrap_or_else(Instant::now);
            loop {
                if sh2.stopped() {
                    return;
                }
                let now = Instant::now();
                if now >= target {
                    break;
                }
                // Sleep in slices of at most 50 ms so a stop is seen promptly.
                std::thread::sleep((target - now).min(Duration::from_millis(50)));
            }
            let sh3 = Arc::clone(&sh2);
            let slot = slot.clone();
            let guard = sh2.tracker.enter();
            handle.spawn(async move {
                sh3.one(i as u64, t, slot.as_deref()).await;
                guard.finish();
            });
        }
    });
    let _ = pacer.await;
    last
}

/// Asks the kernel to end this thread's sleeps on time (`true`), or gives the thread its default
/// timer slack back (`false`): by default Linux may end a sleep up to 50 us late (the slack lets
/// it batch wake-ups), and the pacer's lateness is every request's schedule lag. The pacer runs
/// on a blocking-pool thread that tokio reuses for other work, so it resets the slack when done.
fn precise_sleeps(on: bool) {
    #[cfg(target_os = "linux")]
    #[expect(unsafe_code, reason = "prctl(PR_SET_TIMERSLACK) changes one number of this thread; it touches no memory")]
    // SAFETY: PR_SET_TIMERSLACK takes an integer argument and sets only the calling thread's
    // timer slack (0 restores the thread's default); a failure leaves the slack as it was, which
    // is only more or less precise.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, libc::c_ulong::from(on), 0 as libc::c_ulong, 0 as libc::c_ulong, 0 as libc::c_ulong);
    }
    #[cfg(not(target_os = "linux"))]
    let _ = on;
}

/// Gives the pacer's thread its default timer slack back however the pacer ends.
struct DefaultSlackOnDrop;

impl Drop for DefaultSlackOnDrop {
    fn drop(&mut self) {
        precise_sleeps(false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_request_task_that_panics_is_counted_as_lost_not_forgotten() {
        let t: Arc<Tracker> = Arc::default();
        let ok = t.enter();
        tokio::spawn(async move { ok.finish() });
        let bad = t.enter();
        let h = tokio::spawn(async move {
            let _guard = bad;
            panic!("a bug in a request task");
        });
        assert!(h.await.is_err());
        t.wait_idle().await;
        assert_eq!(t.panicked.load(Ordering::Relaxed), 1);
        assert_eq!(t.n.load(Ordering::Relaxed), 0);
    }
}
