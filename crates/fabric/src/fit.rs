//! Alpha-beta fits: time(bytes) = alpha + bytes / beta, by least squares on relative error (so
//! small copies weigh as much as large ones), with the residuals.

use serde::{Deserialize, Serialize};

/// A fitted link.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AlphaBeta {
    /// Latency, microseconds.
    pub alpha_us: f64,
    /// Bandwidth, GB/s.
    pub beta_gbs: f64,
    /// (bytes, measured us, fitted us, relative residual).
    pub residuals: Vec<(u64, f64, f64, f64)>,
    /// Root mean square of the relative residuals.
    pub rms_rel: f64,
}

/// Fits `points` (bytes, seconds). `None` with fewer than two distinct sizes.
pub fn fit(points: &[(u64, f64)]) -> Option<AlphaBeta> {
    let pts: Vec<(f64, f64)> = points.iter().filter(|(b, t)| *b > 0 && *t > 0.0 && t.is_finite()).map(|(b, t)| (*b as f64, *t)).collect();
    if pts.iter().map(|p| p.0 as u64).collect::<std::collections::BTreeSet<_>>().len() < 2 {
        return None;
    }
    // Weighted least squares with weights 1/t^2 (relative error).
    let (mut sw, mut sx, mut sy, mut sxx, mut sxy) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for &(x, y) in &pts {
        let w = 1.0 / (y * y);
        sw += w;
        sx += w * x;
        sy += w * y;
        sxx += w * x * x;
        sxy += w * x * y;
    }
    let det = sw * sxx - sx * sx;
    if det.abs() < f64::MIN_POSITIVE {
        return None;
    }
    let mut b = (sw * sxy - sx * sy) / det;
    let mut a = (sy - b * sx) / sw;
    if a < 0.0 {
        // Latency cannot be negative: refit the slope through the origin.
        a = 0.0;
        b = sxy / sxx;
    }
    if b <= 0.0 {
        return None;
    }
    let residuals: Vec<(u64, f64, f64, f64)> = pts
        .iter()
        .map(|&(x, y)| {
            let f = a + b * x;
            (x as u64, y * 1e6, f * 1e6, (y - f) / y)
        })
        .collect();
    let rms_rel = (residuals.iter().map(|r| r.3 * r.3).sum::<f64>() / residuals.len() as f64).sqrt();
    Some(AlphaBeta { alpha_us: a * 1e6, beta_gbs: 1.0 / b / 1e9, residuals, rms_rel })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fit_recovers_alpha_and_beta_exactly_from_clean_points() {
        // 13.3 us + bytes / 29.4 GB/s (the reference deployment's host-staged copies).
        let pts: Vec<(u64, f64)> = [4u64, 1024, 65536, 1 << 20, 16 << 20].iter().map(|&b| (b, 13.3e-6 + b as f64 / 29.4e9)).collect();
        let f = fit(&pts).expect("fit");
        assert!((f.alpha_us - 13.3).abs() < 1e-6, "{}", f.alpha_us);
        assert!((f.beta_gbs - 29.4).abs() < 1e-6, "{}", f.beta_gbs);
        assert!(f.rms_rel < 1e-9);
    }

    #[test]
    fn too_few_points_give_no_fit() {
        assert!(fit(&[(4, 1e-6)]).is_none());
        assert!(fit(&[(4, 1e-6), (4, 2e-6)]).is_none());
    }
}
