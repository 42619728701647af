//! `servetune demo`: the whole story on the built-in simulator of the reference deployment.
//! Starts the simulator in-process (preset `reference-kvm`), runs a bench concurrency sweep
//! against it, prints the table, the saturation finding and the server-metrics summary, and writes
//! JSON and Markdown under `./servetune-demo/`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use servetune_bench::api::Api;
use servetune_bench::runner::{self, Outcome, Prepared};
use servetune_bench::spec::{BenchConfig, LengthDist, Limits, Load, PromptSource, Stop};
use servetune_bench::{export, BenchError, Control, Progress, Stopping, SweepPoint};
use servetune_model::predict::{Point, Scenario};
use servetune_model::quant::Dtype;
use servetune_model::request::LinkSource;
use servetune_model::{report, ModelSource, ScenarioSpec};
use servetune_sim::cost::{preset, PRESETS};
use servetune_sim::{SimConfig, SimError};

use crate::Failure;

/// Run the whole story against a simulated reference deployment (GLM-5 on 8 PCIe GPUs in a KVM guest).
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Where to write the results
    #[arg(long, default_value = "servetune-demo", value_name = "DIR")]
    pub out: PathBuf,
    /// Simulator preset to run against
    #[arg(long, default_value = "reference-kvm")]
    pub preset: String,
    /// No progress line
    #[arg(long, short)]
    pub quiet: bool,
}

/// The sweep: (concurrency, measured requests). Counts are small so the demo ends in about a
/// minute: two rounds up to the engine's 64-request limit, then 3 and 4 rounds where requests queue.
pub const SWEEP: [(u32, u64); 6] = [(1, 4), (8, 16), (32, 64), (64, 128), (128, 192), (256, 256)];
const INPUT_TOKENS: u32 = 256;
const OUTPUT_TOKENS: u32 = 32;

/// The reference deployment as the performance model sees it (the project's starting point): GLM-5 NVFP4, TP8 on
/// 8 RTX PRO 6000 Blackwell Server Edition, all-reduces staged through host memory (KVM, no P2P).
pub fn reference_scenario() -> Result<Scenario, Failure> {
    let mut spec = ScenarioSpec::new(ModelSource::Catalog("glm-5".into()), "rtx-pro-6000-se");
    spec.quant.checkpoint = Some(Dtype::Nvfp4);
    spec.link = LinkSource::Catalog("pcie-host-staged".into());
    spec.tp = Some(8);
    // The simulator mixes prefill chunks into decode steps; the prediction assumes the same.
    spec.mixed_prefill = true;
    spec.input_len = INPUT_TOKENS;
    spec.output_len = OUTPUT_TOKENS;
    spec.max_running = Some(64);
    spec.build().map_err(|e| Failure::runtime(e.to_string()))
}

/// Predicted points for the sweep.
fn predicted() -> Result<Vec<Point>, Failure> {
    let s = reference_scenario()?;
    Ok(SWEEP.iter().map(|&(c, _)| s.point(c)).collect())
}

/// Rows of predicted against measured: (concurrency, predicted, measured, bottleneck).
fn versus_rows(rep: &servetune_bench::BenchReport, pred: &[Point]) -> Vec<Vec<String>> {
    pred.iter()
        .map(|p| {
            let m = rep.runs.iter().find(|r| r.concurrency == Some(p.concurrency)).map_or(0.0, |r| r.throughput.output_tokens_per_s);
            vec![
                p.concurrency.to_string(),
                format!("{:.0}", p.output_tokens_per_s),
                format!("{m:.0}"),
                if m > 0.0 { export::signed_pct(p.output_tokens_per_s / m - 1.0) } else { "-".into() },
                report::bottleneck_words(&p.bottleneck),
            ]
        })
        .collect()
}

const VERSUS_HEADERS: [&str; 5] = ["conc", "predicted tok/s", "measured tok/s", "predicted vs measured", "predicted bottleneck"];

fn map_sim(e: SimError) -> Failure {
    match e {
        SimError::Input(m) => Failure::usage(m),
        SimError::Runtime(m) => Failure::runtime(m),
    }
}

/// The bench configuration of the demo's sweep against the simulator at `url`.
fn bench_config(url: String) -> BenchConfig {
    BenchConfig {
        base_url: url,
        api: Api::OpenaiCompletions,
        model: None,
        api_key: None,
        metrics_api_key: None,
        stream: true,
        loads: SWEEP.iter().map(|&(c, _)| Load::Closed { concurrency: c }).collect(),
        stop: Stop { requests: SWEEP.iter().map(|&(_, n)| n).max(), duration: None },
        warmup: 0,
        ramp_up: Duration::ZERO,
        prompts: PromptSource::Random { input: LengthDist::Fixed { len: INPUT_TOKENS }, prefix_len: 0, prefix_groups: 0 },
        output: LengthDist::Fixed { len: OUTPUT_TOKENS },
        seed: 0,
        ignore_eos: true,
        eos_token_id: None,
        limits: Limits { request: Duration::from_secs(300), ..Limits::default() },
        slos: Vec::new(),
        tokenizer_path: None,
        metrics_url: None,
        scrape_interval: Duration::from_millis(500),
        drain_timeout: Duration::from_secs(10),
        calibrate: true,
    }
}

/// Starts the simulator in-process and runs the sweep against it; Ctrl-C drains and keeps what
/// was measured (the outcome is then marked partial).
async fn sweep_the_simulator(a: &DemoArgs, profile: servetune_sim::cost::Profile, desc: &str) -> Result<Outcome, Failure> {
    let addr = "127.0.0.1:0".parse().map_err(|_| Failure::runtime("bad address"))?;
    let sim = servetune_sim::start(SimConfig::new(profile), addr).await.map_err(map_sim)?;
    crate::say!("servetune demo: a simulated server of the reference deployment ({}: {desc})", a.preset);
    crate::say!(
        "  listening on {}; sweeping concurrency {:?}, {INPUT_TOKENS} prompt / {OUTPUT_TOKENS} output tokens",
        sim.url,
        SWEEP.iter().map(|(c, _)| *c).collect::<Vec<_>>()
    );
    let prepared: Prepared = runner::prepare(bench_config(sim.url.clone()), None).await.map_err(|e| match e {
        BenchError::Input(i) => Failure::usage(i.0),
        BenchError::Runtime(r) => Failure::runtime(r),
    })?;
    let (int_tx, stopping) = tokio::sync::watch::channel(Stopping::Running);
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            crate::tell!("\nstopping: in-flight requests get 10s to finish, then results are written (marked partial)");
            let _ = int_tx.send(Stopping::Draining);
        }
    });
    let progress = Arc::new(Progress::default());
    let bar = crate::progress::spawn(Arc::clone(&progress), !a.quiet);
    let points: Vec<SweepPoint> = SWEEP
        .iter()
        .map(|&(c, n)| SweepPoint { load: Load::Closed { concurrency: c }, stop: Stop { requests: Some(n), duration: None } })
        .collect();
    let ctl = Control { stopping, progress, observer: None };
    let out = servetune_bench::run_sweep(&prepared, &points, &ctl, None).await;
    crate::progress::finish(bar);
    drop(sim);
    Ok(out)
}

/// Runs the demo. An interrupted sweep still prints and writes what it measured, then exits 130.
pub fn run(a: DemoArgs) -> Result<(), Failure> {
    let profile = preset(&a.preset).map_err(map_sim)?;
    let desc = PRESETS.iter().find(|(n, _)| *n == a.preset).map(|(_, d)| *d).unwrap_or("");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::runtime(format!("cannot start the runtime: {e}")))?;
    let outcome = rt.block_on(sweep_the_simulator(&a, profile, desc))?;
    rt.shutdown_timeout(Duration::from_millis(100));
    let pred = predicted()?;
    print_results(&outcome.report, &pred);
    write_outputs(&a, desc, &outcome, &pred)?;
    if outcome.report.partial {
        return Err(Failure { code: 130, msg: "interrupted: the results above are partial (and marked so in the files)".into() });
    }
    Ok(())
}

fn print_results(rep: &servetune_bench::BenchReport, pred: &[Point]) {
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout);
    let _ = export::write_terminal(rep, &mut stdout);
    let _ = writeln!(
        stdout,
        "\npredicted by servetune plan (GLM-5 NVFP4, TP8 on 8 x RTX PRO 6000, all-reduce staged through host memory) against measured on the simulator:"
    );
    let _ = write!(stdout, "{}", export::text_table(&VERSUS_HEADERS, &versus_rows(rep, pred)));
    let _ = writeln!(stdout);
}

/// Writes `bench.json`, `demo.md` and `records.jsonl` under `--out`.
fn write_outputs(a: &DemoArgs, desc: &str, outcome: &Outcome, pred: &[Point]) -> Result<(), Failure> {
    let rep = &outcome.report;
    std::fs::create_dir_all(&a.out).map_err(|e| Failure::runtime(format!("cannot create {}: {e}", a.out.display())))?;
    let write = |name: &str, f: &dyn Fn(&mut dyn Write) -> std::io::Result<()>| -> Result<PathBuf, Failure> {
        let p = a.out.join(name);
        let mut file =
            std::io::BufWriter::new(std::fs::File::create(&p).map_err(|e| Failure::runtime(format!("cannot write {}: {e}", p.display())))?);
        f(&mut file).and_then(|_| file.flush()).map_err(|e| Failure::runtime(format!("cannot write {}: {e}", p.display())))?;
        Ok(p)
    };
    let j = write("bench.json", &|w| export::write_json(rep, w))?;
    let m = write("demo.md", &|w| write_demo_markdown(rep, pred, &a.preset, desc, w))?;
    let r = write("records.jsonl", &|w| export::write_records(rep, &outcome.records, w))?;
    crate::say!("wrote {}, {} and {}", show(&j), show(&m), show(&r));
    Ok(())
}

fn show(p: &Path) -> String {
    p.display().to_string()
}

/// The demo's Markdown: the scenario, then the bench summary.
pub fn write_demo_markdown(
    rep: &servetune_bench::BenchReport,
    pred: &[Point],
    preset: &str,
    desc: &str,
    mut w: impl Write,
) -> std::io::Result<()> {
    writeln!(w, "# servetune demo\n")?;
    writeln!(w, "A simulated server of the reference deployment (`{preset}`): {desc}.")?;
    writeln!(w, "The simulator batches continuously, holds at most the engine's running-request limit, and queues the rest.\n")?;
    writeln!(
        w,
        "Sweep: concurrency {}, each with {INPUT_TOKENS} prompt and {OUTPUT_TOKENS} output tokens.\n",
        SWEEP.iter().map(|(c, _)| c.to_string()).collect::<Vec<_>>().join(", ")
    )?;
    let mut body = Vec::new();
    export::write_markdown(rep, &mut body)?;
    // Demote the bench report's title under the demo's.
    let text = String::from_utf8_lossy(&body).replacen("# servetune bench", "## Measured with servetune bench", 1);
    w.write_all(text.as_bytes())?;
    writeln!(w, "\n## Predicted by servetune plan\n")?;
    writeln!(w, "The performance model from hardware facts alone (GLM-5 NVFP4, TP8 on 8 RTX PRO 6000, all-reduces staged through host memory), against the simulator, whose preset reproduces the team's measured 485 tok/s.\n")?;
    writeln!(w, "| {} |\n|{}", VERSUS_HEADERS.join(" | "), "---|".repeat(VERSUS_HEADERS.len()))?;
    for r in versus_rows(rep, pred) {
        writeln!(w, "| {} |", r.join(" | "))?;
    }
    Ok(())
}
