//! servetune's performance model of model x hardware x parallelism x concurrency.
//!
//! - [`spec`]: model architectures (catalog `config.json` files and `--model-config`), validation,
//!   parameter counts;
//! - [`quant`]: bytes per weight and per-component formats;
//! - [`hw`]: the GPU, link and network catalog (data files), link kinds, multi-node clusters;
//! - [`comm`]: all-reduce as engines run it (NCCL's cost model per algorithm and protocol, custom
//!   one-shot/two-shot);
//! - [`kernels`]: decode weight-streaming rates per GPU and format, from the kernel tables;
//! - [`predict`]: memory fit, step-time breakdown, prefill, the bottleneck with its numbers;
//! - [`rank`]: feasible plans ranked under SLOs, and fixes;
//! - [`calibrate`]: fitting named efficiency factors to measured throughput;
//! - [`inputs`]: the bench and fabric JSON documents `plan` reads;
//! - [`request`]: what `plan` is asked ([`request::PlanRequest`]) and [`request::build_report`];
//! - [`validate`]: predictions against public measurements;
//! - [`workload`]: a benchmark's workload and what its client measures, through the
//!   [`workload::VirtualBench`] seam the simulator implements;
//! - [`report`]: the `servetune.plan/1.5` document and its renderings.
//!
//! No I/O beyond parsing text the caller read (a config.json, a bench or fabric JSON).

#![warn(missing_docs)]

pub mod aic;
pub mod calibrate;
pub mod comm;
pub mod hw;
pub mod inputs;
pub mod interval;
pub mod kernels;
pub mod launch;
pub mod predict;
pub mod quant;
pub mod rank;
pub mod report;
pub mod request;
pub mod spec;
pub mod validate;
pub mod workload;

pub use request::{build_report, build_report_with, ModelSource, PlanRequest, ScenarioSpec, WhatIf};

/// Errors: bad input (exit 2) or a plan that does not fit (exit 2, with the numbers).
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// A value the user gave that cannot be used; the message names it and the fix.
    #[error("{0}")]
    Input(String),
    /// The weights (or one request's KV) do not fit in GPU memory; the message gives the numbers.
    #[error("{0}")]
    DoesNotFit(String),
}
