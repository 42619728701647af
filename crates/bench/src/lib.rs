//! servetune's load generator for LLM serving endpoints.
//!
//! Flow: [`spec::BenchConfig`] (resolved flags) -> [`runner::prepare`] (reachability, model,
//! calibration, workload) -> [`sweep::run_sweep`] (each load point; per-request
//! [`record::RequestRecord`]s handed to a [`sweep::SweepObserver`] as they finish) -> [`report`]
//! (metrics per run) and [`saturation`] (the sweep's knee) -> [`export`] (terminal, Markdown, JSON,
//! CSV, JSONL). Every network wait is bounded by a [`spec::Limits`] entry. Tests run it against
//! `servetune-sim` (its exact-timing mode has known TTFT and ITL).

#![warn(missing_docs)]

pub mod api;
pub mod client;
pub mod conn;
pub mod definitions;
pub mod export;
pub mod record;
pub mod report;
pub mod runner;
pub mod saturation;
pub mod scan;
pub mod schedule;
pub mod scrape;
pub mod selfcheck;
pub mod spec;
pub mod sse;
pub mod stats;
pub mod sweep;
pub mod tokenizer;
pub mod workload;

pub use runner::{BenchError, BenchReport, Prepared, Progress, SCHEMA, SCHEMA_MINOR};
pub use spec::{BenchConfig, InputError};
pub use sweep::{run_sweep, Control, Stopping, SweepObserver, SweepPoint};
