//! Integration tests of servetune-bench (one binary, grouped by topic).
