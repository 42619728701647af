//! The terminal report: sections, the matrices like `nvidia-smi topo`, then findings by severity.
//!
//! Much of a report is outside data (GPU names from NVML or a snapshot, file contents, paths), so
//! everything written goes through [`Printable`]: a control character is shown escaped, never
//! sent raw to a terminal, where an escape sequence in a GPU name could rewrite the screen.

use std::io::{self, Write};

use crate::ProbeReport;

/// A writer that passes text through with its control characters escaped: C0 controls other
/// than newline and tab, DEL, and the C1 controls (U+0080 to U+009F, 8-bit CSI among them)
/// become `\xNN` or `\u{NN}`.
#[derive(Debug)]
pub struct Printable<W: Write> {
    w: W,
    /// A UTF-8 lead byte 0xC2 seen at the end of the last write (a C1 control starts with it).
    pending_c2: bool,
}

impl<W: Write> Printable<W> {
    /// Wraps `w`.
    pub fn new(w: W) -> Self {
        Self { w, pending_c2: false }
    }
}

impl<W: Write> Write for Printable<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut out = Vec::with_capacity(buf.len());
        for &b in buf {
            if std::mem::take(&mut self.pending_c2) {
                if (0x80..=0x9f).contains(&b) {
                    out.extend(format!("\\u{{{b:x}}}").bytes());
                    continue;
                }
                out.push(0xc2);
            }
            match b {
                b'\n' | b'\t' => out.push(b),
                0x00..=0x1f | 0x7f => out.extend(format!("\\x{b:02x}").bytes()),
                0xc2 => self.pending_c2 = true,
                _ => out.push(b),
            }
        }
        self.w.write_all(&out)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        if std::mem::take(&mut self.pending_c2) {
            self.w.write_all(&[0xc2])?;
        }
        self.w.flush()
    }
}

/// `s` with its control characters escaped as [`Printable`] writes them (for one line of
/// outside data printed elsewhere, such as a warning on stderr).
pub fn printable(s: &str) -> String {
    let mut p = Printable::new(Vec::new());
    // Writing to a Vec cannot fail.
    let _ = p.write_all(s.as_bytes()).and_then(|_| p.flush());
    String::from_utf8_lossy(&p.w).into_owned()
}

/// A link figure sysfs gave, or `?` where it gave none (`Unknown`, a link that is down).
fn known(v: Option<u32>) -> String {
    v.map_or_else(|| "?".into(), |v| v.to_string())
}

/// A GPU-by-GPU matrix laid out as `nvidia-smi topo` prints it.
fn matrix(w: &mut impl Write, names: &[String], m: &[Vec<String>]) -> io::Result<()> {
    let width = names.iter().map(|n| n.len()).chain(m.iter().flatten().map(|s| s.len())).max().unwrap_or(4).max(4);
    let cells = |c: &mut dyn Iterator<Item = &String>| c.map(|s| format!("{s:>width$}")).collect::<Vec<_>>().join(" ");
    writeln!(w, "{:<8}{}", "", cells(&mut names.iter()))?;
    for (i, row) in m.iter().enumerate() {
        writeln!(w, "{:<8}{}", names.get(i).map(String::as_str).unwrap_or("?"), cells(&mut row.iter()))?;
    }
    Ok(())
}

/// The bridge/switch tree above the GPUs, merged from each GPU's sysfs path.
fn write_tree(w: &mut impl Write, r: &ProbeReport) -> io::Result<()> {
    #[derive(Default)]
    struct Node(std::collections::BTreeMap<String, Node>);
    let mut top = Node::default();
    for g in &r.pcie {
        let mut path: Vec<String> = vec![g.root.clone().unwrap_or_else(|| "?".into())];
        path.extend(g.bridges.iter().rev().map(|b| format!("{} (ACS {})", b.bus_id, b.acs.name())));
        path.push(format!("{} GPU, NUMA {}", g.bus_id, g.numa_node));
        let mut n = &mut top;
        for p in path {
            n = n.0.entry(p).or_default();
        }
    }
    fn walk(w: &mut impl Write, n: &Node, depth: usize) -> io::Result<()> {
        for (k, v) in &n.0 {
            writeln!(w, "  {}{}{k}", "   ".repeat(depth), if depth == 0 { "" } else { "`- " })?;
            walk(w, v, depth + 1)?;
        }
        Ok(())
    }
    walk(w, &top, 0)
}

/// The terminal report: warnings, then virtualization, host, PCIe, GPUs, findings; control
/// characters in it escaped ([`Printable`]).
pub fn write_terminal(r: &ProbeReport, w: impl Write) -> io::Result<()> {
    let mut w = Printable::new(w);
    write_sections(r, &mut w)?;
    w.flush()
}

fn write_sections(r: &ProbeReport, mut w: impl Write) -> io::Result<()> {
    for warning in &r.warnings {
        writeln!(w, "warning: {warning}")?;
    }
    if !r.warnings.is_empty() {
        writeln!(w)?;
    }
    write_virtualization(&mut w, r)?;
    write_host(&mut w, r)?;
    write_pcie(&mut w, r)?;
    write_gpus(&mut w, r)?;
    write_findings(&mut w, r)
}

fn write_virtualization(w: &mut impl Write, r: &ProbeReport) -> io::Result<()> {
    let v = &r.virtualization;
    writeln!(w, "== virtualization\n  vm: {}   container: {}\n  {}", v.vm.name(), v.container.name(), v.implication)?;
    for e in &v.evidence {
        writeln!(w, "  - {e}")?;
    }
    Ok(())
}

fn write_host(w: &mut impl Write, r: &ProbeReport) -> io::Result<()> {
    let h = &r.host;
    writeln!(
        w,
        "\n== host\n  cpu: {} ({} socket(s), {} cores, {} threads)",
        h.cpu_model.as_deref().unwrap_or("unknown"),
        h.sockets,
        if h.cores == 0 { "?".to_string() } else { h.cores.to_string() },
        h.threads
    )?;
    writeln!(w, "  kernel: {}", h.kernel.as_deref().unwrap_or("unknown"))?;
    for n in &h.numa_nodes {
        writeln!(w, "  NUMA node {}: cpus {}{}", n.id, n.cpus, n.memory_gb.map(|m| format!(", {m:.0} GB")).unwrap_or_default())?;
    }
    let mut kinds: std::collections::BTreeMap<&str, usize> = std::collections::BTreeMap::new();
    for g in &h.iommu_groups {
        *kinds.entry(g.kind.as_str()).or_default() += 1;
    }
    let groups = if kinds.is_empty() {
        "none (IOMMU off or not visible)".to_string()
    } else {
        kinds.iter().map(|(k, n)| format!("{n} x {k}")).collect::<Vec<_>>().join(", ")
    };
    writeln!(w, "  IOMMU groups: {groups}")
}

fn write_pcie(w: &mut impl Write, r: &ProbeReport) -> io::Result<()> {
    writeln!(w, "\n== PCIe (NVIDIA devices)")?;
    if r.pcie.is_empty() {
        writeln!(w, "  none")?;
    }
    for g in &r.pcie {
        let l = &g.link;
        writeln!(
            w,
            "  {}  dev {}  NUMA {}  link Gen{} x{} (max Gen{} x{}){}  IOMMU group {}{}",
            g.bus_id,
            g.device_id,
            g.numa_node,
            known(l.current_gen),
            known(l.current_width),
            known(l.max_gen),
            known(l.max_width),
            if l.downgraded { " DOWNGRADED" } else { "" },
            g.iommu_group.map(|x| x.to_string()).unwrap_or_else(|| "-".into()),
            g.iommu_type.as_deref().map(|t| format!(" {t}")).unwrap_or_default()
        )?;
        for b in &g.bridges {
            let bits = if b.acs_bits.is_empty() { String::new() } else { format!(" ({})", b.acs_bits.join(", ")) };
            writeln!(w, "      <- {} ACS {}{bits}", b.bus_id, b.acs.name())?;
        }
    }
    if !r.pcie.is_empty() {
        writeln!(w, "\n  tree (host bridge -> bridges/switches -> GPU):")?;
        write_tree(w, r)?;
    }
    Ok(())
}

fn on_off(x: Option<bool>) -> &'static str {
    x.map_or("?", |p| if p { "on" } else { "off" })
}

fn write_gpus(w: &mut impl Write, r: &ProbeReport) -> io::Result<()> {
    writeln!(w, "\n== GPUs (NVML)")?;
    match &r.driver.error {
        Some(e) => writeln!(w, "  {e}")?,
        None => writeln!(
            w,
            "  driver {}  CUDA {}",
            r.driver.driver_version.as_deref().unwrap_or("?"),
            r.driver.cuda_version.as_deref().unwrap_or("?")
        )?,
    }
    for g in &r.gpus {
        writeln!(
            w,
            "  GPU{} {} {} sm_{} {} MiB  persistence {}  MIG {}  ECC {}  power {} W  clocks {}/{} MHz  NVLink {}",
            g.index,
            g.name,
            g.bus_id,
            g.compute_capability.as_deref().unwrap_or("?").replace('.', ""),
            g.memory_total_mib.unwrap_or(0),
            on_off(g.persistence_mode),
            on_off(g.mig_enabled),
            on_off(g.ecc_enabled),
            g.power_limit_w.map(|p| format!("{p:.0}")).unwrap_or_else(|| "?".into()),
            g.max_graphics_clock_mhz.unwrap_or(0),
            g.max_memory_clock_mhz.unwrap_or(0),
            g.nvlinks_active
        )?;
    }
    if !r.topology.matrix.is_empty() {
        writeln!(w, "\n  topology (as nvidia-smi topo -m):")?;
        matrix(w, &r.topology.gpus, &r.topology.matrix)?;
        for (cap, m) in &r.p2p {
            writeln!(w, "\n  P2P {cap} (as nvidia-smi topo -p2p {}):", cap.get(..1).unwrap_or("?"))?;
            matrix(w, &r.topology.gpus, m)?;
        }
    }
    if !r.uvm_params.is_empty() {
        writeln!(w, "\n  nvidia_uvm: {}", r.uvm_params.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" "))?;
    }
    Ok(())
}

fn write_findings(w: &mut impl Write, r: &ProbeReport) -> io::Result<()> {
    writeln!(w, "\n== findings")?;
    if r.findings.is_empty() {
        writeln!(w, "  none")?;
    }
    for f in &r.findings {
        writeln!(w, "  [{:?}] {}\n      evidence: {}\n      fix: {}", f.severity, f.title, f.evidence, f.fix)?;
    }
    if !r.unreadable.is_empty() {
        writeln!(w, "\ncould not read (the probe went on without them): {}", r.unreadable.join(", "))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_in_outside_text_are_escaped_and_text_is_kept() {
        assert_eq!(printable("NVIDIA \x1b]0;pwned\x07H100\u{9b}2J"), "NVIDIA \\x1b]0;pwned\\x07H100\\u{9b}2J");
        assert_eq!(printable("GPU0 Ä\u{e9}\tok\n"), "GPU0 Ä\u{e9}\tok\n");
        // A C1 control split across two writes is still caught.
        let mut p = Printable::new(Vec::new());
        p.write_all(b"a\xc2").and_then(|_| p.write_all(b"\x9bb")).and_then(|_| p.flush()).expect("write");
        assert_eq!(p.w, b"a\\u{9b}b");
    }
}
