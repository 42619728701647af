//! servetune's campaign: a crash-safe SQLite journal of experiments on real serving engines, an
//! executor that launches, readies, benchmarks and tears them down, and a planner that proposes the
//! next experiment with the performance model's expected gain, or stops to ask a person.
//!
//! Flow: [`engine`] (launch templates) + [`probe_step`] (the box) -> [`campaign::init`] writes the
//! [`journal`]; [`campaign::continue_once`] asks [`planner`] for the next step, runs a runnable one
//! through [`executor`] and [`bench_step`], classifies failures with [`classify`], and records every
//! state change before it goes on; [`report`] turns the journal into report data and renders it.
//!
//! Calls into bench, probe and the model go through [`bench_step`], [`probe_step`] and
//! [`plan_step`] only (and a fabric document's typed reading through [`fabric_step`]), so a change
//! of those crates' APIs is absorbed in one place each.

#![warn(missing_docs)]

pub mod bench_step;
pub mod campaign;
pub mod classify;
pub mod controller;
pub mod engine;
pub mod executor;
pub mod executor_slurm;
pub mod fabric_step;
pub mod finding;
pub mod goal;
pub mod http;
pub mod journal;
pub mod knobs;
pub mod plan_step;
pub mod planner;
pub mod probe_step;
pub mod report;
pub mod report_compare;
pub mod report_html;
pub mod report_svg;
pub mod secrets;
pub mod text;
pub mod verdict;

/// A campaign error: the user's input (exit 2) or the environment at run time (exit 1).
#[derive(Debug, thiserror::Error)]
pub enum CampaignError {
    /// Bad input: names the input, what is wrong and the fix.
    #[error("{0}")]
    Input(String),
    /// A failure while running (I/O, SQLite, a server).
    #[error("{0}")]
    Runtime(String),
}

impl From<rusqlite::Error> for CampaignError {
    /// What the journal holds (a value of the wrong type in a row, a missing row, table or
    /// column, a damaged file) is bad input, exit 2, [`damaged`]; everything else (a full disk, a
    /// lock, an unreadable file, a constraint servetune's own write broke) is the machine's or
    /// servetune's, exit 1.
    fn from(e: rusqlite::Error) -> Self {
        use rusqlite::ffi::ErrorCode as C;
        let content = match &e {
            rusqlite::Error::SqliteFailure(f, msg) => {
                matches!(f.code, C::DatabaseCorrupt | C::NotADatabase)
                    || (f.code == C::Unknown && msg.as_deref().is_some_and(|m| m.contains("no such table") || m.contains("no such column")))
            }
            rusqlite::Error::InvalidColumnType(..)
            | rusqlite::Error::FromSqlConversionFailure(..)
            | rusqlite::Error::IntegralValueOutOfRange(..)
            | rusqlite::Error::QueryReturnedNoRows
            | rusqlite::Error::InvalidColumnName(..)
            | rusqlite::Error::Utf8Error(..) => true,
            _ => false,
        };
        if content {
            damaged(format!("journal: {e}"))
        } else {
            CampaignError::Runtime(format!("journal: {e}"))
        }
    }
}

/// A journal value this servetune cannot read (`what` says which): bad input, exit 2, with what
/// to do about it.
pub fn damaged(what: String) -> CampaignError {
    CampaignError::Input(format!(
        "{what}: the campaign's journal.sqlite holds a value this servetune cannot read (edited by hand, damaged, or written by another servetune); restore it from a backup, open it with the servetune that wrote it, or start a new campaign directory"
    ))
}

/// Result alias.
pub type Result<T> = std::result::Result<T, CampaignError>;

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}
