//! Open-loop send schedules, computed in advance as absolute offsets from the run's start, so that
//! pacing never drifts: a late send does not push later ones back.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::SeedableRng;
use rand_distr::{Distribution, Exp, Gamma};

use crate::spec::Arrival;

/// Intended send times (ns from the run's start) for an open loop at `rate` req/s.
///
/// With `ramp_up`, the instantaneous rate grows linearly from near 0 to `rate` over that time.
/// The schedule stops after `count` arrivals, or at `until` (ns), whichever comes first.
pub fn arrivals(rate: f64, arrival: Arrival, ramp_up: Duration, seed: u64, count: Option<u64>, until: Option<u64>) -> Vec<u64> {
    let mut rng = StdRng::seed_from_u64(seed ^ 0xa11_5eed);
    let max = count.unwrap_or(u64::MAX);
    let mut out = Vec::with_capacity(count.unwrap_or(1024).min(1 << 22) as usize);
    let unit_gap = |rng: &mut StdRng| -> f64 {
        // A gap with mean 1 (in units of 1/rate).
        match arrival {
            Arrival::Constant => 1.0,
            Arrival::Poisson => Exp::new(1.0).map(|d| d.sample(rng)).unwrap_or(1.0),
            Arrival::Gamma { shape } => Gamma::new(shape, 1.0 / shape).map(|d| d.sample(rng)).unwrap_or(1.0),
        }
    };
    let ramp = ramp_up.as_secs_f64();
    let mut t = 0.0f64; // seconds
    let mut first = true;
    while (out.len() as u64) < max {
        if !first {
            let g = unit_gap(&mut rng);
            // During the ramp the rate is rate * t/ramp (at least 1% of it, so the first send is not
            // infinitely far away); the gap is measured against the rate at its start.
            let r = if ramp > 0.0 && t < ramp { rate * (t / ramp).max(0.01) } else { rate };
            t += g / r;
        }
        first = false;
        let ns = (t * 1e9) as u64;
        if until.is_some_and(|u| ns > u) {
            break;
        }
        out.push(ns);
    }
    // A count-bounded schedule without ramp is scaled so its realized mean rate is exactly `rate`:
    // N random gaps would otherwise miss it by about 1/sqrt(N) (1.4% at N = 5,000), which would hide
    // the client's own pacing error.
    if count.is_some() && until.is_none() && ramp == 0.0 && out.len() > 1 && arrival != Arrival::Constant {
        let want = (out.len() - 1) as f64 / rate * 1e9;
        let have = out[out.len() - 1] as f64;
        if have > 0.0 {
            let k = want / have;
            for t in out.iter_mut() {
                *t = (*t as f64 * k) as u64;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_schedule_is_evenly_spaced() {
        let s = arrivals(100.0, Arrival::Constant, Duration::ZERO, 1, Some(5), None);
        assert_eq!(s, vec![0, 10_000_000, 20_000_000, 30_000_000, 40_000_000]);
    }

    #[test]
    fn poisson_mean_rate_matches() {
        let s = arrivals(200.0, Arrival::Poisson, Duration::ZERO, 7, Some(20_000), None);
        let span = *s.last().unwrap_or(&0) as f64 / 1e9;
        let rate = (s.len() - 1) as f64 / span;
        assert!((rate - 200.0).abs() / 200.0 < 1e-6, "{rate}");
        assert!(s.windows(2).all(|w| w[1] >= w[0]));
    }

    #[test]
    fn gamma_keeps_the_mean_rate() {
        let s = arrivals(50.0, Arrival::Gamma { shape: 0.5 }, Duration::ZERO, 3, Some(20_000), None);
        let rate = (s.len() - 1) as f64 / (*s.last().unwrap_or(&1) as f64 / 1e9);
        assert!((rate - 50.0).abs() / 50.0 < 0.05, "{rate}");
    }

    #[test]
    fn duration_bounds_the_schedule_and_seed_repeats_it() {
        let a = arrivals(1000.0, Arrival::Poisson, Duration::ZERO, 9, None, Some(1_000_000_000));
        let b = arrivals(1000.0, Arrival::Poisson, Duration::ZERO, 9, None, Some(1_000_000_000));
        assert_eq!(a, b);
        assert!(a.iter().all(|&t| t <= 1_000_000_000));
        assert!((a.len() as f64 - 1000.0).abs() < 120.0);
    }

    #[test]
    fn ramp_up_sends_fewer_requests_early() {
        let s = arrivals(1000.0, Arrival::Constant, Duration::from_secs(1), 1, None, Some(2_000_000_000));
        let early = s.iter().filter(|&&t| t < 500_000_000).count();
        let late = s.iter().filter(|&&t| t >= 1_500_000_000).count();
        assert!(early * 2 < late, "early {early} late {late}");
    }
}
