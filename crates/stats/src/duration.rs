//! The one duration syntax of every flag and SLO threshold: `500ms`, `30s`, `2m`, `1h`, `250us`, or
//! a bare number of seconds, bounded so that no later `Instant` arithmetic can overflow.

use std::time::Duration;

use crate::{bad, InputError};

/// The longest duration any flag accepts: a week. Longer runs, timeouts or stalls are typos, and a
/// bound keeps `Instant + Duration` from overflowing anywhere downstream.
pub const MAX_DURATION: Duration = Duration::from_secs(7 * 24 * 3600);

/// Parses a duration given to `flag`; refuses text that is not a number with a unit, negative or
/// non-finite values, and anything above [`MAX_DURATION`], with a message naming the flag.
pub fn parse_duration(flag: &str, s: &str) -> Result<Duration, InputError> {
    let t = s.trim();
    let (num, mul) = split_unit(t);
    let v: f64 = num.trim().parse().map_err(|_| bad(format!("{flag} {s:?} is not a duration: write it like 500ms, 30s, 2m or 1h")))?;
    if !v.is_finite() || v < 0.0 {
        return Err(bad(format!("{flag} {s:?} is not a duration: it must be a finite value >= 0, like 500ms, 30s, 2m or 1h")));
    }
    let secs = v * mul;
    if secs > MAX_DURATION.as_secs_f64() {
        return Err(bad(format!("{flag} {s:?} is longer than the limit of a week (168h): give a shorter duration")));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Splits `t` into its number and the seconds per unit.
fn split_unit(t: &str) -> (&str, f64) {
    const UNITS: [(&str, f64); 5] = [("ms", 1e-3), ("us", 1e-6), ("s", 1.0), ("m", 60.0), ("h", 3600.0)];
    UNITS.iter().find_map(|&(suffix, mul)| t.strip_suffix(suffix).map(|n| (n, mul))).unwrap_or((t, 1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_and_bare_seconds_parse() {
        assert_eq!(parse_duration("--t", "500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("--t", "250us"), Ok(Duration::from_micros(250)));
        assert_eq!(parse_duration("--t", "2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("--t", "1.5"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("--t", "1h"), Ok(Duration::from_secs(3600)));
    }

    #[test]
    fn absurd_durations_are_refused_with_the_flag_named() {
        for s in ["1e30s", "1e19", "169h", "inf", "NaN", "-1s", "soon"] {
            let e = parse_duration("--timeout", s).expect_err(s);
            assert!(e.0.contains("--timeout"), "{e}");
        }
        assert_eq!(parse_duration("--t", "168h"), Ok(MAX_DURATION));
    }
}
