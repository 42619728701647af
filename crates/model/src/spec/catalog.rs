//! The model catalog: `crates/model/data/models/catalog.json` names each model `--model` takes,
//! the published `config.json` it is read from (embedded at build time, so the binary needs no
//! files) and the checkpoints published for it, the default (the config's own format) first.
//!
//! A catalog model is read by the same parser as a user's `--model-config`
//! ([`super::from_hf_config`]), so the catalog cannot hold a model the parser would refuse from a
//! file; the unit tests read every entry. Adding a model is adding its published `config.json`
//! under `crates/model/data/models/`, an entry in `catalog.json` and a line in [`CONFIGS`].

use std::sync::OnceLock;

use serde::Deserialize;

use super::{from_hf_config, ModelSpec};
use crate::quant::Dtype;
use crate::ModelError;

/// A catalog model: its published `config.json` and the checkpoint formats published for it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct CatalogEntry {
    /// The name `--model` takes.
    pub name: String,
    /// File under `crates/model/data/models/`.
    pub config: String,
    /// The Hugging Face repository the config comes from.
    pub repo: String,
    /// Where the entry's config is another model's (a release published with an architecture the
    /// catalog already has, DeepSeek-R1 with DeepSeek-V3's), or the file says less than its name:
    /// which config it reads and why that is the same architecture.
    #[serde(default)]
    pub note: Option<String>,
    /// Published checkpoints, the default (the config's own format) first.
    pub checkpoints: Vec<Checkpoint>,
}

/// One published checkpoint of a catalog model.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Checkpoint {
    /// Its weight format.
    pub quant: Dtype,
    /// Where it is published: a Hugging Face repository, or words where none is named.
    pub repo: String,
}

impl Checkpoint {
    /// Its Hugging Face repository ("owner/name"), or None where the catalog describes it in
    /// words (GLM-5's NVFP4 checkpoint).
    pub fn repository(&self) -> Option<&str> {
        let r = self.repo.as_str();
        (r.split('/').count() == 2 && !r.contains(char::is_whitespace) && !r.starts_with('/') && !r.ends_with('/')).then_some(r)
    }
}

#[derive(Debug, Deserialize)]
pub(super) struct CatalogFile {
    models: Vec<CatalogEntry>,
}

/// The catalog's config files, embedded at build time.
pub(super) const CONFIGS: [(&str, &str); 29] = [
    ("glm-5.json", include_str!("../../data/models/glm-5.json")),
    ("deepseek-v3.json", include_str!("../../data/models/deepseek-v3.json")),
    ("qwen3-235b-a22b.json", include_str!("../../data/models/qwen3-235b-a22b.json")),
    ("qwen3-30b-a3b.json", include_str!("../../data/models/qwen3-30b-a3b.json")),
    ("llama-3.1-70b.json", include_str!("../../data/models/llama-3.1-70b.json")),
    ("llama-3.1-8b.json", include_str!("../../data/models/llama-3.1-8b.json")),
    ("mixtral-8x7b.json", include_str!("../../data/models/mixtral-8x7b.json")),
    ("gpt-oss-120b.json", include_str!("../../data/models/gpt-oss-120b.json")),
    ("kimi-k2.json", include_str!("../../data/models/kimi-k2.json")),
    ("minimax-m2.json", include_str!("../../data/models/minimax-m2.json")),
    ("glm-4.5.json", include_str!("../../data/models/glm-4.5.json")),
    ("glm-4.6.json", include_str!("../../data/models/glm-4.6.json")),
    ("qwen3-next-80b-a3b.json", include_str!("../../data/models/qwen3-next-80b-a3b.json")),
    ("qwen3.5-397b-a17b.json", include_str!("../../data/models/qwen3.5-397b-a17b.json")),
    ("gpt-oss-20b.json", include_str!("../../data/models/gpt-oss-20b.json")),
    ("llama-4-scout.json", include_str!("../../data/models/llama-4-scout.json")),
    ("llama-4-maverick.json", include_str!("../../data/models/llama-4-maverick.json")),
    ("nemotron-3-nano-30b-a3b.json", include_str!("../../data/models/nemotron-3-nano-30b-a3b.json")),
    ("gemma-4-26b-a4b.json", include_str!("../../data/models/gemma-4-26b-a4b.json")),
    ("gemma-4-31b.json", include_str!("../../data/models/gemma-4-31b.json")),
    ("kimi-linear-48b-a3b.json", include_str!("../../data/models/kimi-linear-48b-a3b.json")),
    ("kimi-k2.5.json", include_str!("../../data/models/kimi-k2.5.json")),
    ("qwen3-32b.json", include_str!("../../data/models/qwen3-32b.json")),
    ("qwen3-14b.json", include_str!("../../data/models/qwen3-14b.json")),
    ("minimax-m2.5.json", include_str!("../../data/models/minimax-m2.5.json")),
    ("minimax-m2.7.json", include_str!("../../data/models/minimax-m2.7.json")),
    ("glm-5.1.json", include_str!("../../data/models/glm-5.1.json")),
    ("glm-5.2.json", include_str!("../../data/models/glm-5.2.json")),
    ("nemotron-3-super-120b-a12b.json", include_str!("../../data/models/nemotron-3-super-120b-a12b.json")),
];

pub(super) fn catalog_file() -> &'static CatalogFile {
    static FILE: OnceLock<CatalogFile> = OnceLock::new();
    // Part of the crate and unit-tested: a parse failure is a build bug, not an input error.
    FILE.get_or_init(|| {
        serde_json::from_str(include_str!("../../data/models/catalog.json"))
            .expect("crates/model/data/models/catalog.json is valid (unit-tested)")
    })
}

/// Catalog names, in the catalog's order.
pub fn catalog_names() -> Vec<&'static str> {
    catalog_file().models.iter().map(|m| m.name.as_str()).collect()
}

/// The catalog entry `name`.
pub fn catalog_entry(name: &str) -> Result<&'static CatalogEntry, ModelError> {
    catalog_file().models.iter().find(|m| m.name == name).ok_or_else(|| {
        ModelError::Input(format!(
            "--model {name:?} is not in the catalog; known: {} (or give --model-config path/to/config.json)",
            catalog_names().join(", ")
        ))
    })
}

/// The entry whose config file `entry` reads, where that is another entry: the architecture a
/// release was published with (deepseek-r1 reads deepseek-v3's); None for an entry with a file of
/// its own.
pub fn architecture_of(entry: &CatalogEntry) -> Option<&'static CatalogEntry> {
    catalog_file().models.iter().find(|e| e.config == entry.config).filter(|e| e.name != entry.name)
}

/// A catalog model as a user named it: by its catalog name, or by the Hugging Face repository of
/// one of its published checkpoints ([`named_model`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NamedModel {
    /// The catalog entry.
    pub entry: &'static CatalogEntry,
    /// The weight format of the checkpoint whose repository named it; None for a catalog name.
    pub checkpoint: Option<Dtype>,
}

/// The catalog model `name` names: a catalog name ("glm-5", any letter case), or the Hugging Face
/// repository ("owner/name", any letter case, as `sglang --model-path` and `vllm serve` take it)
/// of one of its published checkpoints, which also names that checkpoint's format
/// ("zai-org/GLM-5-FP8": glm-5's FP8 checkpoint). Only the repositories the catalog lists
/// ([`Checkpoint::repository`]) are known: another checkpoint of the same architecture is not
/// guessed at. The error names the input, lists the catalog and says where its repositories are
/// listed; each caller adds its own flag and way out.
pub fn named_model(name: &str) -> Result<NamedModel, ModelError> {
    let models = &catalog_file().models;
    let given = name.trim();
    if let Some(entry) = models.iter().find(|m| m.name.eq_ignore_ascii_case(given)) {
        return Ok(NamedModel { entry, checkpoint: None });
    }
    let repo = given.trim_end_matches('/');
    for entry in models {
        if let Some(c) = entry.checkpoints.iter().find(|c| c.repository().is_some_and(|r| r.eq_ignore_ascii_case(repo))) {
            return Ok(NamedModel { entry, checkpoint: Some(c.quant) });
        }
    }
    Err(ModelError::Input(format!(
        "{name:?} is not in the model catalog: give a catalog name ({}) or the Hugging Face repository of a checkpoint it lists (`servetune plan --help` lists them)",
        catalog_names().join(", ")
    )))
}

/// A catalog model, read from its published `config.json` by [`from_hf_config`].
pub fn catalog(name: &str) -> Result<ModelSpec, ModelError> {
    let entry = catalog_entry(name)?;
    let (file, text) = CONFIGS
        .iter()
        .find(|(f, _)| *f == entry.config)
        .ok_or_else(|| ModelError::Input(format!("catalog entry {name:?} names {:?}, which is not embedded", entry.config)))?;
    let mut spec = from_hf_config(text, &format!("crates/model/data/models/{file}"))?;
    spec.name = name.to_string();
    Ok(spec)
}
