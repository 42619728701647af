//! One experiment's life: launch its server (on this machine or as a Slurm job), wait until it is
//! ready (health, model list, a one-token generation), benchmark it, and record every state on
//! the way before going on: a failure is classified with its evidence, a stop signal tears the
//! server down and records the step as interrupted, and a measured sweep that the journal cannot
//! take is kept beside it. A heartbeat thread keeps the step's row fresh while it runs, so another
//! controller can tell a live step from one whose owner died.

use super::*;

/// Inherited variables that change an engine's behaviour, recorded in fingerprints.
pub(super) const ENV_PREFIXES: &[&str] = &["CUDA_", "NCCL_", "NVIDIA_", "HF_", "SGLANG_", "VLLM_", "OMP_", "PYTORCH_", "TORCH_", "LLAMA_"];

/// An experiment's launch fingerprint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LaunchFingerprint {
    /// The engine template's name.
    pub engine: String,
    /// The launch command, secrets stripped.
    pub argv: Vec<String>,
    /// The environment variables that matter to serving (CUDA_, NCCL_, ...), secrets stripped.
    pub env: BTreeMap<String, String>,
    /// The engine's version as the server or its command reported it.
    pub engine_version: Option<String>,
    /// The NVIDIA driver version.
    pub driver_version: Option<String>,
    /// The CUDA version the driver supports.
    pub cuda_version: Option<String>,
    /// NCCL's version, when the environment says (NCCL_VERSION).
    pub nccl_version: Option<String>,
    /// MoE kernel config files the server said it loaded.
    pub moe_configs: Vec<String>,
    /// The probe fingerprint of the environment.
    pub environment: i64,
    /// The Slurm job, when the experiment ran as one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm_job: Option<u64>,
    /// One line per node of a Slurm job (name, address, rank, kernel), as each node wrote it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<String>,
}

pub(super) fn log_signals(e: &EngineTemplate, logs: &[PathBuf]) -> Vec<(LogSignal, String)> {
    logs.iter()
        .flat_map(|log| executor::log_tail(log, 5000))
        .filter_map(|l| e.logs.iter().find(|p| l.contains(&p.contains)).map(|p| (p.signal, l.clone())))
        .collect()
}

pub(super) struct Heartbeat {
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Heartbeat {
    /// Stamps the experiment's heartbeat every second from its own connection.
    fn start(dir: &Path, id: i64) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let path = journal::path_in(dir);
        let handle = std::thread::spawn(move || {
            let Ok(conn) = rusqlite::Connection::open_with_flags(&path, rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE) else { return };
            let _ = conn.busy_timeout(Duration::from_secs(5));
            while !flag.load(Ordering::Relaxed) {
                let _ = conn.execute("UPDATE experiments SET heartbeat_at = ?2 WHERE id = ?1", rusqlite::params![id, now_ms()]);
                for _ in 0..10 {
                    if flag.load(Ordering::Relaxed) {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        });
        Self { stop, handle: Some(handle) }
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// A server that is up, with what the later phases need.
pub(super) struct Up {
    server: Box<dyn Launched>,
    endpoint: Endpoint,
    rendered: Rendered,
    knobs: BTreeMap<String, String>,
    /// Every log of the server (one per node on Slurm), the main one first.
    logs: Vec<PathBuf>,
    bench_path: PathBuf,
    port: u16,
}

pub(super) fn run_experiment(
    j: &mut Journal,
    dir: &Path,
    snap: &Snapshot,
    id: i64,
    o: &RunOptions,
    say: &mut dyn FnMut(&str),
) -> Result<Outcome> {
    let _beat = Heartbeat::start(dir, id);
    let up = match launch(j, dir, snap, id, o, say)? {
        Ok(up) => up,
        Err(ended) => return Ok(ended),
    };
    ready_then_benchmark(j, snap, id, up, o, say)
}

/// Launching -> ready (fingerprinted) -> benchmarking -> done or failed.
pub(super) fn ready_then_benchmark(
    j: &mut Journal,
    snap: &Snapshot,
    id: i64,
    up: Up,
    o: &RunOptions,
    say: &mut dyn FnMut(&str),
) -> Result<Outcome> {
    let s = &snap.settings;
    let fp = fingerprint(j, s, snap, &up)?;
    let ready = Update { fingerprint: Some(fp), ..Update::default() };
    j.transition(id, &[ExpState::Launching], ExpState::Ready, &ready, "ready: /health answered and a one-token generation succeeded")?;
    say("  ready; benchmarking");
    let bench = Update { bench_path: Some(up.bench_path.display().to_string()), ..Update::default() };
    j.transition(id, &[ExpState::Ready], ExpState::Benchmarking, &bench, "bench sweep")?;
    benchmark(j, snap, id, up, o, say)
}

/// A re-attached Slurm job: readiness (at once if it serves), then the benchmark as usual.
pub(super) fn resume_experiment(
    j: &mut Journal,
    dir: &Path,
    snap: &Snapshot,
    id: i64,
    o: &RunOptions,
    say: &mut dyn FnMut(&str),
) -> Result<Outcome> {
    let _beat = Heartbeat::start(dir, id);
    let s = &snap.settings;
    let e = j.experiment(id)?;
    let (Some(job), Some(port), Some(log)) = (e.slurm_job, e.server_port, e.log_path.clone()) else {
        return Err(CampaignError::Runtime(format!("experiment {id}: no Slurm job to re-attach to")));
    };
    let nodes = match &s.executor {
        Executor::Slurm(c) => c.nodes.get() as usize,
        Executor::Local => 1,
    };
    say(&format!("experiment {id} (attempt {}): following Slurm job {job} again", e.attempt));
    let mut server: Box<dyn Launched> = Box::new(SlurmServer::attach(job, port, Path::new(&log), nodes));
    let ctx = context(s, &snap.env.facts, port)?;
    let mut knobs = s.knobs.clone();
    knobs.extend(e.knobs.clone());
    let rendered = s.engine.render(&ctx, &knobs)?;
    let (argv, env) = crate::secrets::unseal_launch(dir, &rendered.argv, &rendered.env)?;
    let spec = LaunchSpec {
        argv,
        env,
        log_path: PathBuf::from(&log),
        port,
        health: s.engine.health.clone(),
        generate: s.engine.generate.clone(),
        ready_timeout: Duration::from_secs(s.ready_timeout_s.unwrap_or(s.engine.ready_timeout_s)),
    };
    let beat = &mut |waiting: Option<String>| {
        if let Some(w) = waiting {
            say_every(&w, say);
        }
    };
    match executor::wait_ready(server.as_mut(), &spec, queue_timeout(s), &o.cancel, beat) {
        Err(NotReady::Interrupted) => interrupted(j, id, ExpState::Launching, server, say),
        Err(NotReady::Failed(f)) => {
            server.teardown(TEARDOWN_GRACE);
            fail(j, id, ExpState::Launching, f, say)
        }
        Ok(_) => {
            let endpoint = server.endpoint().unwrap_or_else(|| Endpoint::local(port));
            let logs = server.logs();
            let bench_path = dir.join(format!("exp-{id}-a{}.bench.json", e.attempt));
            let up = Up { server, endpoint, rendered, knobs, logs, bench_path, port };
            ready_then_benchmark(j, snap, id, up, o, say)
        }
    }
}

/// What a launch starts from: the rendered command, its launch spec, the knobs, the attempt and
/// where its bench JSON goes. Preparing it records the experiment as launching.
pub(super) struct Prepared {
    rendered: Rendered,
    spec: LaunchSpec,
    knobs: BTreeMap<String, String>,
    attempt: i64,
    bench_path: PathBuf,
}

/// Renders experiment `id`'s launch on a free port and records it as launching.
pub(super) fn prepare_launch(j: &mut Journal, dir: &Path, snap: &Snapshot, id: i64, say: &mut dyn FnMut(&str)) -> Result<Prepared> {
    let s = &snap.settings;
    let e = j.experiment(id)?;
    let port = executor::free_port().map_err(|err| CampaignError::Runtime(format!("cannot find a free port: {err}")))?;
    let ctx = context(s, &snap.env.facts, port)?;
    let mut knobs = s.knobs.clone();
    knobs.extend(e.knobs.clone());
    let rendered = s.engine.render(&ctx, &knobs)?;
    let attempt = e.attempt + 1;
    let log_path = dir.join(format!("exp-{id}-a{attempt}.log"));
    let bench_path = dir.join(format!("exp-{id}-a{attempt}.bench.json"));
    let owner = Owner { pid: i64::from(std::process::id()), pgid: None };
    let up = Update {
        owner: Some(owner),
        new_attempt: true,
        log_path: Some(log_path.display().to_string()),
        env_fingerprint: Some(snap.env_id),
        ..Update::default()
    };
    j.transition(id, &[ExpState::Planned], ExpState::Launching, &up, &format!("launch on port {port}: {}", shown(&rendered.argv)))?;
    say(&format!("experiment {id} (attempt {attempt}): {}", e.title));
    let (argv, env) = crate::secrets::unseal_launch(dir, &rendered.argv, &rendered.env)?;
    let spec = LaunchSpec {
        argv,
        env,
        log_path: log_path.clone(),
        port,
        health: s.engine.health.clone(),
        generate: s.engine.generate.clone(),
        ready_timeout: Duration::from_secs(s.ready_timeout_s.unwrap_or(s.engine.ready_timeout_s)),
    };
    Ok(Prepared { rendered, spec, knobs, attempt, bench_path })
}

/// Planned -> launching -> up; `Err(outcome)` when it failed or was interrupted on the way.
pub(super) fn launch(
    j: &mut Journal,
    dir: &Path,
    snap: &Snapshot,
    id: i64,
    o: &RunOptions,
    say: &mut dyn FnMut(&str),
) -> Result<std::result::Result<Up, Outcome>> {
    let s = &snap.settings;
    let Prepared { mut rendered, mut spec, knobs, attempt, bench_path } = prepare_launch(j, dir, snap, id, say)?;
    // The port is picked by binding port 0 and releasing it; another process can take it before the
    // server binds it. That race gets one more try on a new port; a second port_in_use is recorded.
    for try_no in 0..2 {
        let mut server = match start_server(j, s, id, &spec, attempt) {
            Ok(srv) => srv,
            Err(f) => return fail(j, id, ExpState::Launching, f, say).map(Err),
        };
        let queue_timeout = queue_timeout(s);
        let beat = &mut |waiting: Option<String>| {
            if let Some(w) = waiting {
                say_every(&w, say);
            }
        };
        match executor::wait_ready(server.as_mut(), &spec, queue_timeout, &o.cancel, beat) {
            Err(NotReady::Interrupted) => return interrupted(j, id, ExpState::Launching, server, say).map(Err),
            Err(NotReady::Failed(f)) => {
                let td = server.teardown(TEARDOWN_GRACE);
                say(&format!("  torn down; port {} {}", spec.port, if td.port_free { "is free" } else { "is still taken" }));
                if f.kind == FailureKind::PortInUse && try_no == 0 {
                    let new_port =
                        executor::free_port().map_err(|err| CampaignError::Runtime(format!("cannot find a free port: {err}")))?;
                    j.add_event(
                        "retry",
                        &format!("experiment {id}: port {} was taken ({}); retrying on port {new_port}", spec.port, f.evidence.join(" | ")),
                    )?;
                    say(&format!("  port {} was taken; retrying on port {new_port}", spec.port));
                    rendered = s.engine.render(&context(s, &snap.env.facts, new_port)?, &knobs)?;
                    spec.argv = crate::secrets::unseal_launch(dir, &rendered.argv, &rendered.env)?.0;
                    spec.port = new_port;
                    continue;
                }
                return fail(j, id, ExpState::Launching, f, say).map(Err);
            }
            Ok(_) => {
                let endpoint = server.endpoint().unwrap_or_else(|| Endpoint::local(spec.port));
                let logs = server.logs();
                return Ok(Ok(Up { server, endpoint, rendered, knobs, logs, bench_path, port: spec.port }));
            }
        }
    }
    Err(CampaignError::Runtime(format!("experiment {id}: no launch try left")))
}

/// A launch command for people: values filled in on each node shown as `{node_rank}` and the like.
pub(super) fn shown(argv: &[String]) -> String {
    argv.iter().map(|w| servetune_slurm::display_word(w)).collect::<Vec<_>>().join(" ")
}

/// Starts the server on the campaign's executor and journals how to find it again.
pub(super) fn start_server(
    j: &Journal,
    s: &Settings,
    id: i64,
    spec: &LaunchSpec,
    attempt: i64,
) -> std::result::Result<Box<dyn Launched>, Failure> {
    let journal_err = |e: CampaignError| Failure {
        kind: FailureKind::SpawnFailed,
        exit: None,
        evidence: vec![e.to_string()],
        corrective: FailureKind::SpawnFailed.corrective().into(),
        summary: e.to_string(),
    };
    match &s.executor {
        Executor::Local => {
            let srv = executor::spawn(spec)?;
            j.set_server_pgid(id, i64::from(srv.pgid)).map_err(journal_err)?;
            Ok(Box::new(srv))
        }
        Executor::Slurm(cfg) => {
            let srv = executor_slurm::submit(cfg, spec, &format!("servetune-exp-{id}-a{attempt}"))?;
            j.set_slurm_job(id, srv.job, spec.port).map_err(journal_err)?;
            j.add_event("slurm", &format!("experiment {id}: submitted Slurm job {} ({} node(s))", srv.job, cfg.nodes))
                .map_err(journal_err)?;
            Ok(Box::new(srv))
        }
    }
}

pub(super) fn queue_timeout(s: &Settings) -> Duration {
    match &s.executor {
        Executor::Local => Duration::from_secs(60),
        Executor::Slurm(c) => Duration::from_secs(c.queue_timeout_s),
    }
}

/// How the server ended, if it does within `limit`.
pub(super) fn ended_within(srv: &mut dyn Launched, limit: Duration) -> Option<ExitInfo> {
    let until = std::time::Instant::now() + limit;
    loop {
        if let Some(x) = srv.exited() {
            return Some(x);
        }
        if std::time::Instant::now() >= until {
            return None;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Says a waiting line when it changes (a queued job's reason), not every poll.
pub(super) fn say_every(line: &str, say: &mut dyn FnMut(&str)) {
    thread_local!(static LAST: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) });
    LAST.with(|l| {
        if *l.borrow() != line {
            say(&format!("  {line}"));
            *l.borrow_mut() = line.to_string();
        }
    });
}

/// The bench sweep, teardown, and the experiment's end state.
pub(super) fn benchmark(
    j: &mut Journal,
    snap: &Snapshot,
    id: i64,
    mut up: Up,
    o: &RunOptions,
    say: &mut dyn FnMut(&str),
) -> Result<Outcome> {
    let port = up.port;
    let sweep = bench_step::run_sweep(&up.endpoint.url(), &snap.settings.bench, &up.bench_path, &o.cancel);
    if o.cancel.load(Ordering::Relaxed) {
        return interrupted(j, id, ExpState::Benchmarking, up.server, say);
    }
    // A server that went away makes every request fail; give its end a moment to show (a Slurm job
    // passes through COMPLETING) so the failure is the server's, not the benchmark's.
    let some_failed = sweep.as_ref().map_or(true, |sm| sm.points.iter().any(|p| p.failed > 0));
    let crash = ended_within(up.server.as_mut(), if some_failed { Duration::from_secs(15) } else { Duration::ZERO })
        .map(|x| up.server.failure(Some(x), false));
    let td = up.server.teardown(TEARDOWN_GRACE);
    say(&format!(
        "  torn down ({}); port {port} {}",
        if td.killed { "SIGKILL after the grace period" } else { "SIGTERM" },
        if td.port_free { "is free" } else { "is still taken" }
    ));
    record_log_findings(j, &snap.settings.engine, &up.logs, id)?;
    if !td.port_free {
        j.add_finding(&NewFinding {
            source: Source::Executor,
            code: Code::PortNotFree,
            severity: Severity::Warning,
            title: "the port stayed taken after teardown",
            evidence: &format!("port {port} after experiment {id}"),
            fix: "find the process with ss -ltnp and stop it",
            experiment: Some(id),
        })?;
    }
    if let Some(mut f) = crash {
        f.evidence.insert(0, "the server exited during the benchmark".into());
        return fail(j, id, ExpState::Benchmarking, f, say);
    }
    let summary = match sweep {
        Ok(sm) if !sm.all_failed() => sm,
        Ok(sm) => {
            let ex = sm.error_example.clone().unwrap_or_default();
            return fail(j, id, ExpState::Benchmarking, bench_failure(format!("every request failed; e.g. {ex}")), say);
        }
        Err(why) => return fail(j, id, ExpState::Benchmarking, bench_failure(why), say),
    };
    let line = record_done(j, snap, id, &up.knobs, summary, &up.bench_path)?;
    say(&format!("  {line}"));
    Ok(Outcome::Progress { experiment: id, state: ExpState::Done, line })
}

/// Records a measured sweep: the model's verdict and calibration, then the experiment done. When
/// the journal cannot take it (a full disk, a lost file system), the measurement is not lost: the
/// sweep's summary is written beside the journal (`exp-ID.result.json`) when it can be, the bench
/// JSON written during the sweep is named, and the error says both.
pub(super) fn record_done(
    j: &mut Journal,
    snap: &Snapshot,
    id: i64,
    knobs: &BTreeMap<String, String>,
    summary: bench_step::BenchSummary,
    bench_json: &Path,
) -> Result<String> {
    let best = summary.best_output_tok_s(true);
    let knee = summary.knee_concurrency.map_or(String::new(), |c| format!(", knee at concurrency {c}"));
    let line = format!("experiment {id} done: best {best:.1} output tok/s{knee}");
    let kept = summary.clone();
    let recorded = (|| {
        let version = super::run::reported_engine_version(j)?;
        let allreduce = crate::fabric_step::allreduce_for(j, &snap.env.facts.hash, None)?;
        if let Some(m) = model_box(&snap.settings, &snap.env.facts)
            .map(|m| m.with_engine_version(&snap.settings.engine.name, version).with_allreduce(allreduce))
        {
            let values = crate::knobs::KnobValues::parse(knobs, &format!("experiment {id}"))?;
            crate::verdict::record_measurement(j, &m, &snap.env.facts.hash, id, &values, &summary)?;
        }
        j.transition(id, &[ExpState::Benchmarking], ExpState::Done, &Update { result: Some(summary), ..Update::default() }, &line)
    })();
    recorded.map_err(|e| keep_measured(j.path(), id, &kept, bench_json, e))?;
    Ok(line)
}

/// The error of a journal that could not take a measured sweep, after keeping the sweep beside it.
pub(super) fn keep_measured(
    journal: &Path,
    id: i64,
    summary: &bench_step::BenchSummary,
    bench_json: &Path,
    e: CampaignError,
) -> CampaignError {
    let dir = journal.parent().unwrap_or(Path::new("."));
    let file = dir.join(format!("exp-{id}.result.json"));
    let kept = serde_json::to_vec_pretty(summary)
        .map_err(std::io::Error::other)
        .and_then(|b| servetune_io::open_plain_for_write(&file, true).and_then(|mut f| std::io::Write::write_all(&mut f, &b)));
    let where_ = match kept {
        Ok(()) => format!("its summary is kept in {} and its requests in {}", file.display(), bench_json.display()),
        Err(w) => format!("it could not be kept in {} ({w}); its requests are in {}", file.display(), bench_json.display()),
    };
    CampaignError::Runtime(format!(
        "{}: the measured sweep of experiment {id} could not be recorded ({e}); {where_}. Free space and run campaign continue again: it records the kept sweep instead of re-running the step",
        journal.display()
    ))
}

pub(super) fn bench_failure(why: String) -> Failure {
    Failure {
        kind: FailureKind::BenchFailed,
        exit: None,
        evidence: vec![why.clone()],
        corrective: FailureKind::BenchFailed.corrective().into(),
        summary: why,
    }
}

pub(super) fn fail(j: &mut Journal, id: i64, from: ExpState, f: Failure, say: &mut dyn FnMut(&str)) -> Result<Outcome> {
    let line = format!("experiment {id} failed: {} ({})", f.kind.name(), f.summary);
    say(&format!("  {line}\n  evidence: {}\n  corrective step: {}", f.evidence.join(" | "), f.corrective));
    j.transition(id, &[from], ExpState::Failed, &Update { failure: Some(f), ..Update::default() }, &line)?;
    Ok(Outcome::Progress { experiment: id, state: ExpState::Failed, line })
}

pub(super) fn interrupted(
    j: &mut Journal,
    id: i64,
    from: ExpState,
    mut server: Box<dyn Launched>,
    say: &mut dyn FnMut(&str),
) -> Result<Outcome> {
    let port = server.endpoint().map_or(0, |e| e.port);
    let td = server.teardown(TEARDOWN_GRACE);
    let line = format!("experiment {id} interrupted; server torn down, port {port} {}", if td.port_free { "free" } else { "still taken" });
    j.transition(id, &[from], ExpState::Interrupted, &Update::default(), &line)?;
    say(&format!("  {line}"));
    Ok(Outcome::Progress { experiment: id, state: ExpState::Interrupted, line })
}

pub(super) fn fingerprint(j: &Journal, s: &Settings, snap: &Snapshot, up: &Up) -> Result<i64> {
    let r = &up.rendered;
    let mut env: BTreeMap<String, String> = std::env::vars().filter(|(k, _)| ENV_PREFIXES.iter().any(|p| k.starts_with(p))).collect();
    env.extend(r.env.clone());
    let (env, argv) = strip_secrets(&env, &r.argv, &s.secret_env);
    let argv: Vec<String> = argv.iter().map(|w| servetune_slurm::display_word(w)).collect();
    let ctx = context(s, &snap.env.facts, up.port)?;
    let fill = |w: &str| -> String {
        let mut out = w.to_string();
        for (k, v) in ctx.values.iter().chain(r.knobs.iter()) {
            out = out.replace(&format!("{{{k}}}"), v);
        }
        out
    };
    let engine_version = s.engine.version.as_ref().and_then(|q| executor::version(q, &up.endpoint, &fill));
    let moe_configs =
        log_signals(&s.engine, &up.logs).into_iter().filter(|(sig, _)| *sig == LogSignal::MoeConfigLoaded).map(|(_, l)| l).collect();
    let (slurm_job, nodes) = match up.server.handle() {
        Handle::SlurmJob(job) => (Some(job), executor_slurm::JobFiles::of(&up.logs[0]).node_lines()),
        Handle::ProcessGroup(_) => (None, Vec::new()),
    };
    let f = &snap.env.facts;
    let lf = LaunchFingerprint {
        engine: s.engine.name.clone(),
        argv,
        env,
        engine_version,
        driver_version: f.driver_version.clone(),
        cuda_version: f.cuda_version.clone(),
        nccl_version: std::env::var("NCCL_VERSION").ok(),
        moe_configs,
        environment: snap.env_id,
        slurm_job,
        nodes,
    };
    let body = serde_json::to_value(&lf).map_err(|e| CampaignError::Runtime(e.to_string()))?;
    let hash = journal::stable_hash(&body.to_string());
    j.add_fingerprint(journal::FingerprintKind::Experiment, &hash, &body)
}

pub(super) fn record_log_findings(j: &Journal, e: &EngineTemplate, logs: &[PathBuf], id: i64) -> Result<()> {
    if let Some((_, line)) = log_signals(e, logs).into_iter().find(|(s, _)| *s == LogSignal::MoeDefaultConfig) {
        j.add_finding(&NewFinding {
            source: Source::Log,
            code: Code::MoeDefaultConfig,
            severity: Severity::Warning,
            title: "fused-MoE kernels run with untuned default configs",
            evidence: &line,
            fix: "tune the MoE kernels for this model's expert shape on these GPUs and install the config",
            experiment: Some(id),
        })?;
    }
    Ok(())
}
