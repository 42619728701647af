//! The closed-loop virtual run, event by event: the same scheduling as [`crate::engine::Engine`]
//! (FCFS admission under the running cap and the paged KV cache, chunked prefill under the step's
//! token budget, prefill-first or mixed steps, recompute preemption of the newest request), for
//! requests that always run to `max_tokens` (`ignore_eos`, as every virtual run's are).
//!
//! Why a second form of the engine: the engine touches every running request in every step, and
//! `servetune plan --rank` runs tens of thousands of requests at concurrencies in the thousands
//! for every plan. Here a decoding request is touched only when something happens to it (it
//! needs a KV page, it finishes, it is preempted): all decoding requests advance together, so a
//! request's output count is the number of decode steps since it began decoding, less an offset,
//! and the step's context is kept as a sum. A property test (`tests.rs`) holds it to the engine's
//! trace, step for step and bit for bit.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use super::{prefill_part, Lengths, Record, Trace};
use crate::cost::{Profile, Scheduling, StepBatch, StepCost};

/// A request waiting for admission (new, or preempted with its output so far).
#[derive(Debug, Clone, Copy)]
struct Waiting {
    id: usize,
    prompt: u32,
    target: u32,
    generated: u32,
    /// Tokens to prefill on admission: the prompt, plus the output so far after a preemption.
    prefill_len: u32,
}

/// An admitted request still prefilling. These are always the newest running requests, in
/// admission order: the step's budget goes to the oldest first, so they finish prefill in order.
#[derive(Debug, Clone, Copy)]
struct Prefilling {
    seq: u64,
    w: Waiting,
    prefilled: u32,
    pages: u64,
    /// Tokens given to it in the step being planned.
    chunk: u32,
}

/// A decoding request: its output count is `decode_steps - g0`.
#[derive(Debug, Clone, Copy)]
struct Decoding {
    id: usize,
    prompt: u32,
    target: u32,
    g0: i64,
    pages: u64,
}

/// At most this many page buckets (a cache's page is at most a few hundred tokens in practice).
pub(super) const MAX_PAGE_BUCKETS: u64 = 1024;

/// Decoding requests by admission order (seq), as a window from the oldest one still decoding to
/// the newest: memory follows the requests decoding now, not every admission of the run (a run
/// that preempts often admits a request many times).
#[derive(Debug, Default)]
struct BySeq {
    /// The seq of `slots[0]`.
    base: u64,
    /// `None`: finished, preempted, or not decoding.
    slots: VecDeque<Option<Decoding>>,
    live: usize,
}

impl BySeq {
    fn get(&self, seq: u64) -> Option<Decoding> {
        let i = seq.checked_sub(self.base)?;
        self.slots.get(usize::try_from(i).ok()?).copied().flatten()
    }

    /// Puts `d` at `seq`, new or in place of the one there.
    fn set(&mut self, seq: u64, d: Decoding) {
        if self.slots.is_empty() {
            self.base = seq;
        }
        while seq < self.base {
            self.slots.push_front(None);
            self.base -= 1;
        }
        let i = (seq - self.base) as usize;
        if i >= self.slots.len() {
            self.slots.resize(i + 1, None);
        }
        if self.slots[i].replace(d).is_none() {
            self.live += 1;
        }
    }

    /// Takes the one at `seq` out, and trims empty slots off both ends.
    fn take(&mut self, seq: u64) -> Option<Decoding> {
        let i = usize::try_from(seq.checked_sub(self.base)?).ok()?;
        let d = self.slots.get_mut(i)?.take()?;
        self.live -= 1;
        while let Some(None) = self.slots.front() {
            self.slots.pop_front();
            self.base += 1;
        }
        while let Some(None) = self.slots.back() {
            self.slots.pop_back();
        }
        Some(d)
    }

    /// The newest seq decoding (the back of the window, which `take` keeps live).
    fn newest(&self) -> Option<u64> {
        (self.live > 0).then(|| self.base + self.slots.len() as u64 - 1)
    }
}

/// The engine's state.
struct Events<'a> {
    p: &'a Profile,
    page: u64,
    free_pages: u64,
    total_pages: u64,
    waiting: VecDeque<Waiting>,
    prefilling: VecDeque<Prefilling>,
    decoding: BySeq,
    /// A min-heap of (decode step count at which it finishes, seq); an entry whose request was
    /// preempted is stale and skipped when it comes up.
    finishes: BinaryHeap<Reverse<(i64, u64)>>,
    /// Decoding requests by the decode step count, modulo the bucket count, at which their next
    /// token needs a new KV page: all decoding requests advance together, so a request comes due
    /// once a page (and is checked once per lap of the buckets). Entries of requests that left are
    /// dropped when their bucket comes up.
    page_buckets: Vec<Vec<u64>>,
    /// Decode steps so far.
    steps: i64,
    sum_prompt: i64,
    sum_g0: i64,
    next_seq: u64,
}

/// One step as planned.
struct Planned {
    batch: StepBatch,
    hold_decode: bool,
}

impl<'a> Events<'a> {
    fn new(p: &'a Profile, max_buckets: u64) -> Self {
        // A profile's page is at least 1 (`Profile::validate`); `max` keeps a division by zero
        // out of a profile built in code without it.
        let page = p.page_size.max(1) as u64;
        let total_pages = p.kv_tokens / page;
        Self {
            p,
            page,
            free_pages: total_pages,
            total_pages,
            waiting: VecDeque::new(),
            prefilling: VecDeque::new(),
            decoding: BySeq::default(),
            finishes: BinaryHeap::new(),
            page_buckets: vec![Vec::new(); page.min(max_buckets.max(1)) as usize],
            steps: 0,
            sum_prompt: 0,
            sum_g0: 0,
            next_seq: 0,
        }
    }

    fn pages(&self, tokens: u64) -> u64 {
        tokens.div_ceil(self.page)
    }

    fn running(&self) -> usize {
        self.decoding.live + self.prefilling.len()
    }

    /// Queues a request, or refuses one larger than the whole KV cache (the engine's `submit`).
    fn submit(&mut self, id: usize, l: Lengths) -> bool {
        let (prompt, target) = (l.input.max(1), l.output.max(1));
        if self.pages(prompt as u64 + target as u64) > self.total_pages {
            return false;
        }
        self.waiting.push_back(Waiting { id, prompt, target, generated: 0, prefill_len: prompt });
        true
    }

    /// FCFS admission under the running cap and the free pages; the first admitted seq.
    fn admit(&mut self) -> u64 {
        let first = self.next_seq;
        while self.running() < self.p.max_running_requests as usize {
            let Some(head) = self.waiting.front() else { break };
            let need = self.pages(head.prefill_len as u64 + 1);
            if need > self.free_pages {
                break;
            }
            let Some(w) = self.waiting.pop_front() else { break };
            self.free_pages -= need;
            self.prefilling.push_back(Prefilling { seq: self.next_seq, w, prefilled: 0, pages: need, chunk: 0 });
            self.next_seq += 1;
        }
        first
    }

    /// The decoding request `seq`, if it is one.
    fn get(&self, seq: u64) -> Option<Decoding> {
        self.decoding.get(seq)
    }

    /// Takes `seq` out of the decoding set (its heap entries go stale).
    fn remove_decoding(&mut self, seq: u64) -> Option<Decoding> {
        let d = self.decoding.take(seq)?;
        self.sum_prompt -= d.prompt as i64;
        self.sum_g0 -= d.g0;
        Some(d)
    }

    fn need_at(&self, d: &Decoding, seq: u64) -> (i64, u64) {
        (d.g0 + (d.pages * self.page) as i64 - d.prompt as i64, seq)
    }

    fn insert_decoding(&mut self, seq: u64, d: Decoding) {
        self.finishes.push(Reverse((d.g0 + d.target as i64, seq)));
        self.file_page_need(&d, seq);
        self.sum_prompt += d.prompt as i64;
        self.sum_g0 += d.g0;
        self.decoding.set(seq, d);
    }

    fn file_page_need(&mut self, d: &Decoding, seq: u64) {
        let at = self.need_at(d, seq).0;
        let n = self.page_buckets.len() as i64;
        self.page_buckets[at.rem_euclid(n) as usize].push(seq);
    }

    /// The seqs of the decoding requests whose last token the step that just ran produced,
    /// oldest request first.
    fn take_finished(&mut self) -> Vec<u64> {
        let mut out = Vec::new();
        while let Some(&Reverse((at, seq))) = self.finishes.peek() {
            if at > self.steps {
                break;
            }
            self.finishes.pop();
            if self.get(seq).is_some_and(|d| d.g0 + d.target as i64 == at) {
                out.push(seq);
            }
        }
        out.sort_unstable();
        out
    }

    /// Preempts the newest running request: its pages are freed and it goes back to the head of
    /// the queue to recompute its prompt and output. Returns its seq.
    fn preempt_newest(&mut self) -> Option<u64> {
        let (seq, w, pages) = if let Some(q) = self.prefilling.pop_back() {
            (q.seq, q.w, q.pages)
        } else {
            let seq = self.decoding.newest()?;
            let d = self.remove_decoding(seq)?;
            let generated = (self.steps - d.g0) as u32;
            (seq, Waiting { id: d.id, prompt: d.prompt, target: d.target, generated, prefill_len: 0 }, d.pages)
        };
        self.free_pages += pages;
        self.waiting.push_front(Waiting { prefill_len: w.prompt + w.generated, ..w });
        Some(seq)
    }

    /// Every decoding request whose next token starts a KV page gets one, oldest first,
    /// preempting the newest request when none is free.
    fn grow_pages(&mut self) {
        let b = self.steps.rem_euclid(self.page_buckets.len() as i64) as usize;
        let mut bucket = std::mem::take(&mut self.page_buckets[b]);
        let mut needing = Vec::new();
        bucket.retain(|&seq| match self.get(seq) {
            None => false,
            Some(d) if self.need_at(&d, seq).0 == self.steps => {
                needing.push(seq);
                false
            }
            Some(_) => true,
        });
        self.page_buckets[b].append(&mut bucket);
        needing.sort_unstable();
        for seq in needing {
            let Some(d) = self.get(seq) else { continue };
            if self.free_pages == 0 {
                match self.preempt_newest() {
                    Some(victim) if victim == seq => break,
                    Some(_) => {}
                    None => break,
                }
            }
            self.free_pages -= 1;
            let grown = Decoding { pages: d.pages + 1, ..d };
            self.file_page_need(&grown, seq);
            self.decoding.set(seq, grown);
        }
    }

    /// The next step (admission, KV growth, the batch); None when nothing runs.
    fn plan(&mut self) -> Option<(Planned, u64)> {
        let first_new = self.admit();
        let hold_decode = self.p.scheduling == Scheduling::PrefillFirst && !self.prefilling.is_empty();
        if !hold_decode {
            self.grow_pages();
        }
        if self.running() == 0 {
            return None;
        }
        let mut batch = StepBatch::default();
        let mut budget = self.p.chunked_prefill_size as i64;
        if !hold_decode {
            let n = self.decoding.live as i64;
            batch.decode_batch = n as u32;
            batch.context_tokens = (self.sum_prompt + n * (self.steps + 1) - self.sum_g0) as u64;
            budget -= n;
        }
        // Chunks go to the oldest prompts first; the first prompt without one ends the prefix that
        // `apply` reads (the chunks behind it are stale and never read).
        for q in self.prefilling.iter_mut() {
            if budget <= 0 {
                q.chunk = 0;
                break;
            }
            let chunk = (q.w.prefill_len - q.prefilled).min(budget as u32);
            budget -= chunk as i64;
            q.chunk = chunk;
            batch.prefill_tokens += chunk;
            batch.context_tokens += (q.prefilled + chunk) as u64;
        }
        Some((Planned { batch, hold_decode }, first_new))
    }

    /// Applies a planned step at time `t` (its end): one token per decoding request, prefill
    /// progress and first tokens; finished requests are appended to `done` in the engine's order.
    fn apply(&mut self, plan: &Planned, t: f64, first: &mut [f64], tr: &mut Trace, done: &mut Vec<(usize, u32, u32)>) {
        if !plan.hold_decode {
            self.steps += 1;
            let n = self.decoding.live as u64;
            tr.output_tokens += n;
            tr.decode_tokens += n;
            for seq in self.take_finished() {
                if let Some(d) = self.remove_decoding(seq) {
                    self.free_pages += d.pages;
                    done.push((d.id, d.prompt, d.target));
                }
            }
        }
        while let Some(q) = self.prefilling.front().copied() {
            if q.chunk == 0 {
                break;
            }
            let prefilled = q.prefilled + q.chunk;
            if prefilled < q.w.prefill_len {
                if let Some(f) = self.prefilling.front_mut() {
                    f.prefilled = prefilled;
                    f.chunk = 0;
                }
                break;
            }
            self.prefilling.pop_front();
            tr.output_tokens += 1;
            if q.w.generated == 0 {
                first[q.w.id] = t;
            } else {
                tr.decode_tokens += 1;
            }
            let generated = q.w.generated + 1;
            if generated >= q.w.target {
                self.free_pages += q.pages;
                done.push((q.w.id, q.w.prompt, generated));
            } else {
                let d = Decoding { id: q.w.id, prompt: q.w.prompt, target: q.w.target, g0: self.steps - generated as i64, pages: q.pages };
                self.insert_decoding(q.seq, d);
            }
        }
    }
}

/// [`super::run_closed_counted`]'s run: `requests` in order with `concurrency` in flight, with
/// at most `max_buckets` page buckets ([`MAX_PAGE_BUCKETS`]; the tests also run pages larger than
/// the buckets).
pub(super) fn run(
    profile: &Profile,
    cost: &dyn StepCost,
    requests: &[Lengths],
    concurrency: u32,
    finished: Option<&std::sync::atomic::AtomicU64>,
    max_buckets: u64,
) -> Trace {
    let mut e = Events::new(profile, max_buckets);
    let n = requests.len();
    let (mut sent, mut admitted, mut first) = (vec![f64::NAN; n], vec![f64::NAN; n], vec![f64::NAN; n]);
    let mut tr = Trace { records: Vec::with_capacity(n), ..Trace::default() };
    let mut next = 0usize;
    let mut t = 0.0f64;
    let mut submit = |e: &mut Events, t: f64, tr: &mut Trace, sent: &mut [f64]| {
        while next < n {
            let id = next;
            next += 1;
            if e.submit(id, requests[id]) {
                sent[id] = t;
                return;
            }
            tr.refused += 1;
        }
    };
    for _ in 0..concurrency.max(1) {
        submit(&mut e, t, &mut tr, &mut sent);
    }
    let mut done = Vec::new();
    while let Some((plan, first_new)) = e.plan() {
        // This step's admissions are the newest prompts, at the back.
        for q in e.prefilling.iter().rev().take_while(|q| q.seq >= first_new) {
            let a = &mut admitted[q.w.id];
            if a.is_nan() {
                *a = t;
            }
        }
        tr.peak_running = tr.peak_running.max(e.running() as u32);
        let dt = cost.step(&plan.batch).as_secs_f64();
        let pre = prefill_part(cost, &plan.batch, dt);
        tr.prefill_seconds += pre;
        tr.decode_seconds += dt - pre;
        t += dt;
        e.apply(&plan, t, &mut first, &mut tr, &mut done);
        for (id, input, output) in done.drain(..) {
            tr.records.push(Record { input, output, sent: sent[id], admitted: admitted[id], first_token: first[id], done: t });
            if let Some(f) = finished {
                f.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            submit(&mut e, t, &mut tr, &mut sent);
        }
    }
    tr.seconds = t;
    tr
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_decoding_window_spans_only_the_live_requests_however_many_were_admitted() {
        let d = Decoding { id: 0, prompt: 1, target: 1, g0: 0, pages: 1 };
        let mut w = BySeq::default();
        for seq in 0..10_000u64 {
            w.set(seq, d);
            if seq >= 3 {
                assert!(w.take(seq - 3).is_some());
            }
            assert!(w.slots.len() <= 4, "window of {} slots at seq {seq}", w.slots.len());
            assert_eq!(w.newest(), Some(seq));
        }
        // A hole in the middle stays until the older side finishes; the newest is still the back.
        assert!(w.take(9_998).is_some());
        assert_eq!(w.newest(), Some(9_999));
        assert!(w.take(9_999).is_some());
        assert_eq!(w.newest(), Some(9_997));
        assert_eq!((w.live, w.slots.len()), (1, 1));
    }
}
