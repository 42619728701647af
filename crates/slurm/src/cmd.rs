//! Running Slurm's commands: each one bounded in time, its failure said with what it printed.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::state::{parse_sacct, parse_scontrol, parse_squeue_json, JobInfo, JobState};
use crate::{Result, SlurmError};

/// The most kept of one Slurm command's stdout or stderr: `squeue --json` on a busy cluster
/// prints a few MB; more is a runaway command, refused rather than held.
pub const MAX_COMMAND_OUTPUT: u64 = 64 << 20;

/// The most a job's exit record may hold: it is one number and a newline.
const MAX_EXIT_RECORD: u64 = 4096;

/// One partition as `sinfo` lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct Partition {
    /// Its name (without the default marker).
    pub name: String,
    /// Nodes in it.
    pub nodes: u32,
    /// Generic resources per node (`gpu:8`, or `(null)`).
    pub gres: String,
    /// up, down, drain or inact.
    pub avail: String,
    /// The cluster's default partition.
    pub default: bool,
}

impl Partition {
    /// GPUs per node from the gres (`gpu:h100:8(S:0-1)` -> 8); 0 when none is listed.
    pub fn gpus_per_node(&self) -> u32 {
        self.gres
            .split(',')
            .filter(|g| g.starts_with("gpu"))
            .filter_map(|g| g.split('(').next()?.rsplit(':').next()?.parse::<u32>().ok())
            .max()
            .unwrap_or(0)
    }
}

/// What an `srun` step printed.
#[derive(Debug, Clone)]
pub struct SrunOutput {
    /// Its exit code (None when killed by a signal or the time limit).
    pub code: Option<i32>,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

/// Slurm's client commands.
#[derive(Debug, Clone)]
pub struct Slurm {
    /// How long one query or submission may take (a busy controller answers within seconds).
    pub timeout: Duration,
}

impl Default for Slurm {
    fn default() -> Self {
        Self { timeout: Duration::from_secs(30) }
    }
}

/// The first `prog` on PATH.
pub fn which(prog: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|p| std::env::split_paths(&p).map(|d| d.join(prog)).find(|f| f.is_file()))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).trim().to_string()
}

impl Slurm {
    /// Checks that the client commands are here; the error says how to get them.
    pub fn check_installed() -> Result<()> {
        for p in ["sbatch", "squeue", "scancel", "sinfo", "srun"] {
            if which(p).is_none() {
                return Err(SlurmError::NotInstalled(format!(
                    "{p} not found on PATH: this machine has no Slurm client. Run servetune on a Slurm login node (Debian/Ubuntu: apt install slurm-client, with SLURM_CONF or /etc/slurm/slurm.conf naming the cluster), or use --executor local"
                )));
            }
        }
        Ok(())
    }

    /// Runs `prog args` within `limit`. Both pipes are drained while it runs: `squeue --json`
    /// prints every recent job (22.05 ignores `--jobs` for JSON), which fills a pipe nobody reads.
    fn run_for(&self, prog: &str, args: &[String], limit: Duration) -> Result<Output> {
        use std::io::Read;
        let mut child = Command::new(prog)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| SlurmError::NotInstalled(format!("cannot run {prog}: {e}")))?;
        // At most MAX_COMMAND_OUTPUT is kept of each pipe; the rest is read and dropped, so the
        // command never blocks on a full pipe and a runaway one cannot fill memory.
        let drain = |r: Option<Box<dyn Read + Send>>| {
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let mut over = false;
                if let Some(mut r) = r {
                    let _ = r.by_ref().take(MAX_COMMAND_OUTPUT).read_to_end(&mut buf);
                    over = std::io::copy(&mut r, &mut std::io::sink()).unwrap_or(0) > 0;
                }
                (buf, over)
            })
        };
        let out = drain(child.stdout.take().map(|s| Box::new(s) as Box<dyn Read + Send>));
        let err = drain(child.stderr.take().map(|s| Box::new(s) as Box<dyn Read + Send>));
        let start = Instant::now();
        let status = loop {
            match child.try_wait() {
                Ok(Some(st)) => break st,
                Ok(None) if start.elapsed() < limit => std::thread::sleep(Duration::from_millis(20)),
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(SlurmError::Command(format!("{prog} {} did not answer within {:?}", args.join(" "), limit)));
                }
            }
        };
        let (stdout, over_out) = out.join().unwrap_or_default();
        let (stderr, over_err) = err.join().unwrap_or_default();
        if over_out || over_err {
            return Err(SlurmError::Command(format!(
                "{prog} {} printed more than {} MiB on {}, the most servetune reads of a Slurm command; check the cluster's Slurm commands (a wrapper printing in a loop?)",
                args.join(" "),
                MAX_COMMAND_OUTPUT >> 20,
                if over_out { "stdout" } else { "stderr" }
            )));
        }
        Ok(Output { status, stdout, stderr })
    }

    fn run(&self, prog: &str, args: &[String]) -> Result<Output> {
        self.run_for(prog, args, self.timeout)
    }

    /// Submits `script` with `args` (`--nodes=2`, ...); returns the job id.
    pub fn submit(&self, args: &[String], script: &Path) -> Result<u64> {
        let mut a = vec!["--parsable".to_string()];
        a.extend(args.iter().cloned());
        a.push(script.display().to_string());
        let out = self.run("sbatch", &a)?;
        let so = text(&out.stdout);
        if !out.status.success() {
            return Err(SlurmError::Input(format!("sbatch refused the job: {}", text(&out.stderr))));
        }
        // --parsable prints "jobid" or "jobid;cluster".
        so.split(';')
            .next()
            .and_then(|s| s.trim().parse().ok())
            .ok_or_else(|| SlurmError::Command(format!("sbatch printed no job id: {so:?}")))
    }

    /// `sbatch --test-only`: would the cluster take this job? The error is sbatch's own words.
    pub fn test_only(&self, args: &[String], script: &Path) -> Result<String> {
        let mut a = vec!["--test-only".to_string()];
        a.extend(args.iter().cloned());
        a.push(script.display().to_string());
        let out = self.run("sbatch", &a)?;
        let said = format!("{} {}", text(&out.stdout), text(&out.stderr)).trim().to_string();
        if out.status.success() {
            Ok(said)
        } else {
            Err(SlurmError::Input(said))
        }
    }

    /// What Slurm knows of `job`: squeue, then scontrol (jobs that ended recently), then sacct
    /// (accounting storage), then the batch script's `exit_record`. `None`: no reading knows it.
    pub fn query(&self, job: u64, exit_record: Option<&Path>) -> Result<Option<JobInfo>> {
        let id = job.to_string();
        if let Ok(out) = self.run("squeue", &["--json".into(), format!("--jobs={id}")]) {
            if out.status.success() {
                if let Some(j) = parse_squeue_json(&String::from_utf8_lossy(&out.stdout))?.into_iter().find(|j| j.id == job) {
                    return Ok(Some(j));
                }
            }
        }
        if let Ok(out) = self.run("scontrol", &["show".into(), "job".into(), "-o".into(), id.clone()]) {
            if let Some(j) = out.status.success().then(|| parse_scontrol(&String::from_utf8_lossy(&out.stdout))).flatten() {
                return Ok(Some(j));
            }
        }
        let sacct = ["-X", "-n", "-P", "-o", "JobIDRaw,State,ExitCode,NodeList", "-j"].iter().map(|s| s.to_string()).chain([id]);
        if let Ok(out) = self.run("sacct", &sacct.collect::<Vec<_>>()) {
            // Without slurmdbd sacct says "Slurm accounting storage is disabled": fall through.
            if let Some(j) = out.status.success().then(|| parse_sacct(&String::from_utf8_lossy(&out.stdout), job)).flatten() {
                return Ok(Some(j));
            }
        }
        Ok(exit_record.and_then(|p| read_exit_record(p, job)))
    }

    /// `scancel` (with `--signal=SIG --full` when given: the signal to the batch shell and steps).
    pub fn cancel(&self, job: u64, signal: Option<&str>) -> Result<()> {
        let mut a = Vec::new();
        if let Some(s) = signal {
            a.push(format!("--signal={s}"));
            a.push("--full".into());
        }
        a.push(job.to_string());
        let out = self.run("scancel", &a)?;
        if out.status.success() {
            Ok(())
        } else {
            Err(SlurmError::Command(format!("scancel {job}: {}", text(&out.stderr))))
        }
    }

    /// The partitions `sinfo` lists.
    pub fn partitions(&self) -> Result<Vec<Partition>> {
        let out = self.run("sinfo", &["-h".into(), "-o".into(), "%P|%D|%G|%a".into()])?;
        if !out.status.success() {
            return Err(SlurmError::Command(format!("sinfo: {}", text(&out.stderr))));
        }
        let mut parts: Vec<Partition> = Vec::new();
        for l in String::from_utf8_lossy(&out.stdout).lines() {
            let f: Vec<&str> = l.split('|').collect();
            if f.len() < 4 {
                continue;
            }
            let default = f[0].ends_with('*');
            let name = f[0].trim_end_matches('*').to_string();
            let nodes = f[1].trim().parse().unwrap_or(0);
            // sinfo prints a line per node configuration; a partition's nodes add up.
            match parts.iter_mut().find(|p| p.name == name) {
                Some(p) => p.nodes += nodes,
                None => parts.push(Partition { name, nodes, gres: f[2].to_string(), avail: f[3].to_string(), default }),
            }
        }
        Ok(parts)
    }

    /// A node's address (`NodeAddr` in `scontrol show node`), which is what the controller and other
    /// nodes reach it by; the name itself when Slurm lists none.
    pub fn node_addr(&self, node: &str) -> Result<String> {
        let out = self.run("scontrol", &["show".into(), "node".into(), "-o".into(), node.to_string()])?;
        if !out.status.success() {
            return Err(SlurmError::Command(format!("scontrol show node {node}: {}", text(&out.stderr))));
        }
        let body = String::from_utf8_lossy(&out.stdout);
        Ok(body.split_whitespace().find_map(|w| w.strip_prefix("NodeAddr=")).unwrap_or(node).to_string())
    }

    /// Runs an `srun` step to its end within `limit`.
    pub fn srun(&self, args: &[String], limit: Duration) -> Result<SrunOutput> {
        let out = self.run_for("srun", args, limit)?;
        Ok(SrunOutput {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }
}

/// The batch script's exit record: its exit code (143 after SIGTERM, that is a cancellation).
fn read_exit_record(p: &Path, job: u64) -> Option<JobInfo> {
    // The job writes it: only a regular file is opened (a FIFO there would block each poll).
    let bytes = servetune_io::read_regular(p, &p.display().to_string(), MAX_EXIT_RECORD).ok()?;
    let code: i32 = std::str::from_utf8(&bytes).ok()?.trim().parse().ok()?;
    let (state, signal) = match code {
        0 => (JobState::Completed, None),
        143 => (JobState::Cancelled, Some(15)),
        130 => (JobState::Cancelled, Some(2)),
        _ => (JobState::Failed, None),
    };
    Some(JobInfo { id: job, state, exit_code: Some(code), signal, nodes: None, reason: None, source: "exit record" })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpus_per_node_read_from_gres_forms() {
        let p = |g: &str| Partition { name: "p".into(), nodes: 1, gres: g.into(), avail: "up".into(), default: false };
        assert_eq!(p("gpu:8").gpus_per_node(), 8);
        assert_eq!(p("gpu:h100:8(S:0-1)").gpus_per_node(), 8);
        assert_eq!(p("(null)").gpus_per_node(), 0);
        assert_eq!(p("tmpfs:1,gpu:a100:4").gpus_per_node(), 4);
    }

    #[test]
    fn a_command_printing_more_than_a_pipe_holds_finishes_instead_of_timing_out() {
        // squeue --json on a busy cluster prints megabytes; an undrained pipe blocks it forever.
        let out = Slurm { timeout: Duration::from_secs(20) }
            .run_for("sh", &["-c".into(), "head -c 1000000 /dev/zero; echo done >&2".into()], Duration::from_secs(20))
            .expect("finishes");
        assert_eq!(out.stdout.len(), 1_000_000);
        assert_eq!(String::from_utf8_lossy(&out.stderr).trim(), "done");
    }

    #[test]
    fn a_command_printing_more_than_the_output_limit_is_refused_naming_the_limit() {
        let script = format!("head -c {} /dev/zero", MAX_COMMAND_OUTPUT + 1);
        let e = Slurm { timeout: Duration::from_secs(60) }
            .run_for("sh", &["-c".into(), script], Duration::from_secs(60))
            .expect_err("over the limit");
        assert!(e.to_string().contains("printed more than 64 MiB on stdout"), "{e}");
    }

    #[test]
    fn an_exit_record_that_is_a_fifo_or_too_large_is_not_read() {
        let d = tempfile::tempdir().expect("tmp");
        let fifo = d.path().join("exit");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().expect("mkfifo").success());
        let t = Instant::now();
        assert_eq!(read_exit_record(&fifo, 3), None);
        assert!(t.elapsed() < Duration::from_secs(2), "a FIFO nobody writes to is not opened");
        let big = d.path().join("big");
        std::fs::File::create(&big).expect("create").set_len(MAX_EXIT_RECORD + 1).expect("len");
        assert_eq!(read_exit_record(&big, 3), None);
    }

    #[test]
    fn exit_records_map_to_states() {
        let d = tempfile::tempdir().expect("tmp");
        let f = d.path().join("exit");
        for (body, st) in [("0\n", JobState::Completed), ("143\n", JobState::Cancelled), ("1\n", JobState::Failed)] {
            std::fs::write(&f, body).expect("write");
            assert_eq!(read_exit_record(&f, 3).map(|j| j.state), Some(st));
        }
        std::fs::write(&f, "garbage").expect("write");
        assert_eq!(read_exit_record(&f, 3), None);
    }
}
