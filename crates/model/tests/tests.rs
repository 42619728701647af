//! Integration tests of servetune-model: properties of the prediction.

mod goals;
mod properties;
mod snapshots;
