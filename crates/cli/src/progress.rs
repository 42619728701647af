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
