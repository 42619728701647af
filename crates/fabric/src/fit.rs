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
    /// How far each measured point lies from the line.
    pub residuals: Vec<Residual>,
    /// Root mean square of the relative residuals (0.01 is 1%).
    pub rms_rel: f64,
}

/// One measured point against the fitted line.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Residual {
    /// Copy size, bytes.
    pub bytes: u64,
    /// Measured time, microseconds.
    pub measured_us: f64,
    /// The fitted line's time at this size, microseconds.
    pub fitted_us: f64,
    /// (measured - fitted) / measured.
    pub relative: f64,
}

/// One measurement to fit: `bytes` copied in `seconds`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Copy size, bytes.
    pub bytes: u64,
    /// Time of one copy, seconds.
    pub seconds: f64,
}

/// Fits `points`. `None` with fewer than two distinct sizes.
pub fn fit(points: &[Sample]) -> Option<AlphaBeta> {
    let pts: Vec<(f64, f64)> =
        points.iter().filter(|p| p.bytes > 0 && p.seconds > 0.0 && p.seconds.is_finite()).map(|p| (p.bytes as f64, p.seconds)).collect();
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
    let residuals: Vec<Residual> = pts
        .iter()
        .map(|&(x, y)| {
            let f = a + b * x;
            Residual { bytes: x as u64, measured_us: y * 1e6, fitted_us: f * 1e6, relative: (y - f) / y }
        })
        .collect();
    let rms_rel = (residuals.iter().map(|r| r.relative * r.relative).sum::<f64>() / residuals.len() as f64).sqrt();
    Some(AlphaBeta { alpha_us: a * 1e6, beta_gbs: 1.0 / b / 1e9, residuals, rms_rel })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fit_recovers_alpha_and_beta_exactly_from_clean_points() {
        // 13.3 us + bytes / 29.4 GB/s (the reference deployment's host-staged copies).
        let pts: Vec<Sample> = [4u64, 1024, 65536, 1 << 20, 16 << 20]
            .iter()
            .map(|&bytes| Sample { bytes, seconds: 13.3e-6 + bytes as f64 / 29.4e9 })
            .collect();
        let f = fit(&pts).expect("fit");
        assert!((f.alpha_us - 13.3).abs() < 1e-6, "{}", f.alpha_us);
        assert!((f.beta_gbs - 29.4).abs() < 1e-6, "{}", f.beta_gbs);
        assert!(f.rms_rel < 1e-9);
    }

    #[test]
    fn too_few_points_give_no_fit() {
        let s = |bytes, seconds| Sample { bytes, seconds };
        assert!(fit(&[s(4, 1e-6)]).is_none());
        assert!(fit(&[s(4, 1e-6), s(4, 2e-6)]).is_none());
    }
}
