//! Integration tests of servetune-sim.
