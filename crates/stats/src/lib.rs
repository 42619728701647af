//! The numbers that bench, plan, fabric, trace and the campaign must agree on, defined once: the
//! median and percentiles of a sample (interpolated, or by nearest rank), the saturation rule that
//! finds a sweep's knee, service-level objectives (`ttft:p99<2s`), the one duration syntax every flag
//! and SLO uses, and the one length-distribution syntax of `bench` and `plan` (`uniform:LO..HI`).
//!
//! This crate exists because those crates must not depend on each other (bench knows nothing of
//! GPUs, the model does no I/O), yet two medians or two saturation rules that disagree would make
//! `plan` and `bench` contradict each other about the same sweep.

#![warn(missing_docs)]

mod duration;
mod length;
mod sample;
mod saturation;
mod slo;

pub use duration::{parse_duration, MAX_DURATION};
pub use length::{LengthDist, MAX_TOKENS};
pub use sample::{median, nearest_rank, percentile, weighted_median};
pub use saturation::{knee, LoadPoint, MIN_GAIN};
pub use slo::{parse_slos, parse_slos_stored, Slo, SloMetric};

/// A value a user gave that cannot be used; the message names the input, what is wrong and the fix.
/// The CLI maps it to exit code 2.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InputError(pub String);

pub(crate) fn bad(msg: impl Into<String>) -> InputError {
    InputError(msg.into())
}
