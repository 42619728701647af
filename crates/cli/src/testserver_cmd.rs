//! `servetune testserver`: the bench crate's in-process test server as a process, for the load
//! generator's benchmark (`scripts/bench-loadgen`) and for trying a client against known timing.

use clap::Args;
use servetune_bench::spec::parse_duration;
use servetune_bench::testserver::{self, TestServerConfig};

use crate::Failure;

/// Serve OpenAI/sglang endpoints with exact, configured timing (not an engine simulation: see `sim`).
#[derive(Debug, Args)]
pub struct TestServerArgs {
    /// Time to first token
    #[arg(long, default_value = "0ms")]
    pub ttft: String,
    /// Time between chunks
    #[arg(long, default_value = "0ms")]
    pub itl: String,
    /// Tokens per chunk
    #[arg(long, default_value_t = 1)]
    pub tokens_per_chunk: u32,
    /// Fraction of requests answered with HTTP 500
    #[arg(long, default_value_t = 0.0)]
    pub fail_rate: f64,
    /// Runtime worker threads (default: all cores)
    #[arg(long)]
    pub threads: Option<usize>,
}

pub fn run(a: TestServerArgs) -> Result<(), Failure> {
    let cfg = TestServerConfig {
        ttft: parse_duration("--ttft", &a.ttft).map_err(|e| Failure::usage(e.0))?,
        itl: parse_duration("--itl", &a.itl).map_err(|e| Failure::usage(e.0))?,
        tokens_per_chunk: a.tokens_per_chunk.max(1),
        fail_rate: a.fail_rate,
        ..Default::default()
    };
    let mut b = tokio::runtime::Builder::new_multi_thread();
    if let Some(t) = a.threads {
        b.worker_threads(t.max(1));
    }
    let rt = b.enable_all().build().map_err(|e| Failure::runtime(format!("cannot start the runtime: {e}")))?;
    rt.block_on(async {
        let srv = testserver::start(cfg).await.map_err(|e| Failure::runtime(format!("cannot listen on 127.0.0.1: {e}")))?;
        crate::say!("listening on {}", srv.url);
        let _ = tokio::signal::ctrl_c().await;
        drop(srv);
        Ok(())
    })
}
