//! The engine thread: runs [`Engine`] steps on the wall clock and routes each token to its
//! request's channel the moment its step ends. Steps follow an absolute timeline (step k ends at
//! the end of step k-1 plus its cost), so emission stays within the sleep's wake-up error of the
//! simulated time; the lateness of every step is measured and published.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::mpsc::UnboundedSender;

use crate::cost::StepCost;
use crate::engine::{Emit, Engine, EngineRequest, EngineStats, Finish};
use crate::metrics::Histogram;
use crate::profile::Recorder;

/// What a request's stream receives.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Out {
    /// `count` output tokens, the first of them token number `first` (from 0).
    Tokens {
        /// Index of the first token in the chunk.
        first: u32,
        /// Tokens in the chunk (at least 1).
        count: u32,
    },
    /// The request finished.
    Done {
        /// Why it finished.
        finish: Finish,
        /// Prompt length in tokens.
        prompt_tokens: u32,
        /// Output tokens generated.
        completion_tokens: u32,
    },
    /// The engine refused the request (it can never fit).
    Refused,
}

/// A command to the engine thread.
#[derive(Debug)]
pub enum Cmd {
    /// Run a request; its tokens go to `sink`.
    Submit {
        /// The request.
        req: EngineRequest,
        /// Where its output goes.
        sink: UnboundedSender<Out>,
        /// When the server received it (for TTFT and E2E).
        arrival: Instant,
    },
    /// Stop the engine thread.
    Shutdown,
}

/// Published after every step, read by `/metrics`.
#[derive(Debug, Clone)]
pub struct Published {
    /// The engine's counters and gauges.
    pub stats: EngineStats,
    /// Time to first token, seconds.
    pub ttft: Histogram,
    /// Time between tokens, seconds.
    pub itl: Histogram,
    /// Arrival to finish, seconds.
    pub e2e: Histogram,
    /// Lateness of token emission against the simulated step end, seconds.
    pub lateness: Histogram,
    /// The largest lateness seen, seconds.
    pub lateness_max_s: f64,
    /// Output tokens per second over the last second.
    pub gen_throughput: f64,
    /// Requests finished since start.
    pub requests_finished: u64,
}

impl Default for Published {
    fn default() -> Self {
        Self {
            stats: EngineStats::default(),
            ttft: Histogram::new(crate::metrics::TTFT_BUCKETS),
            itl: Histogram::new(crate::metrics::ITL_BUCKETS),
            e2e: Histogram::new(crate::metrics::E2E_BUCKETS),
            lateness: Histogram::new(crate::metrics::LATENESS_BUCKETS),
            lateness_max_s: 0.0,
            gen_throughput: 0.0,
            requests_finished: 0,
        }
    }
}

/// Handle to a running engine thread.
#[derive(Debug, Clone)]
pub struct EngineHandle {
    tx: Sender<Cmd>,
    /// The figures of the last step.
    pub published: Arc<Mutex<Published>>,
    alive: Arc<AtomicBool>,
}

impl EngineHandle {
    /// Sends a request; `false` when the engine has stopped.
    pub fn submit(&self, req: EngineRequest, sink: UnboundedSender<Out>) -> bool {
        self.tx.send(Cmd::Submit { req, sink, arrival: Instant::now() }).is_ok()
    }

    /// Asks the engine thread to stop.
    pub fn shutdown(&self) {
        let _ = self.tx.send(Cmd::Shutdown);
    }

    /// Whether the engine thread is still running (false once it returned or panicked).
    pub fn is_alive(&self) -> bool {
        self.alive.load(Ordering::Acquire)
    }

    /// A copy of the figures of the last step.
    pub fn snapshot(&self) -> Published {
        self.published.lock().map(|p| p.clone()).unwrap_or_default()
    }
}

/// Stalls injected into the timeline.
#[derive(Debug, Clone, Copy, Default)]
pub struct Stall {
    /// Every this many steps...
    pub every: Option<u64>,
    /// ...one step takes this much longer.
    pub dur: Duration,
}

/// Clears the engine's liveness flag when the thread ends, by return or by panic.
struct AliveGuard(Arc<AtomicBool>);

impl Drop for AliveGuard {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// `t + d`, or a week past `t` where that overflows the clock (durations are bounded to a week
/// where the user gives them; this keeps a bad cost from panicking the engine thread).
pub(crate) fn later(t: Instant, d: Duration) -> Instant {
    t.checked_add(d).or_else(|| t.checked_add(Duration::from_secs(7 * 24 * 3600))).unwrap_or(t)
}

struct Live {
    sink: UnboundedSender<Out>,
    arrival: Instant,
    last: Option<Instant>,
}

/// Starts the engine thread.
pub fn spawn(engine: Engine, cost: Arc<dyn StepCost>, stall: Stall, recorder: Recorder) -> std::io::Result<EngineHandle> {
    let (tx, rx) = std::sync::mpsc::channel();
    let published = Arc::new(Mutex::new(Published::default()));
    let pubc = Arc::clone(&published);
    let alive = Arc::new(AtomicBool::new(true));
    let guard = AliveGuard(Arc::clone(&alive));
    std::thread::Builder::new().name("sim-engine".into()).spawn(move || {
        let _guard = guard;
        run(engine, cost, stall, rx, pubc, recorder)
    })?;
    Ok(EngineHandle { tx, published, alive })
}

fn run(engine: Engine, cost: Arc<dyn StepCost>, stall: Stall, rx: Receiver<Cmd>, published: Arc<Mutex<Published>>, recorder: Recorder) {
    let mut t = Thread {
        engine,
        cost,
        stall,
        published,
        live: HashMap::new(),
        local: Published::default(),
        out: Vec::with_capacity(1024),
        timeline: None,
        window: VecDeque::new(),
        step_no: 0,
        recorder,
    };
    loop {
        if t.engine.is_idle() {
            t.timeline = None;
            t.publish();
            match rx.recv_timeout(Duration::from_millis(500)) {
                Ok(cmd) => {
                    if !t.command(cmd) {
                        return;
                    }
                }
                Err(RecvTimeoutError::Disconnected) => return,
                Err(RecvTimeoutError::Timeout) => continue,
            }
        }
        loop {
            match rx.try_recv() {
                Ok(cmd) => {
                    if !t.command(cmd) {
                        return;
                    }
                }
                Err(TryRecvError::Disconnected) => return,
                Err(TryRecvError::Empty) => break,
            }
        }
        t.step();
    }
}

/// The engine thread's state between steps.
struct Thread {
    engine: Engine,
    cost: Arc<dyn StepCost>,
    stall: Stall,
    published: Arc<Mutex<Published>>,
    live: HashMap<u64, Live>,
    local: Published,
    out: Vec<Emit>,
    /// The simulated end of the last step, while the engine is busy.
    timeline: Option<Instant>,
    /// (step end, tokens) over the last second, for the generation throughput.
    window: VecDeque<(Instant, u64)>,
    step_no: u64,
    /// `/start_profile`'s recording.
    recorder: Recorder,
}

impl Thread {
    /// Applies a command; `false` to stop.
    fn command(&mut self, cmd: Cmd) -> bool {
        match cmd {
            Cmd::Submit { req, sink, arrival } => {
                if self.engine.submit(req).is_ok() {
                    self.live.insert(req.id, Live { sink, arrival, last: None });
                } else {
                    let _ = sink.send(Out::Refused);
                }
                true
            }
            Cmd::Shutdown => false,
        }
    }

    /// Plans a step, sleeps until its simulated end, applies it and routes its tokens.
    fn step(&mut self) {
        let Some(plan) = self.engine.plan() else { return };
        let mut dur = self.engine.cost(self.cost.as_ref(), &plan);
        self.step_no += 1;
        if self.stall.every.is_some_and(|n| self.step_no.is_multiple_of(n)) {
            dur = dur.saturating_add(self.stall.dur);
        }
        let now = Instant::now();
        // Keep the absolute timeline unless the thread fell more than 2 ms behind it (then resync).
        let start = match self.timeline {
            Some(t) if later(t, Duration::from_millis(2)) >= now => t,
            _ => now,
        };
        let end = later(start, dur);
        self.recorder.record(start, &plan.batch, || self.cost.split(&plan.batch).fitted(dur));
        let now = Instant::now();
        if end > now {
            std::thread::sleep(end - now);
        }
        let woke = Instant::now();
        let late = woke.saturating_duration_since(end).as_secs_f64();
        self.local.lateness.observe(late);
        self.local.lateness_max_s = self.local.lateness_max_s.max(late);
        self.timeline = Some(end);
        self.engine.apply(&plan, &mut self.out);
        let tokens = self.route(woke);
        self.window.push_back((woke, tokens));
        self.publish();
    }

    /// Sends each emitted token and finish to its request; aborts requests whose client left.
    /// Returns the tokens emitted.
    fn route(&mut self, woke: Instant) -> u64 {
        let mut gone = Vec::new();
        let mut tokens = 0u64;
        for e in self.out.drain(..) {
            match e {
                Emit::Token { id, index } => {
                    tokens += 1;
                    let Some(l) = self.live.get_mut(&id) else { continue };
                    match l.last {
                        None => self.local.ttft.observe(woke.saturating_duration_since(l.arrival).as_secs_f64()),
                        Some(prev) => self.local.itl.observe(woke.saturating_duration_since(prev).as_secs_f64()),
                    }
                    l.last = Some(woke);
                    if l.sink.send(Out::Tokens { first: index, count: 1 }).is_err() {
                        gone.push(id);
                    }
                }
                Emit::Done { id, finish, prompt_tokens, completion_tokens } => {
                    if let Some(l) = self.live.remove(&id) {
                        self.local.e2e.observe(woke.saturating_duration_since(l.arrival).as_secs_f64());
                        self.local.requests_finished += 1;
                        let _ = l.sink.send(Out::Done { finish, prompt_tokens, completion_tokens });
                    }
                }
            }
        }
        for id in gone {
            self.live.remove(&id);
            self.engine.abort(id);
        }
        tokens
    }

    fn publish(&mut self) {
        publish(&self.published, &mut self.local, &self.engine, &mut self.window);
    }
}

fn publish(published: &Mutex<Published>, local: &mut Published, engine: &Engine, window: &mut VecDeque<(Instant, u64)>) {
    let now = Instant::now();
    while window.front().is_some_and(|(t, _)| now.duration_since(*t) > Duration::from_secs(1)) {
        window.pop_front();
    }
    local.gen_throughput = window.iter().map(|(_, n)| *n).sum::<u64>() as f64;
    local.stats = engine.stats();
    if let Ok(mut p) = published.lock() {
        p.clone_from(local);
    }
}
