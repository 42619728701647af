//! Feasible plans over the given GPUs, ranked by output throughput under an SLO; fixes (link,
//! overlap, kernels) ranked by their gain; what-if comparisons.

use serde::Serialize;
use servetune_stats::{Slo, SloMetric};

use crate::interval::Interval;
use crate::launch::Launch;
use crate::predict::{Bottleneck, Overlap, Plan, Point, RunningLimit, Scenario};
use crate::workload::{VirtualBench, Workload};

/// How a plan's best operating point is scored: the steady state alone (`None`), or what a
/// benchmark client running the workload would measure there, the workload run in virtual time
/// by the bench (`servetune plan` passes the simulator's engine).
pub type Client<'a> = Option<(&'a dyn VirtualBench, &'a Workload)>;

/// The concurrencies ranking considers (the range the user asked about).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
pub struct ConcurrencyRange {
    /// Concurrencies above this are not considered (None: up to what the plan runs at once, its
    /// KV cache or running cap: [`Scenario::running_limit`]).
    pub max: Option<u32>,
}

/// Whether a predicted point meets every objective. The model is deterministic, so the percentile
/// is not modelled: the predicted value is compared with the threshold. ITL equals TPOT in a
/// model without jitter; E2E is TTFT plus the remaining tokens at TPOT.
pub fn meets(s: &Scenario, p: &Point, slos: &[Slo]) -> bool {
    slos.iter().all(|o| {
        let v = match o.metric {
            SloMetric::Ttft => p.ttft_ms,
            SloMetric::Tpot | SloMetric::Itl => p.tpot_ms,
            SloMetric::E2e => p.ttft_ms + p.tpot_ms * s.output_len.saturating_sub(1) as f64,
        };
        o.met_by(v)
    })
}

/// A plan's best operating point under the objectives.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Ranked {
    /// The plan.
    pub plan: Plan,
    /// Its label, e.g. `TP4+PP2`.
    pub label: String,
    /// Concurrency giving the most output under the objectives.
    pub concurrency: u32,
    /// Output tokens/s of the whole deployment there.
    pub output_tokens_per_s: f64,
    /// The same per GPU.
    pub tokens_per_s_per_gpu: f64,
    /// Time per output token there, ms.
    pub tpot_ms: f64,
    /// Over the current plan's best under the same objectives (1.0 = equal; None when the current
    /// plan meets no objective, so there is nothing to compare with).
    pub gain: Option<f64>,
    /// What limits it there.
    pub bottleneck: Bottleneck,
    /// How far `output_tokens_per_s` may be off: its family's validation residuals.
    pub interval: Interval,
    /// The low end of `output_tokens_per_s`'s interval.
    pub output_tokens_per_s_low: f64,
    /// The high end.
    pub output_tokens_per_s_high: f64,
    /// Whether its rate is within the model's median error (the interval's) of the best plan's, so
    /// the model cannot tell the two apart: only a measurement can.
    pub tied_with_best: bool,
    /// Why `concurrency` is the best one.
    pub concurrency_reason: ConcurrencyReason,
    /// The highest concurrency looked at for this plan (the asked range, or its KV cache's).
    pub searched_up_to: u32,
    /// The engine's command that serves it as predicted.
    pub launch: Launch,
}

/// Why a plan's best concurrency is where it is.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ConcurrencyReason {
    /// This many requests run at once and more only queue; `limit` says what holds them.
    RunningLimit {
        /// Requests that run at once.
        requests: u32,
        /// What sets `requests`: the KV cache, a stated running cap or the engine's default one.
        limit: RunningLimit,
    },
    /// The range searched ends here (the KV cache holds more).
    RangeEnd {
        /// The end of the range.
        max: u32,
    },
    /// The next concurrency tried gives less output (the step slows more than the batch grows).
    Peak {
        /// The next concurrency tried.
        next: u32,
        /// Its output tokens/s (steady state).
        next_tokens_per_s: f64,
    },
    /// The next concurrency tried misses an objective (`--slo`).
    Objective {
        /// The next concurrency tried.
        next: u32,
    },
}

/// A scenario's best operating point.
#[derive(Debug, Clone, PartialEq)]
pub struct Best {
    /// The concurrency.
    pub concurrency: u32,
    /// The prediction there.
    pub point: Point,
    /// Why there.
    pub why: ConcurrencyReason,
    /// The highest concurrency looked at.
    pub up_to: u32,
}

/// Concurrencies tried: 1, 2, 3, 4, 6, 8, 12, ... (powers of two and 1.5x between) up to `max`,
/// and `max` itself.
fn ladder(max: u32) -> Vec<u32> {
    let mut v: Vec<u32> = (0..17).flat_map(|i| [1u32 << i, (3u32 << i) / 2]).filter(|c| *c >= 1 && *c <= max).collect();
    v.sort_unstable();
    v.dedup();
    if v.last() != Some(&max) && max > 0 {
        v.push(max);
    }
    v
}

/// The fraction of memory bandwidth tuned fused-MoE kernels reach in the model: the tuned-kernel
/// fix's assumption, shared by `plan --rank`'s fixes, the campaign's MoE question and the simulator.
pub const TUNED_MOE_EFFICIENCY: f64 = 0.8;

/// The best throughput of `s` under `slos` within `range`; None when it does not fit or no
/// concurrency meets the objectives.
pub fn best(s: &Scenario, slos: &[Slo], range: ConcurrencyRange) -> Option<Best> {
    s.check_fit().ok()?;
    let (kv, limit) = s.running_limit();
    let cap = range.max.map_or(kv, |m| m.min(kv));
    let steps = ladder(cap);
    let mut best: Option<(usize, Point)> = None;
    for (i, &c) in steps.iter().enumerate() {
        let p = s.point(c);
        if meets(s, &p, slos) && best.as_ref().is_none_or(|(_, b)| p.output_tokens_per_s > b.output_tokens_per_s) {
            best = Some((i, p));
        }
    }
    let (i, point) = best?;
    let why = match steps.get(i + 1) {
        None if cap < kv => ConcurrencyReason::RangeEnd { max: cap },
        None => ConcurrencyReason::RunningLimit { requests: kv, limit },
        Some(&next) => {
            let p = s.point(next);
            if meets(s, &p, slos) {
                ConcurrencyReason::Peak { next, next_tokens_per_s: p.output_tokens_per_s }
            } else {
                ConcurrencyReason::Objective { next }
            }
        }
    };
    Some(Best { concurrency: steps[i], point, why, up_to: cap })
}

/// [`best`], and with a client the workload run at the chosen concurrency
/// ([`Point::client`]): the concurrency is chosen on the steady state, the rate reported is what
/// the client measures there.
pub fn best_with(s: &Scenario, slos: &[Slo], range: ConcurrencyRange, client: Client) -> Option<Best> {
    let mut b = best(s, slos, range)?;
    if let Some((bench, w)) = client {
        b.point.client = Some(bench.run(s, w, b.concurrency));
    }
    Some(b)
}

fn best_tput(s: &Scenario, slos: &[Slo], range: ConcurrencyRange, client: Client) -> f64 {
    best_with(s, slos, range, client).map_or(0.0, |b| crate::report::headline_rate(&b.point))
}

fn divisors(n: u32) -> Vec<u32> {
    (1..=n).filter(|d| n.is_multiple_of(*d)).collect()
}

/// Every plan over `base.plan.gpus` GPUs: TP and PP dividing it, EP off or across TP for MoE, DP
/// attention for MLA MoE models; replicas fill the rest. On several nodes, only plans whose TP
/// groups and replicas divide a node or are whole nodes (so TP within a node with PP or EP across
/// nodes, or TP across whole nodes).
pub fn enumerate(base: &Scenario) -> Vec<Plan> {
    let g = base.plan.gpus;
    let placed = |p: &Plan| {
        base.cluster.as_ref().is_none_or(|c| c.check_group(p.tp, "--tp").is_ok() && c.check_group(p.tp * p.pp, "tp x pp").is_ok())
    };
    let mut out = Vec::new();
    for tp in divisors(g) {
        for pp in divisors(g / tp) {
            let eps: Vec<u32> = if base.model.moe.is_some() && tp > 1 { vec![1, tp] } else { vec![1] };
            for ep in eps {
                // DP attention for MLA MoE models, where the engine has a path for it.
                let dpa: &[bool] = if base.model.moe.is_some()
                    && matches!(base.model.attention, crate::spec::Attention::Mla { .. })
                    && crate::predict::dp_attention_runs(&base.model, base.engine.serving)
                    && tp > 1
                    && ep > 1
                {
                    &[false, true]
                } else {
                    &[false]
                };
                for &dp_attention in dpa {
                    let p = Plan { gpus: g, tp, pp, ep, dp_attention };
                    if p.check(&base.model).is_ok() && placed(&p) {
                        out.push(p);
                    }
                }
            }
        }
    }
    out
}

/// Plans ranked by output tok/s under the objectives within `range`, best first (steady state;
/// the campaign's question, bounded by its sweep).
pub fn rank(base: &Scenario, slos: &[Slo], range: ConcurrencyRange) -> Vec<Ranked> {
    rank_within(base, slos, range, None)
}

/// [`rank_within`], searched further when the best plan's best concurrency sits at the end of
/// `range` and it runs more at once: then every plan is ranked up to what it runs at once
/// (`plan --rank`'s default; each [`Ranked::searched_up_to`] says how far, and a concurrency
/// above `range.max` says the search went on). Concurrencies are chosen on the steady state, so
/// when no plan's sits at the end there, the client's virtual runs are made once.
pub fn rank_with(base: &Scenario, slos: &[Slo], range: ConcurrencyRange, client: Client) -> Vec<Ranked> {
    let at_end = |max: u32, r: &Ranked| r.concurrency >= max && r.searched_up_to == max;
    let Some(max) = range.max else { return rank_within(base, slos, range, client) };
    if client.is_some() && !rank_within(base, slos, range, None).iter().any(|r| at_end(max, r)) {
        return rank_within(base, slos, range, client);
    }
    let ranked = rank_within(base, slos, range, client);
    match ranked.first() {
        Some(top) if at_end(max, top) => rank_within(base, slos, ConcurrencyRange { max: None }, client),
        _ => ranked,
    }
}

/// The range a ranking actually searched: `range`, or the KV caches' when [`rank_with`] went on.
pub fn searched_range(range: ConcurrencyRange, ranked: &[Ranked]) -> ConcurrencyRange {
    match range.max {
        Some(m) if ranked.iter().any(|r| r.searched_up_to > m) => ConcurrencyRange { max: None },
        _ => range,
    }
}

/// [`rank`], each plan's rate what `client` would measure at its best concurrency. Plans are
/// scored on threads of their own (each virtual run is independent).
pub fn rank_within(base: &Scenario, slos: &[Slo], range: ConcurrencyRange, client: Client) -> Vec<Ranked> {
    let plans = enumerate(base);
    let scored: Vec<Option<(Plan, Best)>> = std::thread::scope(|scope| {
        let handles: Vec<_> = plans
            .iter()
            .map(|&plan| {
                scope.spawn(move || {
                    let s = Scenario { plan, ..base.clone() };
                    best_with(&s, slos, range, client).map(|b| (plan, b))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().ok().flatten()).collect()
    });
    // The current plan is one of the enumerated ones when it is valid; else score it alone.
    let current = scored
        .iter()
        .flatten()
        .find(|(p, _)| *p == base.plan)
        .map_or_else(|| best_tput(base, slos, range, client), |(_, b)| crate::report::headline_rate(&b.point));
    let mut out: Vec<Ranked> = scored
        .into_iter()
        .flatten()
        .map(|(plan, Best { concurrency, point: p, why, up_to })| {
            let rate = crate::report::headline_rate(&p);
            // Each plan's own: under a calibration, the calibrated plan's or another plan's.
            let interval = crate::interval::for_scenario(&Scenario { plan, ..base.clone() });
            let (low, high) = interval.of(rate);
            Ranked {
                label: plan.label(),
                plan,
                concurrency,
                output_tokens_per_s: rate,
                tokens_per_s_per_gpu: rate / plan.gpus as f64,
                tpot_ms: p.client.map_or(p.tpot_ms, |c| c.tpot_ms.p50),
                gain: (current > 0.0).then(|| rate / current),
                bottleneck: p.bottleneck,
                interval,
                output_tokens_per_s_low: low,
                output_tokens_per_s_high: high,
                tied_with_best: false,
                concurrency_reason: why,
                searched_up_to: up_to,
                launch: crate::launch::launch(&Scenario { plan, ..base.clone() }, &plan, concurrency),
            }
        })
        .collect();
    out.sort_by(|a, b| b.output_tokens_per_s.total_cmp(&a.output_tokens_per_s));
    mark_ties(&mut out);
    out
}

/// Marks the plans whose rate is within the model's median error of the best plan's: a
/// difference the model cannot vouch for (the errors of two plans on one box are not independent,
/// so the median error, not the whole interval, is the bar).
fn mark_ties(ranked: &mut [Ranked]) {
    // One bar for every plan, the best plan's (the answer prints it): under a calibration the
    // calibrated plan's median error and another plan's differ.
    let Some((top, bar)) = ranked.first().map(|r| (r.output_tokens_per_s, r.interval.median_abs_error)) else { return };
    for r in ranked.iter_mut() {
        r.tied_with_best = r.output_tokens_per_s > 0.0 && top / r.output_tokens_per_s - 1.0 <= bar;
    }
}

/// A change to the deployment and what it buys.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fix {
    /// The change, e.g. "enable GPU peer-to-peer (P2P)".
    pub fix: String,
    /// How to make it.
    pub how: String,
    /// Best output tokens/s with it, under the objectives.
    pub output_tokens_per_s: f64,
    /// Over the current best under the objectives (None when the current plan meets none).
    pub gain: Option<f64>,
}

/// Fixes that keep the model and GPUs: a P2P link, communication overlap, tuned MoE kernels, the
/// best plan. Sorted by gain (steady state).
pub fn fixes(base: &Scenario, slos: &[Slo], range: ConcurrencyRange) -> Vec<Fix> {
    let ranked = rank(base, slos, range);
    fixes_with(base, slos, range, None, &ranked)
}

/// [`fixes`], each rate what `client` would measure at the best concurrency; `ranked` is
/// [`rank_with`]'s answer for the same client (its first plan is the "switch to" fix, and the
/// current plan's rate is taken from it when it is there).
pub fn fixes_with(base: &Scenario, slos: &[Slo], range: ConcurrencyRange, client: Client, ranked: &[Ranked]) -> Vec<Fix> {
    // Over the range the ranking searched, so "switch to" and the other fixes compare alike.
    let range = searched_range(range, ranked);
    let current =
        ranked.iter().find(|r| r.plan == base.plan).map_or_else(|| best_tput(base, slos, range, client), |r| r.output_tokens_per_s);
    let mut cands: Vec<(String, String, Scenario)> = Vec::new();
    // Any host-staged link, catalog or measured (`--fabric`), gains from P2P.
    if let Some(name) = crate::hw::p2p_replacement(base.link.kind) {
        if let Ok(l) = crate::hw::link(name) {
            cands.push((
                "enable GPU peer-to-peer (P2P)".into(),
                "bare metal, an LXC container, or a VM with a P2P clique (x-nv-gpudirect-clique): all-reduces stop staging through host memory".into(),
                Scenario { link: l, ..base.clone() },
            ));
        }
    }
    if let Some((c, net)) = base.cluster.as_ref().filter(|_| base.across_nodes().is_some()).zip(faster_net(base)) {
        let how = format!(
            "{} ({}, {:.1} GB/s per NIC) instead of {} ({:.1} GB/s): the collectives that cross nodes go faster",
            net.name,
            net.kind.describe(),
            net.beta_gbs,
            c.net.name,
            c.net.beta_gbs
        );
        let mut s = base.clone();
        if let Some(sc) = &mut s.cluster {
            sc.net = net.clone();
        }
        cands.push((format!("a faster network between the nodes: {}", net.name), how, s));
    }
    if base.engine.overlap == Overlap::None && base.plan.tp > 1 {
        let mut e = base.engine;
        e.overlap = Overlap::Full;
        cands.push((
            "overlap communication with compute".into(),
            "two-batch overlap or similar, so all-reduces hide behind the other micro-batch's kernels".into(),
            Scenario { engine: e, ..base.clone() },
        ));
    }
    if base.model.moe.is_some() && base.expert_stream_efficiency() < TUNED_MOE_EFFICIENCY {
        let mut e = base.engine;
        e.moe_efficiency = TUNED_MOE_EFFICIENCY;
        e.moe_table = false;
        cands.push((
            "tune the fused-MoE kernels".into(),
            format!(
                "kernel configs for {} experts on {} (the engine's fused-MoE tuning script, where its {} expert kernel takes configs), assuming expert reads then reach 80% of bandwidth (now {:.0}%{})",
                base.model.moe.map_or(0, |m| m.experts),
                base.gpu.name,
                base.quant.experts.name(),
                base.expert_stream_efficiency() * 100.0,
                if base.expert_rate_is_marginal() { ", the kernel's marginal rate" } else { "" }
            ),
            Scenario { engine: e, ..base.clone() },
        ));
    }
    if let Some(fix) = radix_cache_off(base) {
        cands.push(fix);
    }
    let gain = |rate: f64| (current > 0.0).then(|| rate / current);
    let mut out: Vec<Fix> = std::thread::scope(|scope| {
        let handles: Vec<_> = cands
            .into_iter()
            .map(|(fix, how, s)| {
                scope.spawn(move || {
                    let rate = crate::report::headline_rate(&best_with(&s, slos, range, client)?.point);
                    Some(Fix { fix, how, output_tokens_per_s: rate, gain: gain(rate) })
                })
            })
            .collect();
        handles.into_iter().filter_map(|h| h.join().ok().flatten()).collect()
    });
    if let Some(r) = ranked.first().filter(|r| r.plan != base.plan) {
        out.push(Fix {
            fix: format!("switch to {}", r.label),
            how: "the best-ranked plan on the same GPUs".into(),
            output_tokens_per_s: r.output_tokens_per_s,
            gain: gain(r.output_tokens_per_s),
        });
    }
    out.sort_by(|a, b| b.output_tokens_per_s.total_cmp(&a.output_tokens_per_s));
    out
}

/// Where sglang's state pool holds a hybrid model's running requests
/// ([`RunningLimit::StatePool`]) with the radix cache keeping states of its own (0.5.9 and later,
/// where a cache that is off still splits the pool from the memory): the same deployment with
/// `--disable-radix-cache`, where each running request keeps one state.
fn radix_cache_off(base: &Scenario) -> Option<(String, String, Scenario)> {
    let (cap, limit) = base.running_limit();
    let pool = base.state_pool()?;
    if limit != RunningLimit::StatePool || pool.per_running <= 1 {
        return None;
    }
    let mut e = base.engine;
    e.state_pool = Some(e.state_pool?.radix_cache_off()?);
    let s = Scenario { engine: e, ..base.clone() };
    let pool_cap = s.state_running_cap()?;
    let (then, then_by) = s.running_limit();
    Some((
        "turn off sglang's radix cache for this hybrid model".into(),
        format!(
            "--disable-radix-cache: each running request keeps 1 linear-attention state instead of {}, so the state pool allows {pool_cap} running requests instead of {cap} (then {} {then} at once); prompts that share a prefix are prefilled again",
            pool.per_running,
            then_by.words()
        ),
        s,
    ))
}

/// The catalog network one step faster than `base`'s: the least bandwidth per NIC above its own.
fn faster_net(base: &Scenario) -> Option<crate::hw::LinkProfile> {
    let now = base.cluster.as_ref()?.net.beta_gbs;
    crate::hw::net_names()
        .into_iter()
        .filter_map(|n| crate::hw::net(n).ok())
        .filter(|l| l.beta_gbs > now)
        .min_by(|a, b| a.beta_gbs.total_cmp(&b.beta_gbs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::predict::tests::scenario;
    use crate::quant::Dtype;

    #[test]
    fn enumeration_covers_tp_pp_and_ep_and_all_fit_the_gpu_count() {
        let s = scenario("glm-5", Dtype::Nvfp4, "rtx-pro-6000-se", "pcie-host-staged", 8, 8);
        let plans = enumerate(&s);
        assert!(plans.iter().any(|p| p.tp == 4 && p.pp == 2));
        assert!(plans.iter().any(|p| p.tp == 8 && p.ep == 8));
        assert!(plans.iter().all(|p| p.tp * p.pp <= 8 && 8 % (p.tp * p.pp) == 0));
    }

    #[test]
    fn dp_attention_is_offered_to_mla_moe_models_where_the_engine_runs_it() {
        let ds = scenario("deepseek-v3", Dtype::Fp8, "h200", "nvlink", 8, 8);
        assert!(enumerate(&ds).iter().any(|p| p.dp_attention), "DeepSeek-V3: DP attention among the plans");
        let mut kimi = scenario("kimi-linear-48b-a3b", Dtype::Bf16, "h100-sxm", "nvlink", 8, 8);
        assert_eq!(kimi.engine.serving, crate::predict::EngineName::Sglang);
        let plans = enumerate(&kimi);
        assert!(plans.iter().any(|p| p.ep > 1), "Kimi Linear: EP plans");
        assert!(!plans.iter().any(|p| p.dp_attention), "Kimi Linear under sglang: its KDA layers shard over the whole TP group");
        kimi.engine.serving = crate::predict::EngineName::Vllm;
        assert!(enumerate(&kimi).iter().any(|p| p.dp_attention), "Kimi Linear under vLLM: DP attention at TP1");
    }

    /// A bench that measures a fixed fraction of the steady rate, and more of it for TP4 plans, so
    /// a client-measured ranking can differ from the steady one.
    #[derive(Debug)]
    struct Fraction;

    impl VirtualBench for Fraction {
        fn run(&self, s: &Scenario, _: &Workload, concurrency: u32) -> crate::workload::ClientRun {
            let share = if s.plan.tp == 4 { 0.9 } else { 0.5 };
            let steady = s.point(concurrency);
            crate::workload::ClientRun {
                requests: 1,
                output_tokens_per_s: steady.output_tokens_per_s * share,
                total_tokens_per_s: 0.0,
                ttft_ms: crate::workload::Latency::default(),
                tpot_ms: crate::workload::Latency { p50: 7.0, ..Default::default() },
                seconds: 1.0,
                peak_running: concurrency,
                full_batch: concurrency,
                steady_decode_tokens_per_s: steady.output_tokens_per_s,
                effects: crate::workload::ClientEffects::default(),
            }
        }
    }

    #[test]
    fn a_client_ranking_reports_and_orders_by_what_the_client_measures() {
        let s = scenario("glm-5", Dtype::Nvfp4, "rtx-pro-6000-se", "pcie5-p2p", 8, 8);
        let w = Workload {
            requests: None,
            input: crate::workload::LengthDist::Fixed { len: 1024 },
            output: crate::workload::LengthDist::Fixed { len: 1024 },
            seed: 0,
        };
        let range = ConcurrencyRange { max: Some(64) };
        let steady = rank(&s, &[], range);
        let client = rank_within(&s, &[], range, Some((&Fraction, &w)));
        assert_eq!(steady.len(), client.len());
        for r in &client {
            let st = steady.iter().find(|x| x.plan == r.plan).expect("same plans");
            let share = if r.plan.tp == 4 { 0.9 } else { 0.5 };
            assert!((r.output_tokens_per_s - st.output_tokens_per_s * share).abs() < 1e-6, "{r:?}");
            assert_eq!((r.concurrency, r.tpot_ms), (st.concurrency, 7.0));
            // rank_with decides on the steady state whether any plan sits at the range's end.
            assert_eq!((r.searched_up_to, r.concurrency_reason), (st.searched_up_to, st.concurrency_reason));
        }
        assert!(client.windows(2).all(|p| p[0].output_tokens_per_s >= p[1].output_tokens_per_s));
        assert_eq!(client[0].plan.tp, 4, "the bench favours TP4 enough to lead: {client:?}");
        // The fixes compare client rates with the current plan's client rate.
        let fixes = fixes_with(&s, &[], range, Some((&Fraction, &w)), &client);
        let switch = fixes.iter().find(|f| f.fix.starts_with("switch to")).expect("a switch fix");
        let current = client.iter().find(|r| r.plan == s.plan).expect("current plan ranked").output_tokens_per_s;
        assert!((switch.gain.expect("gain") - client[0].output_tokens_per_s / current).abs() < 1e-9);
    }

    /// `rank_with` skips the client's first pass where the steady state shows no plan at the end
    /// of the range: its answer is still the one of ranking with the client and going on when
    /// the client's top plan sits at the end.
    #[test]
    fn rank_with_answers_as_ranking_with_the_client_then_going_on_from_its_top_plan() {
        let s = scenario("glm-5", Dtype::Nvfp4, "rtx-pro-6000-se", "pcie5-p2p", 8, 8);
        let w = Workload::fixed(1024, 1024);
        let client: Client = Some((&Fraction, &w));
        let mut went_on = 0;
        for max in [Some(2), Some(8), Some(16), Some(32), Some(64), Some(128), Some(256), Some(512), Some(100_000), None] {
            let range = ConcurrencyRange { max };
            let first = rank_within(&s, &[], range, client);
            let want = match (max, first.first()) {
                (Some(m), Some(top)) if top.concurrency >= m && top.searched_up_to == m => {
                    went_on += 1;
                    rank_within(&s, &[], ConcurrencyRange { max: None }, client)
                }
                _ => first,
            };
            assert_eq!(rank_with(&s, &[], range, client), want, "range {max:?}");
        }
        assert!(went_on > 0, "no range made the ranking go on: the test would not see that path");
    }

    #[test]
    fn p2p_is_the_top_fix_for_the_host_staged_reference() {
        let s = scenario("glm-5", Dtype::Nvfp4, "rtx-pro-6000-se", "pcie-host-staged", 8, 8);
        let f = fixes(&s, &[], ConcurrencyRange::default());
        assert!(!f.is_empty());
        let p2p = f.iter().find(|x| x.fix.contains("P2P")).expect("p2p fix");
        assert!(p2p.gain.is_some_and(|g| g > 1.2), "{p2p:?}");
    }

    #[test]
    fn a_measured_host_staged_link_gets_the_p2p_fix_too() {
        let mut s = scenario("glm-5", Dtype::Nvfp4, "rtx-pro-6000-se", "pcie-host-staged", 8, 8);
        s.link.name = "measured-host-staged".into();
        s.link.alpha_us = 12.0;
        let f = fixes(&s, &[], ConcurrencyRange::default());
        assert!(f.iter().any(|x| x.fix.contains("P2P")), "{f:?}");
        let p2p = scenario("glm-5", Dtype::Nvfp4, "rtx-pro-6000-se", "pcie5-p2p", 8, 8);
        assert!(!fixes(&p2p, &[], ConcurrencyRange::default()).iter().any(|x| x.fix.contains("P2P")));
    }

    /// Where sglang's state pool holds a hybrid model's running requests, turning its radix cache
    /// off is offered: each request then keeps 1 state, so more run and the rate rises. Not
    /// offered under vLLM (no pool) nor for a model without linear layers.
    #[test]
    fn turning_sglangs_radix_cache_off_is_offered_where_its_state_pool_holds_the_running_requests() {
        let s = scenario("qwen3-next-80b-a3b", Dtype::Bf16, "h200", "nvlink", 2, 2);
        assert_eq!(s.running_limit().1, RunningLimit::StatePool);
        let f = fixes(&s, &[], ConcurrencyRange { max: Some(512) });
        let off = f.iter().find(|x| x.fix.contains("radix cache")).expect("the radix-cache fix");
        let (cap, slots) = (s.state_running_cap().expect("pool"), s.state_slots().expect("pool"));
        assert!(
            off.how.starts_with(&format!(
                "--disable-radix-cache: each running request keeps 1 linear-attention state instead of 5, so the state pool allows {slots} running requests instead of {cap}"
            )),
            "{off:?}"
        );
        // Before 0.5.9 a cache that is off held 512 states: no fix is priced.
        let mut old = s.clone();
        old.engine.state_pool = Some(crate::predict::StatePoolRelease::Split058);
        assert_eq!(old.running_limit().1, RunningLimit::StatePool);
        assert!(!fixes(&old, &[], ConcurrencyRange { max: Some(512) }).iter().any(|x| x.fix.contains("radix cache")));
        assert!(off.gain.is_some_and(|g| g > 1.1), "{off:?}");
        let mut vllm = s.clone();
        vllm.engine = crate::predict::EngineName::Vllm.defaults();
        assert!(!fixes(&vllm, &[], ConcurrencyRange { max: Some(512) }).iter().any(|x| x.fix.contains("radix cache")));
        let dense = scenario("llama-3.1-70b", Dtype::Bf16, "h200", "nvlink", 2, 2);
        assert!(!fixes(&dense, &[], ConcurrencyRange { max: Some(512) }).iter().any(|x| x.fix.contains("radix cache")));
    }

    #[test]
    fn a_tight_tpot_slo_lowers_the_best_concurrency() {
        let s = scenario("glm-5", Dtype::Nvfp4, "rtx-pro-6000-se", "pcie5-p2p", 8, 8);
        let all = ConcurrencyRange::default();
        let free = best(&s, &[], all).expect("fits");
        let slo = servetune_stats::parse_slos("--slo", "tpot:p50<30ms").expect("slo");
        let tight = best(&s, &slo, all).expect("fits");
        assert!(tight.concurrency < free.concurrency, "{} vs {}", tight.concurrency, free.concurrency);
        assert!(tight.point.tpot_ms < 30.0);
    }

    /// Over two 8-GPU nodes on 100 GbE, every ranked plan is placed on the nodes and the best keeps
    /// TP within a node (PP or EP across nodes); on InfiniBand XDR a TP16 plan gains ground.
    #[test]
    fn multi_node_ranking_keeps_tp_within_a_node_on_a_slow_network() {
        let mut s = scenario("deepseek-v3", Dtype::Fp8, "h100-sxm", "nvlink", 16, 8);
        s.plan.pp = 2;
        let eth = crate::predict::tests::on_nodes(s.clone(), "eth-100g", 8);
        let ranked = rank(&eth, &[], ConcurrencyRange { max: Some(256) });
        assert!(!ranked.is_empty());
        assert!(ranked.iter().all(|r| r.plan.tp <= 8 || r.plan.tp % 8 == 0), "{ranked:?}");
        assert!(ranked[0].plan.tp <= 8, "best on 100GbE: {}", ranked[0].label);
        assert!(ranked.iter().any(|r| r.plan.tp == 16), "TP16 across both nodes is ranked too");
        let tp16 =
            |r: &[Ranked]| r.iter().find(|x| x.plan.tp == 16 && x.plan.ep == 1 && !x.plan.dp_attention).map(|x| x.output_tokens_per_s);
        let xdr = rank(&crate::predict::tests::on_nodes(s, "ib-xdr", 8), &[], ConcurrencyRange { max: Some(256) });
        assert!(tp16(&xdr) > tp16(&ranked), "a faster network helps the plan that crosses it");
        let mut tp16_eth = eth.clone();
        tp16_eth.plan = Plan { tp: 16, pp: 1, ..tp16_eth.plan };
        let f = fixes(&tp16_eth, &[], ConcurrencyRange { max: Some(64) });
        let net = f.iter().find(|x| x.fix.contains("faster network")).expect("a network fix for TP16 over 100GbE");
        assert!(net.fix.ends_with("roce-200") && net.gain.is_some_and(|g| g > 1.05), "{net:?}");
        // Nothing crosses nodes when the groups fit in one: no network fix.
        let mut within = eth.clone();
        within.plan = Plan { gpus: 16, tp: 8, pp: 1, ep: 1, dp_attention: false };
        assert!(within.across_nodes().is_none());
        assert!(!fixes(&within, &[], ConcurrencyRange { max: Some(64) }).iter().any(|x| x.fix.contains("network")));
    }
}
