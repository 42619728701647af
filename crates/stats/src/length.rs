//! How a request's length (input or output tokens) is drawn, in the one syntax `bench` and `plan`
//! both take (`128`, `fixed:128`, `uniform:64..256`, `normal:128,32`).

use serde::Serialize;

use crate::{bad, InputError};

/// How a request's length (input or output tokens) is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum LengthDist {
    /// Always `len`.
    Fixed {
        /// Tokens.
        len: u32,
    },
    /// Uniform over `lo..=hi`.
    Uniform {
        /// Shortest, tokens.
        lo: u32,
        /// Longest, tokens.
        hi: u32,
    },
    /// Normal, rounded and at least 1.
    Normal {
        /// Mean, tokens.
        mean: f64,
        /// Standard deviation, tokens.
        std: f64,
    },
}

/// The longest length a distribution may draw, tokens: ten million, the longest context window of
/// any released model (Llama 4 Scout's). A longer length is a typo, and a prompt of it would be
/// built in memory before any request is sent.
pub const MAX_TOKENS: u32 = 10_000_000;

impl LengthDist {
    /// Parses `128`, `fixed:128`, `uniform:64..256`, `normal:128,32` (mean, standard deviation).
    /// A distribution that could draw more than [`MAX_TOKENS`] is refused.
    pub fn parse(flag: &str, s: &str) -> Result<Self, InputError> {
        let d = Self::parse_unbounded(flag, s)?;
        if d.max() > MAX_TOKENS {
            return Err(bad(format!(
                "{flag} {s:?}: draws up to {} tokens, more than {MAX_TOKENS} (the longest context window of any model); give a shorter length",
                d.max()
            )));
        }
        Ok(d)
    }

    fn parse_unbounded(flag: &str, s: &str) -> Result<Self, InputError> {
        let hint = "write N, uniform:LO..HI or normal:MEAN,STD (token counts >= 1)";
        let err = || bad(format!("{flag} {s:?} is not a length: {hint}"));
        let t = s.trim();
        let d = if let Some(r) = t.strip_prefix("uniform:") {
            let (lo, hi) = r.split_once("..").ok_or_else(err)?;
            let lo: u32 = lo.trim().parse().map_err(|_| err())?;
            let hi: u32 = hi.trim().parse().map_err(|_| err())?;
            if lo == 0 || hi < lo {
                return Err(bad(format!("{flag} {s:?}: need 1 <= LO <= HI")));
            }
            LengthDist::Uniform { lo, hi }
        } else if let Some(r) = t.strip_prefix("normal:") {
            let (m, sd) = r.split_once(',').ok_or_else(err)?;
            let mean: f64 = m.trim().parse().map_err(|_| err())?;
            let std: f64 = sd.trim().parse().map_err(|_| err())?;
            if !(mean >= 1.0 && std >= 0.0 && mean.is_finite() && std.is_finite()) {
                return Err(bad(format!("{flag} {s:?}: need MEAN >= 1 and STD >= 0")));
            }
            LengthDist::Normal { mean, std }
        } else {
            let n = t.strip_prefix("fixed:").unwrap_or(t);
            let len: u32 = n.trim().parse().map_err(|_| err())?;
            if len == 0 {
                return Err(bad(format!("{flag} 0: a request needs at least 1 token")));
            }
            LengthDist::Fixed { len }
        };
        Ok(d)
    }

    /// The mean length.
    pub fn mean(&self) -> f64 {
        match *self {
            LengthDist::Fixed { len } => len as f64,
            LengthDist::Uniform { lo, hi } => (lo as f64 + hi as f64) / 2.0,
            LengthDist::Normal { mean, .. } => mean,
        }
    }

    /// The longest length a draw can give (for a normal, mean + 4 standard deviations).
    pub fn max(&self) -> u32 {
        match *self {
            LengthDist::Fixed { len } => len,
            LengthDist::Uniform { hi, .. } => hi,
            LengthDist::Normal { mean, std } => (mean + 4.0 * std).round().clamp(1.0, u32::MAX as f64) as u32,
        }
    }

    /// The length for a uniform draw `u` in [0, 1) and a standard normal draw `z` (the caller owns
    /// the random source): uniform takes `lo + floor(u * (hi - lo + 1))`, normal rounds
    /// `mean + z * std` and keeps it within 1 ..= [`LengthDist::max`].
    pub fn draw(&self, u: f64, z: f64) -> u32 {
        match *self {
            LengthDist::Fixed { len } => len,
            LengthDist::Uniform { lo, hi } => {
                let span = (hi - lo) as f64 + 1.0;
                lo + ((u.clamp(0.0, 1.0) * span).floor() as u32).min(hi - lo)
            }
            LengthDist::Normal { mean, std } => (mean + z * std).round().clamp(1.0, self.max() as f64) as u32,
        }
    }

    /// The syntax it parses from (`uniform:64..256`).
    pub fn label(&self) -> String {
        match *self {
            LengthDist::Fixed { len } => len.to_string(),
            LengthDist::Uniform { lo, hi } => format!("uniform:{lo}..{hi}"),
            LengthDist::Normal { mean, std } => format!("normal:{mean},{std}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_past_any_context_window_are_refused_naming_the_flag() {
        for s in ["4294967295", "uniform:1..10000001", "normal:1e300,1e300", "normal:9000000,1000000"] {
            let e = LengthDist::parse("--input-len", s).expect_err(s).to_string();
            assert!(e.contains("--input-len") && e.contains(&MAX_TOKENS.to_string()), "{s}: {e}");
        }
        assert_eq!(LengthDist::parse("--input-len", "10000000"), Ok(LengthDist::Fixed { len: MAX_TOKENS }));
        assert!(LengthDist::parse("--output-len", "normal:1000,100").is_ok());
    }

    #[test]
    fn the_three_forms_parse_and_bad_ones_name_the_flag() {
        assert_eq!(LengthDist::parse("--input-len", "128"), Ok(LengthDist::Fixed { len: 128 }));
        assert_eq!(LengthDist::parse("--input-len", "fixed:7"), Ok(LengthDist::Fixed { len: 7 }));
        assert_eq!(LengthDist::parse("--input-len", "uniform:64..256"), Ok(LengthDist::Uniform { lo: 64, hi: 256 }));
        assert_eq!(LengthDist::parse("--input-len", "normal:100,10"), Ok(LengthDist::Normal { mean: 100.0, std: 10.0 }));
        let e = LengthDist::parse("--output-len", "uniform:9..3").expect_err("lo > hi");
        assert!(e.0.contains("--output-len"), "{e}");
        assert!(LengthDist::parse("--input-len", "0").is_err());
        assert!(LengthDist::parse("--input-len", "normal:0,1").is_err());
    }

    #[test]
    fn draws_stay_in_range_and_labels_round_trip() {
        let u = LengthDist::Uniform { lo: 10, hi: 12 };
        assert_eq!(u.draw(0.0, 0.0), 10);
        assert_eq!(u.draw(0.999_999, 0.0), 12);
        assert_eq!(u.draw(1.0, 0.0), 12);
        let n = LengthDist::Normal { mean: 5.0, std: 10.0 };
        assert_eq!(n.draw(0.5, -3.0), 1);
        assert_eq!(n.draw(0.5, 9.0), n.max());
        for d in [u, n, LengthDist::Fixed { len: 3 }] {
            assert_eq!(LengthDist::parse("--x", &d.label()), Ok(d));
        }
        assert_eq!(u.mean(), 11.0);
    }
}
