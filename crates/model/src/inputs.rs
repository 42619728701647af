//! The files `plan` reads besides a `config.json`, as typed documents: a `servetune bench` JSON
//! (`--calibrate`) and a `servetune fabric` JSON (`--fabric`). Only the fields the model needs are
//! read; every error names the file and the field. The caller reads the file; this parses its text.

use serde::Deserialize;

use crate::calibrate::Measured;
use crate::hw::LinkProfile;
use crate::ModelError;

/// The fields of a `servetune bench --json` document that calibration reads.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct BenchInput {
    /// `servetune.bench/<version>`.
    pub schema: String,
    /// One entry per load point.
    pub runs: Vec<BenchRun>,
}

/// One load point of a bench document.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct BenchRun {
    /// Closed-loop concurrency (None for an open-loop rate run, which calibration skips).
    #[serde(default)]
    pub concurrency: Option<u32>,
    /// The run's throughput.
    pub throughput: BenchThroughput,
}

/// A bench run's throughput.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct BenchThroughput {
    /// Output tokens per second.
    pub output_tokens_per_s: f64,
}

impl BenchInput {
    /// Parses a bench JSON's text; `source` names the file in errors.
    pub fn parse(text: &str, source: &str) -> Result<Self, ModelError> {
        let b: BenchInput = serde_json::from_str(text).map_err(|e| {
            ModelError::Input(format!("{source}: not a servetune bench JSON ({e}); write one with servetune bench --json FILE"))
        })?;
        if !b.schema.starts_with("servetune.bench/") {
            return Err(ModelError::Input(format!("{source}: field \"schema\" is {:?}, not servetune.bench/1", b.schema)));
        }
        Ok(b)
    }

    /// The closed-loop runs as calibration points. Refuses a throughput that is not finite and
    /// positive (naming `runs[i].throughput.output_tokens_per_s`) and a file without closed-loop runs.
    pub fn measured(&self, source: &str) -> Result<Vec<Measured>, ModelError> {
        let mut out = Vec::new();
        for (i, r) in self.runs.iter().enumerate() {
            let Some(concurrency) = r.concurrency else { continue };
            let t = r.throughput.output_tokens_per_s;
            if concurrency == 0 {
                return Err(ModelError::Input(format!("{source}: field \"runs[{i}].concurrency\" is 0: a closed loop needs 1 or more")));
            }
            if !(t.is_finite() && t > 0.0) {
                return Err(ModelError::Input(format!(
                    "{source}: field \"runs[{i}].throughput.output_tokens_per_s\" is {t:?}: calibration needs runs that produced tokens (finite, > 0); remove that run or rerun it"
                )));
            }
            out.push(Measured { concurrency, output_tokens_per_s: t });
        }
        if out.is_empty() {
            return Err(ModelError::Input(format!("{source}: no closed-loop run in it (calibration needs runs made with --concurrency)")));
        }
        Ok(out)
    }
}

/// The fields of a `servetune fabric p2p --json` document that `--fabric` reads.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct FabricInput {
    /// `servetune.fabric/<version>`.
    pub schema: String,
    /// The measured link (absent when no GPU pair was measured); its `mode` (p2p or host_staged)
    /// is read as the link's kind.
    #[serde(default)]
    pub link: Option<LinkProfile>,
}

impl FabricInput {
    /// Parses a fabric JSON's text; `source` names the file in errors.
    pub fn parse(text: &str, source: &str) -> Result<Self, ModelError> {
        let f: FabricInput = serde_json::from_str(text).map_err(|e| {
            ModelError::Input(format!("{source}: not a servetune fabric JSON ({e}); write one with servetune fabric p2p --json FILE"))
        })?;
        if !f.schema.starts_with("servetune.fabric/1") {
            return Err(ModelError::Input(format!("{source}: field \"schema\" is {:?}, not servetune.fabric/1", f.schema)));
        }
        Ok(f)
    }

    /// The measured link as the model's link, validated (finite, positive alpha and beta).
    pub fn link_profile(&self, source: &str) -> Result<LinkProfile, ModelError> {
        let l = self.link.as_ref().ok_or_else(|| {
            ModelError::Input(format!(
                "{source}: field \"link\" is missing: no link profile in it (it needs a fabric p2p run over two or more GPUs)"
            ))
        })?;
        let p = LinkProfile { source: format!("{} ({source})", l.source), ..l.clone() };
        if p.kind.is_network() {
            return Err(ModelError::Input(format!(
                "{source} field \"link\": its mode is {}, a network between nodes; --fabric takes the link between the GPUs of one node (a fabric p2p run); give a network with --net and --net-latency/--net-bw",
                p.kind.describe()
            )));
        }
        p.validate(&format!("{source} field \"link\""))?;
        Ok(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fabric(alpha: f64, beta: f64, mode: &str) -> String {
        format!(
            r#"{{"schema":"servetune.fabric/1","link":{{"name":"measured-{mode}","alpha_us":{alpha},"beta_gbs":{beta},"mode":"{mode}","source":"sim"}},"extra":1}}"#
        )
    }

    use crate::hw::LinkKind;

    #[test]
    fn a_network_is_not_taken_as_the_link_within_a_node() {
        let f = FabricInput::parse(&fabric(3.0, 40.0, "infiniband"), "f.json").expect("parse");
        let e = f.link_profile("f.json").expect_err("a network");
        assert!(e.to_string().contains("a network between nodes") && e.to_string().contains("--net"), "{e}");
    }

    #[test]
    fn a_measured_host_staged_link_keeps_its_kind() {
        let l = FabricInput::parse(&fabric(13.0, 29.0, "host_staged"), "f.json").expect("parse").link_profile("f.json").expect("link");
        assert_eq!(l.kind, LinkKind::HostStaged);
        assert!(l.source.ends_with("(f.json)"));
        let p = FabricInput::parse(&fabric(1.0, 50.0, "p2p"), "f.json").expect("parse").link_profile("f.json").expect("link");
        assert_eq!(p.kind, LinkKind::PcieP2p);
    }

    #[test]
    fn negative_fabric_values_are_refused_naming_the_file_and_field() {
        let e = FabricInput::parse(&fabric(-3.0, 29.0, "p2p"), "f.json").expect("parse").link_profile("f.json").expect_err("alpha");
        assert!(e.to_string().contains("f.json field \"link\": link latency (alpha_us) -3"), "{e}");
        let e = FabricInput::parse(&fabric(3.0, 0.0, "p2p"), "f.json").expect("parse").link_profile("f.json").expect_err("beta");
        assert!(e.to_string().contains("beta_gbs"), "{e}");
        let e = FabricInput::parse(r#"{"schema":"servetune.probe/1"}"#, "p.json").expect_err("schema");
        assert!(e.to_string().contains("p.json: field \"schema\""), "{e}");
    }

    #[test]
    fn bench_runs_become_points_and_bad_values_name_the_run() {
        let ok = r#"{"schema":"servetune.bench/1","runs":[{"concurrency":8,"throughput":{"output_tokens_per_s":150.0}},
            {"concurrency":null,"throughput":{"output_tokens_per_s":90.0}}]}"#;
        let m = BenchInput::parse(ok, "b.json").expect("parse").measured("b.json").expect("points");
        assert_eq!(m, vec![Measured { concurrency: 8, output_tokens_per_s: 150.0 }]);
        let bad = ok.replace("150.0", "-1e300");
        let e = BenchInput::parse(&bad, "b.json").expect("parse").measured("b.json").expect_err("negative");
        assert!(e.to_string().contains("\"runs[0].throughput.output_tokens_per_s\" is -1e300"), "{e}");
        let e = BenchInput::parse(&ok.replace("150.0", "0.0"), "b.json").expect("parse").measured("b.json").expect_err("zero");
        assert!(e.to_string().contains("is 0.0"), "{e}");
        let e = BenchInput::parse(r#"{"schema":"servetune.bench/1"}"#, "b.json").expect_err("no runs");
        assert!(e.to_string().contains("missing field `runs`"), "{e}");
    }
}
