//! Job states as Slurm names them, and the three readings of a job: `squeue --json` (22.05's flat
//! fields and 23.02+'s lists and `{set, number}` objects alike), `scontrol show job -o`, and `sacct -P`.

use serde_json::Value;

use crate::{Result, SlurmError};

/// A job's state (`JOB_STATE` in Slurm's `slurm.h`; the names `squeue` prints).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobState {
    /// Waiting for resources or priority.
    Pending,
    /// Nodes are booting or being set up.
    Configuring,
    /// Running.
    Running,
    /// Stopped by a person (`scontrol suspend`).
    Suspended,
    /// Ending: epilogs are running.
    Completing,
    /// Ended with exit code 0.
    Completed,
    /// Ended with a non-zero exit code or signal.
    Failed,
    /// Hit its time limit.
    Timeout,
    /// Killed by the out-of-memory handler.
    OutOfMemory,
    /// A node of the job failed.
    NodeFail,
    /// Preempted by a higher-priority job.
    Preempted,
    /// Cancelled (`scancel`, or by an administrator).
    Cancelled,
    /// A node could not boot.
    BootFail,
    /// Missed its deadline.
    Deadline,
    /// Put back in the queue.
    Requeued,
    /// A name this reading does not know, kept as printed.
    Other(String),
}

impl JobState {
    /// Parses Slurm's name (`RUNNING`, `CANCELLED by 0`, `OUT_OF_MEMORY`, `PD`).
    pub fn parse(s: &str) -> Self {
        let w = s.split_whitespace().next().unwrap_or("").trim_end_matches('+').to_ascii_uppercase();
        match w.as_str() {
            "PENDING" | "PD" => Self::Pending,
            "CONFIGURING" | "CF" => Self::Configuring,
            "RUNNING" | "R" => Self::Running,
            "SUSPENDED" | "S" => Self::Suspended,
            "COMPLETING" | "CG" => Self::Completing,
            "COMPLETED" | "CD" => Self::Completed,
            "FAILED" | "F" => Self::Failed,
            "TIMEOUT" | "TO" => Self::Timeout,
            "OUT_OF_MEMORY" | "OOM" => Self::OutOfMemory,
            "NODE_FAIL" | "NF" => Self::NodeFail,
            "PREEMPTED" | "PR" => Self::Preempted,
            "CANCELLED" | "CA" => Self::Cancelled,
            "BOOT_FAIL" | "BF" => Self::BootFail,
            "DEADLINE" | "DL" => Self::Deadline,
            "REQUEUED" | "RQ" | "REQUEUE_HOLD" | "REQUEUE_FED" => Self::Requeued,
            _ => Self::Other(w),
        }
    }

    /// Slurm's name.
    pub fn name(&self) -> &str {
        match self {
            Self::Pending => "PENDING",
            Self::Configuring => "CONFIGURING",
            Self::Running => "RUNNING",
            Self::Suspended => "SUSPENDED",
            Self::Completing => "COMPLETING",
            Self::Completed => "COMPLETED",
            Self::Failed => "FAILED",
            Self::Timeout => "TIMEOUT",
            Self::OutOfMemory => "OUT_OF_MEMORY",
            Self::NodeFail => "NODE_FAIL",
            Self::Preempted => "PREEMPTED",
            Self::Cancelled => "CANCELLED",
            Self::BootFail => "BOOT_FAIL",
            Self::Deadline => "DEADLINE",
            Self::Requeued => "REQUEUED",
            Self::Other(s) => s,
        }
    }

    /// The job has ended and will not run again by itself.
    pub fn is_terminal(&self) -> bool {
        matches!(
            self,
            Self::Completed
                | Self::Failed
                | Self::Timeout
                | Self::OutOfMemory
                | Self::NodeFail
                | Self::Preempted
                | Self::Cancelled
                | Self::BootFail
                | Self::Deadline
        )
    }

    /// The job holds (or waits for) its allocation: it can still serve, so it can be re-attached.
    pub fn is_live(&self) -> bool {
        matches!(self, Self::Pending | Self::Configuring | Self::Running | Self::Suspended | Self::Requeued)
    }
}

/// What one reading says of a job.
#[derive(Debug, Clone, PartialEq)]
pub struct JobInfo {
    /// The job id.
    pub id: u64,
    /// Its state.
    pub state: JobState,
    /// The batch script's exit code, once it ended.
    pub exit_code: Option<i32>,
    /// The signal that ended it, if one did.
    pub signal: Option<i32>,
    /// Its nodes (compressed list as Slurm prints it), once allocated.
    pub nodes: Option<String>,
    /// Why it waits or ended (`Resources`, `NonZeroExitCode`), when Slurm says.
    pub reason: Option<String>,
    /// Which reading said it: `squeue`, `scontrol`, `sacct` or `exit record`.
    pub source: &'static str,
}

/// A number as 22.05 prints it (`0`) or as 23.11+ does (`{"set": true, "number": 0}`).
fn number(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64(),
        Value::Object(o) if o.get("set").and_then(Value::as_bool) != Some(false) => o.get("number").and_then(number),
        _ => None,
    }
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        // 23.02+ prints states as a list: the base state, then flags.
        Value::Array(a) => a.first().and_then(text),
        _ => None,
    }
}

fn exit_of(v: Option<&Value>) -> (Option<i32>, Option<i32>) {
    match v {
        None | Some(Value::Null) => (None, None),
        Some(Value::Object(o)) => {
            let code = o.get("return_code").and_then(number).map(|n| n as i32);
            let sig = o.get("signal").and_then(|s| s.get("id").or(Some(s))).and_then(number).filter(|n| *n > 0).map(|n| n as i32);
            (code, sig)
        }
        // 22.05 prints the raw wait status: 36608 is exit 143, 9 is SIGKILL.
        Some(other) => match number(other) {
            Some(n) if n > 255 => (Some((n >> 8) as i32 & 0xff), None),
            Some(n) if n & 0x7f != 0 && n < 128 => (None, Some((n & 0x7f) as i32)),
            Some(n) => (Some(n as i32), None),
            None => (None, None),
        },
    }
}

/// Reads `squeue --json` (every Slurm with the JSON output: 21.08 through 25.x).
pub fn parse_squeue_json(body: &str) -> Result<Vec<JobInfo>> {
    let v: Value =
        serde_json::from_str(body).map_err(|e| SlurmError::Command(format!("squeue --json printed something that is not JSON ({e})")))?;
    let jobs =
        v.get("jobs").and_then(Value::as_array).ok_or_else(|| SlurmError::Command("squeue --json printed no \"jobs\" list".into()))?;
    let mut out = Vec::new();
    for j in jobs {
        let Some(id) = j.get("job_id").and_then(number) else { continue };
        let state = j.get("job_state").and_then(text).map_or(JobState::Other("UNKNOWN".into()), |s| JobState::parse(&s));
        let (exit_code, signal) = if state.is_terminal() { exit_of(j.get("exit_code")) } else { (None, None) };
        out.push(JobInfo {
            id: id as u64,
            state,
            exit_code,
            signal,
            nodes: j.get("nodes").and_then(text),
            reason: j.get("state_reason").and_then(text).filter(|r| r != "None"),
            source: "squeue",
        });
    }
    Ok(out)
}

/// Reads `scontrol show job -o ID` (one line of `Key=Value` words).
pub fn parse_scontrol(line: &str) -> Option<JobInfo> {
    let field = |k: &str| line.split_whitespace().find_map(|w| w.strip_prefix(k).and_then(|r| r.strip_prefix('='))).map(str::to_string);
    let id = field("JobId")?.parse().ok()?;
    let state = JobState::parse(&field("JobState")?);
    let (exit_code, signal) = match field("ExitCode").and_then(|e| e.split_once(':').map(|(a, b)| (a.parse().ok(), b.parse().ok()))) {
        Some((c, s)) if state.is_terminal() => (c, s.filter(|s: &i32| *s > 0)),
        _ => (None, None),
    };
    let nodes = field("NodeList").filter(|n| n != "(null)");
    let reason = field("Reason").filter(|r| r != "None");
    Some(JobInfo { id, state, exit_code, signal, nodes, reason, source: "scontrol" })
}

/// Reads `sacct -X -n -P -o JobIDRaw,State,ExitCode,NodeList` (pipe-separated).
pub fn parse_sacct(body: &str, job: u64) -> Option<JobInfo> {
    body.lines().find_map(|l| {
        let f: Vec<&str> = l.split('|').collect();
        if f.len() < 3 || f[0].trim() != job.to_string() {
            return None;
        }
        let state = JobState::parse(f[1]);
        let (c, s) = f[2].split_once(':').map_or((None, None), |(a, b)| (a.parse().ok(), b.parse().ok()));
        let nodes = f.get(3).map(|n| n.trim().to_string()).filter(|n| !n.is_empty() && n != "None assigned");
        Some(JobInfo { id: job, state, exit_code: c, signal: s.filter(|s: &i32| *s > 0), nodes, reason: None, source: "sacct" })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slurm_22_05_squeue_json_reads_state_exit_and_nodes() {
        // Captured from squeue --json on Debian's slurm-wlm 22.05.8 (fields trimmed).
        let body = r#"{"meta":{"Slurm":{"release":"22.05.8"}},"errors":[],"jobs":[
          {"job_id":1,"job_state":"COMPLETED","exit_code":0,"nodes":"n[1-2]","state_reason":"None"},
          {"job_id":2,"job_state":"RUNNING","exit_code":0,"nodes":"n[1-2]","state_reason":"None"},
          {"job_id":3,"job_state":"PENDING","exit_code":0,"nodes":"","state_reason":"Resources"},
          {"job_id":4,"job_state":"CANCELLED","exit_code":36608,"nodes":"n1","state_reason":"None"}]}"#;
        let j = parse_squeue_json(body).expect("parse");
        assert_eq!(j.len(), 4);
        // 22.05's exit_code is the raw wait status: 36608 = exit 143 (the batch script's SIGTERM trap).
        assert_eq!((j[3].state.clone(), j[3].exit_code), (JobState::Cancelled, Some(143)));
        assert_eq!((j[0].state.clone(), j[0].exit_code), (JobState::Completed, Some(0)));
        assert_eq!((j[1].state.clone(), j[1].exit_code, j[1].nodes.as_deref()), (JobState::Running, None, Some("n[1-2]")));
        assert_eq!((j[2].state.clone(), j[2].nodes.clone(), j[2].reason.as_deref()), (JobState::Pending, None, Some("Resources")));
    }

    #[test]
    fn slurm_24_squeue_json_lists_and_set_number_objects_read_the_same() {
        // The v0.0.40+ shape (Slurm 23.11 and later): states are lists, numbers are {set, number}.
        let body = r#"{"jobs":[{"job_id":7,"job_state":["OUT_OF_MEMORY"],
          "exit_code":{"status":["OUT_OF_MEMORY"],"return_code":{"set":true,"infinite":false,"number":0},
                       "signal":{"id":{"set":true,"number":9},"name":"KILL"}},
          "nodes":"gpu01","state_reason":"OutOfMemory"}]}"#;
        let j = parse_squeue_json(body).expect("parse");
        assert_eq!(j[0].state, JobState::OutOfMemory);
        assert_eq!((j[0].exit_code, j[0].signal), (Some(0), Some(9)));
        assert!(parse_squeue_json("not json").is_err());
        assert!(parse_squeue_json("{}").is_err());
    }

    #[test]
    fn scontrol_and_sacct_lines_read_cancellation_by_signal() {
        let line =
            "JobId=2 JobName=t1 UserId=root(0) JobState=CANCELLED Reason=None Dependency=(null) ExitCode=0:15 NodeList=n[1-2] BatchHost=n1";
        let j = parse_scontrol(line).expect("scontrol");
        assert_eq!(
            (j.id, j.state.clone(), j.exit_code, j.signal, j.nodes.as_deref()),
            (2, JobState::Cancelled, Some(0), Some(15), Some("n[1-2]"))
        );
        let s = parse_sacct("9|CANCELLED by 0|0:15|n1\n9.batch|CANCELLED|0:15|n1\n", 9).expect("sacct");
        assert_eq!((s.state, s.signal), (JobState::Cancelled, Some(15)));
        assert_eq!(parse_sacct("Slurm accounting storage is disabled\n", 9), None);
    }

    #[test]
    fn every_state_slurm_names_maps_and_terminal_states_are_not_live() {
        for (name, terminal) in [
            ("PENDING", false),
            ("RUNNING", false),
            ("COMPLETED", true),
            ("FAILED", true),
            ("TIMEOUT", true),
            ("OUT_OF_MEMORY", true),
            ("NODE_FAIL", true),
            ("PREEMPTED", true),
            ("CANCELLED", true),
        ] {
            let s = JobState::parse(name);
            assert_eq!(s.name(), name);
            assert_eq!(s.is_terminal(), terminal, "{name}");
            assert_eq!(s.is_live(), !terminal, "{name}");
        }
        assert_eq!(JobState::parse("WEIRD"), JobState::Other("WEIRD".into()));
    }
}
