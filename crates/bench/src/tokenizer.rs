//! Exact token counts from a local Hugging Face `tokenizer.json` (feature `tokenizer`).
//! Without the feature, loading one is a clear input error rather than a silent approximation.

use std::path::Path;

use crate::spec::InputError;

/// A loaded tokenizer.
pub struct Tokenizer {
    #[cfg(feature = "tokenizer")]
    inner: tokenizers::Tokenizer,
    /// Token ids of ordinary words, used to build prompts of exact length.
    vocab_words: Vec<u32>,
    eos: Option<u32>,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer").field("words", &self.vocab_words.len()).field("eos", &self.eos).finish()
    }
}

/// The most a `--tokenizer` file may hold: the largest published tokenizer.json files (vocabularies
/// of a few hundred thousand tokens with their merges) are a few tens of MB.
pub const MAX_TOKENIZER_FILE: u64 = 256 * servetune_io::MIB;

impl Tokenizer {
    /// Loads `path` (a `tokenizer.json`).
    #[cfg(feature = "tokenizer")]
    pub fn load(path: &Path) -> Result<Self, InputError> {
        // tokenizer.json is JSON text: read as text, a binary file stops at its first bad byte.
        let bytes = servetune_io::read_text(path, &format!("--tokenizer {}", path.display()), MAX_TOKENIZER_FILE)
            .map_err(|e| InputError(format!("{e}; give the tokenizer.json of the served model")))?
            .into_bytes();
        let inner = tokenizers::Tokenizer::from_bytes(bytes).map_err(|e| {
            InputError(format!(
                "--tokenizer {}: cannot load it as a Hugging Face tokenizer.json ({e}); give the tokenizer.json of the served model",
                path.display()
            ))
        })?;
        let mut vocab: Vec<(String, u32)> = inner.get_vocab(false).into_iter().collect();
        vocab.sort_by_key(|(_, id)| *id);
        let vocab_words: Vec<u32> = vocab
            .iter()
            .filter(|(t, _)| {
                let w = t.trim_start_matches(['Ġ', '▁', ' ']);
                w.len() >= 2 && w.chars().all(|c| c.is_ascii_lowercase())
            })
            .map(|(_, id)| *id)
            .collect();
        if vocab_words.is_empty() {
            return Err(InputError(format!(
                "--tokenizer {}: its vocabulary has no plain lowercase word tokens to build prompts from",
                path.display()
            )));
        }
        let eos =
            ["</s>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>", "<|im_end|>", "<eos>"].iter().find_map(|t| inner.token_to_id(t));
        Ok(Self { inner, vocab_words, eos })
    }

    /// Without the `tokenizer` feature no tokenizer can be loaded.
    #[cfg(not(feature = "tokenizer"))]
    pub fn load(path: &Path) -> Result<Self, InputError> {
        Err(InputError(format!(
            "--tokenizer {}: this servetune was built without the `tokenizer` feature; rebuild with default features or drop --tokenizer",
            path.display()
        )))
    }

    /// Number of tokens in `text` (no special tokens added).
    pub fn count(&self, text: &str) -> u32 {
        #[cfg(feature = "tokenizer")]
        {
            self.inner.encode(text, false).map(|e| e.get_ids().len() as u32).unwrap_or(0)
        }
        #[cfg(not(feature = "tokenizer"))]
        {
            let _ = text;
            0
        }
    }

    /// The end-of-sequence token id, when the vocabulary has a known one.
    pub fn eos_token_id(&self) -> Option<u32> {
        self.eos
    }

    /// A prompt of exactly `n` tokens (checked by re-encoding; trimmed or padded until it is).
    pub fn prompt(&self, rng: &mut impl rand::Rng, n: u32) -> String {
        #[cfg(feature = "tokenizer")]
        {
            let mut ids: Vec<u32> = (0..n).map(|_| self.vocab_words[rng.gen_range(0..self.vocab_words.len())]).collect();
            for _ in 0..8 {
                let text = self.inner.decode(&ids, true).unwrap_or_default();
                let got = self.count(&text);
                if got == n {
                    return text;
                }
                if got > n {
                    let drop = (got - n) as usize;
                    ids.truncate(ids.len().saturating_sub(drop));
                } else {
                    for _ in got..n {
                        ids.push(self.vocab_words[rng.gen_range(0..self.vocab_words.len())]);
                    }
                }
            }
            self.inner.decode(&ids, true).unwrap_or_default()
        }
        #[cfg(not(feature = "tokenizer"))]
        {
            let _ = (rng, n);
            String::new()
        }
    }
}
