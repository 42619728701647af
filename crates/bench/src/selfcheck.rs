//! The client's self-check: could the load generator itself have distorted what it measured?
//!
//! A chunk is timed by the read that brought it ([`crate::conn`]), and that read happens when the
//! runtime gets round to the woken request task. A busy client (its own CPU, or a server sharing
//! its cores) reads late, and a late read shifts that chunk's time: a gap it lengthens and the
//! next it shortens, so ITL spreads although every gap the server made was equal. Two things tell
//! how far to trust the figures:
//!
//! - the **wake-up delay**: an OS thread wakes a probe task on the runtime every
//!   [`PROBE_PERIOD`] and the task records how long it waited to run. That is the time a woken
//!   request task waits too, so its p99 bounds how late reads were, and how much of an ITL gap
//!   may be the client's;
//! - the client's **CPU**, user and system separately (from `/proc/self/stat`, Linux), per
//!   output token and as a share of the runtime's threads.
//!
//! [`ClientCheck::warnings`] turns them into the report's warnings, as the schedule lag's is.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::sync::mpsc;

use crate::stats::Recorder;

/// How often the probe wakes its task: often enough for a p99 over a run of seconds, rarely
/// enough to cost nothing (500 wake-ups a second, about 1 ms of CPU a second).
pub const PROBE_PERIOD: Duration = Duration::from_millis(2);

/// A wake-up delay p99 above this share of the ITL p50 may distort ITL by more than the
/// accuracy the benchmark claims (2%).
pub const WAKE_DELAY_ITL_SHARE: f64 = 0.02;

/// Below this wake-up delay p99 (ms), the load generator's own schedule-lag target, a delay is
/// scheduler noise, not reported against a short ITL.
pub const WAKE_DELAY_FLOOR_MS: f64 = 0.2;

/// A wake-up delay p99 above this (ms) distorts TTFT, schedule lag and short gaps whatever the ITL.
pub const WAKE_DELAY_MAX_MS: f64 = 1.0;

/// The client's CPU above this share of its runtime's threads leaves it little room to read on
/// time.
pub const CPU_BUSY_MAX: f64 = 0.5;

/// Linux reports process CPU times in `/proc` in units of USER_HZ, which is 100 on every
/// architecture servetune builds for (x86_64, aarch64).
const USER_HZ: f64 = 100.0;

/// The process's CPU time so far, user and system, in seconds (`None` off Linux).
pub fn cpu_times() -> Option<(f64, f64)> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    parse_stat(&stat)
}

/// `utime` and `stime` (fields 14 and 15) of a `/proc/<pid>/stat` line, in seconds. The command
/// name (field 2) may hold spaces and parentheses, so fields are counted after its last `)`.
fn parse_stat(stat: &str) -> Option<(f64, f64)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut f = rest.split_whitespace().skip(11);
    let user: f64 = f.next()?.parse().ok()?;
    let system: f64 = f.next()?.parse().ok()?;
    Some((user / USER_HZ, system / USER_HZ))
}

/// Wake-up delays of the probe task, ms.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct WakeDelay {
    /// Wake-ups measured.
    pub samples: u64,
    /// Median, ms.
    pub p50: f64,
    /// 99th percentile, ms.
    pub p99: f64,
    /// Largest, ms.
    pub max: f64,
}

/// What the client measured about itself during one load point.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ClientCheck {
    /// CPU the client's process used in user mode during the point, s (`null` off Linux).
    pub cpu_user_s: Option<f64>,
    /// CPU in the kernel (system calls, the network stack) during the point, s.
    pub cpu_system_s: Option<f64>,
    /// User plus system CPU per output token received, microseconds.
    pub cpu_us_per_output_token: Option<f64>,
    /// User plus system CPU as a share of the runtime's threads over the point (1 = all busy).
    pub cpu_busy: Option<f64>,
    /// How long a woken task waited for the runtime: the bound on how late a read was.
    pub wake_delay_ms: WakeDelay,
}

impl ClientCheck {
    /// Warnings for the report: when the client's reads may have been late enough, or its CPU
    /// busy enough, to distort ITL (`itl_p50_ms`) and TTFT.
    pub fn warnings(&self, itl_p50_ms: Option<f64>) -> Vec<String> {
        let mut out = Vec::new();
        let w = self.wake_delay_ms;
        let itl_bound = itl_p50_ms.filter(|i| *i > 0.0).map(|i| i * WAKE_DELAY_ITL_SHARE);
        if w.p99 > WAKE_DELAY_MAX_MS || (w.p99 > WAKE_DELAY_FLOOR_MS && itl_bound.is_some_and(|b| w.p99 > b)) {
            let share = itl_p50_ms.filter(|i| *i > 0.0).map(|i| format!(" ({:.0}% of the ITL p50)", 100.0 * w.p99 / i)).unwrap_or_default();
            out.push(format!(
                "WARNING: the client read late: a woken task waited {:.2} ms at p99 (max {:.2} ms){share}; chunk times, ITL and TTFT may carry that much of the client's own delay. Free CPU for the client (or run it on other cores than the server).",
                w.p99, w.max
            ));
        }
        if let Some(busy) = self.cpu_busy.filter(|b| *b > CPU_BUSY_MAX) {
            out.push(format!(
                "WARNING: the client used {:.0}% of its threads' time ({} us of CPU per output token): it may be the bottleneck, and its reads late.",
                busy * 100.0,
                self.cpu_us_per_output_token.map_or("?".to_string(), |c| format!("{c:.2}"))
            ));
        }
        out
    }
}

/// A running self-check: started with a load point, finished with it.
#[derive(Debug)]
pub struct SelfCheck {
    started: Instant,
    cpu: Option<(f64, f64)>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    task: tokio::task::JoinHandle<Recorder>,
}

impl SelfCheck {
    /// Starts the probe (an OS thread and a task on the current runtime) and reads the CPU so far.
    pub fn start() -> Self {
        let (tx, mut rx) = mpsc::unbounded_channel::<Instant>();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stop2 = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("servetune-wake-probe".into())
            .spawn(move || {
                while !stop2.load(std::sync::atomic::Ordering::Relaxed) {
                    std::thread::sleep(PROBE_PERIOD);
                    if tx.send(Instant::now()).is_err() {
                        return;
                    }
                }
            })
            .ok();
        let task = tokio::spawn(async move {
            let mut rec = Recorder::new();
            while let Some(sent) = rx.recv().await {
                rec.record_ns(u64::try_from(sent.elapsed().as_nanos()).unwrap_or(u64::MAX));
            }
            rec
        });
        Self { started: Instant::now(), cpu: cpu_times(), stop, thread, task }
    }

    /// Stops the probe and sums up the point; `output_tokens` were received in it.
    pub async fn finish(mut self, output_tokens: u64) -> ClientCheck {
        let wall = self.started.elapsed().as_secs_f64();
        let cpu_now = cpu_times();
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            // The thread drops its sender when it ends, which ends the task.
            let _ = tokio::task::spawn_blocking(move || t.join()).await;
        } else {
            self.task.abort();
        }
        let rec = (&mut self.task).await.unwrap_or_else(|_| Recorder::new());
        let s = rec.summary();
        let wake_delay_ms = WakeDelay { samples: s.count, p50: s.p50, p99: s.p99, max: s.max };
        let (user, system) = match (self.cpu, cpu_now) {
            (Some((u0, s0)), Some((u1, s1))) => (Some((u1 - u0).max(0.0)), Some((s1 - s0).max(0.0))),
            _ => (None, None),
        };
        let total = user.zip(system).map(|(u, s)| u + s);
        // The runtime's worker threads, which read the responses (`TOKIO_WORKER_THREADS` may
        // make them fewer than the cores), but no more than the cores they can run on at once.
        let workers = tokio::runtime::Handle::current().metrics().num_workers().max(1);
        let cores = std::thread::available_parallelism().map_or(workers, |n| n.get());
        let threads = workers.min(cores) as f64;
        ClientCheck {
            cpu_user_s: user,
            cpu_system_s: system,
            cpu_us_per_output_token: total.filter(|_| output_tokens > 0).map(|t| t * 1e6 / output_tokens as f64),
            cpu_busy: total.filter(|_| wall > 0.0).map(|t| t / (wall * threads)),
            wake_delay_ms,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_after_the_command_name() {
        // A command name with a space and a parenthesis must not shift the fields.
        let line = "1234 (a b) c) S 1 2 3 4 5 6 7 8 9 10 250 75 0 0 20 0 4 0 100 0 0";
        assert_eq!(parse_stat(line), Some((2.5, 0.75)));
        assert_eq!(parse_stat("no parenthesis"), None);
    }

    fn check(p99: f64, busy: Option<f64>) -> ClientCheck {
        ClientCheck {
            cpu_user_s: Some(1.0),
            cpu_system_s: Some(0.5),
            cpu_us_per_output_token: Some(0.8),
            cpu_busy: busy,
            wake_delay_ms: WakeDelay { samples: 100, p50: p99 / 2.0, p99, max: p99 * 2.0 },
        }
    }

    #[test]
    fn late_reads_warn_against_the_itl_they_could_distort() {
        assert!(check(0.1, Some(0.1)).warnings(Some(10.0)).is_empty(), "0.1 ms is 1% of a 10 ms ITL");
        assert!(check(0.15, Some(0.1)).warnings(Some(4.0)).is_empty(), "4% of a 4 ms ITL, but under the 0.2 ms noise floor");
        let w = check(0.3, Some(0.1)).warnings(Some(10.0));
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].contains("read late") && w[0].contains("3% of the ITL p50"), "{w:?}");
        assert_eq!(check(1.5, Some(0.1)).warnings(None).len(), 1, "over 1 ms warns without an ITL");
    }

    #[test]
    fn a_busy_client_warns() {
        let w = check(0.01, Some(0.9)).warnings(Some(10.0));
        assert!(w.len() == 1 && w[0].contains("90% of its threads"), "{w:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_probe_measures_wake_ups_and_cpu() {
        let c = SelfCheck::start();
        tokio::time::sleep(Duration::from_millis(60)).await;
        let r = c.finish(1000).await;
        assert!(r.wake_delay_ms.samples >= 5, "{r:?}");
        assert!(r.wake_delay_ms.p50 <= r.wake_delay_ms.p99 && r.wake_delay_ms.p99 <= r.wake_delay_ms.max, "{r:?}");
        if cfg!(target_os = "linux") {
            assert!(r.cpu_user_s.is_some() && r.cpu_us_per_output_token.is_some(), "{r:?}");
        }
    }
}
