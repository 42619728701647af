//! servetune's performance model of model x hardware x parallelism x concurrency.
//!
//! - [`spec`]: model architectures (catalog and HF `config.json`), parameter counts;
//! - [`quant`]: bytes per weight and per-component formats;
//! - [`hw`]: the GPU and link catalog (alpha-beta links, NCCL ring model);
//! - [`predict`]: memory fit, step-time breakdown, prefill, curves, bottleneck in words;
//! - [`rank`]: feasible plans ranked under an SLO, and what-if comparisons;
//! - [`calibrate`]: fitting named efficiency factors to measured throughput;
//! - [`validate`]: predictions against public measurements;
//! - [`report`]: the `servetune.plan/1` document and its renderings.
//!
//! No I/O beyond parsing text the caller read (a config.json, a bench or fabric JSON).

pub mod calibrate;
pub mod hw;
pub mod predict;
pub mod quant;
pub mod rank;
pub mod report;
pub mod spec;
pub mod validate;

/// Errors: bad input (exit 2) or a plan that does not fit (exit 2, with the numbers).
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("{0}")]
    Input(String),
    #[error("{0}")]
    DoesNotFit(String),
}
