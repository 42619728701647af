//! The informational endpoints in the shapes the engines' own clients read, field by field:
//! sglang's `/server_info` (with `internal_states`), `/model_info` and `/flush_cache` answer;
//! vLLM's `/version` and `/v1/models` cards. Each shape names the engine version and the source
//! file it follows; docs/sim.md lists the fields and what the simulator puts in them.

use serde_json::{json, Value};

use crate::cost::{Profile, Scheduling};
use crate::driver::Published;
use crate::SimConfig;

/// The sglang release whose HTTP server these shapes follow (its
/// `python/sglang/srt/entrypoints/http_server.py`, whose client `sglang.bench_serving` is
/// tested against the simulator in `crates/cli/tests/sim_compat.rs`).
pub const SGLANG_VERSION_FOLLOWED: &str = "0.5.23";

/// The vLLM source whose `/version` and `/v1/models` shapes these follow: the `ModelCard` and
/// `ModelPermission` models of `vllm/entrypoints/openai/protocol.py` at commit `ec3b890c` (the
/// same fields since vLLM 0.4).
pub const VLLM_SHAPES_FOLLOWED: &str = "vLLM main at ec3b890c";

/// sglang's answer to a successful `/flush_cache` (the simulator has no prefix cache to drop).
pub const FLUSH_CACHE_OK: &str = "Cache flushed.\nPlease check backend logs for more details. (When there are running or waiting requests, the operation will not be performed.)\n";

/// The simulator's version string, as `version` of `/server_info` and `/version`.
pub fn sim_version() -> String {
    concat!("servetune-sim ", env!("CARGO_PKG_VERSION")).to_string()
}

/// sglang's `GET /server_info` (and `/get_server_info`): the server arguments a client reads
/// (`model_path`, `tp_size`, `dp_size`, `max_running_requests`, `chunked_prefill_size`, ...), the
/// scheduler's `max_total_num_tokens` and `max_req_input_len`, `startup_time`, `version`, and
/// `internal_states`, one object per data-parallel replica (the simulator is one), which
/// `sglang.bench_serving` indexes (`internal_states[0]`) after every run for
/// `avg_spec_accept_length`. The simulator runs no speculative decoding, so that key is absent,
/// as it is from sglang without a draft model. `servetune_sim` adds the simulator's own terms:
/// the profile, how steps are priced, and the seed.
pub fn server_info(cfg: &SimConfig, live: &Published, startup_time: u64) -> Value {
    let p = &cfg.profile;
    let internal = json!({
        "world_size": p.tp_size,
        "startup_time": startup_time,
        "effective_max_running_requests_per_dp": p.max_running_requests,
        "last_gen_throughput": live.gen_throughput,
        "memory_usage": {"token_capacity": p.kv_tokens},
        "max_running_requests": p.max_running_requests,
        "chunked_prefill_size": p.chunked_prefill_size,
        "page_size": p.page_size,
    });
    json!({
        "model_path": p.model,
        "served_model_name": p.model,
        "tokenizer_path": p.model,
        "tp_size": p.tp_size,
        "dp_size": 1,
        "pp_size": 1,
        "max_running_requests": p.max_running_requests,
        "max_total_tokens": p.kv_tokens,
        "max_total_num_tokens": p.kv_tokens,
        "max_req_input_len": p.kv_tokens.saturating_sub(1),
        "context_length": p.kv_tokens,
        "page_size": p.page_size,
        "chunked_prefill_size": p.chunked_prefill_size,
        "enable_mixed_chunk": p.scheduling == Scheduling::Mixed,
        "disaggregation_mode": "null",
        "speculative_algorithm": null,
        "startup_time": startup_time,
        "internal_states": [internal],
        "version": sim_version(),
        "frontend": "servetune-sim",
        "servetune_sim": {
            "profile": p.name,
            "cost": p.cost,
            "step_pricing": cfg.cost.as_ref().map_or_else(|| crate::cost::PARAMETRIC_PRICING.to_string(), |c| c.pricing()),
            "seed": cfg.seed,
            "eos_mean_tokens": p.eos_mean_tokens,
            "follows": {"sglang": SGLANG_VERSION_FOLLOWED, "vllm": VLLM_SHAPES_FOLLOWED},
        },
    })
}

/// sglang's `GET /model_info` (and `/get_model_info`): the fields a client reads to name the model
/// and tell a generation model from an embedding one. The simulator has no Hugging Face config, so
/// `model_type` and `architectures` are null, as sglang reports for a config without them.
pub fn model_info(p: &Profile) -> Value {
    json!({
        "model_path": p.model,
        "served_model_name": p.model,
        "tokenizer_path": p.model,
        "is_generation": true,
        "preferred_sampling_params": null,
        "weight_version": "default",
        "load_format": "dummy",
        "reasoning_parser": null,
        "tool_call_parser": null,
        "disaggregation_mode": "null",
        "has_image_understanding": false,
        "has_audio_understanding": false,
        "model_type": null,
        "architectures": null,
    })
}

/// `GET /v1/models` as vLLM writes its model card: `id`, `object`, `created`, `owned_by`,
/// `root`, `parent`, `max_model_len` and one `permission` object.
pub fn models(p: &Profile, created: u64) -> Value {
    json!({
        "object": "list",
        "data": [{
            "id": p.model,
            "object": "model",
            "created": created,
            "owned_by": "servetune-sim",
            "root": p.model,
            "parent": null,
            "max_model_len": p.kv_tokens,
            "permission": [{
                "id": "modelperm-servetune-sim",
                "object": "model_permission",
                "created": created,
                "allow_create_engine": false,
                "allow_sampling": true,
                "allow_logprobs": true,
                "allow_search_indices": false,
                "allow_view": true,
                "allow_fine_tuning": false,
                "organization": "*",
                "group": null,
                "is_blocking": false,
            }],
        }],
    })
}

/// vLLM's `GET /version`: `{"version": ...}`, the simulator's own.
pub fn version() -> Value {
    json!({"version": sim_version()})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_info_has_one_internal_state_per_replica_with_the_live_throughput() {
        let cfg = SimConfig::new(crate::cost::preset("tiny").expect("tiny"));
        let live = Published { gen_throughput: 123.0, ..Published::default() };
        let v = server_info(&cfg, &live, 7);
        let states = v["internal_states"].as_array().expect("a list");
        assert_eq!(states.len(), 1);
        assert_eq!(states[0]["last_gen_throughput"], 123.0);
        assert!(states[0].get("avg_spec_accept_length").is_none(), "no speculative decoding");
        assert_eq!(v["max_total_num_tokens"], cfg.profile.kv_tokens);
        assert!(v["servetune_sim"]["step_pricing"].as_str().is_some_and(|s| s.contains("per prefilled prompt token")), "{v}");
    }

    #[test]
    fn model_cards_carry_vllms_fields() {
        let p = crate::cost::preset("tiny").expect("tiny");
        let v = models(&p, 5);
        let card = &v["data"][0];
        for k in ["id", "object", "created", "owned_by", "root", "parent", "max_model_len", "permission"] {
            assert!(card.get(k).is_some(), "{k} missing from {card}");
        }
        assert_eq!(card["permission"][0]["object"], "model_permission");
        assert_eq!(model_info(&p)["is_generation"], true);
    }
}
