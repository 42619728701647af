//! What a campaign finding is: where it came from ([`Source`]), which rule or signal raised it
//! ([`Code`]) and how much it matters ([`Severity`]), as enums the planner and the report match on.
//!
//! The journal keeps each as its name (`probe`, `vm_no_p2p`, `warning`), the words it always
//! stored, so a journal written before these types existed reads unchanged. A name is parsed once,
//! when a row is read; a name this servetune does not know (a newer servetune wrote it, or a
//! person edited the file) is refused with the row's id, never mapped to a default. In JSON (the
//! report, an environment's stored probe findings) each is its name too.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use servetune_probe::findings::FindingId;

/// Where a finding came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Source {
    /// The probe of the box (`servetune probe`'s rules).
    Probe,
    /// The executor (launch and teardown).
    Executor,
    /// A line of a server's log that a template's `logs` rule matched.
    Log,
    /// The campaign's own analysis (the plan against the measurement).
    Analysis,
}

/// How much a finding matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    /// Worth knowing; nothing may be wrong.
    Info,
    /// Likely to cost throughput or stability.
    Warning,
    /// Serving will be slow or wrong until it is fixed.
    Critical,
}

/// Which rule or signal raised a finding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Code {
    /// One of the probe's rules, by its stable id.
    Probe(FindingId),
    /// The server ran its fused-MoE kernels with untuned default configs (a log signal).
    MoeDefaultConfig,
    /// The server's port stayed taken after teardown.
    PortNotFree,
    /// The measured throughput is far from the plan's prediction.
    PlanGap,
}

impl Source {
    const ALL: [Source; 4] = [Source::Probe, Source::Executor, Source::Log, Source::Analysis];

    /// The name the journal and the report use.
    pub fn name(self) -> &'static str {
        match self {
            Source::Probe => "probe",
            Source::Executor => "executor",
            Source::Log => "log",
            Source::Analysis => "analysis",
        }
    }

    /// The source named `name`, if this servetune knows it.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.name() == name)
    }
}

impl Severity {
    const ALL: [Severity; 3] = [Severity::Info, Severity::Warning, Severity::Critical];

    /// The name the journal and the report use.
    pub fn name(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Critical => "critical",
        }
    }

    /// The severity named `name`, if this servetune knows it.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.name() == name)
    }
}

impl Code {
    /// The name the journal and the report use: the probe's rule id, or the campaign's own.
    pub fn name(self) -> String {
        match self {
            Code::Probe(id) => probe_id_name(id),
            Code::MoeDefaultConfig => "moe_default_config".into(),
            Code::PortNotFree => "port_not_free".into(),
            Code::PlanGap => "plan_gap".into(),
        }
    }

    /// The code named `name`, if this servetune knows it (the campaign's own names first, then
    /// the probe's rule ids).
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "moe_default_config" => Some(Code::MoeDefaultConfig),
            "port_not_free" => Some(Code::PortNotFree),
            "plan_gap" => Some(Code::PlanGap),
            _ => serde_json::from_value(serde_json::Value::String(name.into())).ok().map(Code::Probe),
        }
    }
}

/// A journal record a step or a question rests on. Written (and stored) as "finding 3",
/// "experiment 5" or "fabric 2", the words a reader looks up in the report's record column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Evidence {
    /// A finding, by its journal id.
    Finding(i64),
    /// An experiment, by its journal id.
    Experiment(i64),
    /// A fabric measurement record, by its journal id.
    Fabric(i64),
}

impl Evidence {
    /// The record as words: "finding 3".
    pub fn name(self) -> String {
        match self {
            Evidence::Finding(id) => format!("finding {id}"),
            Evidence::Experiment(id) => format!("experiment {id}"),
            Evidence::Fabric(id) => format!("fabric {id}"),
        }
    }

    /// The record `name` refers to ("finding 3"), if it is one this servetune knows.
    pub fn parse(name: &str) -> Option<Self> {
        let (kind, id) = name.split_once(' ')?;
        let id: i64 = id.parse().ok()?;
        match kind {
            "finding" => Some(Evidence::Finding(id)),
            "experiment" => Some(Evidence::Experiment(id)),
            "fabric" => Some(Evidence::Fabric(id)),
            _ => None,
        }
    }
}

impl fmt::Display for Evidence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

/// The probe's stable id of a rule, as its JSON writes it.
fn probe_id_name(id: FindingId) -> String {
    serde_json::to_value(id).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_else(|| format!("{id:?}"))
}

/// A stored name that this servetune does not know, with the row it was read from.
pub(crate) fn unknown(what: &str, name: &str, row: &str, known: &str) -> crate::CampaignError {
    crate::CampaignError::Input(format!(
        "journal: {row} has the {what} {name:?}, which this servetune does not know ({known}): it was written by a newer servetune, \
         or edited by hand; open it with the servetune that wrote it"
    ))
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

macro_rules! by_name {
    ($t:ty, $what:literal) => {
        impl Serialize for $t {
            fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
                s.serialize_str(&self.name())
            }
        }

        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
                let name = String::deserialize(d)?;
                <$t>::parse(&name).ok_or_else(|| serde::de::Error::custom(format!("unknown finding {} {name:?}", $what)))
            }
        }

        impl rusqlite::ToSql for $t {
            fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
                Ok(rusqlite::types::ToSqlOutput::Owned(rusqlite::types::Value::Text(self.name().to_string())))
            }
        }
    };
}

by_name!(Source, "source");
by_name!(Severity, "severity");
by_name!(Code, "code");
by_name!(Evidence, "evidence");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_reads_back_as_itself_and_an_unknown_one_is_none() {
        for s in Source::ALL {
            assert_eq!(Source::parse(s.name()), Some(s));
        }
        for s in Severity::ALL {
            assert_eq!(Severity::parse(s.name()), Some(s));
        }
        for c in
            [Code::Probe(FindingId::VmNoP2p), Code::Probe(FindingId::HmmEnabled), Code::MoeDefaultConfig, Code::PortNotFree, Code::PlanGap]
        {
            assert_eq!(Code::parse(&c.name()), Some(c), "{c}");
        }
        assert_eq!(Code::Probe(FindingId::VmNoP2p).name(), "vm_no_p2p");
        assert_eq!((Source::parse("Probe"), Severity::parse("error"), Code::parse("vm-no-p2p")), (None, None, None));
        for e in [Evidence::Finding(3), Evidence::Experiment(12), Evidence::Fabric(1)] {
            assert_eq!(Evidence::parse(&e.name()), Some(e));
        }
        assert_eq!((Evidence::parse("finding"), Evidence::parse("finding x"), Evidence::parse("note 1")), (None, None, None));
        let json = serde_json::to_string(&(Source::Log, Severity::Critical, Code::PlanGap)).expect("json");
        assert_eq!(json, r#"["log","critical","plan_gap"]"#);
    }
}
