//! Integration tests of servetune-trace: real traces nobody here wrote.

mod real;
mod roundtrip;
