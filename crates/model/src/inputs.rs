//! The files `plan` reads besides a `config.json`, as typed documents: a `servetune bench` JSON
//! (`--calibrate`) and a `servetune fabric` JSON (`--fabric`'s link, `--allreduce`'s measured
//! NCCL all-reduce, and the per-pair matrices a campaign report draws). Only the fields the readers need are read; every error names the file and the
//! field. The caller reads the file; this parses its text.

use serde::Deserialize;

use crate::calibrate::Measured;
use crate::comm::{MeasuredAllReduce, MeasuredRun};
use crate::hw::LinkProfile;
use crate::ModelError;

/// The fields of a `servetune bench --json` document that calibration reads.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct BenchInput {
    /// `servetune.bench/<version>`.
    pub schema: String,
    /// One entry per load point.
    pub runs: Vec<BenchRun>,
    /// The workload the sweep ran (older or hand-written documents may lack it).
    #[serde(default)]
    pub config: Option<BenchWorkload>,
}

/// The workload fields of a bench document's `config`: the lengths as bench writes them (`128`,
/// `uniform:819..1024`) and the model the server named.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct BenchWorkload {
    /// `config.input`, the prompt length distribution.
    #[serde(default)]
    pub input: Option<String>,
    /// `config.output`, the output length distribution.
    #[serde(default)]
    pub output: Option<String>,
    /// `config.model`, what the server served.
    #[serde(default)]
    pub model: Option<String>,
}

/// One load point of a bench document.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct BenchRun {
    /// Closed-loop concurrency (None for an open-loop rate run, which calibration skips).
    #[serde(default)]
    pub concurrency: Option<u32>,
    /// The run's throughput.
    pub throughput: BenchThroughput,
    /// The run's request counts (older documents may lack them).
    #[serde(default)]
    pub requests: Option<BenchRequests>,
}

/// A bench run's request counts.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct BenchRequests {
    /// Requests that finished.
    pub completed: u64,
}

/// A bench run's throughput.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct BenchThroughput {
    /// Output tokens per second.
    pub output_tokens_per_s: f64,
    /// Prompt tokens of completed requests per second (older documents may lack it).
    #[serde(default)]
    pub input_tokens_per_s: Option<f64>,
    /// Completed requests per second (older documents may lack it).
    #[serde(default)]
    pub requests_per_s: Option<f64>,
}

/// The lowest output rate a calibration takes, tok/s: one token a million seconds is no run.
pub const MIN_MEASURED_RATE: f64 = 1e-6;
/// The highest, tok/s: a billion output tokens a second is beyond any deployment's measurement.
pub const MAX_MEASURED_RATE: f64 = 1e9;

impl BenchInput {
    /// The mean prompt length the sweep's completed requests had, tokens: prompt tokens over
    /// requests, pooled over the runs that give both rates. None where no run does. This is the
    /// length a `--dataset` or shared-prefix sweep ran, which `config.input` names only in words.
    pub fn measured_input_len(&self) -> Option<f64> {
        let (mut tokens, mut requests) = (0.0, 0.0);
        for t in self.runs.iter().map(|r| &r.throughput) {
            if let (Some(i), Some(q)) = (t.input_tokens_per_s, t.requests_per_s) {
                if i.is_finite() && q.is_finite() && i >= 0.0 && q > 0.0 {
                    tokens += i;
                    requests += q;
                }
            }
        }
        (requests > 0.0 && tokens > 0.0).then(|| tokens / requests)
    }

    /// Parses a bench JSON's text; `source` names the file in errors.
    pub fn parse(text: &str, source: &str) -> Result<Self, ModelError> {
        let b: BenchInput = serde_json::from_str(text).map_err(|e| {
            ModelError::Input(format!("{source}: not a servetune bench JSON ({e}); write one with servetune bench --json FILE"))
        })?;
        if !(b.schema == "servetune.bench/1" || b.schema.starts_with("servetune.bench/1.")) {
            return Err(ModelError::Input(format!("{source}: field \"schema\" is {:?}, not servetune.bench/1", b.schema)));
        }
        Ok(b)
    }

    /// The closed-loop runs as calibration points. Refuses a throughput that is not finite and
    /// positive (naming `runs[i].throughput.output_tokens_per_s`) and a file without closed-loop runs.
    pub fn measured(&self, source: &str) -> Result<Vec<Measured>, ModelError> {
        let mut out = Vec::new();
        // The run each point came from (open-loop runs are skipped), for the messages.
        let mut from: Vec<usize> = Vec::new();
        for (i, r) in self.runs.iter().enumerate() {
            let Some(concurrency) = r.concurrency else { continue };
            let t = r.throughput.output_tokens_per_s;
            if concurrency == 0 {
                return Err(ModelError::Input(format!("{source}: field \"runs[{i}].concurrency\" is 0: a closed loop needs 1 or more")));
            }
            if r.requests.as_ref().is_some_and(|q| q.completed == 0) {
                return Err(ModelError::Input(format!(
                    "{source}: run {i} (concurrency {concurrency}) completed no request, so its rate measures nothing: remove that run or rerun it"
                )));
            }
            if !(t.is_finite() && t > 0.0) {
                return Err(ModelError::Input(format!(
                    "{source}: field \"runs[{i}].throughput.output_tokens_per_s\" is {t:?}: calibration needs runs that produced tokens (finite, > 0); remove that run or rerun it"
                )));
            }
            if !(MIN_MEASURED_RATE..=MAX_MEASURED_RATE).contains(&t) {
                return Err(ModelError::Input(format!(
                    "{source}: field \"runs[{i}].throughput.output_tokens_per_s\" is {t:e}: no serving deployment measures that (between {MIN_MEASURED_RATE:e} and {MAX_MEASURED_RATE:e} output tok/s); remove that run or rerun it"
                )));
            }
            if let Some(j) = out.iter().position(|m: &Measured| m.concurrency == concurrency) {
                return Err(ModelError::Input(format!(
                    "{source}: runs {} and {i} both measured concurrency {concurrency}: calibration takes one run per concurrency; drop one, or give a file of one sweep",
                    from[j]
                )));
            }
            out.push(Measured { concurrency, output_tokens_per_s: t });
            from.push(i);
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
    /// Which measurement: `p2p`, `allreduce` or `host`.
    #[serde(default)]
    pub kind: Option<String>,
    /// `cuda`, `nccl`, `sim` or `host`.
    #[serde(default)]
    pub backend: Option<String>,
    /// p2pBandwidthLatencyTest's matrices (kind `p2p`).
    #[serde(default)]
    pub matrices: Vec<FabricMatrix>,
    /// The raw sweep (kind `p2p`); only the swept GPUs are read.
    #[serde(default)]
    pub p2p: Option<FabricSweep>,
    /// The NCCL all-reduce runs (kind `allreduce`).
    #[serde(default)]
    pub allreduce: Vec<FabricAllReduce>,
}

/// One all-reduce run of a fabric document: a rank count under one set of NCCL settings.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct FabricAllReduce {
    /// GPUs in the all-reduce.
    pub ranks: u64,
    /// The NCCL environment settings of the run (none: NCCL's defaults).
    #[serde(default)]
    pub env: Vec<FabricEnv>,
    /// One row per message size.
    pub rows: Vec<FabricAllReduceRow>,
}

/// One environment setting of an all-reduce run.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct FabricEnv {
    /// The variable.
    pub name: String,
    /// Its value.
    pub value: String,
}

/// One message size of an all-reduce run.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct FabricAllReduceRow {
    /// Bytes per rank.
    pub bytes: u64,
    /// Time of one all-reduce, us.
    pub time_us: f64,
}

/// A GPU-by-GPU matrix of a fabric document.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct FabricMatrix {
    /// p2pBandwidthLatencyTest's title with the size it was read at, e.g. "Unidirectional
    /// P2P=Enabled Bandwidth Matrix (256 MiB)".
    pub title: String,
    /// `GB/s` or `us`.
    pub unit: String,
    /// `values[i][j]`: from the i-th to the j-th swept GPU; `None` where not measured.
    pub values: Vec<Vec<Option<f64>>>,
}

/// The part of a fabric document's raw sweep the readers use.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct FabricSweep {
    /// The swept GPUs: the matrices' rows and columns, in order.
    pub gpus: Vec<usize>,
}

impl FabricInput {
    /// Parses a fabric JSON's text; `source` names the file in errors.
    pub fn parse(text: &str, source: &str) -> Result<Self, ModelError> {
        let f: FabricInput = serde_json::from_str(text).map_err(|e| {
            ModelError::Input(format!("{source}: not a servetune fabric JSON ({e}); write one with servetune fabric p2p --json FILE, or fabric allreduce for --allreduce"))
        })?;
        if !f.schema.starts_with("servetune.fabric/1") {
            return Err(ModelError::Input(format!("{source}: field \"schema\" is {:?}, not servetune.fabric/1", f.schema)));
        }
        Ok(f)
    }

    /// The per-pair matrices checked: a `p2p` document with at least one bandwidth (GB/s) and one
    /// latency (us) matrix, each square over the swept GPUs, every value finite and not negative;
    /// its measured link, when it has one, within the ranges a link may have.
    pub fn checked_matrices(&self, source: &str) -> Result<&[FabricMatrix], ModelError> {
        let bad = |m: String| ModelError::Input(format!("{source}: {m}"));
        if let Some(l) = &self.link {
            l.validate(&format!("{source} field \"link\""))?;
        }
        if let Some(k) = self.kind.as_deref().filter(|k| *k != "p2p") {
            return Err(bad(format!(
                "field \"kind\" is {k:?}: it holds no per-pair matrices; record the document servetune fabric p2p --json FILE writes"
            )));
        }
        let n = self.p2p.as_ref().map(|p| p.gpus.len());
        for (i, m) in self.matrices.iter().enumerate() {
            let size = n.unwrap_or(m.values.len());
            if m.values.len() != size || m.values.iter().any(|r| r.len() != size) {
                return Err(bad(format!("field \"matrices[{i}].values\" is not {size} x {size} (one row and column per swept GPU)")));
            }
            if let Some(v) = m.values.iter().flatten().flatten().find(|v| !v.is_finite() || **v < 0.0) {
                return Err(bad(format!("field \"matrices[{i}].values\" holds {v}: bandwidths and latencies are finite and not negative")));
            }
        }
        for unit in ["GB/s", "us"] {
            if !self.matrices.iter().any(|m| m.unit == unit) {
                return Err(bad(format!(
                    "field \"matrices\" has no {unit} matrix: write the document with servetune fabric p2p --json FILE"
                )));
            }
        }
        Ok(&self.matrices)
    }

    /// The measured NCCL all-reduce (`plan --allreduce`): the runs made with NCCL's default
    /// settings over two or more GPUs (a run with `--env` settings is a comparison, not what an
    /// engine gets), each at two or more sizes. Sizes of 0 bytes are skipped; a time outside 1 to
    /// 1e9 us, a size measured twice, or a run across nodes (a Slurm backend) is refused naming
    /// the field.
    pub fn measured_allreduce(&self, source: &str) -> Result<MeasuredAllReduce, ModelError> {
        let bad = |m: String| ModelError::Input(format!("{source}: {m}"));
        if let Some(k) = self.kind.as_deref().filter(|k| *k != "allreduce") {
            return Err(bad(format!(
                "field \"kind\" is {k:?}, not \"allreduce\": --allreduce takes the document servetune fabric allreduce --json FILE writes"
            )));
        }
        if let Some(b) = self.backend.as_deref().filter(|b| b.contains("slurm")) {
            return Err(bad(format!(
                "field \"backend\" is {b:?}: a run across nodes; --allreduce takes the all-reduce within one node (servetune fabric allreduce --json FILE on the box)"
            )));
        }
        let mut runs: Vec<MeasuredRun> = Vec::new();
        for (i, r) in self.allreduce.iter().enumerate() {
            if !r.env.is_empty() || r.ranks < 2 {
                continue;
            }
            let ranks = u32::try_from(r.ranks)
                .ok()
                .filter(|n| *n <= 1024)
                .ok_or_else(|| bad(format!("field \"allreduce[{i}].ranks\" is {}: at most 1024 GPUs", r.ranks)))?;
            // An all-reduce between GPUs launches at least one kernel: a microsecond or more.
            if let Some((j, row)) = r.rows.iter().enumerate().find(|(_, row)| !(row.time_us >= 1.0 && row.time_us < 1e9)) {
                return Err(bad(format!(
                    "field \"allreduce[{i}].rows[{j}].time_us\" is {:?}: an all-reduce between GPUs takes 1 to 1e9 microseconds",
                    row.time_us
                )));
            }
            let mut points: Vec<(f64, f64)> =
                r.rows.iter().filter(|row| row.bytes > 0).map(|row| (row.bytes as f64, row.time_us)).collect();
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            if let Some(w) = points.windows(2).find(|w| w[0].0 == w[1].0) {
                return Err(bad(format!("field \"allreduce[{i}].rows\" measures {} bytes twice: one row per size", w[0].0)));
            }
            if runs.iter().any(|x| x.ranks() == ranks) {
                return Err(bad(format!(
                    "field \"allreduce[{i}]\" measures {ranks} ranks with NCCL's defaults a second time: one run per rank count"
                )));
            }
            let run = MeasuredRun::new(ranks, points).ok_or_else(|| {
                bad(format!(
                    "field \"allreduce[{i}].rows\" has fewer than two sizes above 0 bytes: measure a sweep (--min-size, --max-size)"
                ))
            })?;
            runs.push(run);
        }
        if runs.is_empty() {
            return Err(bad(
                "field \"allreduce\" holds no run over two or more GPUs with NCCL's default settings: run servetune fabric allreduce --json FILE without --env".into(),
            ));
        }
        runs.sort_by_key(|r| r.ranks());
        Ok(MeasuredAllReduce { source: source.to_string(), runs, measured_on: None })
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

    fn allreduce_doc(runs: &str) -> String {
        format!(r#"{{"schema":"servetune.fabric/1.1","kind":"allreduce","backend":"nccl","allreduce":[{runs}]}}"#)
    }

    fn run(ranks: u64, env: &str, rows: &str) -> String {
        format!(r#"{{"ranks":{ranks},"env":[{env}],"rows":[{rows}],"transports":[],"fit":null,"busbw_large_gbs":1.0}}"#)
    }

    const ROWS: &str = r#"{"bytes":0,"time_us":30.0},{"bytes":8,"time_us":40.0},{"bytes":1048576,"time_us":90.0}"#;
    const P2P_OFF: &str = r#"{"name":"NCCL_P2P_DISABLE","value":"1"}"#;

    #[test]
    fn a_measured_all_reduce_takes_the_default_runs_over_two_or_more_gpus() {
        let text = allreduce_doc(&[run(8, "", ROWS), run(8, P2P_OFF, ROWS), run(1, "", ROWS), run(4, "", ROWS)].join(","));
        let m = FabricInput::parse(&text, "ar.json").expect("parse").measured_allreduce("ar.json").expect("runs");
        assert_eq!(m.runs.iter().map(|r| r.ranks()).collect::<Vec<_>>(), vec![4, 8], "the NCCL_P2P_DISABLE and one-rank runs are left out");
        assert_eq!(m.runs[1].us(8.0), 40.0, "the 0-byte row is skipped");
        assert_eq!(m.source, "ar.json");
    }

    #[test]
    fn a_bad_all_reduce_document_is_refused_naming_the_field() {
        let refused = |text: String, want: &str| {
            let e = FabricInput::parse(&text, "ar.json").and_then(|f| f.measured_allreduce("ar.json")).expect_err(want);
            assert!(e.to_string().contains("ar.json") && e.to_string().contains(want), "{e}");
        };
        refused(fabric(1.0, 50.0, "p2p").replace("\"link\"", "\"kind\":\"p2p\",\"link\""), "not \"allreduce\"");
        refused(allreduce_doc(&run(8, P2P_OFF, ROWS)), "with NCCL's default settings");
        refused(allreduce_doc(&run(8, "", r#"{"bytes":8,"time_us":-1.0},{"bytes":16,"time_us":2.0}"#)), "allreduce[0].rows[0].time_us");
        refused(allreduce_doc(&run(8, "", r#"{"bytes":8,"time_us":1.0},{"bytes":8,"time_us":2.0}"#)), "measures 8 bytes twice");
        refused(allreduce_doc(&run(8, "", r#"{"bytes":8,"time_us":1.0}"#)), "fewer than two sizes");
        refused(allreduce_doc(&[run(8, "", ROWS), run(8, "", ROWS)].join(",")), "a second time");
        refused(allreduce_doc(&run(4_294_967_297, "", ROWS)), "allreduce[0].ranks");
        refused(allreduce_doc(&run(8, "", ROWS)).replace("\"nccl\"", "\"nccl (slurm)\""), "a run across nodes");
        refused(allreduce_doc(&run(8, "", r#"{"bytes":8,"time_us":1e-300},{"bytes":16,"time_us":2.0}"#)), "takes 1 to 1e9 microseconds");
    }

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
    fn per_pair_matrices_are_checked_naming_the_file_and_field() {
        let doc = |kind: &str, values: &str| {
            format!(
                r#"{{"schema":"servetune.fabric/1.1","kind":"{kind}","p2p":{{"gpus":[0,1]}},"matrices":[
                {{"title":"Unidirectional P2P=Enabled Bandwidth Matrix (256 MiB)","unit":"GB/s","values":{values}}},
                {{"title":"P2P=Enabled Latency Matrix (4 B)","unit":"us","values":[[2.0,13.3],[13.3,2.0]]}}]}}"#
            )
        };
        let ok = FabricInput::parse(&doc("p2p", "[[1483.4,29.4],[29.4,null]]"), "f.json").expect("parse");
        assert_eq!(ok.checked_matrices("f.json").expect("matrices").len(), 2);
        let cases = [
            (doc("allreduce", "[[1.0,2.0],[2.0,1.0]]"), "f.json: field \"kind\" is \"allreduce\""),
            (doc("p2p", "[[1.0,2.0]]"), "field \"matrices[0].values\" is not 2 x 2"),
            (doc("p2p", "[[1.0,-2.0],[2.0,1.0]]"), "holds -2"),
        ];
        for (text, says) in cases {
            let e = FabricInput::parse(&text, "f.json").expect("parse").checked_matrices("f.json").expect_err(says);
            assert!(e.to_string().contains(says), "{e}");
        }
        let no_latency = r#"{"schema":"servetune.fabric/1.1","kind":"p2p","matrices":[{"title":"b","unit":"GB/s","values":[[1.0]]}]}"#;
        let e = FabricInput::parse(no_latency, "f.json").expect("parse").checked_matrices("f.json").expect_err("no latency");
        assert!(e.to_string().contains("no us matrix"), "{e}");
    }

    #[test]
    fn a_document_whose_link_has_a_negative_or_absurd_bandwidth_is_refused_with_its_matrices() {
        let doc = |beta: &str| {
            format!(
                r#"{{"schema":"servetune.fabric/1.1","kind":"p2p","p2p":{{"gpus":[0]}},
                "link":{{"name":"measured-p2p","alpha_us":1.0,"beta_gbs":{beta},"mode":"p2p","source":"sim"}},
                "matrices":[{{"title":"b","unit":"GB/s","values":[[1.0]]}},{{"title":"l","unit":"us","values":[[1.0]]}}]}}"#
            )
        };
        FabricInput::parse(&doc("53.8"), "f.json").expect("parse").checked_matrices("f.json").expect("a sane link");
        for (beta, says) in
            [("-5", "beta_gbs) -5.0 is not a bandwidth"), ("1e-300", "beta_gbs) 1e-300 is not"), ("1e308", "beta_gbs) 1e308 is not")]
        {
            let f = FabricInput::parse(&doc(beta), "f.json").expect("parse");
            for e in [f.checked_matrices("f.json").expect_err(beta), f.link_profile("f.json").expect_err(beta)] {
                let m = e.to_string();
                assert!(m.starts_with("f.json field \"link\": link bandwidth (") && m.contains(says), "{m}");
                assert!(m.ends_with("give GB/s from 0.001 to 100000"), "{m}");
            }
        }
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
        // Rates no deployment measures, a concurrency measured twice, another schema's major.
        for (rate, says) in [("1e300", "is 1e300: no serving deployment"), ("1e-300", "is 1e-300: no serving deployment")] {
            let e = BenchInput::parse(&ok.replace("150.0", rate), "b.json").expect("parse").measured("b.json").expect_err(rate);
            assert!(e.to_string().contains(says), "{e}");
        }
        let twice = ok.replace("\"concurrency\":null", "\"concurrency\":8");
        let e = BenchInput::parse(&twice, "b.json").expect("parse").measured("b.json").expect_err("twice");
        assert!(e.to_string().contains("runs 0 and 1 both measured concurrency 8"), "{e}");
        let e = BenchInput::parse(&ok.replace("servetune.bench/1", "servetune.bench/999"), "b.json").expect_err("schema");
        assert!(e.to_string().contains("\"servetune.bench/999\", not servetune.bench/1"), "{e}");
        assert!(BenchInput::parse(&ok.replace("servetune.bench/1", "servetune.bench/1.2"), "b.json").is_ok());
    }
}
