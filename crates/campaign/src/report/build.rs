//! Building the [`Report`] from the journal, once: the standing against the goal, each measured
//! curve beside the model's prediction for it, the environments and their interconnect, the tasks,
//! findings, calibrations, the next steps with their expected gains, and the analysis in words.
//! Every number is taken from a journal record and names it; nothing here renders.

use super::*;

/// Computes the report from the journal.
pub fn build(j: &Journal) -> Result<Report> {
    let c = j.campaign()?;
    let snap = Snapshot::read(j)?;
    let tasks_rows = j.tasks()?;
    let exps = &snap.experiments;
    let mut experiments: BTreeMap<String, usize> = BTreeMap::new();
    for e in exps {
        *experiments.entry(e.state.as_str().to_string()).or_default() += 1;
    }
    let count = |s: TaskState| tasks_rows.iter().filter(|t| t.state == s).count();
    let counts = Counts {
        done: count(TaskState::Done),
        in_progress: count(TaskState::InProgress),
        not_done: count(TaskState::NotDone),
        experiments,
    };
    let tasks = task_lines(&tasks_rows, &snap);
    let launch_commands = launch_lines(j, exps);
    let warnings = warning_lines(&snap.findings);
    let results = exps.iter().map(result_line).collect();
    let track_record = crate::verdict::track_record(j)?;
    let (next_steps, stop_reason) = next_lines(&track_record, &snap)?;
    let (curves, breakdown) = curves(j, &snap)?;
    let standing = standing(&snap, &breakdown);
    let analysis = analysis(&snap).into_iter().chain(plateau_lines(&snap, &breakdown)).collect();
    Ok(Report {
        schema: SCHEMA,
        schema_minor: SCHEMA_MINOR,
        goal: c.goal,
        goal_output_tok_s: snap.settings.goal.output_tok_s,
        standing,
        model: c.model,
        engine: c.engine,
        environment: snap.env.facts.clone(),
        counts,
        tasks,
        launch_commands,
        warnings,
        results,
        curves,
        breakdown,
        p2p: p2p_matrices(j)?,
        fabric: fabric_lines(j)?,
        allreduce: allreduce_lines(j)?,
        analysis,
        track_record,
        calibrations: calibration_lines(j)?,
        next_steps,
        stop_reason,
        open_questions: snap
            .questions
            .iter()
            .filter(|q| q.state == crate::journal::QuestionState::Open)
            .map(|q| QuestionLine { id: q.id, text: q.text.clone(), how: q.how.clone() })
            .collect(),
        notes: j.notes()?.into_iter().map(|n| n.text).collect(),
    })
}

/// The facts of the environment an experiment ran in (its own probe fingerprint).
pub(super) fn experiment_facts(j: &Journal, snap: &Snapshot, e: &crate::journal::Experiment) -> BoxFacts {
    e.env_fingerprint
        .filter(|id| *id != snap.env_id)
        .and_then(|id| j.fingerprint(id).ok().flatten())
        .and_then(|f| serde_json::from_value::<crate::campaign::EnvBody>(f.body).ok())
        .map_or_else(|| snap.env.facts.clone(), |b| b.facts)
}

pub(super) fn curves(j: &Journal, snap: &Snapshot) -> Result<(Vec<Curve>, Vec<BreakdownLine>)> {
    let mut curves = Vec::new();
    let mut breakdown = Vec::new();
    let records = crate::verdict::point_records(j)?;
    for e in snap.experiments.iter().filter(|e| e.state == ExpState::Done) {
        let Some(r) = &e.result else { continue };
        let facts = experiment_facts(j, snap, e);
        // The all-reduce recorded by the time the experiment was: what its stored predictions used.
        let allreduce = crate::fabric_step::allreduce_for(j, &facts.hash, Some(e.updated_at))?;
        let mb = crate::campaign::model_box(&snap.settings, &facts)
            .map(|m| m.with_engine_version(&snap.settings.engine.name, snap.engine_version.clone()).with_allreduce(allreduce));
        // The predictions stored when the experiment was measured; a journal older than schema
        // 1.3 has none, and gets the model's own figure through the same path.
        let stored = records.iter().rfind(|x| x.experiment == e.id).cloned();
        let rec = stored.or_else(|| {
            let m = mb.as_ref()?;
            let layout = crate::verdict::measured_layout(&e.values, m.gpus, Some(r));
            let points = r
                .points
                .iter()
                .map(|p| crate::verdict::PointPrediction {
                    concurrency: p.concurrency,
                    raw: crate::plan_step::predict_at(m, layout, p.concurrency),
                    calibrated: None,
                })
                .collect();
            let (width, width_basis) = crate::verdict::width(&[]);
            let priced = crate::plan_step::FittedTo::SweepRun;
            Some(crate::verdict::PointsRecord { experiment: e.id, layout, calibration: None, points, width, width_basis, priced })
        });
        let points = r
            .points
            .iter()
            .filter(|p| p.completed > 0)
            .map(|p| {
                let pred = rec.as_ref().and_then(|x| x.at(p.concurrency)).copied();
                let shown = pred.and_then(|x| x.shown());
                CurvePoint {
                    measured: p.clone(),
                    predicted_output_tok_s: shown,
                    uncalibrated_output_tok_s: pred.and_then(|x| x.raw),
                    predicted_low: shown.zip(rec.as_ref()).map(|(v, x)| v / (1.0 + x.width)),
                    predicted_high: shown.zip(rec.as_ref()).map(|(v, x)| v * (1.0 + x.width)),
                }
            })
            .collect();
        curves.push(Curve {
            experiment: e.id,
            title: e.title.clone(),
            environment: environment_words(&facts),
            knee_concurrency: r.knee_concurrency,
            calibrated_on: rec.as_ref().and_then(|x| x.calibration).map(|c| c.experiment),
            points,
        });
        let best = result_line(e).at_concurrency;
        // A calibration an older servetune stored with its prediction (fitted against the steady
        // state) is not applied to today's pricing of the step.
        let m = mb.as_ref().zip(rec.as_ref()).map(|(m, x)| (m.calibrated(x.calibration.filter(crate::verdict::usable)), x.layout));
        if let Some(step) = m.zip(best).and_then(|((m, l), c)| crate::plan_step::step_at(&m, l, c)) {
            breakdown.push(BreakdownLine { experiment: e.id, title: e.title.clone(), step });
        }
    }
    Ok((curves, breakdown))
}

pub(super) fn standing(snap: &Snapshot, breakdown: &[BreakdownLine]) -> Standing {
    let goal = snap.settings.goal.output_tok_s;
    let best = snap
        .experiments
        .iter()
        .filter(|e| e.state == ExpState::Done)
        .map(result_line)
        .filter_map(|r| Some((r.experiment, r.best_output_tok_s?, r.at_concurrency?)))
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(experiment, output_tok_s, concurrency)| BestPoint {
            experiment,
            output_tok_s,
            concurrency,
            share_of_goal: if goal > 0.0 { output_tok_s / goal } else { 0.0 },
        });
    let headline = match &best {
        None => format!("No experiment has finished yet; the goal is {}.", snap.settings.goal.text),
        Some(b) => {
            let why = breakdown
                .iter()
                .find(|x| x.experiment == b.experiment)
                .map_or(" The model cannot price this deployment, so no bottleneck is named.".to_string(), |x| {
                    format!(" The model's bottleneck there: {}.", x.step.bottleneck)
                });
            format!(
                "Best measured: {:.0} output tok/s at concurrency {} (experiment {}), {:.0}% of the goal ({}).{why}",
                b.output_tok_s,
                b.concurrency,
                b.experiment,
                b.share_of_goal * 100.0,
                snap.settings.goal.text
            )
        }
    };
    Standing { best, headline }
}

/// The environment in words, from the probe's facts.
pub(super) fn environment_words(f: &BoxFacts) -> String {
    let place = match (f.vm.as_str(), f.container.as_str()) {
        ("none", "none") => "bare metal".to_string(),
        (vm, "none") => format!("{vm} guest"),
        (_, c) => format!("{c} container"),
    };
    format!("{place}, {}", if f.p2p_ok { "P2P" } else { "no P2P" })
}

pub(super) fn p2p_matrices(j: &Journal) -> Result<Vec<P2pMatrix>> {
    let probes: Vec<_> = j.fingerprints()?.into_iter().filter(|f| f.kind == crate::journal::FingerprintKind::Probe).collect();
    let mut out: Vec<(String, P2pMatrix)> = Vec::new();
    for f in probes {
        let Ok(body) = serde_json::from_value::<crate::campaign::EnvBody>(f.body) else { continue };
        let Some(p2p) = body.report.get("p2p").and_then(|v| v.as_object()) else { continue };
        let Some((capability, m)) = p2p.get_key_value("read").or_else(|| p2p.iter().next()) else { continue };
        let Ok(rows) = serde_json::from_value::<Vec<Vec<String>>>(m.clone()) else { continue };
        if rows.is_empty() {
            continue;
        }
        // One matrix per environment: a re-probe of the same box replaces the earlier one.
        out.retain(|(hash, _)| *hash != f.hash);
        let m = P2pMatrix { fingerprint: f.id, environment: environment_words(&body.facts), capability: capability.clone(), rows };
        out.push((f.hash, m));
    }
    Ok(out.into_iter().map(|(_, m)| m).collect())
}

/// Each recorded fabric document with its environment's hash and words, oldest first.
fn fabric_documents(j: &Journal) -> Result<Vec<(String, String, crate::journal::FabricRow, crate::fabric_step::Document)>> {
    j.fabrics()?
        .into_iter()
        .map(|f| {
            let env = j.fingerprint(f.env_fingerprint)?.and_then(|fp| {
                let hash = fp.hash.clone();
                serde_json::from_value::<crate::campaign::EnvBody>(fp.body).ok().map(|b| (hash, environment_words(&b.facts)))
            });
            let (hash, environment) = env.unwrap_or_else(|| (format!("fingerprint {}", f.env_fingerprint), "unknown environment".into()));
            let document = crate::fabric_step::document_of(&f.body, f.id)?;
            Ok((hash, environment, f, document))
        })
        .collect()
}

/// One line per environment (a newer document of the same box replaces the earlier one), in
/// the order the environments were first measured.
fn newest_per_environment<T>(lines: impl Iterator<Item = (String, T)>) -> Vec<T> {
    let mut out: Vec<(String, T)> = Vec::new();
    for (hash, line) in lines {
        out.retain(|(h, _)| *h != hash);
        out.push((hash, line));
    }
    out.into_iter().map(|(_, l)| l).collect()
}

pub(super) fn fabric_lines(j: &Journal) -> Result<Vec<FabricLine>> {
    Ok(newest_per_environment(fabric_documents(j)?.into_iter().filter_map(|(hash, environment, f, d)| match d {
        crate::fabric_step::Document::P2p(matrices) => {
            Some((hash, FabricLine { record: f.id, fingerprint: f.env_fingerprint, environment, source: f.source, matrices }))
        }
        crate::fabric_step::Document::AllReduce(_) => None,
    })))
}

pub(super) fn allreduce_lines(j: &Journal) -> Result<Vec<AllReduceLine>> {
    Ok(newest_per_environment(fabric_documents(j)?.into_iter().filter_map(|(hash, environment, f, d)| match d {
        crate::fabric_step::Document::AllReduce(m) => {
            Some((hash, AllReduceLine { record: f.id, fingerprint: f.env_fingerprint, environment, source: f.source, runs: m.runs }))
        }
        crate::fabric_step::Document::P2p(_) => None,
    })))
}

pub(super) fn task_lines(tasks_rows: &[crate::journal::TaskRow], snap: &Snapshot) -> Vec<TaskLine> {
    let exps = &snap.experiments;
    tasks_rows
        .iter()
        .map(|t| {
            let (record, outcome) = match (t.experiment, t.question) {
                (Some(id), _) => (
                    format!("experiment {id}"),
                    exps.iter().find(|e| e.id == id).map_or(String::new(), |e| match &e.failure {
                        Some(f) if e.state == ExpState::Failed => format!("failed: {}", f.kind.name()),
                        _ => e.state.as_str().to_string(),
                    }),
                ),
                (None, Some(q)) => (
                    format!("question {q}"),
                    snap.questions
                        .iter()
                        .find(|x| x.id == q)
                        .map_or(String::new(), |x| x.answer.clone().unwrap_or_else(|| x.state.as_str().to_string())),
                ),
                _ => (String::new(), String::new()),
            };
            TaskLine { id: t.id, state: t.state, title: t.title.clone(), record, outcome }
        })
        .collect()
}

pub(super) fn launch_lines(j: &Journal, exps: &[crate::journal::Experiment]) -> Vec<LaunchLine> {
    exps.iter()
        .filter(|e| matches!(e.state, ExpState::Done | ExpState::Ready | ExpState::Benchmarking))
        .filter_map(|e| {
            let fp = j.fingerprint(e.fingerprint?).ok()??;
            let lf: LaunchFingerprint = serde_json::from_value(fp.body).ok()?;
            Some(LaunchLine { experiment: e.id, command: shell_line(&lf), engine_version: lf.engine_version })
        })
        .collect()
}

/// Findings as report lines: the box's and the analysis' one by one, and a finding that repeats
/// across experiments (the same code, title and fix, such as a log warning every launch prints)
/// once, listing its experiments.
pub(super) fn warning_lines(findings: &[crate::journal::FindingRow]) -> Vec<WarningLine> {
    let mut out: Vec<WarningLine> = Vec::new();
    for f in findings.iter().filter(|f| f.severity != Severity::Info || f.source == Source::Analysis) {
        let repeats = f.source != Source::Analysis;
        if let Some(w) = out.iter_mut().find(|w| repeats && w.severity == f.severity && w.title == f.title && w.fix == f.fix) {
            w.findings.push(f.id);
            w.experiments.extend(f.experiment);
            continue;
        }
        out.push(WarningLine {
            finding: f.id,
            findings: vec![f.id],
            experiments: f.experiment.into_iter().collect(),
            severity: f.severity,
            title: f.title.clone(),
            evidence: f.evidence.clone(),
            fix: f.fix.clone(),
        });
    }
    out
}

pub(super) fn calibration_lines(j: &Journal) -> Result<Vec<CalibrationLine>> {
    let probes = j.fingerprints()?;
    Ok(crate::verdict::calibrations(j)?
        .into_iter()
        .map(|(c, hash, fabric)| {
            let environment = probes
                .iter()
                .filter(|f| f.kind == crate::journal::FingerprintKind::Probe && f.hash == hash)
                .find_map(|f| serde_json::from_value::<crate::campaign::EnvBody>(f.body.clone()).ok())
                .map_or_else(|| format!("environment {hash}"), |b| environment_words(&b.facts));
            CalibrationLine { experiment: c.experiment, environment, fabric, used: crate::verdict::usable(&c), factors: c }
        })
        .collect())
}

/// A planner step as the report shows it: its gain with what it rests on and its interval from
/// the campaign's `track` record.
pub fn step_line(track: &[crate::verdict::TrackLine], rank: usize, s: &planner::Step) -> StepLine {
    StepLine {
        rank,
        title: s.title.clone(),
        needs_person: matches!(s.kind, StepKind::NeedsPerson { .. }),
        gain: s.gain,
        raw_gain: s.raw_gain,
        calibrated_on: s.calibrated_on,
        interval: s.gain.map(|g| crate::verdict::gain_interval_of(track, g, s.calibrated_on.is_some())),
        basis: s.basis.clone(),
        evidence: s.evidence.iter().map(|e| e.name()).collect(),
    }
}

pub(super) fn next_lines(track: &[crate::verdict::TrackLine], snap: &Snapshot) -> Result<(Vec<StepLine>, Option<String>)> {
    Ok(match crate::campaign::next_of(snap)? {
        Verdict::Steps(steps) => (steps.iter().enumerate().map(|(i, s)| step_line(track, i + 1, s)).collect(), None),
        Verdict::GoalMet { experiment, output_tok_s } => {
            (Vec::new(), Some(format!("goal met: experiment {experiment} reached {output_tok_s:.1} output tok/s")))
        }
        Verdict::NothingLeft { reason } => (Vec::new(), Some(reason)),
    })
}

pub(super) fn result_line(e: &crate::journal::Experiment) -> ResultLine {
    let best = e
        .result
        .as_ref()
        .and_then(|r| r.points.iter().filter(|p| p.slos_met != Some(false)).max_by(|a, b| a.output_tok_s.total_cmp(&b.output_tok_s)));
    ResultLine {
        experiment: e.id,
        title: e.title.clone(),
        state: e.state,
        best_output_tok_s: best.map(|p| p.output_tok_s),
        at_concurrency: best.map(|p| p.concurrency),
        tpot_p90_ms: best.map(|p| p.tpot_p90_ms),
        knee_concurrency: e.result.as_ref().and_then(|r| r.knee_concurrency),
        failure: e.failure.as_ref().map(|f| format!("{}: {}", f.kind.name(), f.summary)),
        bench_json: e.bench_path.clone().filter(|_| e.state == ExpState::Done),
    }
}

pub(super) fn analysis(snap: &Snapshot) -> Vec<String> {
    let mut out = Vec::new();
    let f = &snap.env.facts;
    out.push(format!(
        "environment: {} GPU(s) {}, virtualization {}/{}, GPU peer-to-peer {}",
        f.gpus,
        f.gpu_name.as_deref().unwrap_or("unknown"),
        f.vm,
        f.container,
        if f.p2p_ok { "available" } else { "not available" }
    ));
    let done: Vec<_> = snap.experiments.iter().filter(|e| e.state == ExpState::Done).collect();
    if let Some(best) =
        done.iter().filter_map(|e| e.result.as_ref().map(|r| (e, r.best_output_tok_s(true)))).max_by(|a, b| a.1.total_cmp(&b.1))
    {
        out.push(format!(
            "best so far: experiment {} at {:.1} output tok/s, {:.0}% of the goal ({})",
            best.0.id,
            best.1,
            best.1 / snap.settings.goal.output_tok_s * 100.0,
            snap.settings.goal.text
        ));
    }
    for g in snap.findings.iter().filter(|x| x.code == Code::PlanGap) {
        out.push(format!("{}: {}", g.title, g.evidence));
    }
    out
}

/// The plateau of each done experiment, explained: the running cap from the server's metrics, then
/// the model's step (expert reads at the MoE kernels' efficiency, the TP communication's share: all-reduces and the logits' all-gather).
pub(super) fn plateau_lines(snap: &Snapshot, breakdown: &[BreakdownLine]) -> Vec<String> {
    let mut out = Vec::new();
    for e in snap.experiments.iter().filter(|e| e.state == ExpState::Done) {
        let Some(r) = &e.result else { continue };
        let (Some(knee), Some(last)) = (r.knee_concurrency, r.points.last()) else { continue };
        let at_knee = r.points.iter().find(|p| p.concurrency == knee).map_or(0.0, |p| p.output_tok_s);
        let mut line = format!(
            "experiment {}: throughput plateaus at {:.0} output tok/s from concurrency {knee} ({:.0} at concurrency {})",
            e.id, at_knee, last.output_tok_s, last.concurrency
        );
        if let (Some(run), Some(q)) = (last.server_max_running, last.server_max_queued) {
            if q > 0.0 {
                line += &format!(
                    "; at concurrency {} at most {run:.0} requests ran and {q:.0} queued: the running-request cap holds it",
                    last.concurrency
                );
            }
        }
        if let Some(b) = breakdown.iter().find(|b| b.experiment == e.id) {
            let s = &b.step;
            let pct = |v: f64| if s.total_ms > 0.0 { v / s.total_ms * 100.0 } else { 0.0 };
            line += &format!(
                "; the model's {:.1} ms step at concurrency {}: weight reads {:.1} ms ({:.0}%){}, TP{} communication {:.1} ms ({:.0}%), prefill {:.1} ms, overhead {:.1} ms",
                s.total_ms,
                s.concurrency,
                s.weights_ms,
                pct(s.weights_ms),
                s.moe_efficiency.map_or(String::new(), |m| format!(" with MoE kernels at {:.0}% of memory bandwidth", m * 100.0)),
                s.tp,
                s.communication_ms,
                pct(s.communication_ms),
                s.prefill_ms,
                s.overhead_ms
            );
        }
        out.push(line);
    }
    out
}
