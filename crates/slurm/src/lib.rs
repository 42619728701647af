//! Slurm as servetune uses it, through its own commands (never its C API, never ssh): submit a
//! batch job (`sbatch --parsable`), follow its state (`squeue --json`, then `scontrol show job`,
//! then `sacct`, then the job's own exit record for clusters without accounting storage), cancel
//! it (`scancel`), list partitions (`sinfo`), run `srun` steps, and read a task's place in a job
//! from the `SLURM_*` variables.
//!
//! The campaign's Slurm executor, `probe --slurm` and `fabric allreduce --slurm` all go through
//! this crate, so there is one reading of Slurm's outputs, tested against captured output of two
//! Slurm generations (22.05's flat JSON and 23.02+'s list-valued fields).

#![warn(missing_docs)]

mod cmd;
mod hostlist;
mod script;
mod state;
mod task;

pub use cmd::{Partition, Slurm, SrunOutput};
pub use hostlist::expand as expand_hostlist;
pub use script::{display_word, quote_word, BatchScript, RuntimeValue};
pub use state::{parse_sacct, parse_scontrol, parse_squeue_json, JobInfo, JobState};
pub use task::TaskEnv;

/// What went wrong talking to Slurm.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SlurmError {
    /// No Slurm on this machine (the command is not on PATH).
    #[error("{0}")]
    NotInstalled(String),
    /// The user's input does not fit the cluster (a partition, account or size); names the input.
    #[error("{0}")]
    Input(String),
    /// A Slurm command failed or answered something unreadable.
    #[error("{0}")]
    Command(String),
}

/// Result alias.
pub type Result<T> = std::result::Result<T, SlurmError>;
