//! Deterministic workloads: the prompt and output length of request `i` depend only on the seed,
//! the workload flags and (without a tokenizer) the calibrated words-to-tokens ratio.
//!
//! Without `--tokenizer`, prompts are random common English words and one word is taken as one token
//! (true of most BPE vocabularies for common words with a leading space), then corrected by
//! [`Calibration`] from the prompt tokens the server reports. With a tokenizer, lengths are exact.

use std::path::Path;
use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, StandardNormal};
use serde::Serialize;

use crate::spec::{InputError, LengthDist, PromptSource};
use crate::tokenizer::Tokenizer;

/// Common English words: each is one token in the GPT, Llama-3 and Qwen vocabularies.
const WORDS: &[&str] = &[
    "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be", "by", "on", "not", "he", "this", "are", "or",
    "his", "from", "at", "which", "but", "have", "an", "had", "they", "you", "were", "their", "one", "all", "we", "can", "her", "has",
    "there", "been", "if", "more", "when", "will", "would", "who", "so", "no", "she", "other", "its", "may", "these", "what", "them",
    "than", "some", "him", "time", "into", "only", "do", "two", "first", "any", "new", "like", "my", "made", "over", "such", "our", "even",
    "most", "after", "also", "did", "many", "before", "must", "through", "back", "years", "where", "much", "your", "way", "well", "down",
    "should", "because", "each", "just", "those", "people", "how", "too", "little", "state", "good", "very", "make", "world", "still",
    "own", "see", "men", "work", "long", "get", "here", "between", "both", "life", "being", "under", "never", "day", "same", "another",
    "know", "while", "last", "might", "us", "great", "old", "year", "off", "come", "since", "against", "go", "came", "right", "used",
    "take", "three", "water", "house", "light", "small", "city", "road", "river", "stone", "music", "paper", "table", "green", "north",
];

/// Server-reported prompt tokens as a linear function of prompt words: `tokens = a * words + b`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Calibration {
    /// Tokens per word.
    pub tokens_per_word: f64,
    /// Tokens the server adds around any prompt (BOS, chat template).
    pub overhead_tokens: f64,
    /// Where these numbers come from: "assumed" or "server".
    pub source: &'static str,
}

impl Default for Calibration {
    fn default() -> Self {
        Self { tokens_per_word: 1.0, overhead_tokens: 0.0, source: "assumed" }
    }
}

impl Calibration {
    /// Fits from two (words, tokens) probes.
    pub fn fit(w1: u32, t1: u64, w2: u32, t2: u64) -> Option<Self> {
        if w2 <= w1 || t2 <= t1 {
            return None;
        }
        let a = (t2 - t1) as f64 / (w2 - w1) as f64;
        let b = t1 as f64 - a * w1 as f64;
        (a.is_finite() && a > 0.05 && a < 50.0).then_some(Self { tokens_per_word: a, overhead_tokens: b.max(0.0), source: "server" })
    }

    fn words_for(&self, tokens: u32) -> u32 {
        ((tokens as f64 - self.overhead_tokens) / self.tokens_per_word).round().max(1.0) as u32
    }
}

/// One request of the workload.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestSpec {
    /// The prompt text.
    pub prompt: String,
    /// Prompt tokens as planned (exact with a tokenizer, else the calibrated estimate).
    pub input_tokens: u32,
    /// Output tokens asked for (`max_tokens`).
    pub output_tokens: u32,
}

/// A source of request specs, deterministic per index.
#[derive(Debug)]
pub struct Workload {
    pool: Vec<Arc<RequestSpec>>,
}

fn sample_len(d: &LengthDist, rng: &mut StdRng) -> u32 {
    match *d {
        LengthDist::Fixed { len } => len,
        LengthDist::Uniform { lo, hi } => rng.gen_range(lo..=hi),
        // rand_distr's Normal draws mean + std x a standard normal; `draw` rounds and bounds it.
        LengthDist::Normal { .. } => d.draw(0.0, StandardNormal.sample(rng)),
    }
}

fn words(rng: &mut StdRng, n: u32) -> String {
    let mut s = String::with_capacity(n as usize * 6);
    for i in 0..n {
        if i > 0 {
            s.push(' ');
        }
        s.push_str(WORDS[rng.gen_range(0..WORDS.len())]);
    }
    s
}

/// A text of about `tokens` tokens.
fn text(rng: &mut StdRng, tokens: u32, cal: &Calibration, tok: Option<&Tokenizer>) -> String {
    match tok {
        Some(t) => t.prompt(rng, tokens),
        None => words(rng, ((tokens as f64) / cal.tokens_per_word).round().max(1.0) as u32),
    }
}

impl Workload {
    /// Builds `count` request specs (cycled when more are sent).
    pub fn build(
        source: &PromptSource,
        dataset: Option<&[String]>,
        output: &LengthDist,
        seed: u64,
        count: usize,
        cal: &Calibration,
        tok: Option<&Tokenizer>,
    ) -> Result<Self, InputError> {
        let count = count.max(1);
        let mut pool = Vec::with_capacity(count);
        match source {
            PromptSource::Random { input, prefix_len, prefix_groups } => {
                let prefixes: Vec<String> = (0..*prefix_groups)
                    .filter(|_| *prefix_len > 0)
                    .map(|g| text(&mut StdRng::seed_from_u64(seed ^ 0x9e37_79b9_7f4a_7c15 ^ g as u64), *prefix_len, cal, tok))
                    .collect();
                for i in 0..count {
                    let mut rng = StdRng::seed_from_u64(seed.wrapping_mul(0x2545_f491_4f6c_dd1d) ^ i as u64);
                    let want = sample_len(input, &mut rng);
                    let out = sample_len(output, &mut rng);
                    let mut prompt = String::new();
                    let mut planned = want;
                    if !prefixes.is_empty() {
                        prompt.push_str(&prefixes[rng.gen_range(0..prefixes.len())]);
                        prompt.push(' ');
                        planned += prefix_len;
                    }
                    match tok {
                        Some(t) => prompt.push_str(&t.prompt(&mut rng, want)),
                        None => {
                            // The server's fixed overhead is paid once per prompt, so it comes off the words.
                            let w = if prefixes.is_empty() {
                                cal.words_for(want)
                            } else {
                                ((want as f64) / cal.tokens_per_word).round().max(1.0) as u32
                            };
                            prompt.push_str(&words(&mut rng, w));
                        }
                    }
                    let input_tokens = match tok {
                        Some(t) => t.count(&prompt),
                        None => planned,
                    };
                    pool.push(Arc::new(RequestSpec { prompt, input_tokens, output_tokens: out }));
                }
            }
            PromptSource::Dataset { path } => {
                let owned;
                let prompts = match dataset {
                    Some(d) => d,
                    None => {
                        owned = load_dataset(path)?;
                        &owned[..]
                    }
                };
                let mut order: Vec<usize> = (0..prompts.len()).collect();
                let mut rng = StdRng::seed_from_u64(seed);
                for i in (1..order.len()).rev() {
                    order.swap(i, rng.gen_range(0..=i));
                }
                for i in 0..count {
                    let p = &prompts[order[i % order.len()]];
                    let mut r = StdRng::seed_from_u64(seed ^ (i as u64).wrapping_mul(0x9e37));
                    let input_tokens = match tok {
                        Some(t) => t.count(p),
                        None => (p.split_whitespace().count() as f64 * cal.tokens_per_word + cal.overhead_tokens).round() as u32,
                    };
                    pool.push(Arc::new(RequestSpec { prompt: p.clone(), input_tokens, output_tokens: sample_len(output, &mut r) }));
                }
            }
        }
        Ok(Self { pool })
    }

    /// The spec of request `i`.
    pub fn get(&self, i: u64) -> Arc<RequestSpec> {
        Arc::clone(&self.pool[(i % self.pool.len() as u64) as usize])
    }

    /// Number of distinct specs.
    pub fn len(&self) -> usize {
        self.pool.len()
    }

    /// Always false: a workload has at least one spec.
    pub fn is_empty(&self) -> bool {
        self.pool.is_empty()
    }
}

/// A calibration probe prompt of `n` words (fixed seed, so the server sees the same text each time).
pub fn probe_prompt(n: u32) -> String {
    words(&mut StdRng::seed_from_u64(0x5e47_e7a5), n)
}

/// The most a `--dataset` file may hold: the largest public prompt sets (ShareGPT V3, about 650
/// MB) fit; `/dev/zero` or an endless stream stops here instead of filling memory.
pub const MAX_DATASET: u64 = 1024 * servetune_io::MIB;

/// Reads prompts from a JSONL file (`{"prompt": ...}`, `{"text": ...}` or `{"messages": [...]}` per
/// line) or a ShareGPT JSON array (`[{"conversations": [{"from": "human", "value": ...}, ...]}]`).
/// The file is read with a limit of [`MAX_DATASET`]; a FIFO or a device must reach its end within
/// servetune-io's stream deadline. See [`load_dataset_counted`] for what is skipped.
pub fn load_dataset(path: &Path) -> Result<Vec<String>, InputError> {
    load_dataset_counted(path).map(|(prompts, _)| prompts)
}

/// [`load_dataset`], with the number of entries of a ShareGPT array that were skipped: an entry
/// without a first user turn (public ShareGPT dumps hold some: empty conversations, ones that
/// start with the model's turn). A JSONL line without a prompt is an error instead, naming the
/// line. The caller says how many were skipped (bench's notes).
pub fn load_dataset_counted(path: &Path) -> Result<(Vec<String>, usize), InputError> {
    let raw =
        servetune_io::read_text(path, &format!("--dataset {}", path.display()), MAX_DATASET).map_err(|e| InputError(e.to_string()))?;
    let fmt_err = |what: String| {
        InputError(format!("--dataset {}: {what}; expected JSONL lines with a \"prompt\" field, or a ShareGPT JSON array", path.display()))
    };
    // A byte-order mark some editors write is not part of the JSON.
    let raw = raw.strip_prefix('\u{feff}').unwrap_or(&raw);
    let mut out = Vec::new();
    let mut skipped = 0;
    let trimmed = raw.trim_start();
    if trimmed.starts_with('[') {
        let v: serde_json::Value = serde_json::from_str(trimmed).map_err(|e| fmt_err(format!("not valid JSON ({e})")))?;
        for item in v.as_array().into_iter().flatten() {
            match prompt_of(item) {
                Some(p) => out.push(p),
                None => skipped += 1,
            }
        }
    } else {
        for (n, line) in raw.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let v: serde_json::Value = serde_json::from_str(line).map_err(|e| fmt_err(format!("line {} is not JSON ({e})", n + 1)))?;
            out.push(prompt_of(&v).ok_or_else(|| fmt_err(format!("line {} has no prompt", n + 1)))?);
        }
    }
    if out.is_empty() {
        return Err(fmt_err(match skipped {
            0 => "no prompts found".into(),
            n => format!("none of its {n} entries has a user turn (a \"conversations\" turn from \"human\" or \"user\", or a \"messages\" turn of role \"user\")"),
        }));
    }
    Ok((out, skipped))
}

/// The text of a dataset entry's prompt: its `prompt`/`text`/`input` field, or the first user turn
/// of its `conversations` (ShareGPT: `from` "human", or "user" as some exports write it) or
/// `messages` (OpenAI: `role` "user").
fn prompt_of(v: &serde_json::Value) -> Option<String> {
    for k in ["prompt", "text", "input"] {
        if let Some(s) = v.get(k).and_then(|x| x.as_str()) {
            return Some(s.to_string());
        }
    }
    for (list, role_key, text_key) in [("conversations", "from", "value"), ("messages", "role", "content")] {
        if let Some(turns) = v.get(list).and_then(|x| x.as_array()) {
            return turns
                .iter()
                .find(|t| matches!(t.get(role_key).and_then(|r| r.as_str()), Some("human" | "user")))
                .and_then(|t| t.get(text_key))
                .and_then(|x| x.as_str())
                .map(str::to_string);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn random(input: LengthDist) -> PromptSource {
        PromptSource::Random { input, prefix_len: 0, prefix_groups: 0 }
    }

    #[test]
    fn same_seed_gives_same_workload_and_other_seed_differs() {
        let src = random(LengthDist::Uniform { lo: 10, hi: 50 });
        let out = LengthDist::Normal { mean: 20.0, std: 5.0 };
        let cal = Calibration::default();
        let a = Workload::build(&src, None, &out, 7, 16, &cal, None).expect("build");
        let b = Workload::build(&src, None, &out, 7, 16, &cal, None).expect("build");
        let c = Workload::build(&src, None, &out, 8, 16, &cal, None).expect("build");
        assert!((0..16).all(|i| a.get(i) == b.get(i)));
        assert!((0..16).any(|i| a.get(i) != c.get(i)));
    }

    #[test]
    fn fixed_length_without_tokenizer_uses_one_word_per_token() {
        let w = Workload::build(
            &random(LengthDist::Fixed { len: 32 }),
            None,
            &LengthDist::Fixed { len: 4 },
            1,
            3,
            &Calibration::default(),
            None,
        )
        .expect("build");
        let s = w.get(0);
        assert_eq!(s.prompt.split_whitespace().count(), 32);
        assert_eq!((s.input_tokens, s.output_tokens), (32, 4));
    }

    #[test]
    fn calibration_scales_word_count() {
        let cal = Calibration::fit(64, 100, 256, 388).expect("fit");
        assert!((cal.tokens_per_word - 1.5).abs() < 1e-9);
        assert!((cal.overhead_tokens - 4.0).abs() < 1e-9);
        let w =
            Workload::build(&random(LengthDist::Fixed { len: 154 }), None, &LengthDist::Fixed { len: 1 }, 1, 1, &cal, None).expect("build");
        assert_eq!(w.get(0).prompt.split_whitespace().count(), 100); // (154 - 4) / 1.5
    }

    #[test]
    fn shared_prefix_groups_repeat_their_prefix() {
        let src = PromptSource::Random { input: LengthDist::Fixed { len: 5 }, prefix_len: 20, prefix_groups: 2 };
        let w = Workload::build(&src, None, &LengthDist::Fixed { len: 1 }, 3, 32, &Calibration::default(), None).expect("build");
        let prefixes: std::collections::BTreeSet<String> =
            (0..32).map(|i| w.get(i).prompt.split_whitespace().take(20).collect::<Vec<_>>().join(" ")).collect();
        assert_eq!(prefixes.len(), 2);
        assert_eq!(w.get(0).input_tokens, 25);
    }

    #[test]
    fn sharegpt_and_jsonl_datasets_load() {
        let dir = tempfile::tempdir().expect("tmp");
        let p = dir.path().join("sg.json");
        std::fs::write(&p, r#"[{"conversations":[{"from":"human","value":"hello there"},{"from":"gpt","value":"hi"}]}]"#).expect("write");
        assert_eq!(load_dataset(&p).expect("load"), vec!["hello there".to_string()]);
        let p = dir.path().join("p.jsonl");
        std::fs::write(&p, "{\"prompt\":\"a b\"}\n\n{\"text\":\"c\"}\n").expect("write");
        assert_eq!(load_dataset(&p).expect("load").len(), 2);
        std::fs::write(&p, "{\"prompt\":\"a b\"}\nnot json\n").expect("write");
        let e = load_dataset(&p).expect_err("bad line");
        assert!(e.0.contains("line 2"), "{e}");
    }

    #[test]
    fn sharegpt_entries_without_a_user_turn_are_counted_and_a_bom_is_skipped() {
        let dir = tempfile::tempdir().expect("tmp");
        let p = dir.path().join("sg.json");
        let doc = r#"[{"conversations":[{"from":"human","value":"one"}]},{"conversations":[{"from":"user","value":"two"}]},
            {"conversations":[]},{"conversations":[{"from":"gpt","value":"x"}]},"a bare string",{"messages":[{"role":"user","content":"three"}]},
            {"messages":[{"role":"system","content":"s"}]}]"#;
        std::fs::write(&p, format!("\u{feff}{doc}")).expect("write");
        let (prompts, skipped) = load_dataset_counted(&p).expect("load");
        assert_eq!(prompts, ["one", "two", "three"]);
        assert_eq!(skipped, 4, "empty, model-first, a bare string, system-only");
        std::fs::write(&p, r#"[{"conversations":[]},{"conversations":[{"from":"gpt","value":"x"}]}]"#).expect("write");
        let e = load_dataset(&p).expect_err("nothing usable");
        assert!(e.0.contains("none of its 2 entries has a user turn"), "{e}");
        let jl = dir.path().join("p.jsonl");
        std::fs::write(&jl, "\u{feff}{\"prompt\":\"a\"}\n").expect("write");
        assert_eq!(load_dataset(&jl).expect("a BOM before JSONL"), ["a"]);
    }
}
