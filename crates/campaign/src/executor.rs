//! The executor: launch a server, wait for readiness (health answers, then a one-token generation
//! succeeds; an exit while loading is noticed at once), ask its version, and tear it down.
//!
//! Two backends implement [`Launched`]: [`Server`] here (a process group on this machine with its
//! output in a log file; SIGTERM to the group, SIGKILL after a grace period, then the port is
//! checked) and [`crate::executor_slurm::SlurmServer`] (a batch job on a Slurm cluster, torn down
//! with scancel). Readiness, the version query and the benchmark only see the trait and the
//! [`Endpoint`].

use std::collections::BTreeMap;
use std::fs::File;
use std::net::TcpListener;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::classify::{classify, ExitInfo, Failure, FailureKind};
use crate::engine::VersionQuery;
use crate::http::{self, Endpoint};

/// How often readiness is polled.
const POLL: Duration = Duration::from_millis(100);
/// Log lines read for classification.
const TAIL_LINES: usize = 60;

/// What to launch and how to know it is ready.
#[derive(Debug, Clone)]
pub struct LaunchSpec {
    /// The command's words.
    pub argv: Vec<String>,
    /// Environment variables set for the server.
    pub env: BTreeMap<String, String>,
    /// Where its stdout and stderr go.
    pub log_path: PathBuf,
    /// The port it listens on.
    pub port: u16,
    /// The path that answers 200 once it is up.
    pub health: String,
    /// The completions path for the one-token readiness generation.
    pub generate: String,
    /// How long it may take to become ready.
    pub ready_timeout: Duration,
}

/// How a launched server is found again (journaled, so a later `continue` can clean up or re-attach).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handle {
    /// A process group on this machine.
    ProcessGroup(i32),
    /// A Slurm job.
    SlurmJob(u64),
}

/// A launched server, whichever backend started it.
pub trait Launched {
    /// Where it listens, once known (a queued Slurm job has no node yet).
    fn endpoint(&mut self) -> Option<Endpoint>;
    /// How to find it again.
    fn handle(&self) -> Handle;
    /// Its log files (one per node for a multi-node job), the main one first.
    fn logs(&self) -> Vec<PathBuf>;
    /// How it ended, if it did (polls).
    fn exited(&mut self) -> Option<ExitInfo>;
    /// The classified failure of a server that ended (or that we ended on a timeout).
    fn failure(&self, exit: Option<ExitInfo>, timed_out: bool) -> Failure;
    /// Why it is not up yet, in words (a queued job's reason), for the heartbeat line.
    fn waiting_for(&self) -> Option<String> {
        None
    }
    /// Stops it and reports how that went.
    fn teardown(self: Box<Self>, grace: Duration) -> Teardown;
}

/// A launched server on this machine.
#[derive(Debug)]
pub struct Server {
    child: Child,
    /// Its process group (its own pid).
    pub pgid: i32,
    /// The port it listens on.
    pub port: u16,
    /// Where its stdout and stderr go.
    pub log_path: PathBuf,
}

/// Why waiting for readiness stopped.
#[derive(Debug)]
pub enum NotReady {
    /// The server failed (classified).
    Failed(Failure),
    /// Ctrl-C.
    Interrupted,
}

/// How a teardown went.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Teardown {
    /// SIGKILL was needed after the grace period.
    pub killed: bool,
    /// How it exited, when it did.
    pub exit: Option<ExitInfo>,
    /// The port accepted a new listener afterwards.
    pub port_free: bool,
    /// Whether GPU memory went back, or why it could not be checked.
    pub gpu_memory: String,
}

/// A free localhost port (bound to port 0 and released; the server binds it right after).
///
/// The port after it is the multi-node rendezvous port (`{dist_port}`), so it is picked free too:
/// a kernel-chosen port's neighbour is often some client's ephemeral port. After a few tries
/// without such a pair the last port is returned anyway; its launch then gets the port retry.
/// Both are checked on this machine's 127.0.0.1 only: under the Slurm executor the server binds
/// on the job's nodes, where a taken port shows as the launch's port-in-use failure and its retry.
pub fn free_port() -> std::io::Result<u16> {
    pick_port(|| TcpListener::bind("127.0.0.1:0")?.local_addr().map(|a| a.port()), port_is_free)
}

/// [`free_port`]'s choice over `candidate` (a kernel-chosen free port each call) and `is_free`:
/// the first of at most 16 candidates whose next port is free, else the last candidate.
fn pick_port(mut candidate: impl FnMut() -> std::io::Result<u16>, is_free: impl Fn(u16) -> bool) -> std::io::Result<u16> {
    let mut last = 0;
    for _ in 0..16 {
        last = candidate()?;
        if last < u16::MAX && is_free(last + 1) {
            return Ok(last);
        }
    }
    Ok(last)
}

/// Whether 127.0.0.1:`port` can be bound now.
pub fn port_is_free(port: u16) -> bool {
    TcpListener::bind(("127.0.0.1", port)).is_ok()
}

#[expect(unsafe_code, reason = "kill(2) has no safe std wrapper for a process group; the call passes only integers")]
fn signal_group(pgid: i32, sig: i32) -> bool {
    // SAFETY: kill with a negative pid signals that process group; no memory is shared.
    unsafe { libc::kill(-pgid, sig) == 0 }
}

/// Whether any process of group `pgid` is alive.
pub fn group_alive(pgid: i32) -> bool {
    pgid > 1 && signal_group(pgid, 0)
}

/// The variable every launched server is given: its log's path, which a later `continue` reads
/// back from `/proc` to tell the group it launched from any other that took the number since.
pub const SERVER_MARK: &str = "SERVETUNE_SERVER_LOG";

/// Kills what is left of a process group recorded by a dead `continue` (stale step), but only when
/// it is the server this campaign launched for that step: one of the group's processes carries
/// the launch's mark ([`SERVER_MARK`] set to `log_path`), or, for a launcher that starts the
/// server with a clean environment (`sudo`, `env -i`, a container entrypoint), the group's leader
/// started while the step was alive (`alive_ms`: from when it was planned to its last heartbeat,
/// ms since the epoch). A journal copied from another machine, or a group number reused after a
/// reboot, names some other group, which is left alone. Returns whether it signalled the group.
pub fn kill_stale_group(pgid: i32, log_path: &str, alive_ms: (i64, i64)) -> bool {
    // A window that runs backwards or spans more than a month is no step's life (a damaged or
    // edited journal): only the launch's mark then identifies the group.
    let window = (alive_ms.0 <= alive_ms.1 && alive_ms.1 - alive_ms.0 <= MAX_STEP_LIFE_MS).then_some(alive_ms);
    if group_alive(pgid) && (group_carries_mark(pgid, log_path) || window.is_some_and(|w| started_within(pgid, w))) {
        return signal_group(pgid, libc::SIGKILL);
    }
    false
}

/// The longest a step's life may span for a stale group to be known by its start time: 30 days.
const MAX_STEP_LIFE_MS: i64 = 30 * 24 * 3600 * 1000;

/// `/proc/PID/stat`'s fields after the command (whose name may hold spaces, parentheses or bytes
/// that are not UTF-8): the state is the first, field 3 of proc(5).
fn stat_fields(pid: &str) -> Option<Vec<String>> {
    fields_after_command(&std::fs::read(format!("/proc/{pid}/stat")).ok()?)
}

/// [`stat_fields`] of one `/proc/PID/stat` line's bytes.
fn fields_after_command(stat: &[u8]) -> Option<Vec<String>> {
    let close = stat.iter().rposition(|b| *b == b')')?;
    Some(String::from_utf8_lossy(&stat[close + 1..]).split_whitespace().map(str::to_string).collect())
}

/// Whether a process of group `pgid` has `SERVER_MARK=log_path` in its environment (`/proc`).
fn group_carries_mark(pgid: i32, log_path: &str) -> bool {
    let mark = format!("{SERVER_MARK}={log_path}");
    let Ok(dir) = std::fs::read_dir("/proc") else { return false };
    dir.flatten().filter_map(|d| d.file_name().to_str().filter(|n| n.bytes().all(|b| b.is_ascii_digit())).map(str::to_string)).any(|pid| {
        // The process group is field 5.
        let in_group = stat_fields(&pid).and_then(|f| f.get(2).and_then(|g| g.parse::<i32>().ok())) == Some(pgid);
        in_group && std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|env| env.split(|b| *b == 0).any(|kv| kv == mark.as_bytes()))
    })
}

/// Whether process `pid` started within `alive_ms` (2 s of slack either side for the clock's
/// granularity): its start in clock ticks after boot (field 22) and the boot time (`btime` of
/// `/proc/stat`).
fn started_within(pid: i32, alive_ms: (i64, i64)) -> bool {
    let Some(ticks) = stat_fields(&pid.to_string()).and_then(|f| f.get(19).and_then(|t| t.parse::<i64>().ok())) else { return false };
    let boot = std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("btime ").and_then(|v| v.trim().parse::<i64>().ok())));
    let (Some(boot), Some(hz)) = (boot, clock_ticks_per_second()) else { return false };
    let started_ms = boot.saturating_mul(1000).saturating_add(ticks.saturating_mul(1000) / hz);
    (alive_ms.0.saturating_sub(2000)..=alive_ms.1.saturating_add(2000)).contains(&started_ms)
}

#[expect(unsafe_code, reason = "sysconf(_SC_CLK_TCK) reads one number; it takes and touches no memory")]
fn clock_ticks_per_second() -> Option<i64> {
    // SAFETY: sysconf only returns a value for the constant passed.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (hz > 0).then_some(i64::from(hz as i32))
}

#[expect(unsafe_code, reason = "prctl(PR_SET_PDEATHSIG) runs between fork and exec; it touches no memory")]
fn die_with_parent(cmd: &mut Command) {
    // SAFETY: the closure runs in the forked child before exec and calls only the async-signal-safe
    // prctl(2); the server then gets SIGKILL when the campaign process dies (kill -9 included).
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0);
            Ok(())
        });
    }
}

/// Starts the server; a command that cannot start is a `SpawnFailed` failure.
pub fn spawn(spec: &LaunchSpec) -> Result<Server, Failure> {
    let spawn_failed = |detail: String| Failure {
        kind: FailureKind::SpawnFailed,
        exit: None,
        evidence: vec![detail.clone()],
        corrective: FailureKind::SpawnFailed.corrective().into(),
        summary: detail,
    };
    let log = servetune_io::open_plain_for_write(&spec.log_path, true)
        .map_err(|e| spawn_failed(format!("cannot create the log {}: {e}", spec.log_path.display())))?;
    let log2 = log.try_clone().map_err(|e| spawn_failed(format!("log {}: {e}", spec.log_path.display())))?;
    let mut cmd = Command::new(&spec.argv[0]);
    cmd.args(&spec.argv[1..])
        .envs(&spec.env)
        .env(SERVER_MARK, &spec.log_path)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log2)
        .process_group(0);
    die_with_parent(&mut cmd);
    let child = cmd.spawn().map_err(|e| spawn_failed(format!("cannot start {:?}: {e}", spec.argv[0])))?;
    let pgid = child.id() as i32;
    Ok(Server { child, pgid, port: spec.port, log_path: spec.log_path.clone() })
}

impl Launched for Server {
    fn endpoint(&mut self) -> Option<Endpoint> {
        Some(Endpoint::local(self.port))
    }

    fn handle(&self) -> Handle {
        Handle::ProcessGroup(self.pgid)
    }

    fn logs(&self) -> Vec<PathBuf> {
        vec![self.log_path.clone()]
    }

    fn exited(&mut self) -> Option<ExitInfo> {
        match self.child.try_wait() {
            Ok(Some(st)) => Some(ExitInfo { code: st.code(), signal: st.signal() }),
            _ => None,
        }
    }

    fn failure(&self, exit: Option<ExitInfo>, timed_out: bool) -> Failure {
        classify(exit, timed_out, &log_tail(&self.log_path, TAIL_LINES))
    }

    /// SIGTERM to the group, SIGKILL after `grace`, then checks the port.
    fn teardown(mut self: Box<Self>, grace: Duration) -> Teardown {
        signal_group(self.pgid, libc::SIGTERM);
        let deadline = Instant::now() + grace;
        let mut exit = None;
        while Instant::now() < deadline {
            if exit.is_none() {
                exit = self.exited();
            }
            if exit.is_some() && !group_alive(self.pgid) {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let killed = group_alive(self.pgid);
        if killed {
            signal_group(self.pgid, libc::SIGKILL);
        }
        if exit.is_none() {
            exit = self.child.wait().ok().map(|st| ExitInfo { code: st.code(), signal: st.signal() });
        }
        let free_by = Instant::now() + Duration::from_secs(3);
        let mut port_free = port_is_free(self.port);
        while !port_free && Instant::now() < free_by {
            std::thread::sleep(Duration::from_millis(100));
            port_free = port_is_free(self.port);
        }
        Teardown { killed, exit, port_free, gpu_memory: GPU_MEMORY_NOT_CHECKED.into() }
    }
}

/// What a teardown says of GPU memory: servetune does not hold NVML open between launches.
pub const GPU_MEMORY_NOT_CHECKED: &str = "not checked: servetune reads GPU memory through NVML, which this campaign does not load between launches; check nvidia-smi before the next launch on a GPU box";

/// Waits until `srv` answers /health with 200 and a one-token generation succeeds; returns the
/// model id it serves. `tick` runs every poll (the heartbeat). The ready timeout counts from the
/// moment the server has an endpoint (a Slurm job's queue time is bounded by `queue_timeout`).
pub fn wait_ready(
    srv: &mut dyn Launched,
    spec: &LaunchSpec,
    queue_timeout: Duration,
    cancel: &AtomicBool,
    tick: &mut dyn FnMut(Option<String>),
) -> Result<String, NotReady> {
    let submitted = Instant::now();
    let mut started: Option<Instant> = None;
    loop {
        if cancel.load(Ordering::Relaxed) {
            return Err(NotReady::Interrupted);
        }
        if let Some(exit) = srv.exited() {
            return Err(NotReady::Failed(srv.failure(Some(exit), false)));
        }
        let ep = srv.endpoint();
        if ep.is_some() && started.is_none() {
            started = Some(Instant::now());
        }
        let timed_out = match started {
            Some(at) => at.elapsed() > spec.ready_timeout,
            None => submitted.elapsed() > queue_timeout,
        };
        if timed_out {
            let mut f = srv.failure(None, true);
            if started.is_none() {
                let why =
                    format!("still queued after {:?} ({})", queue_timeout, srv.waiting_for().unwrap_or_else(|| "no reason given".into()));
                f.evidence.insert(0, why.clone());
                f.summary = why;
            }
            return Err(NotReady::Failed(f));
        }
        tick(srv.waiting_for());
        if let Some(ep) = ep {
            // Every request of the check ends by the ready deadline: the wait is the one the
            // template's ready_timeout_s (or --ready-timeout) names, never a fixed one past it.
            let deadline = started.map_or_else(|| Instant::now() + spec.ready_timeout, |at| at + spec.ready_timeout);
            if let Some(ready) = probe_ready(srv, &ep, spec, deadline) {
                return ready;
            }
        }
        std::thread::sleep(POLL);
    }
}

/// One readiness check: `None` while not ready yet. Each request waits at most its own cap (2 s for
/// the health and model lists, 30 s for the one-token generation) and never past `deadline`.
fn probe_ready(srv: &mut dyn Launched, ep: &Endpoint, spec: &LaunchSpec, deadline: Instant) -> Option<Result<String, NotReady>> {
    let left = |cap: Duration| deadline.saturating_duration_since(Instant::now()).min(cap).max(Duration::from_millis(10));
    if !matches!(http::get(ep, &spec.health, left(Duration::from_secs(2))), Ok(r) if r.status == 200) {
        return None;
    }
    let model = served_model(ep, left(Duration::from_secs(2)));
    match one_token(ep, &spec.generate, model.as_deref(), left(Duration::from_secs(30))) {
        Ok(OneToken::Ok) => Some(Ok(model.unwrap_or_default())),
        Ok(OneToken::Invalid(why)) => {
            let ended = srv.exited();
            let mut f = srv.failure(ended, false);
            f.kind = FailureKind::InvalidOutput;
            f.corrective = FailureKind::InvalidOutput.corrective().into();
            f.evidence.insert(0, why.clone());
            f.summary = why;
            Some(Err(NotReady::Failed(f)))
        }
        Err(_) => None,
    }
}

/// The model id the server lists at /v1/models, if it answers.
fn served_model(ep: &Endpoint, t: Duration) -> Option<String> {
    let r = http::get(ep, "/v1/models", t).ok().filter(|r| r.status == 200)?;
    let v: serde_json::Value = serde_json::from_str(&r.body).ok()?;
    v.get("data")?.get(0)?.get("id")?.as_str().map(str::to_string)
}

enum OneToken {
    Ok,
    Invalid(String),
}

/// One completion of one token: 200 with a text choice is ready; 200 without one is invalid output.
fn one_token(ep: &Endpoint, path: &str, model: Option<&str>, t: Duration) -> Result<OneToken, String> {
    let body = serde_json::json!({"model": model.unwrap_or("default"), "prompt": "Hello", "max_tokens": 1, "temperature": 0.0});
    let r = http::post_json(ep, path, &body.to_string(), t).map_err(|e| e.to_string())?;
    if r.status != 200 {
        return Err(format!("HTTP {}", r.status));
    }
    let v: serde_json::Value = match serde_json::from_str(&r.body) {
        Ok(v) => v,
        Err(e) => return Ok(OneToken::Invalid(format!("the one-token generation answered 200 with a body that is not JSON ({e})"))),
    };
    let text = v.get("choices").and_then(|c| c.get(0)).and_then(|c| c.get("text").or_else(|| c.get("message")));
    match text {
        Some(_) if r.body.contains("NaN") => Ok(OneToken::Invalid("the one-token generation returned NaN".into())),
        Some(_) => Ok(OneToken::Ok),
        None => Ok(OneToken::Invalid(format!("the one-token generation answered 200 without choices[0].text: {}", truncate(&r.body, 200)))),
    }
}

fn truncate(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}

/// How much of a server log's end [`log_tail`] reads, and the longest line it keeps.
const LOG_TAIL_BYTES: u64 = 8 << 20;
const LOG_LINE_BYTES: usize = 8 << 10;

/// The last `n` lines of the file at `path` (empty when it cannot be read), read byte-safe: only
/// the file's last 8 MiB, each line decoded on its own (an invalid UTF-8 byte becomes U+FFFD and
/// hides nothing after it) and cut at 8 KiB (a 2 GB line costs 8 MiB, not 2 GB).
pub fn log_tail(path: &Path, n: usize) -> Vec<String> {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut f) = File::open(path) else { return Vec::new() };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let start = len.saturating_sub(LOG_TAIL_BYTES);
    if f.seek(SeekFrom::Start(start)).is_err() {
        return Vec::new();
    }
    let mut buf = Vec::new();
    if f.take(LOG_TAIL_BYTES).read_to_end(&mut buf).is_err() {
        return Vec::new();
    }
    let mut parts: Vec<&[u8]> = buf.split(|b| *b == b'\n').collect();
    if start > 0 && parts.len() > 1 {
        parts.remove(0); // the first piece starts mid-line
    }
    if parts.last().is_some_and(|l| l.is_empty()) {
        parts.pop();
    }
    let from = parts.len().saturating_sub(n);
    parts[from..]
        .iter()
        .map(|l| {
            let l = l.strip_suffix(b"\r").unwrap_or(l);
            String::from_utf8_lossy(&l[..l.len().min(LOG_LINE_BYTES)]).into_owned()
        })
        .collect()
}

/// The engine's version: from the running server or a command; `None` when it does not say.
pub fn version(q: &VersionQuery, ep: &Endpoint, fill: &dyn Fn(&str) -> String) -> Option<String> {
    match q {
        VersionQuery::Http { path, field } => {
            let r = http::get(ep, path, Duration::from_secs(5)).ok().filter(|r| r.status == 200)?;
            let v: serde_json::Value = serde_json::from_str(&r.body).ok()?;
            v.get(field).map(|x| x.as_str().map_or_else(|| x.to_string(), str::to_string))
        }
        VersionQuery::Command(argv) => {
            let argv: Vec<String> = argv.iter().map(|a| fill(a)).collect();
            let out = run_bounded(&argv, Duration::from_secs(20))?;
            out.lines().map(str::trim).find(|l| !l.is_empty()).map(str::to_string)
        }
    }
}

/// Runs `argv` to completion within `limit`, returning stdout then stderr.
fn run_bounded(argv: &[String], limit: Duration) -> Option<String> {
    let mut child =
        Command::new(argv.first()?).args(&argv[1..]).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().ok()?;
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if start.elapsed() < limit => std::thread::sleep(Duration::from_millis(50)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
    let out = child.wait_with_output().ok()?;
    let mut s = String::from_utf8_lossy(&out.stdout).into_owned();
    s += &String::from_utf8_lossy(&out.stderr);
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_process_group_is_read_past_a_command_with_spaces_and_parentheses() {
        // The process group is field 5, the third after the command; the start time field 22.
        let mut line = b"4242 (python3 (x) \xff y) S 1 4240 4240 0 -1".to_vec();
        line.extend((9..=22).flat_map(|f| format!(" {f}").into_bytes()));
        let f = fields_after_command(&line).expect("fields");
        assert_eq!((f[2].as_str(), f[19].as_str()), ("4240", "22"));
        assert_eq!(fields_after_command(b"garbage"), None);
    }

    /// A stale journal's group is killed only when it is the server this campaign launched for
    /// that step (its mark in the environment); any other group of that number is left alone.
    #[test]
    fn a_stale_group_is_killed_only_when_it_carries_the_launchs_mark() {
        let dir = tempfile::tempdir().expect("tmp");
        let log = dir.path().join("exp-1-a1.log");
        let spec = LaunchSpec {
            argv: vec!["sleep".into(), "60".into()],
            env: BTreeMap::new(),
            log_path: log.clone(),
            port: 1,
            health: "/health".into(),
            generate: "/v1/completions".into(),
            ready_timeout: Duration::from_secs(1),
        };
        let mut ours = spawn(&spec).expect("spawns");
        let mut other = Command::new("sleep").arg("60").process_group(0).spawn().expect("spawns");
        let other_group = other.id() as i32;
        // Another group, and ours under another launch's log: neither is touched.
        // A window that ended before both started: only the mark can tell.
        let before = (0, 1);
        assert!(!kill_stale_group(other_group, &log.display().to_string(), before));
        assert!(!kill_stale_group(ours.pgid, "/elsewhere/exp-1-a1.log", before));
        assert!(group_alive(other_group) && group_alive(ours.pgid));
        // A launcher that wiped the environment: the leader started while the step was alive.
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_millis() as i64;
        assert!(started_within(other_group, (now - 60_000, now)));
        assert!(!started_within(other_group, (now + 600_000, now + 700_000)));
        // A window that spans years (an edited journal) identifies nothing: the group is left.
        assert!(!kill_stale_group(other_group, "/elsewhere/exp-1-a1.log", (0, now + 600_000)));
        assert!(group_alive(other_group));
        assert!(kill_stale_group(ours.pgid, &log.display().to_string(), before));
        let st = ours.child.wait().expect("reaped");
        assert_eq!(st.signal(), Some(libc::SIGKILL));
        let _ = other.kill();
        let _ = other.wait();
    }

    #[test]
    fn a_launch_port_is_one_whose_rendezvous_neighbour_is_free_else_the_last_tried() {
        // Candidates 40000 and 41000 have their next port taken; 42000's is free.
        let taken = [40001u16, 41001];
        let mut offered = [40000u16, 41000, 42000].into_iter();
        let p = pick_port(|| Ok(offered.next().expect("a candidate")), |q| !taken.contains(&q)).expect("picks");
        assert_eq!(p, 42000);
        // Every neighbour taken: the 16th candidate, whose launch then gets the port retry.
        let mut n = 50000u16;
        let p = pick_port(
            || {
                n += 2;
                Ok(n)
            },
            |_| false,
        )
        .expect("picks");
        assert_eq!(p, 50032);
        // The last port has no neighbour to pair with.
        let mut offered = [u16::MAX, 43000].into_iter();
        assert_eq!(pick_port(|| Ok(offered.next().expect("a candidate")), |_| true).expect("picks"), 43000);
        // A bind that fails is the caller's error.
        assert!(pick_port(|| Err(std::io::Error::other("no ports")), |_| true).is_err());
        // The real one: a port and its neighbour both bindable when it was picked.
        let p = free_port().expect("a free port");
        assert!(p > 0 && p < u16::MAX);
    }

    #[test]
    fn an_invalid_utf8_byte_in_a_server_log_hides_no_later_line() {
        let d = tempfile::tempdir().expect("tmp");
        let p = d.path().join("server.log");
        std::fs::write(&p, b"loading\n\xff\xfe garbage\ntorch.OutOfMemoryError: CUDA out of memory\n").expect("write");
        let t = log_tail(&p, 10);
        assert_eq!(t.len(), 3, "{t:?}");
        assert!(t[1].contains('\u{fffd}') && t[2].contains("CUDA out of memory"), "{t:?}");
    }

    #[test]
    fn a_huge_log_line_is_cut_and_the_last_lines_kept() {
        let d = tempfile::tempdir().expect("tmp");
        let p = d.path().join("server.log");
        // 20 MiB of lines, then a 1 MiB line and two short ones: only the file's end is read.
        let mut body = b"y\n".repeat(10 << 20);
        body.extend(vec![b'x'; 1 << 20]);
        body.extend_from_slice(b"\nfirst\nlast\n");
        std::fs::write(&p, body).expect("write");
        let t = log_tail(&p, 3);
        assert_eq!(t[1..], ["first".to_string(), "last".to_string()], "{:?}", t.iter().map(String::len).collect::<Vec<_>>());
        assert_eq!(t[0].len(), LOG_LINE_BYTES, "the 1 MiB line is cut");
    }
}
