//! servetune's load generator for LLM serving endpoints.
//!
//! Flow: [`spec::BenchConfig`] (resolved flags) -> [`runner::prepare`] (reachability, model,
//! calibration, workload) -> [`runner::run`] (each load point; per-request [`record::RequestRecord`]s)
//! -> [`report`] (metrics per run) and [`saturation`] (the sweep's knee) -> [`export`] (terminal,
//! Markdown, JSON, CSV, JSONL). Tests run it against `servetune-sim` (its exact-timing mode has
//! known TTFT and ITL).

pub mod api;
pub mod client;
pub mod definitions;
pub mod export;
pub mod record;
pub mod report;
pub mod runner;
pub mod saturation;
pub mod schedule;
pub mod scrape;
pub mod spec;
pub mod sse;
pub mod stats;
pub mod tokenizer;
pub mod workload;

pub use runner::{BenchError, BenchReport, Prepared, Progress, SCHEMA};
pub use spec::{BenchConfig, InputError};
