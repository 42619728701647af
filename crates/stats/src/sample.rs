//! Median and percentiles of a plain sample (HDR histograms in bench have their own quantiles; these
//! serve small samples: validation errors, repeated copy timings, step times).

/// The median of the finite values: the middle one, or the mean of the middle pair for an even
/// count. `None` when there is no finite value.
pub fn median(values: &[f64]) -> Option<f64> {
    percentile(values, 50.0)
}

/// The `q`th percentile (0..=100) of the finite values, interpolating linearly between the two
/// closest ranks (NumPy's default, so p50 is the usual median). `None` when there is no finite
/// value or `q` is outside 0..=100.
pub fn percentile(values: &[f64], q: f64) -> Option<f64> {
    let v = sorted_finite(values, q)?;
    let rank = q / 100.0 * (v.len() - 1) as f64;
    let (lo, hi) = (rank.floor() as usize, rank.ceil() as usize);
    let frac = rank - lo as f64;
    Some(v[lo] + (v[hi] - v[lo]) * frac)
}

/// The `q`th percentile (0..=100) of the finite values by nearest rank: the smallest value at or
/// below which `q` percent of the values fall (the `ceil(q/100 * n)`th in ascending order, at least
/// the first). Always one of the values, never between two, so a trace's p90 step is a step that
/// ran. `None` when there is no finite value or `q` is outside 0..=100.
pub fn nearest_rank(values: &[f64], q: f64) -> Option<f64> {
    let v = sorted_finite(values, q)?;
    let rank = ((q / 100.0 * v.len() as f64).ceil() as usize).max(1);
    v.get(rank - 1).copied()
}

/// The finite values sorted, when there is one and `q` is a percentile (0..=100).
fn sorted_finite(values: &[f64], q: f64) -> Option<Vec<f64>> {
    if !(0.0..=100.0).contains(&q) {
        return None;
    }
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    (!v.is_empty()).then_some(v)
}

/// The weighted median of `(value, weight)` pairs with finite values and positive weights: the
/// first value, in ascending order, at which the running weight reaches half the total (the lower
/// weighted median). `None` when no pair counts.
pub fn weighted_median(pairs: &[(f64, f64)]) -> Option<f64> {
    let mut v: Vec<(f64, f64)> = pairs.iter().copied().filter(|(x, w)| x.is_finite() && w.is_finite() && *w > 0.0).collect();
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    let half = v.iter().map(|p| p.1).sum::<f64>() / 2.0;
    let mut run = 0.0;
    v.into_iter().find_map(|(x, w)| {
        run += w;
        (run >= half - 1e-12 * half).then_some(x)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_weighted_median_is_where_the_running_weight_reaches_half() {
        // Equal weights: the lower middle value.
        assert_eq!(weighted_median(&[(3.0, 1.0), (1.0, 1.0), (2.0, 1.0), (4.0, 1.0)]), Some(2.0));
        // One heavy value carries the median to itself.
        assert_eq!(weighted_median(&[(1.0, 0.25), (2.0, 0.25), (9.0, 1.0)]), Some(9.0));
        assert_eq!(weighted_median(&[(9.0, 0.5), (1.0, 0.25), (2.0, 0.25)]), Some(2.0));
        // Non-finite values and non-positive weights do not count.
        assert_eq!(weighted_median(&[(f64::NAN, 5.0), (7.0, 1.0), (1.0, 0.0)]), Some(7.0));
        assert_eq!(weighted_median(&[]), None);
    }

    #[test]
    fn median_of_an_even_count_averages_the_middle_pair() {
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
    }

    #[test]
    fn empty_or_non_finite_samples_have_no_median() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[f64::NAN, f64::INFINITY]), None);
        assert_eq!(median(&[f64::NAN, 5.0]), Some(5.0));
    }

    #[test]
    fn percentiles_interpolate_between_ranks() {
        let v: Vec<f64> = (1..=5).map(f64::from).collect();
        assert_eq!(percentile(&v, 0.0), Some(1.0));
        assert_eq!(percentile(&v, 100.0), Some(5.0));
        assert_eq!(percentile(&v, 25.0), Some(2.0));
        assert_eq!(percentile(&v, 90.0), Some(4.6));
        assert_eq!(percentile(&v, 101.0), None);
    }

    #[test]
    fn nearest_rank_picks_a_value_of_the_sample() {
        let v: Vec<f64> = (1..=5).map(f64::from).collect();
        assert_eq!(nearest_rank(&v, 0.0), Some(1.0));
        assert_eq!(nearest_rank(&v, 20.0), Some(1.0));
        assert_eq!(nearest_rank(&v, 21.0), Some(2.0));
        assert_eq!(nearest_rank(&v, 90.0), Some(5.0));
        assert_eq!(nearest_rank(&v, 100.0), Some(5.0));
        // An even count: p50 is the lower middle value, not the mean of the pair.
        assert_eq!(nearest_rank(&[9.742, 4.702], 50.0), Some(4.702));
        assert_eq!(nearest_rank(&[9.742, 4.702], 90.0), Some(9.742));
        assert_eq!(nearest_rank(&[f64::NAN, 3.0], 50.0), Some(3.0));
        assert_eq!(nearest_rank(&[], 50.0), None);
        assert_eq!(nearest_rank(&v, -1.0), None);
    }
}
