//! The `servetune.fabric/1` document: measurements, p2pBandwidthLatencyTest-style matrices, fits,
//! and the `link` a performance model takes (`servetune plan --fabric FILE`); and its renderings.

use std::io::{self, Write};

use serde::{Deserialize, Serialize};

use crate::fit::{self, AlphaBeta};
use crate::host::HostPair;
use crate::measure::{allreduce_rows, AllReduceRow, P2pResult};
use crate::{AllReduceRun, CopyMode};

pub const SCHEMA: &str = "servetune.fabric/1";

/// The link a model should use: alpha/beta of one hop between two GPUs of a TP group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Link {
    pub name: String,
    pub alpha_us: f64,
    pub beta_gbs: f64,
    pub mode: CopyMode,
    pub source: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairFit {
    pub src: usize,
    pub dst: usize,
    pub mode: CopyMode,
    pub fit: AlphaBeta,
}

/// Named matrices: (title, unit, rows).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Matrix {
    pub title: String,
    pub unit: String,
    pub values: Vec<Vec<Option<f64>>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AllReduceReport {
    pub ranks: usize,
    pub env: Vec<(String, String)>,
    pub rows: Vec<AllReduceRow>,
    pub transports: Vec<(String, usize)>,
    pub fit: Option<AlphaBeta>,
    /// busbw at the largest size (what nccl-tests users compare).
    pub busbw_large_gbs: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostReport {
    pub pairs: Vec<HostPair>,
    pub fits: Vec<(usize, usize, Option<AlphaBeta>)>,
    /// (GPU, pinned h2d, pinned d2h, pageable h2d, pageable d2h) GB/s.
    pub gpu_transfers: Vec<(usize, f64, f64, f64, f64)>,
}

/// `servetune fabric ... --json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FabricReport {
    pub schema: String,
    pub kind: String,
    pub backend: String,
    pub p2p: Option<P2pResult>,
    pub matrices: Vec<Matrix>,
    pub pair_fits: Vec<PairFit>,
    pub allreduce: Vec<AllReduceReport>,
    pub host: Option<HostReport>,
    /// What `servetune plan --fabric` uses; absent without a GPU pair.
    pub link: Option<Link>,
    pub notes: Vec<String>,
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some(v[v.len() / 2])
}

/// Builds the report of a P2P sweep.
pub fn p2p_report(r: P2pResult) -> FabricReport {
    let idx = |g: usize| r.gpus.iter().position(|x| *x == g);
    let k = r.gpus.len();
    let mut matrices = Vec::new();
    let large = *r.sizes.last().unwrap_or(&0);
    let small = *r.sizes.first().unwrap_or(&0);
    for (bidir, title) in [(false, "Unidirectional"), (true, "Bidirectional")] {
        for mode in [CopyMode::HostStaged, CopyMode::P2p] {
            let mut m = vec![vec![None; k]; k];
            for s in r.series.iter().filter(|s| s.mode == mode && s.bidir == bidir || (s.src == s.dst && !s.bidir)) {
                if let (Some(i), Some(j), Some(&(b, t))) = (idx(s.src), idx(s.dst), s.points.last()) {
                    if b == large && t > 0.0 {
                        m[i][j] = Some(b as f64 * if bidir && s.src != s.dst { 2.0 } else { 1.0 } / t / 1e9);
                    }
                }
            }
            matrices.push(Matrix {
                title: format!("{title} {} Bandwidth Matrix ({})", mode.name(), size_label(large)),
                unit: "GB/s".into(),
                values: m,
            });
        }
    }
    for mode in [CopyMode::HostStaged, CopyMode::P2p] {
        let mut m = vec![vec![None; k]; k];
        for s in r.series.iter().filter(|s| !s.bidir && (s.mode == mode || s.src == s.dst)) {
            if let (Some(i), Some(j), Some(&(b, t))) = (idx(s.src), idx(s.dst), s.points.first()) {
                if b == small {
                    m[i][j] = Some(t * 1e6);
                }
            }
        }
        matrices.push(Matrix { title: format!("{} Latency Matrix ({})", mode.name(), size_label(small)), unit: "us".into(), values: m });
    }
    let pair_fits: Vec<PairFit> = r
        .series
        .iter()
        .filter(|s| !s.bidir && s.src != s.dst)
        .filter_map(|s| fit::fit(&s.points).map(|f| PairFit { src: s.src, dst: s.dst, mode: s.mode, fit: f }))
        .collect();
    // The model's link: P2P where every pair can enable it and none failed verification; else host-staged.
    let verified_bad = r.verify.iter().any(|v| !v.2);
    let p2p_everywhere = k > 1 && r.peer_access.len() == k * (k - 1) && !verified_bad;
    let mode = if p2p_everywhere { CopyMode::P2p } else { CopyMode::HostStaged };
    let chosen: Vec<&PairFit> = pair_fits.iter().filter(|p| p.mode == mode).collect();
    let link = match (median(chosen.iter().map(|p| p.fit.alpha_us).collect()), median(chosen.iter().map(|p| p.fit.beta_gbs).collect())) {
        (Some(a), Some(b)) => Some(Link {
            name: format!("measured-{}", if mode == CopyMode::P2p { "p2p" } else { "host-staged" }),
            alpha_us: a,
            beta_gbs: b,
            mode,
            source: format!(
                "servetune fabric p2p ({} backend): median alpha/beta over {} GPU pairs, {}",
                r.backend,
                chosen.len(),
                mode.name()
            ),
        }),
        _ => None,
    };
    let mut notes = r.notes.clone();
    if link.is_none() {
        notes.push("no GPU pair measured: no link profile for servetune plan --fabric".into());
    }
    FabricReport {
        schema: SCHEMA.into(),
        kind: "p2p".into(),
        backend: r.backend.clone(),
        matrices,
        pair_fits,
        link,
        notes,
        p2p: Some(r),
        allreduce: Vec::new(),
        host: None,
    }
}

/// Builds the report of all-reduce runs.
pub fn allreduce_report(backend: &str, runs: &[AllReduceRun]) -> FabricReport {
    let allreduce = runs
        .iter()
        .map(|r| {
            let rows = allreduce_rows(r);
            let fit = fit::fit(&r.points.iter().map(|p| (p.bytes, p.time_us * 1e-6)).collect::<Vec<_>>());
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
    FabricReport {
        schema: SCHEMA.into(),
        kind: "allreduce".into(),
        backend: backend.into(),
        p2p: None,
        matrices: Vec::new(),
        pair_fits: Vec::new(),
        allreduce,
        host: None,
        link: None,
        notes: Vec::new(),
    }
}

/// Builds the report of host copies.
pub fn host_report(pairs: Vec<HostPair>, gpu_transfers: Vec<(usize, f64, f64, f64, f64)>, notes: Vec<String>) -> FabricReport {
    // Fit beyond the caches (16 MiB and up) when there are two such sizes: smaller copies run from
    // L1-L3 and would make one line through both regimes meaningless.
    let fits = pairs
        .iter()
        .map(|p| {
            let big: Vec<(u64, f64)> = p.points.iter().filter(|x| x.bytes >= 16 << 20).map(|x| (x.bytes, x.time_us * 1e-6)).collect();
            let pts = if big.len() >= 2 { big } else { p.points.iter().map(|x| (x.bytes, x.time_us * 1e-6)).collect() };
            (p.src_node, p.dst_node, fit::fit(&pts))
        })
        .collect();
    FabricReport {
        schema: SCHEMA.into(),
        kind: "host".into(),
        backend: "host".into(),
        p2p: None,
        matrices: Vec::new(),
        pair_fits: Vec::new(),
        allreduce: Vec::new(),
        host: Some(HostReport { pairs, fits, gpu_transfers }),
        link: None,
        notes,
    }
}

pub fn size_label(b: u64) -> String {
    match b {
        b if b >= 1 << 30 && b % (1 << 30) == 0 => format!("{} GiB", b >> 30),
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} B"),
    }
}

fn table(w: &mut impl Write, headers: &[String], rows: &[Vec<String>]) -> io::Result<()> {
    let mut width: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            width[i] = width[i].max(c.len());
        }
    }
    let line = |cells: &[String]| {
        cells
            .iter()
            .enumerate()
            .map(|(i, c)| if i == 0 { format!("{c:<w$}", w = width[i]) } else { format!("{c:>w$}", w = width[i]) })
            .collect::<Vec<_>>()
            .join("  ")
    };
    writeln!(w, "{}", line(headers).trim_end())?;
    writeln!(w, "{}", width.iter().map(|n| "-".repeat(*n)).collect::<Vec<_>>().join("  "))?;
    for r in rows {
        writeln!(w, "{}", line(r).trim_end())?;
    }
    Ok(())
}

/// The terminal report.
pub fn write_terminal(r: &FabricReport, mut w: impl Write) -> io::Result<()> {
    writeln!(w, "servetune fabric {} ({} backend)", r.kind, r.backend)?;
    if let Some(p) = &r.p2p {
        for d in p.gpus.iter().filter_map(|g| p.devices.get(*g)) {
            writeln!(w, "  GPU{} {}", d.index, d.name)?;
        }
    }
    for m in &r.matrices {
        writeln!(w, "\n{} ({})", m.title, m.unit)?;
        let gpus: Vec<usize> = r.p2p.as_ref().map(|p| p.gpus.clone()).unwrap_or_default();
        let mut headers = vec!["   D\\D".to_string()];
        headers.extend(gpus.iter().map(|g| g.to_string()));
        let rows: Vec<Vec<String>> = m
            .values
            .iter()
            .enumerate()
            .map(|(i, row)| {
                let mut v = vec![gpus.get(i).map(|g| g.to_string()).unwrap_or_default()];
                v.extend(row.iter().map(|x| x.map_or("-".into(), |x| format!("{x:.2}"))));
                v
            })
            .collect();
        table(&mut w, &headers, &rows)?;
    }
    if !r.pair_fits.is_empty() {
        writeln!(w, "\nalpha-beta fits per pair (time = alpha + bytes / beta):")?;
        let rows: Vec<Vec<String>> = r
            .pair_fits
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
        table(&mut w, &["pair".into(), "mode".into(), "alpha us".into(), "beta GB/s".into(), "rms resid".into()], &rows)?;
    }
    if let Some(p) = &r.p2p {
        for (a, b, ok) in &p.verify {
            writeln!(w, "verify {a} -> {b}: {}", if *ok { "data delivered" } else { "DATA LOST" })?;
        }
    }
    for a in &r.allreduce {
        let env = if a.env.is_empty() {
            "defaults".to_string()
        } else {
            a.env.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ")
        };
        writeln!(w, "\nall-reduce, {} ranks, out of place, {env}", a.ranks)?;
        let rows: Vec<Vec<String>> = a
            .rows
            .iter()
            .map(|x| vec![x.bytes.to_string(), format!("{:.2}", x.time_us), format!("{:.2}", x.algbw_gbs), format!("{:.2}", x.busbw_gbs)])
            .collect();
        table(&mut w, &["size (B)".into(), "time (us)".into(), "algbw (GB/s)".into(), "busbw (GB/s)".into()], &rows)?;
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
            writeln!(w, "transports: {}", a.transports.iter().map(|(t, n)| format!("{t} x{n}")).collect::<Vec<_>>().join(", "))?;
        }
    }
    if let Some(h) = &r.host {
        for (p, (_, _, f)) in h.pairs.iter().zip(&h.fits) {
            writeln!(
                w,
                "\nhost copy: memory on node {} copied by node {}{}",
                p.src_node,
                p.dst_node,
                if p.pinned { "" } else { " (thread not pinned)" }
            )?;
            let rows: Vec<Vec<String>> =
                p.points.iter().map(|x| vec![size_label(x.bytes), format!("{:.3}", x.time_us), format!("{:.2}", x.gbs)]).collect();
            table(&mut w, &["size".into(), "time (us)".into(), "GB/s".into()], &rows)?;
            if let Some(f) = f {
                writeln!(
                    w,
                    "fit (sizes >= 16 MiB, beyond the caches): alpha {:.3} us, beta {:.2} GB/s (rms residual {:.1}%)",
                    f.alpha_us,
                    f.beta_gbs,
                    f.rms_rel * 100.0
                )?;
            }
        }
        for (g, a, b, c, d) in &h.gpu_transfers {
            writeln!(w, "GPU{g}: pinned H2D {a:.1} GB/s, D2H {b:.1} GB/s; pageable H2D {c:.1} GB/s, D2H {d:.1} GB/s")?;
        }
    }
    if let Some(l) = &r.link {
        writeln!(w, "\nlink for servetune plan --fabric: alpha {:.2} us, beta {:.2} GB/s ({})", l.alpha_us, l.beta_gbs, l.source)?;
    }
    for n in &r.notes {
        writeln!(w, "note: {n}")?;
    }
    Ok(())
}

/// Markdown: the terminal text in a fenced block under a heading.
pub fn write_markdown(r: &FabricReport, mut w: impl Write) -> io::Result<()> {
    writeln!(w, "# servetune fabric {}\n\n```", r.kind)?;
    write_terminal(r, &mut w)?;
    writeln!(w, "```")
}
