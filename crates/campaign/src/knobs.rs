//! The knobs the planner and the model read (`tp`, `pp`, `ep`, `max_running`, `mem_fraction`,
//! `kv_dtype`), parsed and checked once into typed fields.
//!
//! The journal keeps an experiment's knobs as the words of its launch command (`"tp": "8"`), since
//! that is what the engine was given. Code that branches on a knob reads [`KnobValues`] instead:
//! built when an experiment is read from the journal and when the campaign's base knobs are
//! resolved, so a value that is not a number of the right kind is refused there, with the knob's
//! name and where it came from, and never read as a default later. A knob that is absent stays
//! `None`; what that means (all GPUs for `tp`, the engine's own cap for `max_running`) is decided
//! where the value is used, and said there.

use std::collections::BTreeMap;

use servetune_model::quant::KvDtype;

use crate::{CampaignError, Result};

/// The knobs the planner and the model read, parsed.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct KnobValues {
    /// Tensor parallelism (`tp`): GPUs per model replica's layer.
    pub tp: Option<u32>,
    /// Pipeline parallelism (`pp`): stages.
    pub pp: Option<u32>,
    /// Expert parallelism (`ep`).
    pub ep: Option<u32>,
    /// The running-request cap (`max_running`).
    pub max_running: Option<u32>,
    /// The share of GPU memory for weights and KV (`mem_fraction`), in (0, 1].
    pub mem_fraction: Option<f64>,
    /// The KV cache's format (`kv_dtype`): None for `auto` or unset (the engine's default for the
    /// checkpoint, which the model applies), else the format the engine was told.
    pub kv_cache: Option<KvDtype>,
}

impl KnobValues {
    /// Parses the knobs the planner reads out of `knobs`; `whose` names where they came from
    /// ("experiment 3", "the campaign's knobs") in an error.
    pub fn parse(knobs: &BTreeMap<String, String>, whose: &str) -> Result<Self> {
        let count = |name: &str| -> Result<Option<u32>> {
            let Some(v) = knobs.get(name) else { return Ok(None) };
            match v.trim().parse::<u32>() {
                Ok(n) if n >= 1 => Ok(Some(n)),
                _ => Err(bad(whose, name, v, "a whole number >= 1")),
            }
        };
        let mem_fraction = match knobs.get("mem_fraction") {
            None => None,
            Some(v) => match v.trim().parse::<f64>() {
                Ok(x) if x > 0.0 && x <= 1.0 => Some(x),
                _ => return Err(bad(whose, "mem_fraction", v, "a share of GPU memory in (0, 1], e.g. 0.88")),
            },
        };
        let kv_cache = match knobs.get("kv_dtype") {
            None => None,
            Some(v) if v.trim().eq_ignore_ascii_case("auto") => None,
            Some(v) => {
                Some(KvDtype::from_engine_name(v).ok_or_else(|| bad(whose, "kv_dtype", v, "auto, fp8, fp8_e4m3, fp8_e5m2, bf16 or fp16"))?)
            }
        };
        Ok(Self { tp: count("tp")?, pp: count("pp")?, ep: count("ep")?, max_running: count("max_running")?, mem_fraction, kv_cache })
    }
}

fn bad(whose: &str, name: &str, value: &str, want: &str) -> CampaignError {
    CampaignError::Input(format!("{whose}: knob {name}={value:?} is not {want}; set it with --set {name}=VALUE"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn knobs(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn the_planners_knobs_are_read_into_typed_fields_and_absent_ones_stay_none() {
        let v = KnobValues::parse(&knobs(&[("tp", "8"), ("mem_fraction", "0.9"), ("kv_dtype", "fp8")]), "experiment 1").expect("valid");
        assert_eq!(v, KnobValues { tp: Some(8), mem_fraction: Some(0.9), kv_cache: Some(KvDtype::Fp8), ..KnobValues::default() });
        // `auto` is the engine's default for the checkpoint, which the model decides: as unset.
        for (kv, want) in [("auto", None), ("fp8_e4m3", Some(KvDtype::Fp8)), ("bfloat16", Some(KvDtype::Bf16))] {
            assert_eq!(KnobValues::parse(&knobs(&[("kv_dtype", kv)]), "experiment 2").expect(kv).kv_cache, want, "{kv}");
        }
    }

    #[test]
    fn a_knob_that_is_not_its_kind_of_number_is_refused_naming_the_knob_and_its_owner() {
        for (k, v) in
            [("tp", "eight"), ("pp", "0"), ("max_running", "-1"), ("mem_fraction", "1.5"), ("mem_fraction", "x"), ("kv_dtype", "int8")]
        {
            let e = KnobValues::parse(&knobs(&[(k, v)]), "experiment 4").expect_err("invalid");
            let m = e.to_string();
            assert!(m.contains("experiment 4") && m.contains(&format!("knob {k}={v:?}")), "{m}");
        }
    }
}
