//! A box's measured NCCL all-reduce (`plan --allreduce`), read in place of the model's NCCL
//! figure where the engine runs NCCL within a node.

use serde::Serialize;

use super::{nccl, AllReduce, Method};
use crate::hw::LinkProfile;

/// A box's NCCL all-reduce as `servetune fabric allreduce --json` measured it (one process per
/// GPU, as the engines run it; NCCL's default settings): time by message size for each rank
/// count measured. Read by [`crate::inputs::FabricInput::measured_allreduce`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MeasuredAllReduce {
    /// The file it was read from.
    pub source: String,
    /// One run per rank count, fewest ranks first (with none, the model's NCCL is used).
    pub runs: Vec<MeasuredRun>,
    /// The link and GPU (catalog or measured names) of the deployment it was given with: it
    /// prices that box only, so a what-if or a fix on another link or GPU takes the model
    /// (`None` until a deployment is built with it).
    pub measured_on: Option<(String, String)>,
}

/// One measured rank count.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MeasuredRun {
    /// GPUs in the all-reduce (2 or more).
    ranks: u32,
    /// (bytes, us), sizes rising, every figure finite and positive; two or more.
    points: Vec<(f64, f64)>,
}

impl MeasuredRun {
    /// A run of `ranks` GPUs (2 or more) measured at `points` ((bytes, us), two or more, sizes
    /// strictly rising, every figure finite and positive); `None` otherwise.
    pub fn new(ranks: u32, points: Vec<(f64, f64)>) -> Option<Self> {
        let positive = |x: f64| x.is_finite() && x > 0.0;
        let ok = ranks >= 2
            && points.len() >= 2
            && points.iter().all(|p| positive(p.0) && positive(p.1))
            && points.windows(2).all(|w| w[1].0 > w[0].0);
        ok.then_some(Self { ranks, points })
    }

    /// GPUs in the all-reduce.
    pub fn ranks(&self) -> u32 {
        self.ranks
    }

    /// The measured (bytes, us) points, sizes rising.
    pub fn points(&self) -> &[(f64, f64)] {
        &self.points
    }

    /// The measured time of `bytes`, us: linear in the size between the measured sizes around it
    /// (a fixed cost plus bytes over a bandwidth within each span, as [`super::measured_latency_us`]
    /// reads its table), the smallest size's time below it (the latency floor), the last span's
    /// line past the largest (its time grown with the bytes where that span did not rise).
    pub fn us(&self, bytes: f64) -> f64 {
        let (Some(&first), Some(&last)) = (self.points.first(), self.points.last()) else { return 0.0 };
        if bytes <= first.0 {
            return first.1;
        }
        if bytes >= last.0 {
            // The last span's slope (its bandwidth), or through the origin if the last span fell.
            let n = self.points.len();
            let (x0, y0) = self.points[n - 2];
            let slope = (last.1 - y0) / (last.0 - x0);
            return if slope > 0.0 { last.1 + slope * (bytes - last.0) } else { last.1 * bytes / last.0 };
        }
        let i = self.points.iter().position(|p| p.0 >= bytes).unwrap_or(self.points.len() - 1).max(1);
        let ((x0, y0), (x1, y1)) = (self.points[i - 1], self.points[i]);
        y0 + (y1 - y0) * (bytes - x0) / (x1 - x0)
    }
}

impl MeasuredAllReduce {
    /// Whether it prices a deployment on `link` with `gpu`: the box it was given with.
    pub fn prices(&self, link: &str, gpu: &str) -> bool {
        self.measured_on.as_ref().is_some_and(|(l, g)| l == link && g == gpu)
    }

    /// NCCL's all-reduce of `bytes` over `n` GPUs on `link` as the box measured it, net of
    /// `floor_us` (the per-kernel floor a step counts apart for every collective; a measured time
    /// holds it): the run with `n` ranks; else the run nearest in ranks (the larger on a tie), its
    /// ratio to the model's NCCL on `link` at the same size carried over to `n` ranks. The method
    /// names the run read.
    pub fn allreduce(&self, link: &LinkProfile, n: u32, bytes: f64, floor_us: f64) -> AllReduce {
        let Some(run) = self.runs.iter().min_by_key(|r| (r.ranks.abs_diff(n), u32::MAX - r.ranks)) else { return nccl(link, n, bytes) };
        let net = (run.us(bytes) - floor_us).max(0.0);
        let us = if run.ranks == n {
            net
        } else {
            let model_there = nccl(link, run.ranks, bytes).us;
            let ratio = if model_there > 0.0 { net / model_there } else { 1.0 };
            nccl(link, n, bytes).us * ratio
        };
        AllReduce { us, method: Method::Measured { ranks: run.ranks } }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hw::link;

    #[test]
    fn a_measured_run_is_linear_between_its_sizes_flat_below_and_on_its_last_span_above() {
        let r = MeasuredRun::new(8, vec![(1024.0, 40.0), (1_048_576.0, 90.0), (4_194_304.0, 200.0)]).expect("run");
        assert_eq!(r.us(1024.0), 40.0);
        assert_eq!(r.us(8.0), 40.0, "below the smallest size: its latency");
        let mid = 1024.0 + (1_048_576.0 - 1024.0) / 2.0;
        assert!((r.us(mid) - 65.0).abs() < 1e-9, "{}", r.us(mid));
        // Past the largest: the last span's line (110 us per 3 MiB).
        assert!((r.us(7_340_032.0) - 310.0).abs() < 1e-9, "{}", r.us(7_340_032.0));
        // Refused: one rank, one size, sizes not rising, a time not finite and positive.
        assert!(MeasuredRun::new(1, vec![(1.0, 1.0), (2.0, 2.0)]).is_none());
        assert!(MeasuredRun::new(8, vec![(1.0, 1.0)]).is_none());
        assert!(MeasuredRun::new(8, vec![(2.0, 1.0), (1.0, 2.0)]).is_none());
        assert!(MeasuredRun::new(8, vec![(1.0, f64::NAN), (2.0, 2.0)]).is_none());
        assert!(MeasuredRun::new(8, vec![(1.0, 0.0), (2.0, 2.0)]).is_none());
    }

    #[test]
    fn a_measured_all_reduce_is_read_at_its_rank_count_or_carried_over_by_its_ratio_to_the_model() {
        let staged = link("pcie-host-staged").expect("link");
        let twice = |n: u32| {
            let pts = [4096.0, 65536.0, 1_048_576.0].iter().map(|&b| (b, 2.0 * nccl(&staged, n, b).us + 5.0)).collect();
            MeasuredRun::new(n, pts).expect("run")
        };
        let m = MeasuredAllReduce { source: "ar.json".into(), runs: vec![twice(4)], measured_on: None };
        // At its own rank count: the measurement, net of the floor.
        let at4 = m.allreduce(&staged, 4, 65536.0, 5.0);
        assert!((at4.us - 2.0 * nccl(&staged, 4, 65536.0).us).abs() < 1e-9, "{at4:?}");
        assert_eq!(at4.method, Method::Measured { ranks: 4 });
        // Eight ranks were not measured: the model at 8 times the run's ratio at 4 (2x).
        let at8 = m.allreduce(&staged, 8, 65536.0, 5.0);
        assert!((at8.us - 2.0 * nccl(&staged, 8, 65536.0).us).abs() < 1e-9, "{at8:?}");
        assert_eq!(at8.method, Method::Measured { ranks: 4 });
        // With both measured, each size reads its own; a tie in distance takes the larger run.
        let both = MeasuredAllReduce { source: "ar.json".into(), runs: vec![twice(4), twice(8)], measured_on: None };
        assert_eq!(both.allreduce(&staged, 8, 4096.0, 5.0).method, Method::Measured { ranks: 8 });
        assert_eq!(both.allreduce(&staged, 6, 4096.0, 5.0).method, Method::Measured { ranks: 8 });
        assert_eq!(both.allreduce(&staged, 2, 4096.0, 5.0).method, Method::Measured { ranks: 4 });
        // None measured: the model.
        let none = MeasuredAllReduce { source: "ar.json".into(), runs: vec![], measured_on: None };
        assert_eq!(none.allreduce(&staged, 8, 4096.0, 5.0), nccl(&staged, 8, 4096.0));
    }
}
