//! The Slurm backend of the executor: an experiment is one batch job. The batch script runs the
//! rendered launch command on every node with `srun` (one task per node, node rank, node count and
//! head address filled in on the node), writes a log per node and its own exit record; the server
//! is reached on the head node's address. Its state comes from squeue, scontrol, sacct or the exit
//! record (clusters without slurmdbd); teardown and Ctrl-C are `scancel`. The job id is journaled, so
//! a `continue` after the controlling process died re-attaches to a job that still runs.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use servetune_slurm::{BatchScript, JobInfo, JobState, Slurm};

use crate::classify::{classify, ExitInfo, Failure, FailureKind};
use crate::executor::{log_tail, Handle, LaunchSpec, Launched, Teardown, GPU_MEMORY_NOT_CHECKED};
use crate::http::Endpoint;
use crate::CampaignError;

/// How often the job's state is read (each read runs squeue).
const STATE_EVERY: Duration = Duration::from_secs(1);
/// After `scancel`, how long Slurm may take to end the job (its KillWait is 30 s by default).
const CANCEL_WAIT: Duration = Duration::from_secs(45);

/// The campaign's Slurm settings (`campaign init --executor slurm ...`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SlurmSettings {
    /// `--partition`; the cluster's default when unset.
    pub partition: Option<String>,
    /// `--account`.
    pub account: Option<String>,
    /// Nodes per experiment: at least one, checked where it is read (`--nodes`, the journal).
    pub nodes: std::num::NonZeroU32,
    /// GPUs per node to ask for (`--gpus-per-node`); 0 asks for none (CPU-only clusters, the sim).
    pub gpus_per_node: u32,
    /// `--time` (Slurm's syntax, e.g. `2:00:00`).
    pub time: Option<String>,
    /// More sbatch arguments, each a whole `--flag=value` word.
    pub args: Vec<String>,
    /// How long a job may wait in the queue before the experiment fails.
    pub queue_timeout_s: u64,
}

impl SlurmSettings {
    /// The sbatch arguments of one experiment's job.
    pub fn sbatch_args(&self, job_name: &str, batch_log: &Path) -> Vec<String> {
        let mut a = vec![
            format!("--job-name={job_name}"),
            format!("--output={}", batch_log.display()),
            format!("--nodes={}", self.nodes),
            "--ntasks-per-node=1".into(),
        ];
        if let Some(p) = &self.partition {
            a.push(format!("--partition={p}"));
        }
        if let Some(acc) = &self.account {
            a.push(format!("--account={acc}"));
        }
        if let Some(t) = &self.time {
            a.push(format!("--time={t}"));
        }
        if self.gpus_per_node > 0 {
            a.push(format!("--gpus-per-node={}", self.gpus_per_node));
        }
        a.extend(self.args.iter().cloned());
        a
    }
}

fn input(e: servetune_slurm::SlurmError) -> CampaignError {
    match e {
        servetune_slurm::SlurmError::Command(m) => CampaignError::Runtime(m),
        other => CampaignError::Input(other.to_string()),
    }
}

/// Checks the settings against the cluster before anything is journaled: Slurm is here, the
/// partition exists and has the nodes, sbatch accepts the partition and account
/// (`sbatch --test-only`), and the allocation holds the plan's `gpus_needed` GPUs. Fills in
/// GPUs per node from the partition's gres when the user gave none. `scratch` is a directory for
/// the test script.
pub fn check(cfg: &mut SlurmSettings, gpus_needed: u32, scratch: &Path) -> crate::Result<()> {
    Slurm::check_installed().map_err(input)?;
    let slurm = Slurm::default();
    let parts = slurm.partitions().map_err(input)?;
    let listing = parts
        .iter()
        .map(|p| format!("{}{} ({} nodes, gres {})", p.name, if p.default { "*" } else { "" }, p.nodes, p.gres))
        .collect::<Vec<_>>()
        .join(", ");
    let part = match &cfg.partition {
        Some(name) => parts.iter().find(|p| &p.name == name).ok_or_else(|| {
            CampaignError::Input(format!(
                "--partition {name} is not a partition of this cluster; sinfo lists: {listing} (* is the default)"
            ))
        })?,
        None => parts
            .iter()
            .find(|p| p.default)
            .or(parts.first())
            .ok_or_else(|| CampaignError::Input("sinfo lists no partition: this cluster has nothing to run on".into()))?,
    };
    if cfg.nodes.get() > part.nodes {
        return Err(CampaignError::Input(format!(
            "--nodes {}: partition {} has {} node(s); sinfo lists: {listing}",
            cfg.nodes, part.name, part.nodes
        )));
    }
    if cfg.gpus_per_node == 0 {
        cfg.gpus_per_node = part.gpus_per_node();
    }
    let have = cfg.nodes.get() * cfg.gpus_per_node;
    if cfg.gpus_per_node > 0 && have < gpus_needed {
        return Err(CampaignError::Input(format!(
            "the allocation is smaller than the plan: {} node(s) x {} GPU(s) = {have} GPUs, but tp x pp needs {gpus_needed}: ask for more --nodes (or --gpus-per-node), or plan for fewer GPUs (--gpus, --set tp=..)",
            cfg.nodes,
            cfg.gpus_per_node
        )));
    }
    std::fs::create_dir_all(scratch).map_err(|e| CampaignError::Runtime(format!("{}: {e}", scratch.display())))?;
    let probe = scratch.join("servetune-slurm-check.sbatch");
    std::fs::write(
        &probe,
        "#!/bin/bash
true
",
    )
    .map_err(|e| CampaignError::Runtime(format!("{}: {e}", probe.display())))?;
    let res = slurm.test_only(&cfg.sbatch_args("servetune-check", &scratch.join("servetune-slurm-check.log")), &probe);
    let _ = std::fs::remove_file(&probe);
    res.map_err(|e| match e {
        servetune_slurm::SlurmError::Input(said) => CampaignError::Input(format!(
            "sbatch --test-only refused these settings (partition {}, account {}): {said}; sinfo lists: {listing}",
            part.name,
            cfg.account.as_deref().unwrap_or("default")
        )),
        other => input(other),
    })?;
    Ok(())
}

/// The files of one attempt, named from its log path (`exp-3-a1.log` -> `exp-3-a1.node0.log`, ...).
#[derive(Debug, Clone)]
pub struct JobFiles {
    /// The batch script's own output (the journaled log path).
    pub batch_log: PathBuf,
    stem: PathBuf,
}

impl JobFiles {
    /// The files beside `log_path`.
    pub fn of(log_path: &Path) -> Self {
        Self { batch_log: log_path.to_path_buf(), stem: log_path.with_extension("") }
    }

    fn with(&self, ext: &str) -> PathBuf {
        PathBuf::from(format!("{}.{ext}", self.stem.display()))
    }

    /// The batch script.
    pub fn batch(&self) -> PathBuf {
        self.with("sbatch")
    }

    /// The exit record.
    pub fn exit(&self) -> PathBuf {
        self.with("exit")
    }

    /// One line per node (name, address, rank, kernel).
    pub fn nodes(&self) -> PathBuf {
        self.with("nodes")
    }

    /// The nodes file's lines (one per node that started its task). The job writes it, so it is
    /// read only as a regular file of at most [`MAX_NODES_FILE`]; a missing file has no lines, and
    /// any other failure is the one line that says why (it is evidence in the fingerprint).
    pub fn node_lines(&self) -> Vec<String> {
        let p = self.nodes();
        match servetune_io::read_regular(&p, &p.display().to_string(), MAX_NODES_FILE) {
            Ok(bytes) => String::from_utf8_lossy(&bytes).lines().map(str::to_string).collect(),
            Err(servetune_io::ReadError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => vec![e.to_string()],
        }
    }

    /// Node `i`'s log.
    pub fn node_log(&self, i: usize) -> PathBuf {
        self.with(&format!("node{i}.log"))
    }
}

/// The most a job's nodes file may hold: one short line per node (name, address, rank, kernel),
/// so a few hundred bytes per node.
pub const MAX_NODES_FILE: u64 = servetune_io::MIB;

/// A server running as a Slurm job.
#[derive(Debug)]
pub struct SlurmServer {
    slurm: Slurm,
    /// The job id.
    pub job: u64,
    port: u16,
    files: JobFiles,
    nodes: usize,
    last: Option<JobInfo>,
    read_at: Option<Instant>,
    endpoint: Option<Endpoint>,
}

fn failure(kind: FailureKind, detail: String) -> Failure {
    Failure { kind, exit: None, evidence: vec![detail.clone()], corrective: kind.corrective().into(), summary: detail }
}

/// Writes the job's scripts and submits it.
pub fn submit(cfg: &SlurmSettings, spec: &LaunchSpec, job_name: &str) -> Result<SlurmServer, Failure> {
    let files = JobFiles::of(&spec.log_path);
    let script = BatchScript {
        argv: spec.argv.clone(),
        env: spec.env.clone(),
        nodes_file: files.nodes().display().to_string(),
        exit_file: files.exit().display().to_string(),
        node_log_pattern: format!("{}.node%n.log", files.stem.display()),
        task_path: files.with("task.sh").display().to_string(),
    };
    for p in [files.exit(), files.nodes()] {
        let _ = std::fs::remove_file(p);
    }
    script
        .write(&files.batch())
        .map_err(|e| failure(FailureKind::SpawnFailed, format!("cannot write the batch script {}: {e}", files.batch().display())))?;
    let slurm = Slurm::default();
    let job = slurm
        .submit(&cfg.sbatch_args(job_name, &files.batch_log), &files.batch())
        .map_err(|e| failure(FailureKind::SpawnFailed, e.to_string()))?;
    Ok(SlurmServer::attach(job, spec.port, &spec.log_path, cfg.nodes.get() as usize))
}

impl SlurmServer {
    /// Follows job `job` (a new one, or one a dead `continue` left running).
    pub fn attach(job: u64, port: u16, log_path: &Path, nodes: usize) -> Self {
        Self { slurm: Slurm::default(), job, port, files: JobFiles::of(log_path), nodes, last: None, read_at: None, endpoint: None }
    }

    /// The job's state now (read at most once a second).
    pub fn state(&mut self) -> Option<&JobInfo> {
        if self.read_at.is_none_or(|t| t.elapsed() >= STATE_EVERY) {
            self.read_at = Some(Instant::now());
            match self.slurm.query(self.job, Some(&self.files.exit())) {
                Ok(Some(info)) => self.last = Some(info),
                // Nobody knows the job and it left no record: it is gone.
                Ok(None) => {
                    self.last = Some(JobInfo {
                        id: self.job,
                        state: JobState::Other("GONE".into()),
                        exit_code: None,
                        signal: None,
                        nodes: None,
                        reason: Some("squeue, scontrol and sacct no longer know it and it left no exit record".into()),
                        source: "none",
                    })
                }
                // A busy controller: keep the last reading and ask again next time.
                Err(_) => {}
            }
        }
        self.last.as_ref()
    }

    /// Whether the job can still serve (queued or running).
    pub fn is_live(&mut self) -> bool {
        self.state().is_some_and(|s| s.state.is_live())
    }

    fn ended(&self) -> bool {
        self.last.as_ref().is_some_and(|l| l.state.is_terminal() || matches!(&l.state, JobState::Other(s) if s == "GONE"))
    }

    fn slurm_kind(&self) -> Option<FailureKind> {
        match self.last.as_ref()?.state {
            JobState::Timeout | JobState::Deadline => Some(FailureKind::JobTimeLimit),
            JobState::NodeFail | JobState::BootFail => Some(FailureKind::NodeFail),
            JobState::Preempted => Some(FailureKind::Preempted),
            JobState::OutOfMemory => Some(FailureKind::OutOfMemory),
            JobState::Cancelled => Some(FailureKind::Cancelled),
            _ => None,
        }
    }
}

impl Launched for SlurmServer {
    fn endpoint(&mut self) -> Option<Endpoint> {
        if self.endpoint.is_none() {
            let running = self.state().filter(|s| s.state == JobState::Running).and_then(|s| s.nodes.clone());
            if let Some(list) = running {
                let head = servetune_slurm::expand_hostlist(&list).into_iter().next()?;
                let host = self.slurm.node_addr(&head).unwrap_or(head);
                self.endpoint = Some(Endpoint { host, port: self.port });
            }
        }
        self.endpoint.clone()
    }

    fn handle(&self) -> Handle {
        Handle::SlurmJob(self.job)
    }

    fn logs(&self) -> Vec<PathBuf> {
        let mut v = vec![self.files.batch_log.clone()];
        v.extend((0..self.nodes).map(|i| self.files.node_log(i)));
        v
    }

    fn exited(&mut self) -> Option<ExitInfo> {
        self.state();
        if !self.ended() {
            return None;
        }
        let l = self.last.as_ref()?;
        Some(ExitInfo { code: l.exit_code, signal: l.signal })
    }

    fn failure(&self, exit: Option<ExitInfo>, timed_out: bool) -> Failure {
        let tail: Vec<String> = self.logs().iter().flat_map(|p| log_tail(p, 40)).collect();
        let mut f = classify(exit, timed_out, &tail);
        if let Some(l) = &self.last {
            let line = format!(
                "slurm job {}: {}{} (from {})",
                self.job,
                l.state.name(),
                l.reason.as_ref().map_or(String::new(), |r| format!(", reason {r}")),
                l.source
            );
            let generic = matches!(f.kind, FailureKind::Exited | FailureKind::Crash | FailureKind::Timeout);
            if let Some(kind) = self.slurm_kind().filter(|k| generic || *k != FailureKind::Cancelled) {
                if !timed_out || kind != FailureKind::Cancelled {
                    f.kind = kind;
                    f.corrective = kind.corrective().into();
                    f.summary = format!("{}: {line}", kind.name());
                }
            }
            f.evidence.insert(0, line);
        }
        f
    }

    fn waiting_for(&self) -> Option<String> {
        let l = self.last.as_ref()?;
        (l.state == JobState::Pending)
            .then(|| format!("slurm job {} pending ({})", self.job, l.reason.as_deref().unwrap_or("no reason given")))
    }

    fn teardown(mut self: Box<Self>, grace: Duration) -> Teardown {
        let ep = self.endpoint.clone();
        let mut killed = false;
        if !self.ended() {
            let _ = self.slurm.cancel(self.job, Some("TERM"));
            if !wait_end(&mut self, grace) {
                killed = true;
                let _ = self.slurm.cancel(self.job, None);
                wait_end(&mut self, CANCEL_WAIT);
            }
        }
        let exit = self.last.as_ref().map(|l| ExitInfo { code: l.exit_code, signal: l.signal });
        let port_free = ep.is_none_or(|e| port_closed(&e));
        Teardown { killed, exit, port_free, gpu_memory: GPU_MEMORY_NOT_CHECKED.into() }
    }
}

fn wait_end(s: &mut SlurmServer, limit: Duration) -> bool {
    let until = Instant::now() + limit;
    while Instant::now() < until {
        s.read_at = None;
        s.state();
        if s.ended() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    false
}

/// Nothing accepts on the endpoint any more (a few tries: the server may take a moment to close).
fn port_closed(ep: &Endpoint) -> bool {
    use std::net::ToSocketAddrs;
    let Some(addr) = (ep.host.as_str(), ep.port).to_socket_addrs().ok().and_then(|mut a| a.next()) else { return true };
    for _ in 0..30 {
        if std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nodes_file_is_read_within_its_limit_and_never_blocks() {
        let d = tempfile::tempdir().expect("tmp");
        let files = JobFiles::of(&d.path().join("exp-1-a1.log"));
        assert!(files.node_lines().is_empty(), "no file yet: no lines");
        std::fs::write(files.nodes(), "n1 10.0.0.1 0 6.8\nn2 10.0.0.2 1 6.8\n").expect("write");
        assert_eq!(files.node_lines(), ["n1 10.0.0.1 0 6.8", "n2 10.0.0.2 1 6.8"]);
        std::fs::File::create(files.nodes()).expect("create").set_len(MAX_NODES_FILE + 1).expect("len");
        let lines = files.node_lines();
        assert!(lines.len() == 1 && lines[0].contains("larger than 1 MiB"), "{lines:?}");
        std::fs::remove_file(files.nodes()).expect("rm");
        assert!(std::process::Command::new("mkfifo").arg(files.nodes()).status().expect("mkfifo").success());
        let lines = files.node_lines();
        assert!(lines.len() == 1 && lines[0].contains("is a FIFO"), "{lines:?}");
    }

    #[test]
    fn sbatch_arguments_carry_every_setting_as_whole_words() {
        let cfg = SlurmSettings {
            partition: Some("gpu".into()),
            account: Some("team a".into()),
            nodes: std::num::NonZeroU32::new(2).expect("2 is not 0"),
            gpus_per_node: 8,
            time: Some("1:00:00".into()),
            args: vec!["--exclude=n3".into()],
            queue_timeout_s: 60,
        };
        let a = cfg.sbatch_args("servetune-exp-1", Path::new("/c/exp-1-a1.log"));
        assert_eq!(
            a,
            [
                "--job-name=servetune-exp-1",
                "--output=/c/exp-1-a1.log",
                "--nodes=2",
                "--ntasks-per-node=1",
                "--partition=gpu",
                "--account=team a",
                "--time=1:00:00",
                "--gpus-per-node=8",
                "--exclude=n3"
            ]
        );
        let f = JobFiles::of(Path::new("/c/exp-1-a1.log"));
        assert_eq!(f.node_log(1), Path::new("/c/exp-1-a1.node1.log"));
        assert_eq!(f.exit(), Path::new("/c/exp-1-a1.exit"));
    }
}
