//! Integration tests of servetune-trace, on traces this project draws itself (`synth`).

mod fixtures;
mod roundtrip;
