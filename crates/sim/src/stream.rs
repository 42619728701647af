//! The one streaming response body: output chunks from a channel ([`Out`], fed by the engine
//! thread or by the exact-timing source) framed by the [`ChunkWriter`], with the per-request
//! stream faults applied after the first chunk. Also the exact-timing source itself.

use std::future::Future as _;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::Frame;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};
use tokio::time::{Instant, Sleep};

use crate::driver::Out;
use crate::engine::Finish;
use crate::wire::{Ask, ChunkWriter, MALFORMED_EVENT};
use crate::ExactTiming;

/// What goes wrong with one stream after its first chunk (at most one of the endings applies:
/// error event, then malformed event, then a broken connection).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StreamFaults {
    /// End with an error event.
    pub error_event: bool,
    /// End with an event that is not JSON.
    pub malformed: bool,
    /// Break the connection.
    pub truncate: bool,
    /// Pause this long.
    pub stall: Option<Duration>,
    /// Stop with finish reason "stop" after this many tokens.
    pub early_stop_at: Option<u32>,
}

/// A streamed response. Every chunk that arrived since the last poll goes out in one frame (one
/// write), as a real server flushes once per step.
pub struct SseBody {
    rx: UnboundedReceiver<Out>,
    writer: ChunkWriter,
    faults: StreamFaults,
    role_chunk: bool,
    started: bool,
    finished: bool,
    /// Break the connection once the data already framed went out.
    break_next: bool,
    /// `break_next` has yielded once, so the connection flushed what was framed.
    flushed: bool,
    stall: Option<Pin<Box<Sleep>>>,
    chunks: u32,
    tokens: u32,
}

impl SseBody {
    /// A body reading `rx`, written by `writer`, with `faults`; `role_chunk` sends the chat
    /// role chunk first.
    pub fn new(rx: UnboundedReceiver<Out>, writer: ChunkWriter, faults: StreamFaults, role_chunk: bool) -> Self {
        Self {
            rx,
            writer,
            faults,
            role_chunk,
            started: false,
            finished: false,
            break_next: false,
            flushed: false,
            stall: None,
            chunks: 0,
            tokens: 0,
        }
    }

    /// Frames one chunk of tokens and applies the faults due after the first chunk.
    fn on_tokens(&mut self, buf: &mut Vec<u8>, first: u32, count: u32) {
        let count = match self.faults.early_stop_at {
            Some(stop) => count.min(stop.saturating_sub(self.tokens)),
            None => count,
        };
        if count > 0 {
            self.writer.tokens(buf, first, count);
            self.tokens = self.tokens.saturating_add(count);
            self.chunks += 1;
        }
        if self.faults.early_stop_at.is_some_and(|s| self.tokens >= s) {
            self.writer.done(buf, Finish::Stop, self.tokens);
            self.finished = true;
            return;
        }
        if self.chunks != 1 {
            return;
        }
        let f = self.faults;
        if f.error_event {
            self.writer.error(buf, "injected error mid-stream: simulated engine failure (--fail-rate)");
            self.finished = true;
        } else if f.malformed {
            buf.extend_from_slice(MALFORMED_EVENT);
            self.finished = true;
        } else if f.truncate {
            self.break_next = true;
        } else if let Some(d) = f.stall {
            self.stall = Some(Box::pin(tokio::time::sleep_until(later(Instant::now(), d))));
        }
    }

    /// Reads every chunk available now into `buf`; `Err` when the source vanished with nothing
    /// to send (the engine stopped: the connection breaks).
    fn drain(&mut self, cx: &mut Context<'_>, buf: &mut Vec<u8>) -> Result<(), std::io::Error> {
        while !self.finished && !self.break_next && self.stall.is_none() {
            match self.rx.poll_recv(cx) {
                Poll::Ready(Some(Out::Tokens { first, count })) => self.on_tokens(buf, first, count),
                Poll::Ready(Some(Out::Done { finish, completion_tokens, .. })) => {
                    self.writer.done(buf, finish, completion_tokens);
                    self.finished = true;
                }
                Poll::Ready(Some(Out::Refused)) => {
                    self.writer.error(buf, "the engine refused this request");
                    self.finished = true;
                }
                Poll::Ready(None) => {
                    self.finished = true;
                    if buf.is_empty() {
                        return Err(std::io::Error::other("the simulated engine stopped"));
                    }
                }
                Poll::Pending => break,
            }
        }
        Ok(())
    }
}

impl hyper::body::Body for SseBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        let this = &mut *self;
        if this.break_next {
            if !this.flushed {
                // Yield once: the connection writes out what it holds before it sees the error.
                this.flushed = true;
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            this.finished = true;
            this.break_next = false;
            return Poll::Ready(Some(Err(std::io::Error::other("injected truncation (--truncate-rate)"))));
        }
        if let Some(s) = this.stall.as_mut() {
            if s.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            this.stall = None;
        }
        if this.finished {
            return Poll::Ready(None);
        }
        let mut buf = Vec::new();
        if !this.started {
            this.started = true;
            if this.role_chunk {
                this.writer.role(&mut buf);
            }
        }
        if let Err(e) = this.drain(cx, &mut buf) {
            return Poll::Ready(Some(Err(e)));
        }
        if buf.is_empty() {
            return if this.finished { Poll::Ready(None) } else { Poll::Pending };
        }
        Poll::Ready(Some(Ok(Frame::data(Bytes::from(buf)))))
    }
}

/// `t + d`, or a week past `t` where that overflows the clock.
fn later(t: Instant, d: Duration) -> Instant {
    Instant::from_std(crate::driver::later(t.into_std(), d))
}

/// Feeds `tx` with `ask`'s tokens on the exact schedule of `timing` from `arrival`: chunk `k` at
/// `arrival + ttft + k * itl`. Stops early when the receiver is gone.
pub async fn exact_source(timing: ExactTiming, ask: Ask, arrival: Instant, tx: UnboundedSender<Out>) {
    let tpc = timing.tokens_per_chunk.max(1);
    let chunks = ask.max_tokens.div_ceil(tpc);
    for c in 0..chunks {
        let offset = timing.itl.checked_mul(c).and_then(|d| d.checked_add(timing.ttft)).unwrap_or(Duration::MAX);
        let due = later(arrival, offset);
        if due > Instant::now() {
            tokio::time::sleep_until(due).await;
        }
        let first = c * tpc;
        if tx.send(Out::Tokens { first, count: tpc.min(ask.max_tokens - first) }).is_err() {
            return;
        }
    }
    let _ = tx.send(Out::Done { finish: Finish::Length, prompt_tokens: ask.prompt_tokens, completion_tokens: ask.max_tokens });
}
