//! Exact token lengths with a local tokenizer.json (a small word-level vocabulary written here).

use servetune_bench::spec::{LengthDist, PromptSource};
use servetune_bench::tokenizer::Tokenizer;
use servetune_bench::workload::{Calibration, Workload};

const TOKENIZER: &str = r#"{"version":"1.0","truncation":null,"padding":null,
 "added_tokens":[{"id":0,"content":"</s>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true}],
 "normalizer":null,"pre_tokenizer":{"type":"Whitespace"},"post_processor":null,"decoder":null,
 "model":{"type":"WordLevel","vocab":{"</s>":0,"the":1,"of":2,"and":3,"to":4,"river":5,"stone":6,"<unk>":7},"unk_token":"<unk>"}}"#;

#[test]
fn prompts_have_exact_token_lengths_and_eos_is_found() {
    let dir = tempfile::tempdir().expect("tmp");
    let p = dir.path().join("tokenizer.json");
    std::fs::write(&p, TOKENIZER).expect("write");
    let tok = Tokenizer::load(&p).expect("load");
    assert_eq!(tok.eos_token_id(), Some(0));
    let src = PromptSource::Random { input: LengthDist::Uniform { lo: 5, hi: 40 }, prefix_len: 0, prefix_groups: 0 };
    let w = Workload::build(&src, None, &LengthDist::Fixed { len: 4 }, 3, 20, &Calibration::default(), Some(&tok)).expect("build");
    for i in 0..20 {
        let s = w.get(i);
        assert_eq!(tok.count(&s.prompt), s.input_tokens, "{:?}", s.prompt);
        assert!((5..=40).contains(&s.input_tokens), "{}", s.input_tokens);
    }
}

#[test]
fn a_file_that_is_not_a_tokenizer_is_named_in_the_error() {
    let dir = tempfile::tempdir().expect("tmp");
    let p = dir.path().join("tokenizer.json");
    std::fs::write(&p, "{}").expect("write");
    let e = Tokenizer::load(&p).expect_err("not a tokenizer");
    assert!(e.0.contains("--tokenizer") && e.0.contains("tokenizer.json"), "{e}");
}
