//! The virtual run's tests, and the engine-driven run its event-driven form is held to.

use super::*;
use crate::cost::{preset, ParametricCost, Scheduling};
use crate::engine::{Emit, Engine, EngineRequest};
use proptest::prelude::*;

#[test]
fn reference_presets_hit_their_documented_plateaus() {
    // docs/design.md: 485 tok/s at concurrency 64 in the KVM guest; ~806 tok/s plateau in LXC.
    for (name, want) in [("reference-kvm", 485.0), ("reference-lxc", 806.0)] {
        let p = preset(name).expect("preset");
        let at64 = closed_loop(&p, &p.cost, 64, 256, 64, 256).output_tokens_per_s;
        let at256 = closed_loop(&p, &p.cost, 256, 256, 64, 1024).output_tokens_per_s;
        let at8 = closed_loop(&p, &p.cost, 8, 256, 64, 32).output_tokens_per_s;
        assert!((at64 - want).abs() / want < 0.03, "{name}: {at64:.0} tok/s at c=64, want {want}");
        assert!((at256 - at64).abs() / at64 < 0.03, "{name}: plateau beyond 64 ({at256:.0})");
        assert!(at8 < at64 * 0.6, "{name}: still rising below the plateau ({at8:.0})");
    }
}

#[test]
fn tpot_at_concurrency_one_is_the_step_time() {
    let p = preset("reference-kvm").expect("preset");
    let r = closed_loop(&p, &p.cost, 1, 16, 64, 4);
    let step = p.cost.step(&crate::cost::StepBatch { prefill_tokens: 0, decode_batch: 1, context_tokens: 16 + 32 }).as_secs_f64() * 1e3;
    assert!((r.tpot_ms - step).abs() / step < 0.01, "{} vs {step}", r.tpot_ms);
}

// The reference: the engine's own plan/apply loop, one request at a time.
/// Submits the next request that the engine takes at time `t` (a refused one is counted and the
/// one after it tried), recording when it was sent.
fn submit_next(e: &mut Engine, requests: &[Lengths], t: f64, next: &mut usize, sent: &mut [f64], tr: &mut Trace) {
    while *next < requests.len() {
        let (id, l) = (*next, requests[*next]);
        *next += 1;
        let r =
            EngineRequest { id: id as u64, prompt_tokens: l.input.max(1), max_tokens: l.output.max(1), min_tokens: 0, ignore_eos: true };
        if e.submit(r).is_ok() {
            sent[id] = t;
            return;
        }
        tr.refused += 1;
    }
}

/// The closed loop driven by the engine's own `plan` and `apply`, every running request touched
/// in every step: what [`run_closed`] must reproduce.
fn run_closed_engine(profile: &Profile, cost: &dyn StepCost, requests: &[Lengths], concurrency: u32) -> Trace {
    let mut e = Engine::new(profile.clone(), 0);
    let n = requests.len();
    let (mut sent, mut admitted, mut first) = (vec![f64::NAN; n], vec![f64::NAN; n], vec![f64::NAN; n]);
    let mut tr = Trace::default();
    let mut next = 0usize;
    let mut t = 0.0f64;
    let submit = |e: &mut Engine, t: f64, next: &mut usize, sent: &mut [f64], tr: &mut Trace| submit_next(e, requests, t, next, sent, tr);
    for _ in 0..concurrency.max(1) {
        submit(&mut e, t, &mut next, &mut sent, &mut tr);
    }
    let mut out = Vec::new();
    while let Some(plan) = e.plan() {
        let mut running = 0u32;
        for id in e.running_ids() {
            running += 1;
            let a = &mut admitted[id as usize];
            if a.is_nan() {
                *a = t;
            }
        }
        tr.peak_running = tr.peak_running.max(running);
        let dt = e.cost(cost, &plan).as_secs_f64();
        let pre = prefill_part(cost, &plan.batch, dt);
        tr.prefill_seconds += pre;
        tr.decode_seconds += dt - pre;
        t += dt;
        e.apply(&plan, &mut out);
        for x in out.drain(..) {
            match x {
                Emit::Token { id, index } => {
                    tr.output_tokens += 1;
                    if index == 0 {
                        first[id as usize] = t;
                    } else {
                        tr.decode_tokens += 1;
                    }
                }
                Emit::Done { id, prompt_tokens, completion_tokens, .. } => {
                    let i = id as usize;
                    let rec = Record {
                        input: prompt_tokens,
                        output: completion_tokens,
                        sent: sent[i],
                        admitted: admitted[i],
                        first_token: first[i],
                        done: t,
                    };
                    tr.records.push(rec);
                    submit(&mut e, t, &mut next, &mut sent, &mut tr);
                }
            }
        }
    }
    tr.seconds = t;
    tr
}

fn profile(max_running: u32, kv_tokens: u64, page_size: u32, chunk: u32, scheduling: Scheduling) -> Profile {
    Profile {
        name: "events".into(),
        model: "m".into(),
        tp_size: 1,
        max_running_requests: max_running,
        kv_tokens,
        page_size,
        chunked_prefill_size: chunk,
        eos_mean_tokens: 16,
        scheduling,
        cost: ParametricCost { overhead_ms: 5.0, per_decode_token_ms: 0.05, per_prefill_token_ms: 0.02, per_context_token_us: 0.3 },
        moe_efficiency: None,
    }
}

fn lengths() -> impl Strategy<Value = Vec<Lengths>> {
    prop::collection::vec((1u32..300, 1u32..90).prop_map(|(input, output)| Lengths { input, output }), 1..120)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// Small caches and pages force preemptions, small budgets chunk prompts across steps, pages
    /// larger than the page buckets (3 of them, half the cases) run them modulo, and
    /// both step compositions run: the event-driven run's trace is the engine's, every figure
    /// equal (the same step batches in the same order give the same floating-point sums).
    #[test]
    fn the_event_driven_run_reproduces_the_engines_trace_exactly(
        reqs in lengths(),
        concurrency in 1u32..64,
        max_running in 1u32..48,
        kv_tokens in 64u64..4000,
        page_size in prop::sample::select(vec![1u32, 4, 16, 64, 2048]),
        chunk in 1u32..600,
        mixed in any::<bool>(),
        few_buckets in any::<bool>(),
    ) {
        let scheduling = if mixed { Scheduling::Mixed } else { Scheduling::PrefillFirst };
        let p = profile(max_running, kv_tokens, page_size, chunk, scheduling);
        let want = run_closed_engine(&p, &p.cost, &reqs, concurrency);
        // With the default page buckets, and with 3 (every page but 1 is larger than them).
        let got = if few_buckets {
            super::events::run(&p, &p.cost, &reqs, concurrency, None, 3)
        } else {
            run_closed(&p, &p.cost, &reqs, concurrency)
        };
        prop_assert_eq!(got.records.len(), want.records.len());
        for (g, w) in got.records.iter().zip(&want.records) {
            // NaN-safe: compare the bits (a request never admitted keeps NaN in both).
            let bits = |r: &Record| (r.input, r.output, r.sent.to_bits(), r.admitted.to_bits(), r.first_token.to_bits(), r.done.to_bits());
            prop_assert_eq!(bits(g), bits(w));
        }
        prop_assert_eq!(
            (got.refused, got.output_tokens, got.decode_tokens, got.peak_running),
            (want.refused, want.output_tokens, want.decode_tokens, want.peak_running)
        );
        prop_assert_eq!(
            (got.seconds.to_bits(), got.prefill_seconds.to_bits(), got.decode_seconds.to_bits()),
            (want.seconds.to_bits(), want.prefill_seconds.to_bits(), want.decode_seconds.to_bits())
        );
    }
}

#[test]
fn the_engines_reference_run_preempts_in_the_cases_the_property_test_draws() {
    // The property test is only as strong as its cases: a small cache under many requests makes
    // the engine preempt (a request then produces more tokens than it needs, recomputing).
    let p = profile(32, 256, 16, 64, Scheduling::Mixed);
    let reqs = vec![Lengths { input: 40, output: 60 }; 40];
    let mut e = Engine::new(p.clone(), 0);
    for (i, l) in reqs.iter().enumerate() {
        e.submit(EngineRequest { id: i as u64, prompt_tokens: l.input, max_tokens: l.output, min_tokens: 0, ignore_eos: true })
            .expect("fits");
    }
    let mut out = Vec::new();
    while let Some(plan) = e.plan() {
        e.apply(&plan, &mut out);
    }
    assert!(e.stats().preemptions > 0, "no preemption: the property test's small caches would not exercise it");
    assert!(out.iter().filter(|x| matches!(x, Emit::Done { .. })).count() == 40);
}
