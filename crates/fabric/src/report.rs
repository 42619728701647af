//! The `servetune.fabric/1.1` document: measurements, p2pBandwidthLatencyTest-style matrices, fits,
//! and the `link` a performance model takes (`servetune plan --fabric FILE`); and its renderings.
//!
//! 1.1 (from 1): every pair, point, transport, setting and fit is a named object instead of a bare
//! array (`residuals`, `host.fits`, `host.gpu_transfers`, `transports`, `env`, `series.points`,
//! `verify`, `peer_access`).

use std::io::{self, Write};

use serde::{Deserialize, Serialize};

use crate::fit::{self, AlphaBeta, Sample};
use crate::host::HostPair;
use crate::measure::{allreduce_rows, AllReduceRow, P2pResult, Series};
use crate::{AllReduceRun, CopyMode, EnvSetting, HostTransfers, TransportCount};

pub use crate::Link;

/// The `schema` of every fabric document.
pub const SCHEMA: &str = "servetune.fabric/1.1";

/// The alpha-beta fit of one GPU pair in one mode.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairFit {
    /// Source GPU.
    pub src: usize,
    /// Destination GPU.
    pub dst: usize,
    /// Peer access enabled or host-staged.
    pub mode: CopyMode,
    /// The fit.
    pub fit: AlphaBeta,
}

/// A GPU-by-GPU matrix as p2pBandwidthLatencyTest prints it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Matrix {
    /// p2pBandwidthLatencyTest's title, with the size it was read at.
    pub title: String,
    /// `GB/s` or `us`.
    pub unit: String,
    /// `values[i][j]`: from the i-th to the j-th swept GPU; `null` where not measured.
    pub values: Vec<Vec<Option<f64>>>,
}

/// One all-reduce sweep (one environment setting).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AllReduceReport {
    /// Number of ranks.
    pub ranks: usize,
    /// The settings of this sweep (empty: NCCL's defaults).
    pub env: Vec<EnvSetting>,
    /// One row per size, with nccl-tests' algbw and busbw.
    pub rows: Vec<AllReduceRow>,
    /// The transports NCCL reported.
    pub transports: Vec<TransportCount>,
    /// time = alpha + bytes / beta over the sweep; `None` with fewer than two sizes.
    pub fit: Option<AlphaBeta>,
    /// busbw at the largest size (what nccl-tests users compare), GB/s.
    pub busbw_large_gbs: f64,
}

/// The alpha-beta fit of one NUMA-node pair's host copies.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostFit {
    /// Node holding the source memory.
    pub src_node: usize,
    /// Node whose CPU runs the copy.
    pub dst_node: usize,
    /// The fit, over sizes of 16 MiB and up when there are two such sizes; `None` when no line fits.
    pub fit: Option<AlphaBeta>,
}

/// One GPU's host transfers.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct GpuTransfers {
    /// The GPU.
    pub gpu: usize,
    /// Its host-to-device and device-to-host bandwidth.
    pub bandwidth: HostTransfers,
}

/// `servetune fabric host`'s measurements.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostReport {
    /// Host memory copies per NUMA-node pair.
    pub pairs: Vec<HostPair>,
    /// One fit per pair, in the order of `pairs`.
    pub fits: Vec<HostFit>,
    /// Per GPU, when a driver was found.
    pub gpu_transfers: Vec<GpuTransfers>,
}

/// Which measurement a document holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// `servetune fabric p2p`.
    P2p,
    /// `servetune fabric allreduce`.
    Allreduce,
    /// `servetune fabric host`.
    Host,
}

impl Kind {
    /// The subcommand's name.
    pub fn name(self) -> &'static str {
        match self {
            Kind::P2p => "p2p",
            Kind::Allreduce => "allreduce",
            Kind::Host => "host",
        }
    }
}

/// `servetune fabric ... --json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FabricReport {
    /// Always [`SCHEMA`].
    pub schema: String,
    /// Which measurement.
    pub kind: Kind,
    /// `cuda`, `nccl`, `sim` or `host`; `nccl (slurm)` or `sim (slurm)` for an all-reduce over
    /// Slurm nodes.
    pub backend: String,
    /// The raw P2P sweep (`kind` p2p).
    pub p2p: Option<P2pResult>,
    /// p2pBandwidthLatencyTest's matrices (`kind` p2p).
    pub matrices: Vec<Matrix>,
    /// One fit per pair and mode (`kind` p2p).
    pub pair_fits: Vec<PairFit>,
    /// One sweep per setting (`kind` allreduce).
    pub allreduce: Vec<AllReduceReport>,
    /// Host copies (`kind` host).
    pub host: Option<HostReport>,
    /// What `servetune plan --fabric` uses; absent without a GPU pair.
    pub link: Option<Link>,
    /// What the reader should know.
    pub notes: Vec<String>,
}

impl FabricReport {
    fn empty(kind: Kind, backend: &str) -> Self {
        FabricReport {
            schema: SCHEMA.into(),
            kind,
            backend: backend.into(),
            p2p: None,
            matrices: Vec::new(),
            pair_fits: Vec::new(),
            allreduce: Vec::new(),
            host: None,
            link: None,
            notes: Vec::new(),
        }
    }
}

/// Builds the report of a P2P sweep.
pub fn p2p_report(r: P2pResult) -> FabricReport {
    let mut matrices = bandwidth_matrices(&r);
    matrices.extend(latency_matrices(&r));
    let pair_fits: Vec<PairFit> = r
        .series
        .iter()
        .filter(|s| !s.bidir && s.src != s.dst)
        .filter_map(|s| fit::fit(&s.points).map(|f| PairFit { src: s.src, dst: s.dst, mode: s.mode, fit: f }))
        .collect();
    let link = model_link(&r, &pair_fits);
    let mut notes = r.notes.clone();
    if link.is_none() {
        notes.push("no GPU pair measured: no link profile for servetune plan --fabric".into());
    }
    FabricReport { matrices, pair_fits, link, notes, p2p: Some(r.clone()), ..FabricReport::empty(Kind::P2p, &r.backend) }
}

/// Where GPU `g` sits in the swept GPUs (the matrices' row and column).
fn slot(r: &P2pResult, g: usize) -> Option<usize> {
    r.gpus.iter().position(|x| *x == g)
}

/// Bandwidth at the largest size: unidirectional and bidirectional, each host-staged and P2P.
fn bandwidth_matrices(r: &P2pResult) -> Vec<Matrix> {
    let k = r.gpus.len();
    let large = *r.sizes.last().unwrap_or(&0);
    let mut out = Vec::new();
    for (bidir, title) in [(false, "Unidirectional"), (true, "Bidirectional")] {
        for mode in [CopyMode::HostStaged, CopyMode::P2p] {
            let mut m = vec![vec![None; k]; k];
            let wanted = |s: &&Series| s.mode == mode && s.bidir == bidir || (s.src == s.dst && !s.bidir);
            for s in r.series.iter().filter(wanted) {
                if let (Some(i), Some(j), Some(p)) = (slot(r, s.src), slot(r, s.dst), s.points.last()) {
                    if p.bytes == large && p.seconds > 0.0 {
                        let directions = if bidir && s.src != s.dst { 2.0 } else { 1.0 };
                        m[i][j] = Some(p.bytes as f64 * directions / p.seconds / 1e9);
                    }
                }
            }
            out.push(Matrix {
                title: format!("{title} {} Bandwidth Matrix ({})", mode.name(), size_label(large)),
                unit: "GB/s".into(),
                values: m,
            });
        }
    }
    out
}

/// Latency at the smallest size, host-staged and P2P.
fn latency_matrices(r: &P2pResult) -> Vec<Matrix> {
    let k = r.gpus.len();
    let small = *r.sizes.first().unwrap_or(&0);
    [CopyMode::HostStaged, CopyMode::P2p]
        .into_iter()
        .map(|mode| {
            let mut m = vec![vec![None; k]; k];
            for s in r.series.iter().filter(|s| !s.bidir && (s.mode == mode || s.src == s.dst)) {
                if let (Some(i), Some(j), Some(p)) = (slot(r, s.src), slot(r, s.dst), s.points.first()) {
                    if p.bytes == small {
                        m[i][j] = Some(p.seconds * 1e6);
                    }
                }
            }
            Matrix { title: format!("{} Latency Matrix ({})", mode.name(), size_label(small)), unit: "us".into(), values: m }
        })
        .collect()
}

/// The model's link: P2P where every pair can enable it and none failed verification, else
/// host-staged; the median alpha and beta over the pairs in that mode.
fn model_link(r: &P2pResult, pair_fits: &[PairFit]) -> Option<Link> {
    let k = r.gpus.len();
    let verified_bad = r.verify.iter().any(|v| !v.delivered);
    let p2p_everywhere = k > 1 && r.peer_access.len() == k * (k - 1) && !verified_bad;
    let mode = if p2p_everywhere { CopyMode::P2p } else { CopyMode::HostStaged };
    let chosen: Vec<&AlphaBeta> = pair_fits.iter().filter(|p| p.mode == mode).map(|p| &p.fit).collect();
    let alpha = servetune_stats::median(&chosen.iter().map(|f| f.alpha_us).collect::<Vec<_>>())?;
    let beta = servetune_stats::median(&chosen.iter().map(|f| f.beta_gbs).collect::<Vec<_>>())?;
    Some(Link {
        name: format!("measured-{}", if mode == CopyMode::P2p { "p2p" } else { "host-staged" }),
        alpha_us: alpha,
        beta_gbs: beta,
        mode,
        source: format!("servetune fabric p2p ({} backend): median alpha/beta over {} GPU pairs, {}", r.backend, chosen.len(), mode.name()),
    })
}

/// Builds the report of all-reduce runs.
pub fn allreduce_report(backend: &str, runs: &[AllReduceRun]) -> FabricReport {
    let allreduce = runs
        .iter()
        .map(|r| {
            let rows = allreduce_rows(r);
            let fit = fit::fit(&r.points.iter().map(|p| Sample { bytes: p.bytes, seconds: p.time_us * 1e-6 }).collect::<Vec<_>>());
            AllReduceReport {
                ranks: r.ranks,
                env: r.env.clone(),
                busbw_large_gbs: rows.last().map_or(0.0, |x| x.busbw_gbs),
                rows,
                transports: r.transports.clone(),
                fit,
            }
        })
        .collect();
    FabricReport { allreduce, ..FabricReport::empty(Kind::Allreduce, backend) }
}

/// Builds the report of host copies.
pub fn host_report(pairs: Vec<HostPair>, gpu_transfers: Vec<GpuTransfers>, notes: Vec<String>) -> FabricReport {
    // Fit beyond the caches (16 MiB and up) when there are two such sizes: smaller copies run from
    // L1-L3 and would make one line through both regimes meaningless.
    let fits = pairs
        .iter()
        .map(|p| {
            let sample = |x: &crate::host::HostPoint| Sample { bytes: x.bytes, seconds: x.time_us * 1e-6 };
            let big: Vec<Sample> = p.points.iter().filter(|x| x.bytes >= 16 << 20).map(sample).collect();
            let pts = if big.len() >= 2 { big } else { p.points.iter().map(sample).collect() };
            HostFit { src_node: p.src_node, dst_node: p.dst_node, fit: fit::fit(&pts) }
        })
        .collect();
    FabricReport { host: Some(HostReport { pairs, fits, gpu_transfers }), notes, ..FabricReport::empty(Kind::Host, "host") }
}

/// `4 B`, `64 KiB`, `256 MiB`, `1 GiB`: the largest binary unit that divides `b`.
pub fn size_label(b: u64) -> String {
    match b {
        b if b >= 1 << 30 && b % (1 << 30) == 0 => format!("{} GiB", b >> 30),
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} B"),
    }
}

/// Columns separated by two spaces, a dashed line under the header, no borders.
const TABLE_STYLE: comfy_table::TableStyle = comfy_table::TableStyle::new()
    .header_lines(comfy_table::ContentLineStyle::none().junction(' '))
    .header_separator(comfy_table::LineStyle::none().fill('-').junction(' '))
    .content_lines(comfy_table::ContentLineStyle::none().junction(' '));

/// A table: the first column left-aligned, the others (numbers) right-aligned.
fn table(w: &mut impl Write, headers: &[&str], rows: Vec<Vec<String>>) -> io::Result<()> {
    let mut t = comfy_table::Table::new();
    t.load_style(TABLE_STYLE).set_header(headers.to_vec()).add_rows(rows);
    for (i, c) in t.column_iter_mut().enumerate() {
        c.set_padding((0, 1));
        c.set_cell_alignment(if i == 0 { comfy_table::CellAlignment::Left } else { comfy_table::CellAlignment::Right });
    }
    for line in t.lines() {
        writeln!(w, "{}", line.trim_end())?;
    }
    Ok(())
}

/// The terminal report.
pub fn write_terminal(r: &FabricReport, mut w: impl Write) -> io::Result<()> {
    writeln!(w, "servetune fabric {} ({} backend)", r.kind.name(), r.backend)?;
    if let Some(p) = &r.p2p {
        for d in p.gpus.iter().filter_map(|g| p.devices.get(*g)) {
            writeln!(w, "  GPU{} {}", d.index, d.name)?;
        }
    }
    write_matrices(&mut w, r)?;
    write_pair_fits(&mut w, &r.pair_fits)?;
    if let Some(p) = &r.p2p {
        for v in &p.verify {
            writeln!(w, "verify {} -> {}: {}", v.src, v.dst, if v.delivered { "data delivered" } else { "DATA LOST" })?;
        }
    }
    for a in &r.allreduce {
        write_allreduce(&mut w, a)?;
    }
    if let Some(h) = &r.host {
        write_host(&mut w, h)?;
    }
    if let Some(l) = &r.link {
        writeln!(w, "\nlink for servetune plan --fabric: alpha {:.2} us, beta {:.2} GB/s ({})", l.alpha_us, l.beta_gbs, l.source)?;
    }
    for n in &r.notes {
        writeln!(w, "note: {n}")?;
    }
    Ok(())
}

fn write_matrices(w: &mut impl Write, r: &FabricReport) -> io::Result<()> {
    let gpus: Vec<String> = r.p2p.as_ref().map(|p| p.gpus.iter().map(|g| g.to_string()).collect()).unwrap_or_default();
    for m in &r.matrices {
        writeln!(w, "\n{} ({})", m.title, m.unit)?;
        let mut headers = vec!["   D\\D"];
        headers.extend(gpus.iter().map(String::as_str));
        let rows: Vec<Vec<String>> = m
            .values
            .iter()
            .enumerate()
            .map(|(i, row)| {
                let mut v = vec![gpus.get(i).cloned().unwrap_or_default()];
                v.extend(row.iter().map(|x| x.map_or("-".into(), |x| format!("{x:.2}"))));
                v
            })
            .collect();
        table(w, &headers, rows)?;
    }
    Ok(())
}

fn write_pair_fits(w: &mut impl Write, fits: &[PairFit]) -> io::Result<()> {
    if fits.is_empty() {
        return Ok(());
    }
    writeln!(w, "\nalpha-beta fits per pair (time = alpha + bytes / beta):")?;
    let rows: Vec<Vec<String>> = fits
        .iter()
        .map(|p| {
            vec![
                format!("{} -> {}", p.src, p.dst),
                p.mode.name().into(),
                format!("{:.2}", p.fit.alpha_us),
                format!("{:.2}", p.fit.beta_gbs),
                format!("{:.1}%", p.fit.rms_rel * 100.0),
            ]
        })
        .collect();
    table(w, &["pair", "mode", "alpha us", "beta GB/s", "rms resid"], rows)?;
    writeln!(
        w,
        "(alpha: latency of one copy; beta: bandwidth; rms resid: root mean square of the relative distance of the points from the line)"
    )
}

fn write_allreduce(w: &mut impl Write, a: &AllReduceReport) -> io::Result<()> {
    let env = if a.env.is_empty() {
        "defaults".to_string()
    } else {
        a.env.iter().map(|e| format!("{}={}", e.name, e.value)).collect::<Vec<_>>().join(" ")
    };
    writeln!(w, "\nall-reduce, {} ranks, out of place, {env}", a.ranks)?;
    let rows: Vec<Vec<String>> = a
        .rows
        .iter()
        .map(|x| vec![x.bytes.to_string(), format!("{:.2}", x.time_us), format!("{:.2}", x.algbw_gbs), format!("{:.2}", x.busbw_gbs)])
        .collect();
    table(w, &["size (B)", "time (us)", "algbw (GB/s)", "busbw (GB/s)"], rows)?;
    if let Some(f) = &a.fit {
        writeln!(
            w,
            "fit: alpha {:.2} us, beta {:.2} GB/s (rms residual {:.1}%); busbw at the largest size {:.2} GB/s",
            f.alpha_us,
            f.beta_gbs,
            f.rms_rel * 100.0,
            a.busbw_large_gbs
        )?;
    }
    if !a.transports.is_empty() {
        writeln!(w, "transports: {}", a.transports.iter().map(|t| format!("{} x{}", t.transport, t.count)).collect::<Vec<_>>().join(", "))?;
    }
    Ok(())
}

fn write_host(w: &mut impl Write, h: &HostReport) -> io::Result<()> {
    for (p, hf) in h.pairs.iter().zip(&h.fits) {
        writeln!(
            w,
            "\nhost copy: memory on node {} copied by node {}{}",
            p.src_node,
            p.dst_node,
            if p.pinned { "" } else { " (thread not pinned)" }
        )?;
        let rows: Vec<Vec<String>> =
            p.points.iter().map(|x| vec![size_label(x.bytes), format!("{:.3}", x.time_us), format!("{:.2}", x.gbs)]).collect();
        table(w, &["size", "time (us)", "GB/s"], rows)?;
        if let Some(f) = &hf.fit {
            writeln!(
                w,
                "fit (sizes >= 16 MiB, beyond the caches): alpha {:.3} us, beta {:.2} GB/s (rms residual {:.1}%)",
                f.alpha_us,
                f.beta_gbs,
                f.rms_rel * 100.0
            )?;
        }
    }
    for g in &h.gpu_transfers {
        let b = &g.bandwidth;
        writeln!(
            w,
            "GPU{}: pinned H2D {:.1} GB/s, D2H {:.1} GB/s; pageable H2D {:.1} GB/s, D2H {:.1} GB/s",
            g.gpu, b.pinned_h2d_gbs, b.pinned_d2h_gbs, b.pageable_h2d_gbs, b.pageable_d2h_gbs
        )?;
    }
    Ok(())
}

/// Markdown: the terminal text in a fenced block under a heading.
pub fn write_markdown(r: &FabricReport, mut w: impl Write) -> io::Result<()> {
    writeln!(w, "# servetune fabric {}\n\n```", r.kind.name())?;
    write_terminal(r, &mut w)?;
    writeln!(w, "```")
}
