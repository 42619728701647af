//! Predictions against public measurements of real deployments and the reference deployment the
//! project started from, with one global set of engine defaults: no case
//! is tuned on its own. `servetune plan --validate` prints this table; VALIDATION.md holds a copy.

use serde::Serialize;

use crate::hw::{gpu, link};
use crate::predict::{Engine, Plan, Scenario};
use crate::quant::{Dtype, Quant};
use crate::spec::catalog;
use crate::ModelError;

/// One measured deployment.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Case {
    /// What was measured.
    pub name: String,
    /// Where it was published.
    pub source: &'static str,
    /// Closed-loop concurrency.
    pub concurrency: u32,
    /// Measured decode output throughput of the whole deployment, tokens/s.
    pub measured_output_tokens_per_s: f64,
    /// The deployment as the model sees it.
    #[serde(skip)]
    pub scenario: Scenario,
}

/// A case's prediction.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    /// The case's name.
    pub case: String,
    /// Where it was published.
    pub source: &'static str,
    /// Closed-loop concurrency.
    pub concurrency: u32,
    /// Predicted output tokens/s.
    pub predicted: f64,
    /// Measured output tokens/s.
    pub measured: f64,
    /// (predicted - measured) / measured.
    pub error: f64,
}

/// The validation table.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Validation {
    /// Always "servetune.validation/1".
    pub schema: &'static str,
    /// One row per case.
    pub rows: Vec<Row>,
    /// Median of |error| (stats' median).
    pub median_abs_error: f64,
    /// The engine defaults every case used.
    pub engine: Engine,
}

/// Every public case is 1k prompt / 1k output tokens.
fn scenario(model: &str, q: Dtype, g: &str, l: &str, tp: u32, engine: Engine) -> Result<Scenario, ModelError> {
    Ok(Scenario {
        model: catalog(model)?,
        quant: Quant::preset(q),
        gpu: gpu(g)?,
        link: link(l)?,
        plan: Plan { gpus: tp, tp, pp: 1, ep: 1, dp_attention: false },
        engine,
        input_len: 1024,
        output_len: 1024,
        max_running: None,
    })
}

/// The public cases, built with `engine`.
pub fn cases(engine: Engine) -> Result<Vec<Case>, ModelError> {
    let mut out = Vec::new();
    // SemiAnalysisAI/InferenceX issue 870: DeepSeek-R1-0528 FP8, 8x H200, TP8, SGLang 0.5.7, 1k/1k;
    // output tok/s per GPU 74.6 / 111.9 / 151.1 / 223.6 at concurrency 8 / 16 / 32 / 64.
    for (c, per_gpu) in [(8, 74.6), (16, 111.9), (32, 151.1), (64, 223.6)] {
        out.push(Case {
            name: format!("DeepSeek-R1 FP8, 8x H200 NVLink, TP8, c={c}"),
            source: "SemiAnalysisAI/InferenceX issue 870",
            concurrency: c,
            measured_output_tokens_per_s: per_gpu * 8.0,
            scenario: scenario("deepseek-v3", Dtype::Fp8, "h200", "nvlink", 8, engine)?,
        });
    }
    // A public SGLang figure (its original source was not recorded): GLM-5-FP8, 8x B200, TP8, SGLang, 1k/1k, concurrency 1, no speculative decoding: TPOT 20.3 ms.
    out.push(Case {
        name: "GLM-5 FP8, 8x B200 NVLink, TP8, c=1".into(),
        source: "public SGLang figure, TPOT 20.3 ms (source not recorded)",
        concurrency: 1,
        measured_output_tokens_per_s: 1000.0 / 20.3,
        scenario: scenario("glm-5", Dtype::Fp8, "b200", "nvlink", 8, engine)?,
    });
    // The reference deployment (the sim preset reference-kvm models it): GLM-5 NVFP4 with sglang TP8 on 8 RTX PRO 6000 in a KVM guest without P2P:
    // 485 tok/s at concurrency 64. In an LXC container with P2P it plateaus at ~806 tok/s (quoted
    // here at concurrency 64, where the KVM figure was measured; the lengths were not published, so
    // 1k/1k is assumed).
    out.push(Case {
        name: "GLM-5 NVFP4, 8x RTX PRO 6000, KVM host-staged, TP8, c=64".into(),
        source: "reference deployment (team measurement)",
        concurrency: 64,
        measured_output_tokens_per_s: 485.0,
        scenario: scenario("glm-5", Dtype::Nvfp4, "rtx-pro-6000-se", "pcie-host-staged", 8, engine)?,
    });
    out.push(Case {
        name: "GLM-5 NVFP4, 8x RTX PRO 6000, LXC P2P, TP8, c=64".into(),
        source: "reference deployment (team measurement)",
        concurrency: 64,
        measured_output_tokens_per_s: 806.0,
        scenario: scenario("glm-5", Dtype::Nvfp4, "rtx-pro-6000-se", "pcie5-p2p", 8, engine)?,
    });
    Ok(out)
}

/// Predicts every case with `engine`.
pub fn run(engine: Engine) -> Result<Validation, ModelError> {
    let rows: Vec<Row> = cases(engine)?
        .into_iter()
        .map(|c| {
            let p = c.scenario.point(c.concurrency).output_tokens_per_s;
            Row {
                case: c.name,
                source: c.source,
                concurrency: c.concurrency,
                predicted: p,
                measured: c.measured_output_tokens_per_s,
                error: (p - c.measured_output_tokens_per_s) / c.measured_output_tokens_per_s,
            }
        })
        .collect();
    let errors: Vec<f64> = rows.iter().map(|r| r.error.abs()).collect();
    let median_abs_error = servetune_stats::median(&errors).unwrap_or(0.0);
    Ok(Validation { schema: "servetune.validation/1", rows, median_abs_error, engine })
}

/// The table as Markdown.
pub fn markdown(v: &Validation) -> String {
    let mut s = String::from("| case | source | predicted tok/s | measured tok/s | error |\n|---|---|---:|---:|---:|\n");
    for r in &v.rows {
        s += &format!("| {} | {} | {:.0} | {:.0} | {:+.1}% |\n", r.case, r.source, r.predicted, r.measured, r.error * 100.0);
    }
    s += &format!(
        "\nMedian absolute error: {:.1}% over {} cases (target: under 20% at concurrency 1 to 64).\n",
        v.median_abs_error * 100.0,
        v.rows.len()
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_error_is_under_twenty_percent_with_the_defaults() {
        let v = run(Engine::default()).expect("cases");
        eprintln!("{}", markdown(&v));
        assert!(v.median_abs_error < 0.20, "{}", markdown(&v));
    }
}
