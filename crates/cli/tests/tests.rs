//! End-to-end tests of the `servetune` binary, grouped by topic.

mod common;

mod bench_bad_input;
mod bench_hostile;
mod bench_llama;
mod bench_mock;
mod campaign;
mod campaign_hostile;
mod campaign_verdicts;
mod demo;
mod docs_commands;
mod fabric;
mod help;
mod hostile_inputs;
mod openai_client;
mod plan;
mod probe;
mod report_html;
mod schemas;
mod sim;
mod slurm;
mod trace;
