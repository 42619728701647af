//! Host memory copies, measured for real: latency and bandwidth per size, per NUMA-node pair
//! (source memory first-touched by a thread on one node, copied by a thread on the other).

use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::FabricError;

/// A NUMA node's CPUs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Node {
    /// The node number (sysfs `nodeN`).
    pub id: usize,
    /// Its CPU numbers.
    pub cpus: Vec<usize>,
}

/// Parses a cpulist like `0-3,8,10-11`.
pub fn parse_cpulist(s: &str) -> Vec<usize> {
    let mut v = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.trim().parse::<usize>(), b.trim().parse::<usize>()) {
                    v.extend(a..=b.min(a + 4096));
                }
            }
            None => {
                if let Ok(a) = part.trim().parse() {
                    v.push(a);
                }
            }
        }
    }
    v
}

/// NUMA nodes from sysfs; one node with every CPU when sysfs says nothing.
pub fn nodes() -> Vec<Node> {
    let mut out: Vec<Node> = std::fs::read_dir("/sys/devices/system/node")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter_map(|e| {
                    let name = e.file_name().to_string_lossy().to_string();
                    let id = name.strip_prefix("node")?.parse().ok()?;
                    // A page of text; bounded as every file read is.
                    let list = servetune_io::read_regular(&e.path().join("cpulist"), "cpulist", servetune_io::MIB).ok()?;
                    let cpus = parse_cpulist(&String::from_utf8_lossy(&list));
                    (!cpus.is_empty()).then_some(Node { id, cpus })
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort_by_key(|n| n.id);
    if out.is_empty() {
        let n = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
        out.push(Node { id: 0, cpus: (0..n).collect() });
    }
    out
}

/// Pins the calling thread to `cpus` (best effort: a refusal leaves it unpinned).
#[expect(unsafe_code, reason = "sched_setaffinity has no safe std wrapper; the cpu_set_t is a local value")]
fn pin(cpus: &[usize]) -> bool {
    // SAFETY: cpu_set_t is plain data; CPU_ZERO/CPU_SET write only into it; sched_setaffinity reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_ZERO(&mut set);
        for &c in cpus.iter().filter(|c| **c < libc::CPU_SETSIZE as usize) {
            libc::CPU_SET(c, &mut set);
        }
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    }
}

/// One measured size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostPoint {
    /// Copy size, bytes.
    pub bytes: u64,
    /// Mean time per copy, microseconds.
    pub time_us: f64,
    /// Bandwidth, GB/s (10^9 bytes per second).
    pub gbs: f64,
}

/// One NUMA-node pair.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostPair {
    /// Node holding the source memory.
    pub src_node: usize,
    /// Node whose CPU runs the copy (and holds the destination).
    pub dst_node: usize,
    /// Whether the copying thread could be pinned to `dst_node`'s CPUs.
    pub pinned: bool,
    /// One point per size.
    pub points: Vec<HostPoint>,
}

/// Measures every node pair over `sizes` (bytes). Each size moves about `budget` bytes (at least
/// 3 copies), after one warm-up copy.
pub fn measure(sizes: &[u64], budget: u64, progress: &mut dyn FnMut(usize, usize)) -> Result<Vec<HostPair>, FabricError> {
    let ns = nodes();
    let max = *sizes.iter().max().unwrap_or(&0) as usize;
    let total = ns.len() * ns.len() * sizes.len();
    let mut done = 0;
    let mut out = Vec::new();
    for a in &ns {
        for b in &ns {
            let (ac, bc) = (a.cpus.clone(), b.cpus.clone());
            let sizes_v = sizes.to_vec();
            // Source memory is first touched on node a.
            let src = std::thread::spawn(move || {
                pin(&ac);
                vec![0x5au8; max.max(1)]
            })
            .join()
            .map_err(|_| FabricError::Runtime("the source-allocation thread panicked".into()))?;
            let (pinned, points) = std::thread::spawn(move || {
                let pinned = pin(&bc);
                let mut dst = vec![0u8; max.max(1)];
                let mut points = Vec::new();
                for &s in &sizes_v {
                    let s = s as usize;
                    let iters = (budget / s.max(1) as u64).clamp(3, 1_000_000);
                    dst[..s].copy_from_slice(&src[..s]);
                    let t = Instant::now();
                    for i in 0..iters {
                        // Vary the offset so no copy can be skipped as a repeat.
                        let o = (i as usize * 64) % (src.len() - s + 1);
                        dst[..s].copy_from_slice(&src[o..o + s]);
                        std::hint::black_box(&mut dst);
                    }
                    let per = t.elapsed().as_secs_f64() / iters as f64;
                    points.push(HostPoint { bytes: s as u64, time_us: per * 1e6, gbs: s as f64 / per / 1e9 });
                }
                (pinned, points)
            })
            .join()
            .map_err(|_| FabricError::Runtime("the copy thread panicked".into()))?;
            done += sizes.len();
            progress(done, total);
            out.push(HostPair { src_node: a.id, dst_node: b.id, pinned, points });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpulists_parse() {
        assert_eq!(parse_cpulist("0-3,8,10-11\n"), vec![0, 1, 2, 3, 8, 10, 11]);
        assert_eq!(parse_cpulist(""), Vec::<usize>::new());
        assert_eq!(parse_cpulist("x,2"), vec![2]);
    }

    #[test]
    fn host_copies_measure_positive_times_that_grow_with_size() {
        let pairs = measure(&[64, 1 << 20], 8 << 20, &mut |_, _| {}).expect("measure");
        assert!(!pairs.is_empty());
        let p = &pairs[0].points;
        assert!(p.iter().all(|x| x.time_us > 0.0 && x.gbs > 0.0));
        assert!(p[1].time_us > p[0].time_us, "1 MiB takes longer than 64 B");
    }
}
