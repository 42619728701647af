//! The `servetune` binary: parse arguments, call a library, map the outcome to an exit code
//! (0 ok, 1 runtime failure, 2 bad usage or input; campaign: 3 needs a person, 4 nothing left).

/// Prints a line to stdout, ignoring a closed pipe: a reader that went away must not kill a
/// server or lose results (println! would panic).
macro_rules! say {
    ($($arg:tt)*) => {{
        $crate::out_line(&format!($($arg)*));
    }};
}
pub(crate) use say;

/// The same for stderr.
macro_rules! tell {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), "{}", servetune_campaign::text::term(&format!($($arg)*)));
    }};
}
pub(crate) use tell;

/// The first error writing to standard output (a full disk, a closed file); `main` turns it into
/// exit 1. A closed pipe (`servetune ... | head`) is not an error.
static STDOUT_ERROR: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// One line to standard output with outside text's control characters escaped (a server's model
/// id or a snapshot's GPU name cannot drive the terminal); a failed write is remembered.
pub(crate) fn out_line(line: &str) {
    use std::io::Write as _;
    if let Err(e) = writeln!(std::io::stdout(), "{}", servetune_campaign::text::term(line)) {
        stdout_failed(&e);
    }
}

/// Records a failed write to standard output (see [`STDOUT_ERROR`]).
pub(crate) fn stdout_failed(e: &std::io::Error) {
    if e.kind() != std::io::ErrorKind::BrokenPipe {
        let _ = STDOUT_ERROR.set(e.to_string());
    }
}

mod bench_cmd;
mod campaign_cmd;
mod completions;
mod demo_cmd;
mod exit;
mod fabric_cmd;
mod plan_cmd;
mod probe_cmd;
mod probe_slurm;
mod progress;
mod sim_cmd;
mod trace_cmd;

use clap::{CommandFactory, Parser, Subcommand};

/// Find out why LLM serving on a multi-GPU machine is slow.
#[derive(Debug, Parser)]
#[command(name = "servetune", version, about, long_about = None, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Run the whole story against a simulated reference deployment
    Demo(demo_cmd::DemoArgs),
    /// Probe this box: virtualization, NUMA, PCIe, GPUs, P2P, driver settings, findings
    Probe(probe_cmd::ProbeArgs),
    /// Measure the GPU interconnect: P2P and host-staged copies, NCCL all-reduce, host memory
    Fabric(fabric_cmd::FabricArgs),
    /// Load-test an OpenAI-compatible or sglang serving endpoint
    Bench(Box<bench_cmd::BenchArgs>),
    /// Predict, explain and rank serving throughput from the performance model
    Plan(Box<plan_cmd::PlanArgs>),
    /// Run a simulated sglang/vLLM-compatible server
    Sim(Box<sim_cmd::SimArgs>),
    /// Split a profiler trace's steps by kernel category, against the model's prediction
    Trace(Box<trace_cmd::TraceArgs>),
    /// Run a tuning campaign: journal, experiments on real servers, next steps, questions
    Campaign(campaign_cmd::CampaignArgs),
    /// Print a shell completion script (bash, zsh, fish)
    Completions(completions::CompletionsArgs),
    /// Print the man page, or write one per subcommand with --dir
    Man(completions::ManArgs),
}

pub use exit::ExitCode;

/// An error with its exit code.
#[derive(Debug)]
pub struct Failure {
    pub code: ExitCode,
    pub msg: String,
}

impl Failure {
    pub fn usage(msg: impl Into<String>) -> Self {
        Self { code: ExitCode::Usage, msg: msg.into() }
    }
    pub fn runtime(msg: impl Into<String>) -> Self {
        Self { code: ExitCode::Failure, msg: msg.into() }
    }
}

/// Whether `a` and `b` name one file: the same device and inode where both exist, else the same
/// absolute path.
pub fn same_file(a: &std::path::Path, b: &std::path::Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        // A device (/dev/null, a terminal) takes any number of writers: never "one file".
        (Ok(x), _) if x.file_type().is_char_device() => false,
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        (Err(_), _) | (_, Err(_)) => match (std::path::absolute(a), std::path::absolute(b)) {
            (Ok(x), Ok(y)) => x == y,
            _ => false,
        },
    }
}

/// Refuses an output that names an input file (writing it would destroy what is read) or the
/// same file as another output (one would overwrite the other), and one that is a folder; `-`
/// (stdout) is no file.
pub fn check_outputs(outputs: &[(&str, Option<&std::path::Path>)], inputs: &[(&str, Option<&std::path::Path>)]) -> Result<(), Failure> {
    let outs: Vec<(&str, &std::path::Path)> =
        outputs.iter().filter_map(|(f, p)| p.filter(|p| p.as_os_str() != "-").map(|p| (*f, p))).collect();
    for (i, (flag, out)) in outs.iter().enumerate() {
        if out.is_dir() {
            return Err(Failure::usage(format!("{flag} {}: is a directory; give a file path to write into", out.display())));
        }
        if let Some((input, _)) = inputs.iter().find(|(_, p)| p.is_some_and(|p| p.as_os_str() != "-" && same_file(out, p))) {
            return Err(Failure::usage(format!(
                "{flag} {}: that is {input}, which writing this output would overwrite; give another file",
                out.display()
            )));
        }
        if let Some((other, _)) = outs[..i].iter().find(|(_, p)| same_file(out, p)) {
            return Err(Failure::usage(format!("{other} and {flag} both name {}: give each output its own file", out.display())));
        }
    }
    Ok(())
}

/// Writes `doc` as pretty JSON to `path`, or to stdout for `-` (so `--json -` is pure JSON).
pub fn write_json(path: &std::path::Path, doc: &impl serde::Serialize) -> Result<(), Failure> {
    use std::io::Write;
    let text = serde_json::to_string_pretty(doc).map_err(|e| Failure::runtime(e.to_string()))?;
    if path.as_os_str() == "-" {
        say!("{text}");
        return Ok(());
    }
    let mut f = std::fs::File::create(path).map_err(|e| Failure::runtime(format!("cannot write {}: {e}", path.display())))?;
    writeln!(f, "{text}").map_err(|e| Failure::runtime(format!("cannot write {}: {e}", path.display())))
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    raise_fd_limit();
    let res = match cli.cmd {
        Cmd::Demo(a) => demo_cmd::run(a),
        Cmd::Bench(a) => bench_cmd::run(*a),
        Cmd::Sim(a) => sim_cmd::run(*a),
        Cmd::Plan(a) => plan_cmd::run(*a),
        Cmd::Probe(a) => probe_cmd::run(a),
        Cmd::Fabric(a) => fabric_cmd::run(a),
        Cmd::Campaign(a) => campaign_cmd::run(a),
        Cmd::Trace(a) => trace_cmd::run(*a),
        Cmd::Completions(a) => completions::completions(a, Cli::command()),
        Cmd::Man(a) => completions::man(a, Cli::command()),
    };
    {
        use std::io::Write as _;
        if let Err(e) = std::io::stdout().flush() {
            stdout_failed(&e);
        }
    }
    if let (Some(e), Ok(())) = (STDOUT_ERROR.get(), &res) {
        tell!("error: cannot write to standard output ({e}): nothing or only part of the output was written; write to a file with room (for a report, --json/--markdown FILE)");
        return ExitCode::Failure.into();
    }
    match res {
        Ok(()) => ExitCode::Ok.into(),
        // Campaign outcomes (a question, nothing left) are not errors.
        Err(f) if f.code.is_outcome() => {
            tell!("{}", f.msg);
            f.code.into()
        }
        Err(f) => {
            tell!("error: {}", f.msg);
            f.code.into()
        }
    }
}

/// The number of files this process may have open (RLIMIT_NOFILE's soft limit; [`raise_fd_limit`]
/// has raised it to the hard one at start). None where it cannot be read or is unlimited.
#[expect(unsafe_code, reason = "getrlimit has no safe std wrapper; the call only writes a local struct")]
pub fn open_file_limit() -> Option<u64> {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: `lim` is a valid, exclusively borrowed rlimit.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0;
    (ok && lim.rlim_cur != libc::RLIM_INFINITY).then_some(lim.rlim_cur)
}

/// High-concurrency runs need one descriptor per connection: lift the soft limit to the hard one.
#[expect(unsafe_code, reason = "setrlimit has no safe std wrapper; the call only reads and writes a local struct")]
fn raise_fd_limit() {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: `lim` is a valid, exclusively borrowed rlimit for both calls.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}
