//! The CUDA backend: the driver API through cudarc, loaded at run time (no CUDA at build time).
//! Copies use cuMemcpyPeerAsync, which DMAs directly when peer access is enabled and stages through
//! host memory when it is not (p2pBandwidthLatencyTest's two modes). Each batch of copies is timed
//! with events on a stream held by a host function until the whole batch is queued, so enqueue
//! overhead is not measured.
#![expect(unsafe_code, reason = "the CUDA driver API is a C API: every call's result is checked and every buffer is owned by this module")]

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};

use cudarc::driver::{result, sys};

use crate::{CopyMode, Device, Fabric, FabricError, HostTransfers};

/// The library names searched for libcuda: the Linux driver's names (`libcuda.so`, `libcuda.so.1`,
/// ...) in full, and how many other spellings cudarc also tries (`libcuda64_12.so` and the like,
/// which name no library a Linux driver installs).
pub fn searched() -> String {
    let mut v = cudarc::get_lib_name_candidates("cuda");
    let mut seen = std::collections::HashSet::new();
    v.retain(|n| seen.insert(n.clone()));
    let (linux, other): (Vec<String>, Vec<String>) = v.into_iter().partition(|n| n.starts_with("libcuda.so"));
    match other.len() {
        0 => linux.join(", "),
        n => format!("{}, and {n} other spelling{}", linux.join(", "), if n == 1 { "" } else { "s" }),
    }
}

/// Whether the CUDA driver library can be loaded (cudarc panics on a missing library, so this is
/// asked first).
pub fn driver_present() -> bool {
    // SAFETY: only tries to dlopen candidate names.
    unsafe { sys::is_culib_present() }
}

fn err(what: &str) -> impl Fn(result::DriverError) -> FabricError + '_ {
    move |e| FabricError::Runtime(format!("{what}: {e}"))
}

/// The GPUs of this machine.
#[derive(Debug)]
pub struct CudaFabric {
    devs: Vec<Device>,
    cu: Vec<sys::CUdevice>,
    ctx: Vec<sys::CUcontext>,
    peer_on: HashSet<(usize, usize)>,
}

impl CudaFabric {
    /// Loads the driver, initialises CUDA and creates a context on every GPU.
    pub fn open() -> Result<Self, FabricError> {
        if !driver_present() {
            return Err(FabricError::NoDriver { searched: searched() });
        }
        result::init().map_err(|e| {
            FabricError::Runtime(format!(
                "cuInit failed ({e}): the driver library loads but CUDA cannot start; run servetune probe (an enabled HMM, uvm_disable_hmm unset, is a known cause)"
            ))
        })?;
        let n = result::device::get_count().map_err(err("cuDeviceGetCount"))?;
        let mut s = Self { devs: Vec::new(), cu: Vec::new(), ctx: Vec::new(), peer_on: HashSet::new() };
        for i in 0..n {
            let d = result::device::get(i).map_err(err("cuDeviceGet"))?;
            // SAFETY: d is a valid device ordinal's handle.
            let ctx = unsafe { result::primary_ctx::retain(d) }.map_err(err("cuDevicePrimaryCtxRetain"))?;
            s.devs.push(Device { index: i as usize, name: result::device::get_name(d).unwrap_or_default() });
            s.cu.push(d);
            s.ctx.push(ctx);
        }
        Ok(s)
    }

    fn set(&self, d: usize) -> Result<(), FabricError> {
        // SAFETY: a primary context retained in open().
        unsafe { result::ctx::set_current(self.ctx[d]) }.map_err(err("cuCtxSetCurrent"))
    }

    fn check(&self, d: usize) -> Result<(), FabricError> {
        if d >= self.devs.len() {
            return Err(FabricError::Input(format!("GPU {d} does not exist; this machine has {} GPU(s)", self.devs.len())));
        }
        Ok(())
    }

    /// Enables or disables peer access from `a`'s context to `b`'s.
    fn set_peer(&mut self, a: usize, b: usize, on: bool) -> Result<(), FabricError> {
        if a == b || self.peer_on.contains(&(a, b)) == on {
            return Ok(());
        }
        self.set(a)?;
        // SAFETY: both contexts are valid; the flags argument must be 0.
        let r = unsafe {
            if on {
                sys::cuCtxEnablePeerAccess(self.ctx[b], 0)
            } else {
                sys::cuCtxDisablePeerAccess(self.ctx[b])
            }
        };
        match r {
            sys::CUresult::CUDA_SUCCESS
            | sys::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED
            | sys::CUresult::CUDA_ERROR_PEER_ACCESS_NOT_ENABLED => {}
            other => {
                return Err(FabricError::Runtime(format!("peer access {a}->{b} ({}): {other:?}", if on { "enable" } else { "disable" })))
            }
        }
        if on {
            self.peer_on.insert((a, b));
        } else {
            self.peer_on.remove(&(a, b));
        }
        Ok(())
    }
}

/// A device buffer freed on drop.
struct Buf {
    ptr: sys::CUdeviceptr,
    ctx: sys::CUcontext,
}

impl Buf {
    fn new(ctx: sys::CUcontext, bytes: u64) -> Result<Self, FabricError> {
        // SAFETY: ctx is a valid context made current before allocating in it.
        unsafe {
            result::ctx::set_current(ctx).map_err(err("cuCtxSetCurrent"))?;
            let ptr = result::malloc_sync(bytes as usize).map_err(err("cuMemAlloc"))?;
            Ok(Self { ptr, ctx })
        }
    }
}

impl Drop for Buf {
    fn drop(&mut self) {
        // SAFETY: ptr was allocated in ctx and is freed once.
        unsafe {
            let _ = result::ctx::set_current(self.ctx);
            let _ = result::free_sync(self.ptr);
        }
    }
}

static HOLD: AtomicBool = AtomicBool::new(false);

unsafe extern "C" fn hold_stream(_: *mut std::ffi::c_void) {
    // Runs on the driver's callback thread: keeps the stream from starting until released.
    let t = std::time::Instant::now();
    while HOLD.load(Ordering::Acquire) && t.elapsed() < std::time::Duration::from_secs(10) {
        std::hint::spin_loop();
    }
}

impl Fabric for CudaFabric {
    fn name(&self) -> &'static str {
        "cuda"
    }

    fn devices(&self) -> &[Device] {
        &self.devs
    }

    fn can_access_peer(&self, src: usize, dst: usize) -> bool {
        if src == dst || src >= self.cu.len() || dst >= self.cu.len() {
            return false;
        }
        let mut can = 0i32;
        // SAFETY: both are valid device handles; can is a local out-parameter.
        let r = unsafe { sys::cuDeviceCanAccessPeer(&mut can, self.cu[src], self.cu[dst]) };
        r == sys::CUresult::CUDA_SUCCESS && can == 1
    }

    fn copy(&mut self, src: usize, dst: usize, bytes: u64, mode: CopyMode, bidir: bool, iters: u32) -> Result<f64, FabricError> {
        self.check(src)?;
        self.check(dst)?;
        let p2p = mode == CopyMode::P2p && self.can_access_peer(src, dst);
        self.set_peer(src, dst, p2p)?;
        self.set_peer(dst, src, p2p)?;
        let a = Buf::new(self.ctx[src], bytes)?;
        let b = Buf::new(self.ctx[dst], bytes)?;
        let (a2, b2) = if bidir { (Some(Buf::new(self.ctx[src], bytes)?), Some(Buf::new(self.ctx[dst], bytes)?)) } else { (None, None) };
        self.set(src)?;
        // SAFETY: every handle below is created here, used on the current context, and destroyed
        // before returning; the buffers outlive the synchronised stream.
        unsafe {
            let stream = result::stream::create(result::stream::StreamKind::NonBlocking).map_err(err("cuStreamCreate"))?;
            let e0 = result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT).map_err(err("cuEventCreate"))?;
            let e1 = result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT).map_err(err("cuEventCreate"))?;
            // One warm-up copy, then the held, timed batch.
            result::memcpy_peer_async(self.ctx[dst], b.ptr, self.ctx[src], a.ptr, bytes as usize, stream)
                .map_err(err("cuMemcpyPeerAsync"))?;
            result::stream::synchronize(stream).map_err(err("cuStreamSynchronize"))?;
            HOLD.store(true, Ordering::Release);
            result::stream::launch_host_function(stream, hold_stream, std::ptr::null_mut()).map_err(err("cuLaunchHostFunc"))?;
            result::event::record(e0, stream).map_err(err("cuEventRecord"))?;
            for _ in 0..iters {
                result::memcpy_peer_async(self.ctx[dst], b.ptr, self.ctx[src], a.ptr, bytes as usize, stream)
                    .map_err(err("cuMemcpyPeerAsync"))?;
                if let (Some(a2), Some(b2)) = (&a2, &b2) {
                    result::memcpy_peer_async(self.ctx[src], a2.ptr, self.ctx[dst], b2.ptr, bytes as usize, stream)
                        .map_err(err("cuMemcpyPeerAsync"))?;
                }
            }
            result::event::record(e1, stream).map_err(err("cuEventRecord"))?;
            HOLD.store(false, Ordering::Release);
            result::stream::synchronize(stream).map_err(err("cuStreamSynchronize"))?;
            let ms = result::event::elapsed(e0, e1).map_err(err("cuEventElapsedTime"))?;
            let _ = result::event::destroy(e0);
            let _ = result::event::destroy(e1);
            let _ = result::stream::destroy(stream);
            Ok(ms as f64 / 1e3 / f64::from(iters))
        }
    }

    fn verify(&mut self, src: usize, dst: usize, bytes: u64) -> Result<bool, FabricError> {
        self.check(src)?;
        self.check(dst)?;
        if !self.can_access_peer(src, dst) {
            return Ok(false);
        }
        self.set_peer(src, dst, true)?;
        self.set_peer(dst, src, true)?;
        let n = bytes as usize;
        let pattern: Vec<u8> = (0..n).map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[1]).collect();
        let a = Buf::new(self.ctx[src], bytes)?;
        let b = Buf::new(self.ctx[dst], bytes)?;
        let mut back = vec![0u8; n];
        // SAFETY: buffers are `bytes` long in their contexts; host slices match in length.
        unsafe {
            self.set(src)?;
            result::memcpy_htod_sync(a.ptr, &pattern).map_err(err("cuMemcpyHtoD"))?;
            self.set(dst)?;
            result::memset_d8_sync(b.ptr, 0, n).map_err(err("cuMemsetD8"))?;
            self.set(src)?;
            let s = result::stream::create(result::stream::StreamKind::NonBlocking).map_err(err("cuStreamCreate"))?;
            result::memcpy_peer_async(self.ctx[dst], b.ptr, self.ctx[src], a.ptr, n, s).map_err(err("cuMemcpyPeerAsync"))?;
            result::stream::synchronize(s).map_err(err("cuStreamSynchronize"))?;
            let _ = result::stream::destroy(s);
            self.set(dst)?;
            result::memcpy_dtoh_sync(&mut back, b.ptr).map_err(err("cuMemcpyDtoH"))?;
        }
        Ok(back == pattern)
    }

    fn host_transfers(&mut self, dev: usize, bytes: u64) -> Result<HostTransfers, FabricError> {
        self.check(dev)?;
        let n = bytes as usize;
        let d = Buf::new(self.ctx[dev], bytes)?;
        let reps = 5;
        let time = |f: &mut dyn FnMut() -> Result<(), FabricError>| -> Result<f64, FabricError> {
            f()?;
            let t = std::time::Instant::now();
            for _ in 0..reps {
                f()?;
            }
            Ok(bytes as f64 * reps as f64 / t.elapsed().as_secs_f64() / 1e9)
        };
        self.set(dev)?;
        let mut pageable = vec![1u8; n];
        // SAFETY: d holds `bytes`; host buffers are `bytes` long; the pinned buffer is freed below.
        unsafe {
            let pinned = result::malloc_host(n, 0).map_err(err("cuMemHostAlloc"))?;
            let ps = std::slice::from_raw_parts_mut(pinned as *mut u8, n);
            let h2d_p = time(&mut || result::memcpy_htod_sync(d.ptr, &*ps).map_err(err("cuMemcpyHtoD")));
            let d2h_p = time(&mut || result::memcpy_dtoh_sync(&mut *ps, d.ptr).map_err(err("cuMemcpyDtoH")));
            let h2d = time(&mut || result::memcpy_htod_sync(d.ptr, &pageable).map_err(err("cuMemcpyHtoD")));
            let d2h = time(&mut || result::memcpy_dtoh_sync(&mut pageable, d.ptr).map_err(err("cuMemcpyDtoH")));
            let _ = result::free_host(pinned);
            Ok(HostTransfers { pinned_h2d_gbs: h2d_p?, pinned_d2h_gbs: d2h_p?, pageable_h2d_gbs: h2d?, pageable_d2h_gbs: d2h? })
        }
    }
}
