//! The engine as a pure state machine: a FCFS waiting queue, admission under
//! `max_running_requests` and a paged KV cache, chunked prefill under a per-step token budget,
//! one decode token per running request in each step that decodes, and recompute preemption when
//! the KV cache runs out. Time is not read here: the caller asks for a step, times it with a
//! [`StepCost`], and applies it. That makes the engine testable in virtual time and drivable in
//! real time.
//!
//! Scheduling ([`Scheduling`]): `mixed` fills each step's token budget with one decode token per
//! running request and then prompt chunks (vLLM V1, TensorRT-LLM); `prefill-first` runs prompt
//! chunks alone while any admitted prompt is unfinished, and the decoding requests wait (sglang's
//! default, without `--enable-mixed-chunk`).
//!
//! KV policy (documented behaviour): admission reserves the prompt's pages plus one; decoding grows
//! a request page by page. When a decode step needs a page and none is free, the most recently
//! admitted running request is preempted: its pages are freed and it returns to the head of the
//! queue, to recompute its prompt and the tokens it already produced when readmitted (vLLM's
//! recompute preemption; sglang calls it retraction). Requests that could never fit are refused
//! at submission.

use std::collections::VecDeque;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::cost::{Profile, Scheduling, StepBatch, StepCost};

/// A request as the engine sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineRequest {
    /// Unique per server (the arrival number).
    pub id: u64,
    /// Prompt length in tokens.
    pub prompt_tokens: u32,
    /// Output limit in tokens.
    pub max_tokens: u32,
    /// No EOS before this many output tokens.
    pub min_tokens: u32,
    /// Generate past EOS up to `max_tokens`.
    pub ignore_eos: bool,
}

/// Why a request finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finish {
    /// Reached `max_tokens`.
    Length,
    /// Sampled EOS.
    Stop,
}

impl Finish {
    /// The OpenAI `finish_reason` string.
    pub fn as_str(self) -> &'static str {
        match self {
            Finish::Length => "length",
            Finish::Stop => "stop",
        }
    }
}

/// What a step produced for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Emit {
    /// One output token (the `index`-th, from 0).
    Token {
        /// The request.
        id: u64,
        /// The token's position in the output, from 0.
        index: u32,
    },
    /// The request is done after its last token.
    Done {
        /// The request.
        id: u64,
        /// Why it finished.
        finish: Finish,
        /// Prompt length in tokens.
        prompt_tokens: u32,
        /// Output tokens generated.
        completion_tokens: u32,
    },
}

#[derive(Debug, Clone)]
struct Req {
    r: EngineRequest,
    /// Output tokens this request will produce.
    target: u32,
    generated: u32,
    /// Tokens to prefill on (re)admission: the prompt, plus generated tokens after a preemption.
    prefill_len: u32,
    prefilled: u32,
    pages: u64,
}

impl Req {
    fn kv_len(&self) -> u64 {
        if self.prefilled < self.prefill_len {
            self.prefilled as u64
        } else {
            (self.r.prompt_tokens + self.generated) as u64
        }
    }
}

/// What one running request does in a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Idle,
    Decode,
    Prefill(u32),
}

/// The batch of one step, as planned.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StepPlan {
    /// What the step computes, for its cost.
    pub batch: StepBatch,
    /// Per running request, in order: (id, action). `apply` expects the running set unchanged.
    actions: Vec<(u64, Action)>,
}

/// Counters and gauges for metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct EngineStats {
    /// Requests in the running batch.
    pub running: usize,
    /// Requests waiting for admission.
    pub queued: usize,
    /// KV pages in use.
    pub kv_used_pages: u64,
    /// KV pages in all.
    pub kv_total_pages: u64,
    /// Requests preempted (KV freed, requeued) since start.
    pub preemptions: u64,
    /// Prompt tokens prefilled since start.
    pub prompt_tokens: u64,
    /// Output tokens generated since start.
    pub generation_tokens: u64,
    /// Steps run since start.
    pub steps: u64,
}

/// The simulated engine.
#[derive(Debug)]
pub struct Engine {
    p: Profile,
    waiting: VecDeque<Req>,
    running: Vec<Req>,
    free_pages: u64,
    total_pages: u64,
    seed: u64,
    stats: EngineStats,
}

/// A request the engine can never serve.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

impl Engine {
    /// An idle engine for `p`; `seed` places EOS.
    pub fn new(p: Profile, seed: u64) -> Self {
        let total_pages = p.kv_tokens / p.page_size as u64;
        Self { waiting: VecDeque::new(), running: Vec::new(), free_pages: total_pages, total_pages, seed, stats: EngineStats::default(), p }
    }

    /// The deployment it simulates.
    pub fn profile(&self) -> &Profile {
        &self.p
    }

    fn pages(&self, tokens: u64) -> u64 {
        tokens.div_ceil(self.p.page_size as u64)
    }

    /// Output length: `max_tokens` with `ignore_eos`; otherwise EOS falls geometrically with mean
    /// `eos_mean_tokens`, seeded by the request id, at least `min_tokens`.
    fn target(&self, r: &EngineRequest) -> u32 {
        if r.ignore_eos {
            return r.max_tokens;
        }
        let mut rng = StdRng::seed_from_u64(self.seed ^ r.id.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let p = 1.0 / self.p.eos_mean_tokens.max(1) as f64;
        let u: f64 = rng.gen_range(f64::MIN_POSITIVE..1.0);
        let n = (u.ln() / (1.0 - p).ln()).ceil().max(1.0) as u32;
        n.clamp(r.min_tokens.max(1), r.max_tokens)
    }

    /// Queues a request, or refuses one that could never run.
    pub fn submit(&mut self, r: EngineRequest) -> Result<(), Refused> {
        if r.max_tokens == 0 {
            return Err(Refused("max_tokens must be at least 1".into()));
        }
        let need = r.prompt_tokens as u64 + r.max_tokens as u64;
        if self.pages(need) > self.total_pages {
            return Err(Refused(format!(
                "this request needs up to {need} tokens of KV cache (prompt {} + max_tokens {}) but the whole cache holds {} tokens",
                r.prompt_tokens, r.max_tokens, self.p.kv_tokens
            )));
        }
        let target = self.target(&r);
        self.waiting.push_back(Req { r, target, generated: 0, prefill_len: r.prompt_tokens.max(1), prefilled: 0, pages: 0 });
        Ok(())
    }

    /// Drops a request (its client went away).
    pub fn abort(&mut self, id: u64) {
        if let Some(i) = self.running.iter().position(|q| q.r.id == id) {
            let q = self.running.remove(i);
            self.free_pages += q.pages;
        }
        self.waiting.retain(|q| q.r.id != id);
    }

    /// The ids of the running requests (admitted, holding KV), oldest first.
    pub fn running_ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.running.iter().map(|q| q.r.id)
    }

    /// Nothing running and nothing waiting.
    pub fn is_idle(&self) -> bool {
        self.running.is_empty() && self.waiting.is_empty()
    }

    /// The counters and gauges now.
    pub fn stats(&self) -> EngineStats {
        EngineStats {
            running: self.running.len(),
            queued: self.waiting.len(),
            kv_used_pages: self.total_pages - self.free_pages,
            kv_total_pages: self.total_pages,
            ..self.stats
        }
    }

    /// Admits what fits, secures KV for the decode tokens (preempting if needed), and composes the
    /// next step. `None` when there is nothing to do.
    pub fn plan(&mut self) -> Option<StepPlan> {
        // Admission, FCFS; the head of the queue blocks those behind it.
        while self.running.len() < self.p.max_running_requests as usize {
            let Some(head) = self.waiting.front() else {
                break;
            };
            let need = self.pages(head.prefill_len as u64 + 1);
            if need > self.free_pages {
                break;
            }
            let Some(mut q) = self.waiting.pop_front() else {
                break;
            };
            q.pages = need;
            q.prefilled = 0;
            self.free_pages -= need;
            self.running.push(q);
        }
        // Prefill-first: while a prompt is unfinished the step carries prompt chunks only.
        let hold_decode = self.p.scheduling == Scheduling::PrefillFirst && self.running.iter().any(|q| q.prefilled < q.prefill_len);
        // Decoding requests need room for one more token each (not in a step that holds them);
        // oldest first.
        let mut i = 0;
        while i < self.running.len() && !hold_decode {
            let q = &self.running[i];
            if q.prefilled >= q.prefill_len && self.pages(q.kv_len() + 1) > q.pages {
                if self.free_pages == 0 {
                    // Preempt the newest running request (possibly this one).
                    let Some(mut v) = self.running.pop() else {
                        break;
                    };
                    self.free_pages += v.pages;
                    v.pages = 0;
                    v.prefill_len = v.r.prompt_tokens + v.generated;
                    v.prefilled = 0;
                    self.waiting.push_front(v);
                    self.stats.preemptions += 1;
                    continue; // retry the same index (it may have been the one preempted)
                }
                self.free_pages -= 1;
                self.running[i].pages += 1;
            }
            i += 1;
        }
        if self.running.is_empty() {
            return None;
        }
        let mut plan = StepPlan { batch: StepBatch::default(), actions: Vec::with_capacity(self.running.len()) };
        let mut budget = self.p.chunked_prefill_size as i64;
        for q in &self.running {
            if q.prefilled >= q.prefill_len && !hold_decode {
                plan.actions.push((q.r.id, Action::Decode));
                plan.batch.decode_batch += 1;
                plan.batch.context_tokens += q.kv_len() + 1;
                budget -= 1;
            } else {
                plan.actions.push((q.r.id, Action::Idle));
            }
        }
        for (q, a) in self.running.iter().zip(plan.actions.iter_mut()) {
            if a.1 == Action::Idle && q.prefilled < q.prefill_len && budget > 0 {
                let chunk = (q.prefill_len - q.prefilled).min(budget as u32);
                budget -= chunk as i64;
                a.1 = Action::Prefill(chunk);
                plan.batch.prefill_tokens += chunk;
                plan.batch.context_tokens += (q.prefilled + chunk) as u64;
            }
        }
        Some(plan)
    }

    /// The planned step's duration.
    pub fn cost(&self, cost: &dyn StepCost, plan: &StepPlan) -> std::time::Duration {
        cost.step(&plan.batch)
    }

    /// Applies a step: prefill progress, one token per decoding request, and a first token for each
    /// request whose prefill completed. Finished requests free their KV.
    pub fn apply(&mut self, plan: &StepPlan, out: &mut Vec<Emit>) {
        self.stats.steps += 1;
        self.stats.prompt_tokens += plan.batch.prefill_tokens as u64;
        let mut finished = false;
        debug_assert_eq!(plan.actions.len(), self.running.len(), "the running set changed between plan and apply");
        for (q, &(aid, action)) in self.running.iter_mut().zip(&plan.actions) {
            let id = q.r.id;
            if aid != id {
                continue; // defensive: a plan applied to a changed running set does nothing for that slot
            }
            let produce = match action {
                Action::Idle => false,
                Action::Decode => true,
                Action::Prefill(chunk) => {
                    q.prefilled += chunk;
                    q.prefilled >= q.prefill_len
                }
            };
            if produce {
                out.push(Emit::Token { id, index: q.generated });
                q.generated += 1;
                self.stats.generation_tokens += 1;
                if q.generated >= q.target {
                    let finish = if q.generated >= q.r.max_tokens { Finish::Length } else { Finish::Stop };
                    out.push(Emit::Done { id, finish, prompt_tokens: q.r.prompt_tokens, completion_tokens: q.generated });
                    finished = true;
                }
            }
        }
        if finished {
            let mut freed = 0;
            self.running.retain(|q| {
                let done = q.generated >= q.target;
                if done {
                    freed += q.pages;
                }
                !done
            });
            self.free_pages += freed;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::{preset, ParametricCost};

    fn profile(max_running: u32, kv_tokens: u64) -> Profile {
        Profile {
            name: "t".into(),
            model: "m".into(),
            tp_size: 1,
            max_running_requests: max_running,
            kv_tokens,
            page_size: 16,
            chunked_prefill_size: 256,
            eos_mean_tokens: 32,
            scheduling: crate::cost::Scheduling::Mixed,
            cost: ParametricCost { overhead_ms: 1.0, per_decode_token_ms: 0.1, per_prefill_token_ms: 0.001, per_context_token_us: 0.0 },
            moe_efficiency: None,
        }
    }

    fn req(id: u64, prompt: u32, max: u32) -> EngineRequest {
        EngineRequest { id, prompt_tokens: prompt, max_tokens: max, min_tokens: 0, ignore_eos: true }
    }

    /// Runs to completion; returns the emits per step.
    fn run(e: &mut Engine) -> Vec<Vec<Emit>> {
        let mut steps = Vec::new();
        while let Some(p) = e.plan() {
            let mut out = Vec::new();
            e.apply(&p, &mut out);
            steps.push(out);
            assert!(steps.len() < 100_000, "no progress");
        }
        steps
    }

    #[test]
    fn chunked_prefill_then_one_token_per_step() {
        let mut e = Engine::new(profile(8, 1 << 16), 1);
        e.submit(req(1, 600, 4)).expect("submit");
        let steps = run(&mut e);
        // 600 prompt tokens at 256 per step: 3 prefill steps, the last emits token 0; then 3 decodes.
        assert_eq!(steps.len(), 6);
        assert!(steps[0].is_empty() && steps[1].is_empty());
        assert_eq!(steps[2], vec![Emit::Token { id: 1, index: 0 }]);
        assert_eq!(steps[5].last(), Some(&Emit::Done { id: 1, finish: Finish::Length, prompt_tokens: 600, completion_tokens: 4 }));
        assert_eq!(e.stats().kv_used_pages, 0, "KV freed");
    }

    #[test]
    fn max_running_requests_caps_the_batch_and_queues_the_rest() {
        let mut e = Engine::new(profile(2, 1 << 16), 1);
        for i in 0..5 {
            e.submit(req(i, 10, 3)).expect("submit");
        }
        let p = e.plan().expect("plan");
        assert_eq!(e.stats().running, 2);
        assert_eq!(e.stats().queued, 3);
        assert_eq!(p.batch.prefill_tokens, 20);
        let steps = run(&mut e);
        let done = steps.iter().flatten().filter(|x| matches!(x, Emit::Done { .. })).count();
        assert_eq!(done, 5, "every queued request is admitted and finishes in turn");
    }

    #[test]
    fn kv_exhaustion_queues_admission_and_preempts_decode() {
        // 8 pages of 16 tokens; each request needs 2 pages to start and grows to 4. Under either
        // scheduling (prefill-first also re-prefills the preempted requests before decoding).
        for scheduling in [Scheduling::Mixed, Scheduling::PrefillFirst] {
            let mut e = Engine::new(Profile { scheduling, ..profile(16, 128) }, 1);
            for i in 0..4 {
                e.submit(req(i, 20, 40)).expect("submit");
            }
            e.plan().expect("plan");
            assert_eq!(e.stats().running, 4);
            let steps = run(&mut e);
            assert!(e.stats().preemptions > 0, "{scheduling:?}: growth beyond the cache preempts");
            let done: Vec<u32> = steps
                .iter()
                .flatten()
                .filter_map(|x| if let Emit::Done { completion_tokens, .. } = x { Some(*completion_tokens) } else { None })
                .collect();
            assert_eq!(done.len(), 4, "{scheduling:?}: preempted requests recompute and still finish: {done:?}");
            assert!(done.iter().all(|&n| n == 40));
            assert_eq!(e.stats().kv_used_pages, 0);
        }
    }

    /// Emitted tokens of request `id` per step.
    fn tokens_of(steps: &[Vec<Emit>], id: u64) -> Vec<usize> {
        steps.iter().map(|s| s.iter().filter(|x| matches!(x, Emit::Token { id: i, .. } if *i == id)).count()).collect()
    }

    #[test]
    fn prefill_first_holds_decode_while_a_prompt_is_unfinished() {
        // Request 0 decodes; request 1's 600-token prompt arrives and needs three 256-token chunks.
        let run_with = |scheduling| {
            let mut e = Engine::new(Profile { scheduling, ..profile(8, 1 << 16) }, 1);
            e.submit(req(0, 10, 20)).expect("submit");
            let mut steps = Vec::new();
            for _ in 0..2 {
                let p = e.plan().expect("plan");
                let mut out = Vec::new();
                e.apply(&p, &mut out);
                steps.push(out);
            }
            e.submit(req(1, 600, 4)).expect("submit");
            let p = e.plan().expect("plan");
            let batch = p.batch;
            let mut out = Vec::new();
            e.apply(&p, &mut out);
            steps.push(out);
            steps.extend(run(&mut e));
            (tokens_of(&steps, 0), batch)
        };
        let (held, batch) = run_with(Scheduling::PrefillFirst);
        assert_eq!((batch.decode_batch, batch.prefill_tokens), (0, 256), "a prefill-only step: {batch:?}");
        assert_eq!(&held[..6], &[1, 1, 0, 0, 0, 1], "request 0 waits out all three of request 1's chunks");
        let (mixed, batch) = run_with(Scheduling::Mixed);
        assert_eq!((batch.decode_batch, batch.prefill_tokens), (1, 255), "decode and a chunk share the budget: {batch:?}");
        assert_eq!(&mixed[..6], &[1, 1, 1, 1, 1, 1], "request 0 decodes in every step");
        assert_eq!(held.iter().sum::<usize>(), 20);
        assert_eq!(mixed.iter().sum::<usize>(), 20);
    }

    #[test]
    fn prefill_first_keeps_a_burst_of_equal_requests_in_step() {
        // Four equal requests sent at once, one 256-token chunk each: prefill-first prefills all four
        // before any decodes, so they finish in the same step; mixed lets the first ones run ahead.
        let finish_steps = |scheduling| {
            let mut e = Engine::new(Profile { scheduling, ..profile(8, 1 << 16) }, 1);
            for i in 0..4 {
                e.submit(req(i, 256, 8)).expect("submit");
            }
            let steps = run(&mut e);
            let mut at: Vec<usize> = (0..4)
                .map(|id| steps.iter().position(|s| s.iter().any(|x| matches!(x, Emit::Done { id: i, .. } if *i == id))).expect("done"))
                .collect();
            at.sort_unstable();
            at.dedup();
            at
        };
        assert_eq!(finish_steps(Scheduling::PrefillFirst).len(), 1, "all four finish in one step");
        assert_eq!(finish_steps(Scheduling::Mixed).len(), 4, "each finishes in a step of its own");
    }

    #[test]
    fn a_request_larger_than_the_cache_is_refused() {
        let mut e = Engine::new(profile(4, 256), 1);
        let err = e.submit(req(1, 250, 100)).expect_err("too big");
        assert!(err.0.contains("whole cache holds 256 tokens"), "{err}");
    }

    #[test]
    fn eos_positions_are_seeded_and_bounded() {
        let p = profile(4, 1 << 16);
        let a = Engine::new(p.clone(), 7);
        let b = Engine::new(p.clone(), 7);
        let r = |id| EngineRequest { id, prompt_tokens: 1, max_tokens: 100, min_tokens: 5, ignore_eos: false };
        let ta: Vec<u32> = (0..50).map(|i| a.target(&r(i))).collect();
        let tb: Vec<u32> = (0..50).map(|i| b.target(&r(i))).collect();
        assert_eq!(ta, tb);
        assert!(ta.iter().all(|&t| (5..=100).contains(&t)));
        let mean = ta.iter().sum::<u32>() as f64 / 50.0;
        assert!(mean > 15.0 && mean < 50.0, "mean {mean} near 32");
    }

    #[test]
    fn reference_presets_are_valid() {
        for n in ["reference-kvm", "reference-lxc", "tiny"] {
            preset(n).expect("preset").validate().expect("valid");
        }
    }
}
