//! Integration tests of servetune-model: properties of the prediction.

mod properties;
mod snapshots;
