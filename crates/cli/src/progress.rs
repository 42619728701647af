//! The live progress line on a terminal: point, done/planned, in flight, tok/s, errors.

use std::io::{IsTerminal, Write};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use servetune_bench::Progress;

/// Draws `p` on stderr every 250 ms until the returned handle is aborted. Nothing is drawn when
/// stderr is not a terminal (CI logs stay clean).
pub fn spawn(p: Arc<Progress>, enabled: bool) -> Option<tokio::task::JoinHandle<()>> {
    if !enabled || !std::io::stderr().is_terminal() {
        return None;
    }
    Some(tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(250));
        loop {
            tick.tick().await;
            draw(&p);
        }
    }))
}

fn draw(p: &Progress) {
    let done = p.done.load(Ordering::Relaxed);
    let planned = p.planned.load(Ordering::Relaxed);
    let started = p.point_started_unix_ns.load(Ordering::Relaxed);
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0);
    let secs = now.saturating_sub(started) as f64 / 1e9;
    let tps = if secs > 0.0 { p.tokens.load(Ordering::Relaxed) as f64 / secs } else { 0.0 };
    let label = p.label.lock().map(|l| l.clone()).unwrap_or_default();
    let bar = if planned > 0 {
        let w = 24usize;
        let f = ((done as f64 / planned as f64) * w as f64).round().min(w as f64) as usize;
        format!("[{}{}] {done}/{planned}", "#".repeat(f), "-".repeat(w - f))
    } else {
        format!("{done} done")
    };
    let line = format!(
        "\r\x1b[2K({}/{}) {label}  {bar}  {} in flight  {tps:.0} tok/s  {} errors  {secs:.1}s",
        p.point.load(Ordering::Relaxed),
        p.points.load(Ordering::Relaxed),
        p.in_flight.load(Ordering::Relaxed),
        p.failed.load(Ordering::Relaxed),
    );
    let mut e = std::io::stderr().lock();
    let _ = e.write_all(line.as_bytes());
    let _ = e.flush();
}

/// Stops drawing and clears the line.
pub fn finish(h: Option<tokio::task::JoinHandle<()>>) {
    if let Some(h) = h {
        h.abort();
        let mut e = std::io::stderr().lock();
        let _ = e.write_all(b"\r\x1b[2K");
        let _ = e.flush();
    }
}

/// Counts the virtual runs a `plan` makes (each a benchmark workload run through the simulator's
/// engine in virtual time) and the requests they have simulated so far: with `--rank` at tens of
/// thousands of clients one run takes tens of seconds, and the progress line says how far it is.
#[derive(Debug, Default)]
pub struct CountingBench {
    inner: servetune_sim::from_plan::CountedPlanBench,
    /// Runs started.
    pub started: std::sync::atomic::AtomicU64,
    /// Runs finished.
    pub done: std::sync::atomic::AtomicU64,
}

impl CountingBench {
    /// Requests the runs have simulated so far, finished runs and running ones alike.
    pub fn requests(&self) -> u64 {
        self.inner.finished.load(Ordering::Relaxed)
    }

    /// The progress line: runs done and running, requests simulated, seconds since `since`.
    pub fn line(&self, since: std::time::Instant) -> String {
        let done = self.done.load(Ordering::Relaxed);
        let running = self.started.load(Ordering::Relaxed).saturating_sub(done);
        format!(
            "[plan] virtual runs: {done} done, {running} running, {} requests simulated, {:.1}s",
            count(self.requests()),
            since.elapsed().as_secs_f64()
        )
    }
}

/// A count people read at a glance: 950, 12.3k, 4.56M.
fn count(n: u64) -> String {
    match n {
        0..=9_999 => n.to_string(),
        10_000..=999_999 => format!("{:.1}k", n as f64 / 1e3),
        _ => format!("{:.2}M", n as f64 / 1e6),
    }
}

impl servetune_model::workload::VirtualBench for CountingBench {
    fn run(
        &self,
        s: &servetune_model::predict::Scenario,
        w: &servetune_model::workload::Workload,
        concurrency: u32,
    ) -> servetune_model::workload::ClientRun {
        self.started.fetch_add(1, Ordering::Relaxed);
        let r = self.inner.run(s, w, concurrency);
        self.done.fetch_add(1, Ordering::Relaxed);
        r
    }
}

/// Runs `work` while a thread redraws `bench`'s line on stderr every 250 ms, from the first second
/// on (a quick plan draws nothing), and clears it at the end. Nothing is drawn when stderr is not
/// a terminal or `enabled` is false.
pub fn with_plan_progress<T>(bench: &CountingBench, enabled: bool, work: impl FnOnce() -> T) -> T {
    if !enabled || !std::io::stderr().is_terminal() {
        return work();
    }
    let stop = std::sync::atomic::AtomicBool::new(false);
    let since = std::time::Instant::now();
    std::thread::scope(|scope| {
        let drawer = scope.spawn(|| {
            let mut drawn = false;
            while !stop.load(Ordering::Relaxed) {
                // Woken early when the work ends, so a quick plan does not wait out the tick.
                std::thread::park_timeout(Duration::from_millis(250));
                if since.elapsed() >= Duration::from_secs(1) && !stop.load(Ordering::Relaxed) {
                    let mut e = std::io::stderr().lock();
                    let _ = write!(e, "\r\x1b[2K{}", bench.line(since));
                    let _ = e.flush();
                    drawn = true;
                }
            }
            if drawn {
                let mut e = std::io::stderr().lock();
                let _ = e.write_all(b"\r\x1b[2K");
                let _ = e.flush();
            }
        });
        let out = work();
        stop.store(true, Ordering::Relaxed);
        drawer.thread().unpark();
        let _ = drawer.join();
        out
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use servetune_model::workload::VirtualBench;

    #[test]
    fn the_counting_bench_passes_runs_through_and_counts_runs_and_requests() {
        let s = servetune_model::predict::Scenario {
            model: servetune_model::spec::catalog("llama-3.1-8b").expect("catalog model"),
            quant: servetune_model::quant::Quant::preset(servetune_model::quant::Dtype::Fp8),
            gpu: servetune_model::hw::gpu("h200").expect("catalog gpu"),
            link: servetune_model::hw::link("nvlink").expect("catalog link"),
            plan: servetune_model::predict::Plan { gpus: 1, tp: 1, pp: 1, ep: 1, dp_attention: false },
            engine: servetune_model::predict::Engine::default(),
            input_len: 256,
            output_len: 64,
            max_running: None,
            cluster: None,
            measured_allreduce: None,
            calibrated_on: None,
        };
        let w = servetune_model::workload::Workload {
            requests: None,
            input: servetune_stats::LengthDist::Fixed { len: 256 },
            output: servetune_stats::LengthDist::Fixed { len: 64 },
            seed: 7,
        };
        let direct = servetune_sim::from_plan::PlanBench.run(&s, &w, 4);
        let counting = CountingBench::default();
        let counted = counting.run(&s, &w, 4);
        assert!(direct.requests > 0);
        assert_eq!(counted.requests, direct.requests);
        assert_eq!(counted.output_tokens_per_s, direct.output_tokens_per_s, "the wrapper changes no figure");
        assert_eq!(counted.ttft_ms, direct.ttft_ms);
        assert_eq!(counting.requests(), direct.requests, "every simulated request is counted as it completes");
        let eight = counting.run(&s, &w, 8);
        assert_eq!(counting.done.load(Ordering::Relaxed), 2);
        assert_eq!(counting.started.load(Ordering::Relaxed), 2);
        assert_eq!(counting.requests(), direct.requests + eight.requests);
        let line = counting.line(std::time::Instant::now());
        assert!(line.starts_with("[plan] virtual runs: 2 done, 0 running, 120 requests simulated, "), "{line}");
    }

    #[test]
    fn counts_read_at_a_glance() {
        assert_eq!(count(950), "950");
        assert_eq!(count(12_345), "12.3k");
        assert_eq!(count(4_560_000), "4.56M");
    }

    #[test]
    fn with_plan_progress_returns_the_work_and_draws_nothing_when_disabled() {
        let counting = CountingBench::default();
        assert_eq!(with_plan_progress(&counting, false, || 41 + 1), 42);
    }
}
