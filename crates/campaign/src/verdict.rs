//! The campaign's verdicts: what the model predicted for each measured experiment and each step,
//! the box's calibration, and the track record that says how far to trust the next prediction.
//!
//! - When an experiment's sweep is measured, [`record_measurement`] stores the prediction for each
//!   of its points (the model's own figure and, when an earlier experiment in the same environment
//!   calibrated the box, the calibrated one), judges the measurement against the shown prediction's
//!   interval (a finding: "explains" only inside it; outside it, the step term that would have to
//!   change and the measurement that would settle it), then fits a new calibration to the sweep.
//! - When the campaign acts on a step with a predicted gain (runs it or asks a person),
//!   [`record_gain`] stores the gain, raw and calibrated, with its interval.
//! - [`track_record`] pairs each stored gain with the gain measured afterwards.
//!
//! Intervals: before the campaign has a track record, the model's held-out error
//! ([`HELD_OUT_MEDIAN_ERROR`]); then the root-mean-square of the campaign's own log errors with
//! that held-out error counted as one prior observation ([`width`]).
//!
//! A calibration belongs to one environment: the probe's hash and the newest fabric record of that
//! environment. A new probe environment or a new fabric record starts without one.

use rusqlite::{params, OptionalExtension};
use serde::{Deserialize, Serialize};

use crate::bench_step::BenchSummary;
use crate::finding::{Code, Severity, Source};
use crate::journal::{ExpState, Experiment, Journal, NewFinding, QuestionRow, QuestionState};
use crate::plan_step::{self, Calibration, FittedTo, Layout, ModelBox};
use crate::planner::StepSource;
use crate::{now_ms, CampaignError, Result};

/// The model's median absolute error of output tok/s on its held-out test set (`servetune plan
/// --validate`, VALIDATION.md's test-set headline, which a test compares with this value): the
/// width of every interval before the campaign has a track record of its own.
pub const HELD_OUT_MEDIAN_ERROR: f64 = 0.183;

/// A predicted figure's interval: `value / (1 + width)` to `value * (1 + width)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    /// Lower bound.
    pub low: f64,
    /// Upper bound.
    pub high: f64,
    /// Relative half-width (0.2 = 20%).
    pub width: f64,
    /// Where the width comes from, in words.
    pub basis: String,
}

impl Interval {
    /// The interval of `value` with `width` from `basis`.
    pub fn around(value: f64, width: f64, basis: String) -> Interval {
        Interval { low: value / (1.0 + width), high: value * (1.0 + width), width, basis }
    }

    /// Whether `x` lies inside.
    pub fn contains(&self, x: f64) -> bool {
        x >= self.low && x <= self.high
    }
}

/// The relative half-width from a campaign's log errors `ln(measured / predicted)`: the RMS of the
/// errors with the held-out error as one prior observation, so one lucky step does not shrink the
/// interval to nothing and a miss widens it at once.
pub fn width(errors: &[f64]) -> (f64, String) {
    let prior = (1.0 + HELD_OUT_MEDIAN_ERROR).ln();
    let n = errors.len();
    let ms = (prior * prior + errors.iter().map(|e| e * e).sum::<f64>()) / (1 + n) as f64;
    let w = ms.sqrt().exp() - 1.0;
    let basis = if n == 0 {
        format!("the model's held-out median error ({:.1}%); no track record yet", HELD_OUT_MEDIAN_ERROR * 100.0)
    } else {
        format!(
            "RMS of this campaign's {n} earlier error(s) with the model's held-out median ({:.1}%) as one prior observation",
            HELD_OUT_MEDIAN_ERROR * 100.0
        )
    };
    (w, basis)
}

/// The prediction for one measured point.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PointPrediction {
    /// Concurrency.
    pub concurrency: u32,
    /// The model's own output tok/s (no calibration).
    pub raw: Option<f64>,
    /// With the box's calibration, when one existed before this experiment was measured.
    pub calibrated: Option<f64>,
}

impl PointPrediction {
    /// The figure the campaign stands by: calibrated when there is a calibration, else raw.
    pub fn shown(&self) -> Option<f64> {
        self.calibrated.or(self.raw)
    }
}

/// What the model predicted for one measured experiment, stored when it was measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PointsRecord {
    /// The experiment.
    pub experiment: i64,
    /// The layout priced: the experiment's knobs and the running cap the server showed.
    pub layout: Layout,
    /// The calibration behind the calibrated figures.
    pub calibration: Option<Calibration>,
    /// Every measured point's prediction.
    pub points: Vec<PointPrediction>,
    /// The relative half-width of the shown figures' intervals, and where it comes from.
    pub width: f64,
    /// Where the width comes from.
    pub width_basis: String,
    /// What the figures were priced as: the sweep's own run, or (a record written before the
    /// field, journal schema < 1.5) the steady state. Only the first kind feeds later intervals.
    #[serde(default)]
    pub priced: FittedTo,
}

impl PointsRecord {
    /// The prediction at `concurrency`.
    pub fn at(&self, concurrency: u32) -> Option<&PointPrediction> {
        self.points.iter().find(|p| p.concurrency == concurrency)
    }
}

/// A step's predicted gain, stored when the campaign acted on it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GainRecord {
    /// The step's title.
    pub title: String,
    /// Where the step came from.
    pub source: StepSource,
    /// The experiment the gain is measured against (the best one when the step was chosen).
    pub reference: i64,
    /// The model's own gain.
    pub raw: Option<f64>,
    /// With the box's calibration.
    pub calibrated: Option<f64>,
    /// The experiment the calibration was fitted to.
    pub calibrated_on: Option<i64>,
    /// The interval of the shown gain (calibrated, else raw).
    pub interval: Option<Interval>,
    /// What the gains were priced as (see [`PointsRecord::priced`]).
    #[serde(default)]
    pub priced: FittedTo,
}

/// One line of the track record: a step's predicted gain against the gain measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TrackLine {
    /// The journal's prediction record.
    pub record: i64,
    /// The step's title.
    pub step: String,
    /// Where the step came from.
    pub source: StepSource,
    /// The experiment it is measured against.
    pub reference: i64,
    /// The experiment that measured the step (a runnable step's own; for a question answered
    /// --done, the first experiment finished after the answer).
    pub experiment: Option<i64>,
    /// The question, for a step a person took.
    pub question: Option<i64>,
    /// The model's own predicted gain.
    pub predicted_raw: Option<f64>,
    /// The calibrated predicted gain.
    pub predicted_calibrated: Option<f64>,
    /// The experiment the calibration came from.
    pub calibrated_on: Option<i64>,
    /// The interval of the shown prediction.
    pub interval: Option<Interval>,
    /// best(experiment) / best(reference), once measured.
    pub measured: Option<f64>,
    /// Whether the measured gain fell inside the interval.
    pub inside: Option<bool>,
    /// What the prediction was priced as; an older steady-state gain is shown but does not widen
    /// the next interval.
    #[serde(skip)]
    pub priced: FittedTo,
}

fn json_err(e: serde_json::Error) -> CampaignError {
    crate::damaged(format!("journal: {e}"))
}

/// The newest fabric record measured in the environment with probe hash `env_hash`.
pub fn fabric_of(j: &Journal, env_hash: &str) -> Result<Option<i64>> {
    Ok(j.env_fabrics(env_hash)?.into_iter().map(|f| f.id).max())
}

/// Stores `c` (fitted to experiment `c.experiment`) for the environment; returns it with its id.
pub fn add_calibration(j: &Journal, env_hash: &str, fabric: Option<i64>, c: &Calibration) -> Result<Calibration> {
    let body = serde_json::to_string(c).map_err(json_err)?;
    j.conn().execute(
        "INSERT INTO calibrations(experiment, env_hash, fabric, body, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![c.experiment, env_hash, fabric, body, now_ms()],
    )?;
    Ok(Calibration { id: j.conn().last_insert_rowid(), ..*c })
}

/// Every calibration, oldest first, with its environment hash and fabric record.
pub fn calibrations(j: &Journal) -> Result<Vec<(Calibration, String, Option<i64>)>> {
    let mut st = j.conn().prepare("SELECT id, env_hash, fabric, body FROM calibrations ORDER BY id")?;
    let rows = st
        .query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?, r.get::<_, Option<i64>>(2)?, r.get::<_, String>(3)?)))?
        .collect::<std::result::Result<Vec<_>, _>>()?;
    rows.into_iter()
        .map(|(id, hash, fabric, body)| {
            let c: Calibration = serde_json::from_str(&body).map_err(|e| crate::damaged(format!("journal: calibration {id}: {e}")))?;
            Ok((Calibration { id, ..c }, hash, fabric))
        })
        .collect()
}

/// Whether a calibration is worth using: it must be fitted against the sweep's own run, as every
/// prediction is now priced (one recorded by an older servetune was fitted against the steady
/// state), and fit its own sweep at least as well as the model fits data it has never seen
/// (root-mean-square log error within the held-out median error). A fit that cannot follow its
/// own points (its factors pinned at their bounds, the curve's shape not the model's) would only
/// carry that misfit into the next prediction.
pub fn usable(c: &Calibration) -> bool {
    unused_because(c).is_none()
}

/// Why a calibration is not used ([`usable`]), in words; None when it is.
pub fn unused_because(c: &Calibration) -> Option<&'static str> {
    if c.fitted_to != FittedTo::SweepRun {
        Some("fitted against the steady state by an older servetune; the next measured sweep calibrates afresh")
    } else if c.rms_log_error > (1.0 + HELD_OUT_MEDIAN_ERROR).ln() {
        Some("it fits its own sweep worse than the model's held-out error")
    } else {
        None
    }
}

/// The newest usable calibration of the environment (probe hash and its newest fabric record),
/// made before experiment `before` when given.
pub fn calibration_for(j: &Journal, env_hash: &str, before: Option<i64>) -> Result<Option<Calibration>> {
    let fabric = fabric_of(j, env_hash)?;
    Ok(calibrations(j)?
        .into_iter()
        .filter(|(c, h, f)| h == env_hash && *f == fabric && before.is_none_or(|b| c.experiment < b) && usable(c))
        .map(|(c, _, _)| c)
        .next_back())
}

fn add_prediction(j: &Journal, kind: &str, experiment: Option<i64>, question: Option<i64>, body: &impl Serialize) -> Result<i64> {
    let body = serde_json::to_string(body).map_err(json_err)?;
    j.conn().execute(
        "INSERT INTO predictions(kind, experiment, question, body, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![kind, experiment, question, body, now_ms()],
    )?;
    Ok(j.conn().last_insert_rowid())
}

type PredictionRow = (i64, Option<i64>, Option<i64>, String);

fn predictions(j: &Journal, kind: &str) -> Result<Vec<PredictionRow>> {
    let mut st = j.conn().prepare("SELECT id, experiment, question, body FROM predictions WHERE kind = ?1 ORDER BY id")?;
    let rows = st.query_map([kind], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?.collect::<std::result::Result<Vec<_>, _>>()?;
    Ok(rows)
}

/// Every measured experiment's stored predictions, oldest first.
pub fn point_records(j: &Journal) -> Result<Vec<PointsRecord>> {
    predictions(j, "points")?
        .into_iter()
        .map(|(id, _, _, body)| serde_json::from_str(&body).map_err(|e| crate::damaged(format!("journal: prediction {id}: {e}"))))
        .collect()
}

/// A stored step gain: (record id, the step's experiment, its question, the gain).
pub type StoredGain = (i64, Option<i64>, Option<i64>, GainRecord);

/// Every stored step gain, oldest first.
pub fn gain_records(j: &Journal) -> Result<Vec<StoredGain>> {
    predictions(j, "gain")?
        .into_iter()
        .map(|(id, e, q, body)| {
            let g: GainRecord = serde_json::from_str(&body).map_err(|e| crate::damaged(format!("journal: prediction {id}: {e}")))?;
            Ok((id, e, q, g))
        })
        .collect()
}

/// The layout the model prices for a measured sweep: the knobs, and when no cap knob is set, the
/// running cap the server showed (requests queued while at most that many ran).
pub fn measured_layout(knobs: &crate::knobs::KnobValues, gpus: u32, r: Option<&BenchSummary>) -> Layout {
    let mut l = crate::planner::layout(knobs, gpus);
    if l.max_running.is_none() {
        let shown = r
            .into_iter()
            .flat_map(|r| r.points.iter())
            .filter(|p| p.server_max_queued.unwrap_or(0.0) > 0.0)
            .filter_map(|p| p.server_max_running)
            .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))));
        l.max_running = shown.filter(|x| *x >= 1.0).map(|x| x.round() as u32);
    }
    l
}

/// The log errors of the measured experiments' shown predictions at their best points, of the
/// same kind (calibrated or the model alone) as the prediction about to be judged: the model
/// alone missing a box says nothing about how well its calibration fits it.
fn point_errors(records: &[PointsRecord], exps: &[Experiment], calibrated: bool) -> Vec<f64> {
    records
        .iter()
        .filter(|r| r.calibration.is_some() == calibrated && r.priced == FittedTo::SweepRun)
        .filter_map(|r| {
            let e = exps.iter().find(|e| e.id == r.experiment)?;
            let p = best_point(e.result.as_ref()?)?;
            let pred = r.at(p.0)?.shown()?;
            (pred > 0.0).then(|| (p.1 / pred).ln())
        })
        .collect()
}

/// The best measured point (concurrency, output tok/s), objectives met when judged.
pub fn best_point(r: &BenchSummary) -> Option<(u32, f64)> {
    r.points
        .iter()
        .filter(|p| p.completed > 0 && p.slos_met != Some(false))
        .max_by(|a, b| a.output_tok_s.total_cmp(&b.output_tok_s))
        .map(|p| (p.concurrency, p.output_tok_s))
}

/// Records what the model predicted for experiment `id`'s sweep `sm` (measured in the environment
/// with probe hash `env_hash`), the verdict as a finding, and the new calibration. `mb` is the
/// box without calibration.
pub fn record_measurement(
    j: &Journal,
    mb: &ModelBox,
    env_hash: &str,
    id: i64,
    knobs: &crate::knobs::KnobValues,
    sm: &BenchSummary,
) -> Result<()> {
    let lay = measured_layout(knobs, mb.gpus, Some(sm));
    let cal = calibration_for(j, env_hash, Some(id))?;
    let cal_box = mb.calibrated(cal);
    let points: Vec<PointPrediction> = sm
        .points
        .iter()
        .filter(|p| p.completed > 0)
        .map(|p| PointPrediction {
            concurrency: p.concurrency,
            raw: plan_step::predict_at(mb, lay, p.concurrency),
            calibrated: cal.and_then(|_| plan_step::predict_at(&cal_box, lay, p.concurrency)),
        })
        .collect();
    let earlier = point_records(j)?;
    let (w, basis) = width(&point_errors(&earlier, &j.experiments()?, cal.is_some()));
    let rec =
        PointsRecord { experiment: id, layout: lay, calibration: cal, points, width: w, width_basis: basis, priced: FittedTo::SweepRun };
    add_prediction(j, "points", Some(id), None, &rec)?;
    verdict_finding(j, &cal_box, &rec, sm)?;
    let measured: Vec<(u32, f64)> = sm.points.iter().filter(|p| p.completed > 0).map(|p| (p.concurrency, p.output_tok_s)).collect();
    if let Some(c) = plan_step::calibrate(mb, lay, &measured) {
        let c = add_calibration(j, env_hash, fabric_of(j, env_hash)?, &Calibration { experiment: id, ..c })?;
        j.add_event(
            "calibrated",
            &format!(
                "calibration {} from experiment {id}: {} (rms log error {:.3}, {} points){}",
                c.id,
                c.factors.words(),
                c.rms_log_error,
                c.points,
                unused_because(&c).map_or(String::new(), |why| format!("; not used: {why}"))
            ),
        )?;
    }
    Ok(())
}

/// The finding that judges the measurement at its best point against the shown prediction.
fn verdict_finding(j: &Journal, cal_box: &ModelBox, rec: &PointsRecord, sm: &BenchSummary) -> Result<()> {
    let Some((c, measured)) = best_point(sm) else { return Ok(()) };
    let Some(p) = rec.at(c).copied() else { return Ok(()) };
    let Some(shown) = p.shown().filter(|x| *x > 0.0) else { return Ok(()) };
    let iv = Interval::around(shown, rec.width, rec.width_basis.clone());
    let id = rec.experiment;
    let what = match (rec.calibration, p.raw) {
        (Some(cal), Some(raw)) => {
            format!("{shown:.1} predicted (calibrated on experiment {}; uncalibrated {raw:.1})", cal.experiment)
        }
        _ => format!("{shown:.1} predicted (uncalibrated: no earlier experiment in this environment)"),
    };
    let evidence = format!(
        "experiment {id}: {measured:.1} output tok/s measured vs {what} at concurrency {c}; interval {:.1}..{:.1} ({})",
        iv.low, iv.high, iv.basis
    );
    let title = format!("measured {:.0}% of the model's prediction", measured / shown * 100.0);
    if iv.contains(measured) {
        return j
            .add_finding(&NewFinding {
                source: Source::Analysis,
                code: Code::PlanGap,
                severity: Severity::Info,
                title: &title,
                evidence: &evidence,
                fix: "none: the model explains the measurement (inside the interval)",
                experiment: Some(id),
            })
            .map(|_| ());
    }
    let terms = plan_step::explain_gap(cal_box, rec.layout, c, measured);
    let fix = match terms.first() {
        None => {
            "no single term of the model's step explains it: check the launch (kernels, backend, flags) against the model's assumptions"
                .to_string()
        }
        Some(_) => terms
            .iter()
            .map(|t| {
                format!("{} would have to take {:.1}x the model's {:.1} ms per step ({})", t.term, t.factor, t.predicted_ms, t.settle_with)
            })
            .collect::<Vec<_>>()
            .join("; or "),
    };
    j.add_finding(&NewFinding {
        source: Source::Analysis,
        code: Code::PlanGap,
        severity: Severity::Warning,
        title: &format!("{title}: outside the interval"),
        evidence: &evidence,
        fix: &fix,
        experiment: Some(id),
    })
    .map(|_| ())
}

/// The log errors of earlier measured gains (shown prediction against measurement), of the same
/// kind (calibrated or the model alone).
fn gain_errors(lines: &[TrackLine], calibrated: bool) -> Vec<f64> {
    lines
        .iter()
        .filter(|l| l.predicted_calibrated.is_some() == calibrated && l.priced == FittedTo::SweepRun)
        .filter_map(|l| {
            let p = l.predicted_calibrated.or(l.predicted_raw)?;
            let m = l.measured?;
            (p > 0.0 && m > 0.0).then(|| (m / p).ln())
        })
        .collect()
}

/// The interval of a gain the campaign is about to act on (`calibrated`: made with the box's
/// calibration), from the track record so far.
pub fn gain_interval_of(track: &[TrackLine], gain: f64, calibrated: bool) -> Interval {
    let (w, basis) = width(&gain_errors(track, calibrated));
    Interval::around(gain, w, basis)
}

/// Stores a step's predicted gain when the campaign acts on it: a runnable step's `experiment`, or
/// the `question` a person is asked. Steps without a gain are not stored.
pub fn record_gain(
    j: &Journal,
    step: &crate::planner::Step,
    reference: Option<i64>,
    experiment: Option<i64>,
    question: Option<i64>,
) -> Result<()> {
    let (Some(shown), Some(reference)) = (step.gain, reference) else { return Ok(()) };
    if gain_records(j)?.iter().any(|(_, e, q, _)| (experiment.is_some() && *e == experiment) || (question.is_some() && *q == question)) {
        return Ok(());
    }
    let rec = GainRecord {
        title: step.title.clone(),
        source: step.source,
        reference,
        raw: step.raw_gain,
        calibrated: step.calibrated_on.map(|_| shown),
        calibrated_on: step.calibrated_on,
        interval: Some(gain_interval_of(&track_record(j)?, shown, step.calibrated_on.is_some())),
        priced: FittedTo::SweepRun,
    };
    add_prediction(j, "gain", experiment, question, &rec).map(|_| ())
}

/// Every stored gain against the gain measured since.
pub fn track_record(j: &Journal) -> Result<Vec<TrackLine>> {
    let exps = j.experiments()?;
    let questions = j.questions()?;
    let best = |id: i64| exps.iter().find(|e| e.id == id && e.state == ExpState::Done).and_then(|e| e.result.as_ref()).and_then(best_point);
    let mut out = Vec::new();
    for (record, e, q, g) in gain_records(j)? {
        let asked = q.and_then(|q| questions.iter().find(|x| x.id == q));
        let measured_by = match (e, asked) {
            (Some(e), _) => Some(e),
            (None, Some(q)) => after_answer(j, q, &exps)?,
            (None, None) => None,
        };
        let measured = measured_by.and_then(best).zip(best(g.reference)).map(|(n, r)| n.1 / r.1).filter(|m| m.is_finite());
        let inside = measured.zip(g.interval.as_ref()).map(|(m, iv)| iv.contains(m));
        out.push(TrackLine {
            record,
            step: g.title,
            source: g.source,
            reference: g.reference,
            experiment: measured_by,
            question: q,
            predicted_raw: g.raw,
            predicted_calibrated: g.calibrated,
            calibrated_on: g.calibrated_on,
            interval: g.interval,
            measured,
            inside,
            priced: g.priced,
        });
    }
    Ok(out)
}

/// The first experiment finished after a question was answered --done: what measured that step.
fn after_answer(j: &Journal, q: &QuestionRow, exps: &[Experiment]) -> Result<Option<i64>> {
    if q.state != QuestionState::Done {
        return Ok(None);
    }
    let at: Option<i64> = j.conn().query_row("SELECT answered_at FROM questions WHERE id = ?1", [q.id], |r| r.get(0)).optional()?.flatten();
    Ok(at.and_then(|at| exps.iter().filter(|e| e.state == ExpState::Done && e.created_at >= at).map(|e| e.id).min()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use servetune_model::calibrate::Factors;

    #[test]
    fn the_width_starts_at_the_held_out_error_and_follows_the_track_record() {
        let (w0, b0) = width(&[]);
        assert!((w0 - HELD_OUT_MEDIAN_ERROR).abs() < 1e-9, "{w0}");
        assert!(b0.contains("no track record"), "{b0}");
        // Two exact steps narrow it; a 50% miss widens it past the prior.
        let (narrow, _) = width(&[0.0, 0.0]);
        assert!(narrow < w0 && narrow > 0.0, "{narrow}");
        let (wide, basis) = width(&[(1.5f64).ln()]);
        assert!(wide > w0, "{wide}");
        assert!(basis.contains("1 earlier error"), "{basis}");
    }

    fn cal(experiment: i64, rms_log_error: f64) -> Calibration {
        Calibration {
            id: 0,
            experiment,
            factors: Factors::Terms { memory_efficiency_scale: 0.9, step_overhead_ms: 4.0, comm_scale: 1.0 },
            rms_log_error,
            points: 3,
            fitted_to: crate::plan_step::FittedTo::SweepRun,
        }
    }

    #[test]
    fn a_journal_keeps_both_calibration_forms_and_reads_an_older_terms_body_as_fitted_to_the_steady_state() {
        let d = tempfile::tempdir().expect("tmp");
        let row =
            crate::journal::CampaignRow { goal: "g".into(), model: "m".into(), engine: "sim".into(), settings: "{}".into(), created_at: 0 };
        let j = Journal::create(d.path(), &row).expect("journal");
        let one = Calibration { factors: Factors::StepScale { step_scale: 1.3 }, points: 1, ..cal(1, 0.0) };
        add_calibration(&j, "env", None, &cal(1, 0.01)).expect("terms");
        add_calibration(&j, "env", None, &one).expect("step scale");
        // A body as the releases before the one-point form wrote it.
        j.conn()
            .execute(
                "INSERT INTO calibrations(experiment, env_hash, fabric, body, created_at) VALUES (3, 'env', NULL, ?1, 0)",
                [r#"{"id":0,"experiment":3,"memory_efficiency_scale":0.8,"step_overhead_ms":5.0,"comm_scale":1.0,"rms_log_error":0.02,"points":4}"#],
            )
            .expect("old body");
        // The old body says nothing of what it was fitted against: the steady state, so the
        // newest calibration predictions use is the step scale of experiment 1, not it.
        let all = calibrations(&j).expect("read");
        assert_eq!(all[2].0.fitted_to, crate::plan_step::FittedTo::SteadyState);
        assert_eq!(calibration_for(&j, "env", None).expect("read").map(|c| c.factors), Some(Factors::StepScale { step_scale: 1.3 }));
        let read: Vec<Factors> = all.into_iter().map(|(c, _, _)| c.factors).collect();
        assert_eq!(
            read,
            vec![
                cal(1, 0.01).factors,
                Factors::StepScale { step_scale: 1.3 },
                Factors::Terms { memory_efficiency_scale: 0.8, step_overhead_ms: 5.0, comm_scale: 1.0 }
            ]
        );
    }

    #[test]
    fn a_new_environment_or_fabric_record_starts_without_a_calibration_and_a_misfit_is_not_used() {
        let d = tempfile::tempdir().expect("tmp");
        let row =
            crate::journal::CampaignRow { goal: "g".into(), model: "m".into(), engine: "sim".into(), settings: "{}".into(), created_at: 0 };
        let mut j = Journal::create(d.path(), &row).expect("journal");
        let env_a = j.add_fingerprint(crate::journal::FingerprintKind::Probe, "a", &serde_json::json!({})).expect("probe a");
        j.add_fingerprint(crate::journal::FingerprintKind::Probe, "b", &serde_json::json!({})).expect("probe b");
        add_calibration(&j, "a", None, &cal(1, 0.01)).expect("add");
        assert_eq!(calibration_for(&j, "a", None).expect("read").map(|c| c.experiment), Some(1));
        assert_eq!(calibration_for(&j, "a", Some(1)).expect("read"), None, "only experiments before the one judged");
        assert_eq!(calibration_for(&j, "b", None).expect("read"), None, "another box has none");
        // A misfit (worse than the held-out error on its own points) is stored but not used.
        add_calibration(&j, "a", None, &cal(2, 0.5)).expect("add");
        assert_eq!(calibration_for(&j, "a", None).expect("read").map(|c| c.experiment), Some(1));
        // A new fabric record of the box starts over.
        let doc = serde_json::json!({"schema": "servetune.fabric/1"});
        let rec = j.add_fabric(env_a, "p2p.json", &doc).expect("fabric");
        assert_eq!(fabric_of(&j, "a").expect("fabric"), Some(rec));
        assert_eq!(calibration_for(&j, "a", None).expect("read"), None);
        add_calibration(&j, "a", Some(rec), &cal(3, 0.02)).expect("add");
        assert_eq!(calibration_for(&j, "a", None).expect("read").map(|c| c.experiment), Some(3));
    }

    #[test]
    fn an_older_steady_state_prediction_is_kept_but_does_not_widen_the_next_interval() {
        // Records as a journal of schema < 1.5 stored them: no `priced`, so the steady state.
        let old_points: PointsRecord = serde_json::from_str(
            r#"{"experiment":1,"layout":{"tp":8,"pp":1,"ep":1,"max_running":null},"calibration":null,"points":[{"concurrency":64,"raw":462.0,"calibrated":null}],"width":0.195,"width_basis":"b"}"#,
        )
        .expect("an old points record");
        assert_eq!(old_points.priced, FittedTo::SteadyState);
        let old_gain: GainRecord = serde_json::from_str(
            r#"{"title":"t","source":"running_cap","reference":1,"raw":1.2,"calibrated":null,"calibrated_on":null,"interval":null}"#,
        )
        .expect("an old gain record");
        assert_eq!(old_gain.priced, FittedTo::SteadyState);
        let line = |raw: f64, measured: f64, priced: FittedTo| TrackLine {
            record: 1,
            step: "t".into(),
            source: StepSource::RunningCap,
            reference: 1,
            experiment: Some(2),
            question: None,
            predicted_raw: Some(raw),
            predicted_calibrated: None,
            calibrated_on: None,
            interval: None,
            measured: Some(measured),
            inside: None,
            priced,
        };
        // An old steady-state gain that missed by 78% and a new one that was exact: only the
        // new one's error feeds the width.
        let track = [line(1.0, 1.78, FittedTo::SteadyState), line(1.2, 1.2, FittedTo::SweepRun)];
        assert_eq!(gain_errors(&track, false), vec![0.0]);
        let with_old = gain_interval_of(&track, 1.5, false);
        let without = gain_interval_of(&track[1..], 1.5, false);
        assert_eq!(with_old, without);
        assert!(with_old.width < HELD_OUT_MEDIAN_ERROR, "an exact step narrows it: {}", with_old.width);
    }

    #[test]
    fn the_held_out_error_is_the_committed_validation_headline() {
        // VALIDATION.md's tail is `servetune plan --validate`'s output (a CLI test checks that).
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../VALIDATION.md");
        let text = std::fs::read_to_string(path).expect("VALIDATION.md");
        let key = "HEADLINE (test set): median absolute error of output tokens/s = ";
        let at = text.rfind(key).expect("the headline line") + key.len();
        let pct: f64 = text[at..].split('%').next().and_then(|x| x.trim().parse().ok()).expect("a percentage");
        assert!((pct / 100.0 - HELD_OUT_MEDIAN_ERROR).abs() < 5e-4, "VALIDATION.md says {pct}%, the constant {HELD_OUT_MEDIAN_ERROR}");
    }

    #[test]
    fn an_interval_contains_its_value_and_not_a_miss_beyond_its_width() {
        let iv = Interval::around(100.0, 0.1, "t".into());
        assert!(iv.contains(100.0) && iv.contains(109.9) && iv.contains(91.0));
        assert!(!iv.contains(111.0) && !iv.contains(90.0));
    }
}
