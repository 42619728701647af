//! The saturation rule: where a throughput curve stops growing. `bench` applies it to a measured
//! sweep and `plan` to a predicted curve, so both name the same knee for the same numbers.

/// Throughput must grow by more than this fraction somewhere beyond a point for the curve to count
/// as still rising there (more load that buys under 10% more tokens is a plateau).
pub const MIN_GAIN: f64 = 0.10;

/// One point of a curve: the offered load (concurrency, or requests/s) and the output throughput.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LoadPoint {
    /// Concurrency or request rate; only its order matters.
    pub load: f64,
    /// Output tokens per second at that load.
    pub output_tokens_per_s: f64,
}

/// The index (into `points`) of the knee: after ordering by load, the first point whose throughput
/// no later point beats by [`MIN_GAIN`] or more. `None` with fewer than two points, or when
/// throughput still rises at the last point.
pub fn knee(points: &[LoadPoint]) -> Option<usize> {
    if points.len() < 2 {
        return None;
    }
    let mut order: Vec<usize> = (0..points.len()).collect();
    order.sort_by(|&a, &b| points[a].load.total_cmp(&points[b].load));
    let tput = |i: usize| points[order[i]].output_tokens_per_s;
    let last = order.len() - 1;
    (0..last).find(|&i| (i + 1..=last).all(|j| tput(j) < tput(i) * (1.0 + MIN_GAIN))).map(|i| order[i])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn curve(v: &[(f64, f64)]) -> Vec<LoadPoint> {
        v.iter().map(|&(load, output_tokens_per_s)| LoadPoint { load, output_tokens_per_s }).collect()
    }

    #[test]
    fn the_knee_is_the_first_point_no_later_point_beats_by_ten_percent() {
        let c = curve(&[(1.0, 30.0), (8.0, 160.0), (32.0, 370.0), (64.0, 470.0), (128.0, 480.0), (256.0, 476.0)]);
        assert_eq!(knee(&c), Some(3));
    }

    #[test]
    fn a_curve_still_rising_at_its_end_has_no_knee() {
        assert_eq!(knee(&curve(&[(1.0, 10.0), (2.0, 20.0), (4.0, 40.0)])), None);
        assert_eq!(knee(&curve(&[(1.0, 10.0)])), None);
    }

    #[test]
    fn unordered_points_are_judged_in_load_order() {
        let c = curve(&[(64.0, 470.0), (1.0, 30.0), (128.0, 480.0)]);
        assert_eq!(knee(&c), Some(0));
    }
}
