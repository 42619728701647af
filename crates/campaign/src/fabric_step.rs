//! Interconnect measurements in the campaign: a `servetune fabric p2p --json` or `servetune fabric
//! allreduce --json` document (`servetune.fabric/1`) read through the model's typed reader,
//! checked, recorded in the journal against the current environment; a p2p document's per-pair
//! matrices are picked for the report, and an all-reduce document's runs price the NCCL
//! all-reduces of every later prediction in that environment ([`allreduce_for`]).

use std::path::Path;

use serde::Serialize;
use servetune_model::comm::MeasuredAllReduce;
use servetune_model::inputs::{FabricInput, FabricMatrix};

use crate::campaign::current_env;
use crate::journal::Journal;
use crate::probe_step::BoxFacts;
use crate::{CampaignError, Result};

/// The document's per-pair bandwidth and small-message latency, as the report draws them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PairMatrices {
    /// `cuda` or `sim`.
    pub backend: String,
    /// The swept GPUs: the rows and columns, in order.
    pub gpus: Vec<usize>,
    /// Bandwidth at the largest size (GB/s).
    pub bandwidth: Measured,
    /// Latency at the smallest size (us).
    pub latency: Measured,
    /// The link `servetune plan --fabric` takes from the document, in words.
    pub link: Option<String>,
}

/// One matrix of a fabric document.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Measured {
    /// p2pBandwidthLatencyTest's title with the size it was read at.
    pub title: String,
    /// `GB/s` or `us`.
    pub unit: String,
    /// `values[i][j]`: from the i-th to the j-th swept GPU; `null` where not measured.
    pub values: Vec<Vec<Option<f64>>>,
}

/// What a fabric document measured.
#[derive(Debug, Clone, PartialEq)]
pub enum Document {
    /// `fabric p2p`: the per-pair bandwidth and latency matrices.
    P2p(PairMatrices),
    /// `fabric allreduce`: NCCL's all-reduce with its default settings, by rank count and size.
    AllReduce(MeasuredAllReduce),
}

/// What `campaign fabric` recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    /// The fabric record's id.
    pub id: i64,
    /// The environment it was recorded for.
    pub facts: BoxFacts,
    /// What the document holds.
    pub document: Document,
    /// Said when the document's GPU count differs from the probe's.
    pub note: Option<String>,
}

/// Parses and checks a fabric document's text; `source` names the file in errors.
pub fn parse(text: &str, source: &str) -> Result<(serde_json::Value, Document)> {
    let input = |e: servetune_model::ModelError| CampaignError::Input(e.to_string());
    let doc = FabricInput::parse(text, source).map_err(|e| match serde_json::from_str::<FabricInput>(text) {
        // The model's message names plan's --allreduce flag; campaign fabric takes either kind as FILE.
        Err(j) => CampaignError::Input(format!(
            "{source}: not a servetune fabric JSON ({j}); give the file servetune fabric p2p --json FILE or fabric allreduce --json FILE wrote"
        )),
        Ok(_) => input(e),
    })?;
    let value = || -> Result<serde_json::Value> {
        serde_json::from_str(text).map_err(|e| CampaignError::Input(format!("{source}: not JSON ({e})")))
    };
    if doc.kind.as_deref() == Some("allreduce") {
        let measured = doc.measured_allreduce(source).map_err(input)?;
        return Ok((value()?, Document::AllReduce(measured)));
    }
    let matrices = doc.checked_matrices(source).map_err(input)?;
    // An engine asks for peer access: the P2P=Enabled matrices are what it gets (on a box without
    // P2P they hold the host-staged numbers, which is the finding, measured).
    let pick = |unit: &str, kind: &str| -> Option<&FabricMatrix> {
        let of_unit = || matrices.iter().filter(move |m| m.unit == unit);
        of_unit()
            .find(|m| m.title.contains("P2P=Enabled") && m.title.contains(kind) && !m.title.starts_with("Bidirectional"))
            .or_else(|| of_unit().next())
    };
    let measured = |m: &FabricMatrix| Measured { title: m.title.clone(), unit: m.unit.clone(), values: m.values.clone() };
    let (Some(bw), Some(lat)) = (pick("GB/s", "Bandwidth"), pick("us", "Latency")) else {
        return Err(CampaignError::Input(format!("{source}: no bandwidth and latency matrices in it")));
    };
    let n = bw.values.len();
    let pairs = PairMatrices {
        backend: doc.backend.clone().unwrap_or_else(|| "unknown".into()),
        gpus: doc.p2p.as_ref().map_or_else(|| (0..n).collect(), |p| p.gpus.clone()),
        bandwidth: measured(bw),
        latency: measured(lat),
        link: doc.link.as_ref().map(|l| format!("{}: alpha {:.2} us, beta {:.2} GB/s", l.name, l.alpha_us, l.beta_gbs)),
    };
    Ok((value()?, Document::P2p(pairs)))
}

/// What a recorded document holds (the journal's copy was checked when it was recorded).
pub fn document_of(body: &serde_json::Value, record: i64) -> Result<Document> {
    parse(&body.to_string(), &format!("fabric record {record}")).map(|(_, d)| d).map_err(|e| crate::damaged(format!("journal: {e}")))
}

/// The newest all-reduce document recorded for the environment with probe hash `env_hash` (before
/// `before`, ms since the epoch, when given), if any: what prices the NCCL all-reduces of the
/// campaign's predictions there. Only records whose document says `"kind": "allreduce"` are read;
/// one that no longer reads (a hand-edited journal) is passed over, so the model prices the
/// all-reduce instead of the campaign stopping.
pub fn allreduce_for(j: &Journal, env_hash: &str, before: Option<i64>) -> Result<Option<(i64, MeasuredAllReduce)>> {
    let candidates =
        j.env_fabrics(env_hash)?.into_iter().rev().filter(|f| f.body["kind"] == "allreduce" && before.is_none_or(|b| f.created_at <= b));
    for f in candidates {
        if let Ok(Document::AllReduce(m)) = document_of(&f.body, f.id) {
            return Ok(Some((f.id, m)));
        }
    }
    Ok(None)
}

/// The most a fabric document may hold: its matrices and sweep for 64 GPUs are a few MB.
pub const MAX_FABRIC_FILE: u64 = 64 << 20;

/// `servetune campaign fabric DIR FILE`: reads `file`, checks it and records it against the
/// current environment (the newest probe).
pub fn record(dir: &Path, file: &Path) -> Result<Recorded> {
    let mut j = Journal::open(dir)?;
    let source = file.display().to_string();
    let text = servetune_io::read_text(file, &source, MAX_FABRIC_FILE)
        .map_err(|e| CampaignError::Input(format!("{e} (give the file servetune fabric p2p or fabric allreduce --json FILE wrote)")))?;
    let (body, document) = parse(&text, &source)?;
    let (env_id, env) = current_env(&j)?;
    // A box's peer copies cover its own GPUs: a document of more is another box's (or made up),
    // and its matrices would be stored and drawn at every report. (An all-reduce may span nodes.)
    if let Document::P2p(m) = &document {
        if env.facts.gpus > 0 && m.gpus.len() > env.facts.gpus as usize {
            return Err(CampaignError::Input(format!(
                "{source} measured peer copies between {} GPUs, but the probe of this environment found {}: it is not this box's; measure here (servetune fabric p2p --json FILE), or probe again (campaign probe) if the box changed",
                m.gpus.len(),
                env.facts.gpus
            )));
        }
    }
    let id = j.add_fabric(env_id, &source, &body)?;
    let n = match &document {
        Document::P2p(m) => m.gpus.len(),
        Document::AllReduce(m) => m.runs.iter().map(|r| r.ranks() as usize).max().unwrap_or(0),
    };
    let note = (n != env.facts.gpus as usize)
        .then(|| format!("{source} measured {n} GPU(s); the probe of this environment found {} (a --gpus subset is fine)", env.facts.gpus));
    Ok(Recorded { id, facts: env.facts, document, note })
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = r#"{"schema":"servetune.fabric/1.1","kind":"p2p","backend":"sim","p2p":{"gpus":[0,1]},
        "link":{"name":"measured-p2p","alpha_us":0.5,"beta_gbs":53.8,"mode":"p2p","source":"sim"},
        "matrices":[
          {"title":"Unidirectional P2P=Disabled Bandwidth Matrix (256 MiB)","unit":"GB/s","values":[[1483.0,29.4],[29.4,1483.0]]},
          {"title":"Unidirectional P2P=Enabled Bandwidth Matrix (256 MiB)","unit":"GB/s","values":[[1483.0,53.8],[53.8,1483.0]]},
          {"title":"Bidirectional P2P=Enabled Bandwidth Matrix (256 MiB)","unit":"GB/s","values":[[1483.0,107.6],[107.6,1483.0]]},
          {"title":"P2P=Disabled Latency Matrix (4 B)","unit":"us","values":[[2.0,13.3],[13.3,2.0]]},
          {"title":"P2P=Enabled Latency Matrix (4 B)","unit":"us","values":[[2.0,0.5],[0.5,2.0]]}]}"#;

    fn allreduce_doc(time_us: f64) -> serde_json::Value {
        serde_json::json!({"schema": "servetune.fabric/1.1", "kind": "allreduce", "backend": "nccl",
            "allreduce": [{"ranks": 8, "env": [], "rows": [{"bytes": 8, "time_us": time_us}, {"bytes": 1048576, "time_us": 2.0 * time_us}]}]})
    }

    /// campaign fabric takes both kinds as its FILE: the error names the commands that write them,
    /// not plan's --allreduce flag.
    #[test]
    fn a_file_that_is_not_fabric_json_names_both_writers_and_no_plan_flag() {
        let e = parse("", "/dev/null").expect_err("empty").to_string();
        assert!(e.starts_with("/dev/null: not a servetune fabric JSON"), "{e}");
        assert!(e.contains("fabric p2p --json FILE") && e.contains("fabric allreduce --json FILE"), "{e}");
        assert!(!e.contains("--allreduce"), "{e}");
    }

    #[test]
    fn the_newest_readable_allreduce_record_of_the_environment_prices_it() {
        let d = tempfile::tempdir().expect("tmp");
        let row =
            crate::journal::CampaignRow { goal: "g".into(), model: "m".into(), engine: "sim".into(), settings: "{}".into(), created_at: 0 };
        let mut j = Journal::create(d.path(), &row).expect("journal");
        let probe = crate::journal::FingerprintKind::Probe;
        let (a, b) = (
            j.add_fingerprint(probe, "a", &serde_json::json!({})).expect("a"),
            j.add_fingerprint(probe, "b", &serde_json::json!({})).expect("b"),
        );
        assert_eq!(allreduce_for(&j, "a", None).expect("read"), None, "none recorded");
        let first = j.add_fabric(a, "ar1.json", &allreduce_doc(40.0)).expect("ar1");
        let second = j.add_fabric(a, "ar2.json", &allreduce_doc(90.0)).expect("ar2");
        // A p2p document recorded after it leaves it in effect; another box's record is not read.
        let p2p: serde_json::Value = serde_json::from_str(DOC).expect("p2p");
        j.add_fabric(a, "p2p.json", &p2p).expect("p2p");
        j.add_fabric(b, "ar3.json", &allreduce_doc(500.0)).expect("ar3");
        let (id, m) = allreduce_for(&j, "a", None).expect("read").expect("recorded");
        assert_eq!((id, m.runs[0].us(8.0)), (second, 90.0));
        // A record that no longer reads is passed over, not fatal.
        j.conn()
            .execute("UPDATE fabrics SET body = ?1 WHERE id = ?2", [allreduce_doc(-1.0).to_string(), second.to_string()])
            .expect("edit");
        assert_eq!(allreduce_for(&j, "a", None).expect("read").map(|(id, _)| id), Some(first));
        // Before the first was recorded there was none.
        assert_eq!(allreduce_for(&j, "a", Some(-1)).expect("read"), None);
    }

    #[test]
    fn the_p2p_enabled_unidirectional_matrices_are_drawn() {
        let (_, Document::P2p(m)) = parse(DOC, "f.json").expect("parse") else { panic!("a p2p document") };
        assert_eq!(m.bandwidth.title, "Unidirectional P2P=Enabled Bandwidth Matrix (256 MiB)");
        assert_eq!(m.bandwidth.values[0][1], Some(53.8));
        assert_eq!(m.latency.title, "P2P=Enabled Latency Matrix (4 B)");
        assert_eq!((m.gpus, m.backend.as_str()), (vec![0, 1], "sim"));
        assert!(m.link.is_some_and(|l| l.contains("beta 53.80 GB/s")));
    }

    #[test]
    fn a_document_with_a_negative_link_bandwidth_is_refused_naming_the_field() {
        let bad = DOC.replace("\"beta_gbs\":53.8", "\"beta_gbs\":-53.8");
        let e = parse(&bad, "f.json").expect_err("negative bandwidth");
        assert!(
            matches!(&e, CampaignError::Input(m) if m.starts_with("f.json field \"link\": link bandwidth (beta_gbs) -53.8 is not a bandwidth")),
            "{e}"
        );
    }

    #[test]
    fn not_json_and_other_schemas_are_input_errors_naming_the_file() {
        for (text, says) in
            [("{not json", "f.json: not a servetune fabric JSON"), (r#"{"schema":"servetune.probe/1.1"}"#, "f.json: field \"schema\"")]
        {
            let e = parse(text, "f.json").expect_err(says);
            assert!(matches!(&e, CampaignError::Input(m) if m.contains(says)), "{e}");
        }
    }
}
