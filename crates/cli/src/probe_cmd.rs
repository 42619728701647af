//! `servetune probe`: the box, its GPUs and their connections, with findings and fixes.

use std::path::{Path, PathBuf};

use clap::Args;

use crate::Failure;

/// Probe this machine (or a captured snapshot): virtualization, CPU/NUMA, PCIe links and bridges,
/// IOMMU/ACS, GPUs through NVML, topology and P2P matrices, driver settings; then findings with fixes.
/// Runs unprivileged; a machine without an NVIDIA driver is a normal outcome.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  servetune probe\n  servetune probe --json probe.json\n  servetune probe --capture box-snapshot/   # attach to a bug report\n  servetune probe --root box-snapshot/      # analyse a snapshot offline\n  servetune probe --slurm --nodes 4 --partition gpu --json cluster.json   # every node, merged"
)]
pub struct ProbeArgs {
    /// Write the report as JSON ("-" for stdout)
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Also copy every file the probe reads into DIR (with nvml.json), for offline analysis
    #[arg(long, value_name = "DIR", conflicts_with = "root")]
    pub capture: Option<PathBuf>,
    /// Analyse a snapshot tree written by --capture instead of this machine
    #[arg(long, value_name = "DIR")]
    pub root: Option<PathBuf>,
    /// No terminal report
    #[arg(long, short)]
    pub quiet: bool,
    /// Probe every node of a Slurm allocation with srun (one task per node) and merge the reports:
    /// per-node findings and what differs between nodes
    #[arg(long, conflicts_with_all = ["root", "capture"], help_heading = "Slurm")]
    pub slurm: bool,
    /// --slurm: nodes to probe (default: the allocation's inside salloc/sbatch, else the partition's)
    #[arg(long, requires = "slurm", help_heading = "Slurm")]
    pub nodes: Option<u32>,
    /// --slurm: the partition
    #[arg(long, requires = "slurm", help_heading = "Slurm")]
    pub partition: Option<String>,
    /// One node's part of --slurm (started by srun): prints {node, report} as JSON
    #[arg(long, hide = true)]
    pub as_slurm_task: bool,
}

pub fn run(a: ProbeArgs) -> Result<(), Failure> {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    if a.as_slurm_task {
        let node = std::env::var("SLURMD_NODENAME").unwrap_or_else(|_| std::env::var("HOSTNAME").unwrap_or_else(|_| "unknown".into()));
        let nr = servetune_probe::cluster::NodeReport { node, report: servetune_probe::probe_live(now) };
        crate::say!("{}", serde_json::to_string(&nr).map_err(|e| Failure::runtime(e.to_string()))?);
        return Ok(());
    }
    if a.slurm {
        return crate::probe_slurm::run(&a);
    }
    crate::check_outputs(&[("--json", a.json.as_deref())], &[])?;
    // The report inside the snapshot folder could replace one of the files it is read from.
    if let (Some(out), Some(dir)) = (a.json.as_deref().filter(|p| p.as_os_str() != "-"), a.root.as_deref().or(a.capture.as_deref())) {
        if let (Some(o), Some(d)) = (resolve(out), std::fs::canonicalize(dir).ok().or_else(|| std::path::absolute(dir).ok())) {
            if o.starts_with(&d) {
                let link = if std::fs::symlink_metadata(out).is_ok_and(|m| m.file_type().is_symlink()) {
                    format!("it is a link to {}, ", o.display())
                } else {
                    String::new()
                };
                return Err(Failure::usage(format!(
                    "--json {}: {link}that is inside the snapshot folder {}, whose files the report could replace; write it outside",
                    out.display(),
                    dir.display()
                )));
            }
        }
        // A hard link is another name of a snapshot file: the same inode.
        if let Some(inside) = same_file_in(out, dir) {
            return Err(Failure::usage(format!(
                "--json {}: it is another name (a hard link) of the snapshot's {}, which the report would replace; write it elsewhere",
                out.display(),
                inside.display()
            )));
        }
    }
    let report = match (&a.root, &a.capture) {
        (Some(dir), _) => servetune_probe::probe_root(dir, now).map_err(Failure::usage)?,
        (None, Some(dir)) => {
            let (r, n) = servetune_probe::capture(dir, now).map_err(Failure::usage)?;
            crate::tell!("captured {n} files into {} (analyse with servetune probe --root {})", dir.display(), dir.display());
            r
        }
        (None, None) => servetune_probe::probe_live(now),
    };
    let terminal = !a.quiet && a.json.as_ref().is_none_or(|j| j.as_os_str() != "-");
    if terminal {
        let out = std::io::stdout().lock();
        crate::plan_cmd::written(servetune_probe::render::write_terminal(&report, out), "stdout")?;
    } else {
        // The terminal report opens with the warnings; without it they go to stderr (escaped:
        // a warning may quote a snapshot's file names).
        for w in &report.warnings {
            crate::tell!("warning: {}", servetune_probe::render::printable(w));
        }
    }
    match &a.json {
        Some(p) => crate::plan_cmd::write_file(p, &|w| {
            serde_json::to_writer_pretty(&mut *w, &report).map_err(std::io::Error::other).and_then(|_| writeln!(w))
        }),
        None => Ok(()),
    }
}

/// Where writing `p` lands: resolved through the file system where it exists, a link at `p`
/// itself included (`snap/../out.json` is beside the snapshot, not in it; `out.json` linking to
/// `snap/nvml.json` is in it); a link that does not resolve is followed as `File::create` would;
/// else the path as written.
fn resolve(p: &Path) -> Option<PathBuf> {
    let mut p = p.to_path_buf();
    // Linux's own limit on links followed.
    for _ in 0..40 {
        if let Ok(full) = std::fs::canonicalize(&p) {
            return Some(full);
        }
        let parent = p.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new(".")).to_path_buf();
        match std::fs::read_link(&p) {
            // A dangling link: File::create makes its target.
            Ok(target) => p = parent.join(target),
            Err(_) => {
                return match (std::fs::canonicalize(&parent), p.file_name()) {
                    (Ok(d), Some(name)) => Some(d.join(name)),
                    _ => std::path::absolute(&p).ok(),
                }
            }
        }
    }
    std::path::absolute(&p).ok()
}

/// The file under `dir` (not following links, at most [`MAX_WALK`] entries) that is the same file
/// as `out` (device and inode), when `out` is a regular file with more than one name.
fn same_file_in(out: &Path, dir: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(out).ok().filter(|m| m.is_file() && m.nlink() > 1)?;
    let mut todo = vec![dir.to_path_buf()];
    let mut seen = 0usize;
    while let Some(d) = todo.pop() {
        // A folder that does not list (search but no read permission) is passed over: the
        // others are still looked at.
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for e in entries.flatten() {
            seen += 1;
            if seen > MAX_WALK {
                return None;
            }
            let Ok(em) = std::fs::symlink_metadata(e.path()) else { continue };
            if em.is_dir() {
                todo.push(e.path());
            } else if em.is_file() && em.dev() == m.dev() && em.ino() == m.ino() {
                return Some(e.path());
            }
        }
    }
    None
}

/// The most snapshot entries looked at for a hard link of `--json` (a capture holds a few
/// thousand).
const MAX_WALK: usize = 200_000;
