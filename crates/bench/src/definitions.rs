//! The same records under other tools' metric definitions, so a
//! user can check servetune's numbers side by side with the tool they know.

use serde::Serialize;

use crate::record::RequestRecord;
use crate::stats::{Recorder, Summary};

/// Whose definitions to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Definitions {
    /// sglang's `bench_serving`.
    Sglang,
    /// vLLM's `benchmark_serving`.
    Vllm,
    /// NVIDIA AIPerf.
    Aiperf,
    /// GuideLLM.
    Guidellm,
}

impl Definitions {
    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Definitions::Sglang => "sglang",
            Definitions::Vllm => "vllm",
            Definitions::Aiperf => "aiperf",
            Definitions::Guidellm => "guidellm",
        }
    }
}

/// One metric under a tool's definition.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct DefinedMetric {
    /// The metric's name in that tool.
    pub name: &'static str,
    /// How that tool defines it.
    pub definition: &'static str,
    /// Its summary, ms.
    pub summary_ms: Summary,
}

/// Computes the latency metrics of `records` (completed, measured) under `d`.
pub fn compute(d: Definitions, records: &[RequestRecord]) -> Vec<DefinedMetric> {
    let ok: Vec<&RequestRecord> = records.iter().filter(|r| !r.warmup && r.ok() && !r.chunks.is_empty()).collect();
    let ms = |ns: u64| ns as f64 / 1e6;
    let mut out = Vec::new();
    let mut add = |name, definition, f: &dyn Fn(&RequestRecord, &mut Recorder)| {
        let mut rec = Recorder::new();
        for r in &ok {
            f(r, &mut rec);
        }
        out.push(DefinedMetric { name, definition, summary_ms: rec.summary() });
    };
    let first = |r: &RequestRecord| r.chunks[0].at_ns;
    let last = |r: &RequestRecord| r.chunks[r.chunks.len() - 1].at_ns;
    let n = |r: &RequestRecord| r.output_tokens();
    match d {
        Definitions::Sglang | Definitions::Vllm => {
            add("ttft", "first chunk with content - request start (actual send; no correction)", &|r, h| {
                h.record_ns(first(r) - r.actual_ns.min(first(r)))
            });
            add("itl", "gaps between chunks, pooled over all requests", &|r, h| {
                r.chunks.windows(2).for_each(|w| h.record_ns(w[1].at_ns - w[0].at_ns))
            });
            add("tpot", "(E2E - TTFT) / (output tokens - 1)", &|r, h| {
                if n(r) >= 2 {
                    h.record_ms(ms(r.end_ns - first(r)) / (n(r) - 1) as f64)
                }
            });
            add("e2e", "response end - request start (actual send)", &|r, h| h.record_ns(r.end_ns - r.actual_ns.min(r.end_ns)));
        }
        Definitions::Aiperf => {
            add("ttft", "first response - request start (actual send)", &|r, h| h.record_ns(first(r) - r.actual_ns.min(first(r))));
            add("ttst", "second token-carrying response - request start", &|r, h| {
                if r.chunks.len() >= 2 {
                    h.record_ns(r.chunks[1].at_ns - r.actual_ns.min(r.chunks[1].at_ns))
                }
            });
            add("itl", "(E2E - TTFT) / (output tokens - 1), per request", &|r, h| {
                if n(r) >= 2 {
                    h.record_ms(ms(r.end_ns - first(r)) / (n(r) - 1) as f64)
                }
            });
            add("e2e", "response end - request start", &|r, h| h.record_ns(r.end_ns - r.actual_ns.min(r.end_ns)));
        }
        Definitions::Guidellm => {
            add("ttft", "first token - request start (actual send)", &|r, h| h.record_ns(first(r) - r.actual_ns.min(first(r))));
            add("itl", "(last token - first token) / (output tokens - 1), per request", &|r, h| {
                if n(r) >= 2 {
                    h.record_ms(ms(last(r) - first(r)) / (n(r) - 1) as f64)
                }
            });
            add("tpot", "(last token - request start) / output tokens (includes TTFT)", &|r, h| {
                if n(r) >= 1 {
                    h.record_ms(ms(last(r) - r.actual_ns.min(last(r))) / n(r) as f64)
                }
            });
            add("e2e", "response end - request start", &|r, h| h.record_ns(r.end_ns - r.actual_ns.min(r.end_ns)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Chunk;

    const MS: u64 = 1_000_000;

    fn r() -> RequestRecord {
        // Intended 0, sent 10 ms, tokens at 50/60/70 ms, end 70 ms.
        let mut r = RequestRecord::new(0, false, 0, 1, 3);
        r.actual_ns = 10 * MS;
        r.end_ns = 70 * MS;
        r.chunks = [50, 60, 70].iter().map(|&t| Chunk { at_ns: t * MS, tokens: 1, content: true }).collect();
        r.output_tokens_chunks = 3;
        r
    }

    fn get(v: &[DefinedMetric], name: &str) -> f64 {
        v.iter().find(|m| m.name == name).map(|m| m.summary_ms.p50).unwrap_or(f64::NAN)
    }

    #[test]
    fn each_tool_definition_gives_its_number() {
        let recs = [r()];
        let v = compute(Definitions::Vllm, &recs);
        assert!((get(&v, "ttft") - 40.0).abs() < 0.1);
        assert!((get(&v, "tpot") - 10.0).abs() < 0.02);
        let g = compute(Definitions::Guidellm, &recs);
        assert!((get(&g, "tpot") - 20.0).abs() < 0.05, "(70-10)/3"); // includes TTFT
        let a = compute(Definitions::Aiperf, &recs);
        assert!((get(&a, "ttst") - 50.0).abs() < 0.1);
    }
}
