//! Integration tests of servetune-bench (one binary, grouped by topic).

mod exporters;
mod sse_props;
mod tokenizer;
