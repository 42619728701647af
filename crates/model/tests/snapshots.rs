//! Snapshots of the plan renderers (terminal and Markdown) on the reference deployment, so a
//! change to what a user reads shows up in review.

use servetune_model::quant::Dtype;
use servetune_model::report::{write_markdown, write_terminal};
use servetune_model::request::LinkSource;
use servetune_model::{build_report, ModelSource, PlanRequest, ScenarioSpec, WhatIf};

fn reference(quant: Option<Dtype>) -> PlanRequest {
    let mut spec = ScenarioSpec::new(ModelSource::Catalog("glm-5".into()), "rtx-pro-6000-se");
    spec.quant.checkpoint = quant;
    spec.link = LinkSource::Catalog("pcie-host-staged".into());
    let mut req = PlanRequest::new(spec);
    req.concurrency = vec![1, 8, 64, 256];
    req.rank = true;
    req.top = 3;
    req.slos = servetune_stats::parse_slos("--slo", "tpot:p50<200ms").expect("slo");
    req.what_ifs = vec![WhatIf::parse("link=pcie5-p2p").expect("what-if")];
    req
}

fn render(req: &PlanRequest, markdown: bool) -> String {
    let r = build_report(req).expect("report");
    let mut out = Vec::new();
    if markdown {
        write_markdown(&r, &mut out).expect("render");
    } else {
        write_terminal(&r, true, &mut out).expect("render");
    }
    String::from_utf8(out).expect("utf-8")
}

#[test]
fn terminal_report_of_the_reference_deployment() {
    insta::assert_snapshot!(render(&reference(Some(Dtype::Nvfp4)), false));
}

#[test]
fn markdown_report_of_the_reference_deployment() {
    insta::assert_snapshot!(render(&reference(Some(Dtype::Nvfp4)), true));
}

#[test]
fn terminal_report_of_a_plan_that_does_not_fit() {
    insta::assert_snapshot!(render(&reference(None), false));
}

/// Two 8-GPU H100 nodes on 100 GbE: the nodes and network in the header, TP16's all-reduces named
/// across the network, and the ranking with what bounds each plan.
#[test]
fn terminal_report_of_a_two_node_plan() {
    let mut spec = ScenarioSpec::new(ModelSource::Catalog("deepseek-v3".into()), "h100-sxm");
    spec.gpus = 16;
    spec.gpus_per_node = Some(8);
    spec.net = Some("eth-100g".into());
    spec.tp = Some(16);
    let mut req = PlanRequest::new(spec);
    req.concurrency = vec![1, 8, 64];
    req.rank = true;
    req.top = 4;
    req.what_ifs = vec![WhatIf::parse("net=ib-ndr").expect("what-if")];
    insta::assert_snapshot!(render(&req, false));
}

/// An early release (sglang 0.4.6): both reports say its steps are scaled, and by what.
#[test]
fn both_reports_of_an_early_release_say_its_step_scale() {
    let mut req = reference(Some(Dtype::Nvfp4));
    req.scenario.engine_version = Some("0.4.6".into());
    for markdown in [false, true] {
        let out = render(&req, markdown);
        let line = out
            .lines()
            .find(|l| l.contains("early release") && l.contains("every step term"))
            .unwrap_or_else(|| panic!("no step-scale line:\n{out}"));
        let scale = format!("every step term x{:.2}", servetune_model::predict::EARLY_RELEASE_STEP_SCALE);
        assert!(line.contains(&scale) && line.contains("VALIDATION.md"), "{line}");
        assert!(!markdown || line.contains("sglang@0.4.6"), "{line}");
    }
}
