//! NCCL all-reduce with one process per GPU, the way serving engines run it. NCCL is loaded at run
//! time under its usual names, `libnccl.so.2` (what the runtime packages install, and a name
//! cudarc's loader does not try) first. The parent makes the unique id and spawns one worker per
//! rank; each worker times out-of-place all-reduces with CUDA events and prints JSON.
#![expect(unsafe_code, reason = "NCCL and the CUDA driver are C APIs: every call's result is checked and every buffer is owned here")]

use std::ffi::{c_char, c_int, c_void};
use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};

use cudarc::driver::{result, sys};
use serde::{Deserialize, Serialize};

use crate::{AllReduce, AllReducePoint, AllReduceRun, EnvSetting, FabricError, TransportCount};

/// Names tried, in order.
pub const NCCL_NAMES: &[&str] = &["libnccl.so.2", "libnccl.so", "libnccl.so.13", "libnccl.so.12"];

/// NCCL's communicator id (ncclUniqueId), 128 opaque bytes passed from the first rank to the others.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct UniqueId(pub [u8; 128]);

type GetUniqueId = unsafe extern "C" fn(*mut UniqueId) -> c_int;
type CommInitRank = unsafe extern "C" fn(*mut *mut c_void, c_int, UniqueId, c_int) -> c_int;
type AllReduceFn = unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, c_int, *mut c_void, *mut c_void) -> c_int;
type CommDestroy = unsafe extern "C" fn(*mut c_void) -> c_int;
type GetErrorString = unsafe extern "C" fn(c_int) -> *const c_char;

const NCCL_FLOAT32: c_int = 7;
const NCCL_SUM: c_int = 0;

/// A loaded NCCL.
pub struct Nccl {
    lib: libloading::Library,
    /// The library name that loaded.
    pub name: String,
}

impl std::fmt::Debug for Nccl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nccl").field("name", &self.name).finish()
    }
}

/// Loads NCCL, or says which packages provide it.
pub fn load() -> Result<Nccl, FabricError> {
    for n in NCCL_NAMES {
        // SAFETY: loading a shared library runs its initialisers; NCCL's are benign.
        if let Ok(lib) = unsafe { libloading::Library::new(n) } {
            return Ok(Nccl { lib, name: n.to_string() });
        }
    }
    Err(FabricError::NoNccl(format!(
        "NCCL not found (tried {}): the NVIDIA driver is here but NCCL is not; install it: Debian/Ubuntu `apt install libnccl2` (NVIDIA's CUDA repository), or `pip install nvidia-nccl-cu12` (or -cu13) and add its lib/ folder to LD_LIBRARY_PATH",
        NCCL_NAMES.join(", ")
    )))
}

impl Nccl {
    fn sym<T: Copy>(&self, name: &[u8]) -> Result<T, FabricError> {
        // SAFETY: the symbol's C signature matches T (the NCCL 2.x API).
        unsafe { self.lib.get::<T>(name).map(|s| *s) }
            .map_err(|e| FabricError::Runtime(format!("{}: missing symbol {}: {e}", self.name, String::from_utf8_lossy(name))))
    }

    fn check(&self, what: &str, r: c_int) -> Result<(), FabricError> {
        if r == 0 {
            return Ok(());
        }
        let msg = self
            .sym::<GetErrorString>(b"ncclGetErrorString\0")
            // SAFETY: NCCL returns a static string for any result code.
            .map(|f| unsafe { std::ffi::CStr::from_ptr(f(r)) }.to_string_lossy().to_string())
            .unwrap_or_default();
        Err(FabricError::Runtime(format!("{what} failed: {msg} (ncclResult {r})")))
    }

    /// A new communicator id (ncclGetUniqueId), made once by the parent.
    pub fn unique_id(&self) -> Result<UniqueId, FabricError> {
        let mut id = UniqueId([0; 128]);
        // SAFETY: id is a local 128-byte out-parameter.
        self.check("ncclGetUniqueId", unsafe { self.sym::<GetUniqueId>(b"ncclGetUniqueId\0")?(&mut id) })?;
        Ok(id)
    }
}

fn hex(id: &UniqueId) -> String {
    id.0.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Result<UniqueId, FabricError> {
    let mut id = UniqueId([0; 128]);
    if s.len() != 256 {
        return Err(FabricError::Input("--id must be 256 hex digits (an NCCL unique id)".into()));
    }
    for (i, b) in id.0.iter_mut().enumerate() {
        *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).map_err(|_| FabricError::Input("--id is not hex".into()))?;
    }
    Ok(id)
}

/// What a worker prints.
#[derive(Debug, Serialize, Deserialize)]
pub struct WorkerOut {
    /// The worker's rank.
    pub rank: usize,
    /// Its timing of each size.
    pub points: Vec<AllReducePoint>,
}

/// One rank: joins the communicator and times all-reduces of each size on `device`.
pub fn worker(rank: usize, nranks: usize, device: usize, id_hex: &str, sizes: &[u64], iters: u32) -> Result<WorkerOut, FabricError> {
    crate::measure::check_iters(iters)?;
    let id = unhex(id_hex)?;
    if !crate::cuda::driver_present() {
        return Err(FabricError::NoDriver { searched: crate::cuda::searched() });
    }
    let nccl = load()?;
    let e = |w: &'static str| move |x: result::DriverError| FabricError::Runtime(format!("{w}: {x}"));
    result::init().map_err(e("cuInit"))?;
    let dev = result::device::get(device as c_int).map_err(e("cuDeviceGet"))?;
    let max = sizes.iter().copied().max().unwrap_or(4).max(4) as usize;
    // SAFETY: a retained primary context made current; buffers and handles are freed before return.
    unsafe {
        let ctx = result::primary_ctx::retain(dev).map_err(e("cuDevicePrimaryCtxRetain"))?;
        result::ctx::set_current(ctx).map_err(e("cuCtxSetCurrent"))?;
        let stream = result::stream::create(result::stream::StreamKind::NonBlocking).map_err(e("cuStreamCreate"))?;
        let send = result::malloc_sync(max).map_err(e("cuMemAlloc"))?;
        let recv = result::malloc_sync(max).map_err(e("cuMemAlloc"))?;
        result::memset_d8_sync(send, 1, max).map_err(e("cuMemsetD8"))?;
        let mut comm: *mut c_void = std::ptr::null_mut();
        nccl.check("ncclCommInitRank", nccl.sym::<CommInitRank>(b"ncclCommInitRank\0")?(&mut comm, nranks as c_int, id, rank as c_int))?;
        let ar = nccl.sym::<AllReduceFn>(b"ncclAllReduce\0")?;
        let e0 = result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT).map_err(e("cuEventCreate"))?;
        let e1 = result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT).map_err(e("cuEventCreate"))?;
        let mut points = Vec::new();
        for &s in sizes {
            let count = (s as usize / 4).max(1);
            let run = |n: u32| -> Result<(), FabricError> {
                for _ in 0..n {
                    nccl.check(
                        "ncclAllReduce",
                        ar(send as *const c_void, recv as *mut c_void, count, NCCL_FLOAT32, NCCL_SUM, comm, stream as *mut c_void),
                    )?;
                }
                Ok(())
            };
            run(2)?;
            result::stream::synchronize(stream).map_err(e("cuStreamSynchronize"))?;
            result::event::record(e0, stream).map_err(e("cuEventRecord"))?;
            run(iters)?;
            result::event::record(e1, stream).map_err(e("cuEventRecord"))?;
            result::stream::synchronize(stream).map_err(e("cuStreamSynchronize"))?;
            let ms = result::event::elapsed(e0, e1).map_err(e("cuEventElapsedTime"))?;
            points.push(AllReducePoint { bytes: (count * 4) as u64, time_us: ms as f64 * 1e3 / f64::from(iters) });
        }
        let _ = nccl.sym::<CommDestroy>(b"ncclCommDestroy\0").map(|f| f(comm));
        let _ = result::event::destroy(e0);
        let _ = result::event::destroy(e1);
        let _ = result::free_sync(send);
        let _ = result::free_sync(recv);
        let _ = result::stream::destroy(stream);
        Ok(WorkerOut { rank, points })
    }
}

/// Each size's time as the slowest rank measured it: a collective ends when its slowest rank does.
pub(crate) fn slowest(sizes: &[u64], outs: &[WorkerOut]) -> Vec<AllReducePoint> {
    sizes
        .iter()
        .enumerate()
        .map(|(i, &b)| AllReducePoint {
            bytes: b,
            time_us: outs.iter().filter_map(|o| o.points.get(i).map(|p| p.time_us)).fold(0.0, f64::max),
        })
        .collect()
}

/// Counts NCCL_DEBUG=INFO transport lines ("... via P2P/IPC").
pub fn transports(log: &str) -> Vec<TransportCount> {
    let mut m: std::collections::BTreeMap<String, usize> = std::collections::BTreeMap::new();
    for l in log.lines() {
        if let Some(i) = l.find(" via ") {
            let t = l[i + 1..].split_whitespace().take(2).collect::<Vec<_>>().join(" ");
            *m.entry(t).or_default() += 1;
        }
    }
    m.into_iter().map(|(transport, count)| TransportCount { transport, count }).collect()
}

/// The multi-process NCCL all-reduce. `worker_cmd` runs `servetune fabric allreduce-worker`.
#[derive(Debug)]
pub struct NcclAllReduce {
    /// The program and leading arguments that start one rank.
    pub worker_cmd: Vec<String>,
}

impl AllReduce for NcclAllReduce {
    fn name(&self) -> &'static str {
        "nccl"
    }

    fn run(&mut self, ranks: &[usize], sizes: &[u64], iters: u32, env: &[EnvSetting]) -> Result<AllReduceRun, FabricError> {
        if !crate::cuda::driver_present() {
            return Err(FabricError::NoDriver { searched: crate::cuda::searched() });
        }
        let nccl = load()?;
        let id = nccl.unique_id()?;
        let sizes_arg = sizes.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(",");
        let (prog, pre) = self.worker_cmd.split_first().ok_or_else(|| FabricError::Runtime("no worker command".into()))?;
        let mut children = Vec::new();
        for (rank, &dev) in ranks.iter().enumerate() {
            let mut c = Command::new(prog);
            c.args(pre)
                .args(["--rank", &rank.to_string(), "--nranks", &ranks.len().to_string(), "--device", &dev.to_string(), "--id", &hex(&id)])
                .args(["--sizes", &sizes_arg, "--iters", &iters.to_string()])
                .env("NCCL_DEBUG", "INFO")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            for e in env {
                c.env(&e.name, &e.value);
            }
            children.push(c.spawn().map_err(|e| FabricError::Runtime(format!("cannot start an all-reduce worker ({prog}): {e}")))?);
        }
        let mut outs = Vec::new();
        let mut log = String::new();
        for mut ch in children {
            let mut err = String::new();
            if let Some(mut s) = ch.stderr.take() {
                // NCCL's INFO log is a few MB; past the limit the rest is drained, not kept (a
                // worker blocked on a full pipe would never exit).
                let _ = s.by_ref().take(WORKER_OUTPUT_LIMIT).read_to_string(&mut err);
                let _ = std::io::copy(&mut s, &mut std::io::sink());
            }
            let mut line = String::new();
            if let Some(s) = ch.stdout.take() {
                let _ = BufReader::new(s.take(WORKER_OUTPUT_LIMIT)).read_line(&mut line);
            }
            let st = ch.wait().map_err(|e| FabricError::Runtime(format!("worker: {e}")))?;
            log.push_str(&err);
            if !st.success() {
                let tail: String = err.lines().rev().take(5).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n");
                return Err(FabricError::Runtime(format!("an all-reduce worker failed ({st}):\n{tail}")));
            }
            outs.push(
                serde_json::from_str::<WorkerOut>(line.trim())
                    .map_err(|e| FabricError::Runtime(format!("a worker printed no result ({e})")))?,
            );
        }
        let points = slowest(sizes, &outs);
        Ok(AllReduceRun { ranks: ranks.len(), points, transports: transports(&log), env: env.to_vec() })
    }
}

/// The most of a worker's stderr (its NCCL log) or of its result line that is read.
const WORKER_OUTPUT_LIMIT: u64 = 64 << 20;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transport_lines_are_counted() {
        let log = "NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC\nNCCL INFO Channel 01/0 : 0[0] -> 1[1] via P2P/IPC\nNCCL INFO Channel 00 : 1[1] -> 0[0] via SHM/direct/direct\nother line";
        let t = |transport: &str, count| TransportCount { transport: transport.into(), count };
        assert_eq!(transports(log), vec![t("via P2P/IPC", 2), t("via SHM/direct/direct", 1)]);
    }

    #[test]
    fn unique_ids_round_trip_through_hex() {
        let mut id = UniqueId([0; 128]);
        id.0[0] = 0xab;
        id.0[127] = 0x01;
        assert_eq!(unhex(&hex(&id)).map(|x| x.0.to_vec()).ok(), Some(id.0.to_vec()));
        assert!(unhex("zz").is_err());
    }

    #[test]
    fn without_a_driver_the_all_reduce_says_so() {
        if crate::cuda::driver_present() {
            return; // a GPU machine: nothing to check here
        }
        let e = NcclAllReduce { worker_cmd: vec!["true".into()] }.run(&[0], &[4], 1, &[]).expect_err("no driver");
        assert!(e.to_string().starts_with("no NVIDIA driver found"), "{e}");
    }
}
