//! Streams a PyTorch profiler (Kineto) Chrome-trace JSON, plain or gzipped, one `traceEvents`
//! entry at a time (by [`crate::scan`]): the whole document is never held, so memory follows the
//! kernels kept, not the file size.

use std::borrow::Cow;
use std::fmt;
use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;

use crate::scan::{scan, ScanError};
use crate::TraceError;

/// What an event is, from its `cat` field (only the kinds the analysis uses are told apart).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EventCat {
    /// A GPU kernel (`cat` "kernel").
    Kernel,
    /// A GPU copy (`cat` "gpu_memcpy").
    Memcpy,
    /// A GPU memset (`cat` "gpu_memset").
    Memset,
    /// A CUDA/HIP runtime call on the host (`cat` "cuda_runtime"), e.g. `cudaGraphLaunch`.
    Runtime,
    /// A `record_function` range on the host (`cat` "user_annotation").
    UserAnnotation,
    /// A Python function on the host (`cat` "python_function", with_stack=True).
    PythonFunction,
    /// A `record_function` range as it ran on the GPU (`cat` "gpu_user_annotation").
    GpuUserAnnotation,
    /// Anything else (cpu_op, python_function, flow events, ...).
    #[default]
    Other,
}

impl<'de> Deserialize<'de> for EventCat {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = EventCat;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an event category string")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<EventCat, E> {
                Ok(match s {
                    "kernel" | "Kernel" => EventCat::Kernel,
                    "gpu_memcpy" | "Memcpy" => EventCat::Memcpy,
                    "gpu_memset" | "Memset" => EventCat::Memset,
                    "cuda_runtime" | "Runtime" | "cuda_driver" => EventCat::Runtime,
                    "user_annotation" => EventCat::UserAnnotation,
                    "python_function" => EventCat::PythonFunction,
                    "gpu_user_annotation" => EventCat::GpuUserAnnotation,
                    _ => EventCat::Other,
                })
            }
        }
        d.deserialize_str(V)
    }
}

/// The `args` of an event, only the fields used.
#[derive(Debug, Clone, Copy, Default, Deserialize)]
pub struct EventArgs {
    /// Links a kernel to the runtime call that launched it.
    #[serde(default)]
    pub correlation: Option<i64>,
    /// The collective a communication kernel ran, where the profiler recorded it (PyTorch's
    /// process groups write `"Collective name"` on their NCCL kernels). It tells the collective of
    /// a kernel whose name does not, as NCCL's `ncclDevKernel_Generic`.
    #[serde(default, rename = "Collective name")]
    pub collective: Option<Collective>,
    /// The GPU a kernel or copy ran on (Kineto's `device`): a whole number, else none.
    #[serde(default)]
    pub device: Device,
}

/// A GPU event's device: Kineto writes a whole number; anything else is no device (not a
/// refusal of the event).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Device(pub Option<i64>);

impl<'de> Deserialize<'de> for Device {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Device;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a device index")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Device, E> {
                Ok(Device(i64::try_from(v).ok()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Device, E> {
                Ok(Device(Some(v)))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Device, E> {
                Ok(Device(None))
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Device, E> {
                Ok(Device(None))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Device, E> {
                Ok(Device(None))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Device, E> {
                Ok(Device(None))
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut a: A) -> Result<Device, A::Error> {
                while a.next_element::<de::IgnoredAny>()?.is_some() {}
                Ok(Device(None))
            }
            fn visit_map<A: de::MapAccess<'de>>(self, mut a: A) -> Result<Device, A::Error> {
                while a.next_entry::<de::IgnoredAny, de::IgnoredAny>()?.is_some() {}
                Ok(Device(None))
            }
        }
        d.deserialize_any(V)
    }
}

/// A collective named in a kernel's `args`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Collective {
    /// "allreduce", "all_reduce", "allreduce_coalesced", ...
    AllReduce,
    /// "allgather", "_allgather_base", "all_gather_into_tensor_coalesced", ...
    AllGather,
    /// Any other collective (broadcast, reduce_scatter, send, recv, all_to_all, ...), or a value
    /// that is not a name.
    Other,
}

impl Collective {
    /// The collective a name says: underscores and case ignored.
    pub fn from_name(s: &str) -> Self {
        let n: String = s.chars().filter(|c| *c != '_' && *c != ' ').flat_map(char::to_lowercase).collect();
        if n.contains("allreduce") {
            Collective::AllReduce
        } else if n.contains("allgather") {
            Collective::AllGather
        } else {
            Collective::Other
        }
    }

    /// As the report writes it.
    pub fn name(self) -> &'static str {
        match self {
            Collective::AllReduce => "allreduce",
            Collective::AllGather => "allgather",
            Collective::Other => "other collective",
        }
    }
}

impl<'de> Deserialize<'de> for Collective {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Collective;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a collective's name")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Collective, E> {
                Ok(Collective::from_name(s))
            }
            // Anything else names no collective the analysis can use: "other", not a refusal.
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Collective, E> {
                Ok(Collective::Other)
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Collective, E> {
                Ok(Collective::Other)
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Collective, E> {
                Ok(Collective::Other)
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Collective, E> {
                Ok(Collective::Other)
            }
            fn visit_unit<E: de::Error>(self) -> Result<Collective, E> {
                Ok(Collective::Other)
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut a: A) -> Result<Collective, A::Error> {
                while a.next_element::<de::IgnoredAny>()?.is_some() {}
                Ok(Collective::Other)
            }
            fn visit_map<A: de::MapAccess<'de>>(self, mut a: A) -> Result<Collective, A::Error> {
                while a.next_entry::<de::IgnoredAny, de::IgnoredAny>()?.is_some() {}
                Ok(Collective::Other)
            }
        }
        d.deserialize_any(V)
    }
}

/// A thread id: Kineto writes a number, some writers a string (hashed to a number here).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Tid(pub u64);

impl<'de> Deserialize<'de> for Tid {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Tid;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a thread id")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Tid, E> {
                Ok(Tid(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Tid, E> {
                Ok(Tid(v as u64))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Tid, E> {
                Ok(Tid(v.to_bits()))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Tid, E> {
                // FNV-1a: stable across runs, unlike the std hasher's random keys.
                Ok(Tid(s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3))))
            }
            // Anything else is not a thread id the analysis can use: thread 0, not a refusal.
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Tid, E> {
                Ok(Tid(0))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Tid, E> {
                Ok(Tid(0))
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut a: A) -> Result<Tid, A::Error> {
                while a.next_element::<de::IgnoredAny>()?.is_some() {}
                Ok(Tid(0))
            }
            fn visit_map<A: de::MapAccess<'de>>(self, mut a: A) -> Result<Tid, A::Error> {
                while a.next_entry::<de::IgnoredAny, de::IgnoredAny>()?.is_some() {}
                Ok(Tid(0))
            }
        }
        d.deserialize_any(V)
    }
}

/// One `traceEvents` entry, the fields used (the name borrowed from the read buffer).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct RawEvent<'a> {
    /// Phase: "X" for a complete event with a duration.
    #[serde(default)]
    pub ph: Option<Phase>,
    /// Category.
    #[serde(default)]
    pub cat: EventCat,
    /// Kernel or range name.
    #[serde(default, borrow)]
    pub name: Cow<'a, str>,
    /// Start, us.
    #[serde(default)]
    pub ts: Option<f64>,
    /// Duration, us.
    #[serde(default)]
    pub dur: Option<f64>,
    /// Thread (host events: the thread that ran the range or the launch).
    #[serde(default)]
    pub tid: Option<Tid>,
    /// Extra fields.
    #[serde(default)]
    pub args: EventArgs,
}

/// The Chrome-trace phase letter, the one the analysis uses told apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// "X": a complete event (start and duration).
    Complete,
    /// Any other phase (metadata, flow, instant, counter).
    Other,
}

impl<'de> Deserialize<'de> for Phase {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Phase;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a phase letter")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Phase, E> {
                Ok(if s == "X" { Phase::Complete } else { Phase::Other })
            }
        }
        d.deserialize_str(V)
    }
}

/// Counts of what the document held.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReadStats {
    /// `traceEvents` entries seen.
    pub events: u64,
    /// Whether the top level had a `traceEvents` array (or was itself the array).
    pub had_events: bool,
}

/// How much a gzipped trace may expand: its JSON may be at most this many times the compressed
/// file. Kineto JSON compresses about 10 to 20 times; a gzip bomb (a few MB that inflate to tens
/// of GB) compresses a thousand times.
pub const GZIP_RATIO: u64 = 100;

/// A gzipped trace may always expand to this much, whatever its ratio (a small trace of
/// repeated kernels compresses well).
pub const GZIP_FLOOR: u64 = 256 << 20;

/// How much JSON a trace from a pipe or a device (its size unknown) may hold.
pub const STREAM_LIMIT: u64 = 16 << 30;

/// The most JSON a trace may hold once decompressed, in bytes: `explicit` (`trace --max-json-mb`)
/// when given; else, gzipped, [`GZIP_RATIO`] times the file (at least [`GZIP_FLOOR`]); a plain
/// regular file is its own size; a pipe or a device [`STREAM_LIMIT`].
pub fn json_limit(explicit: Option<u64>, gz: bool, meta: &std::fs::Metadata) -> Option<u64> {
    match explicit {
        Some(l) => Some(l),
        None if gz => Some(meta.len().saturating_mul(GZIP_RATIO).max(GZIP_FLOOR)),
        None if meta.is_file() => None,
        None => Some(STREAM_LIMIT),
    }
}

fn size(bytes: u64) -> String {
    if bytes >= 1 << 20 {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{bytes} bytes")
    }
}

/// The limit passed while reading (told apart from other read errors by its type).
#[derive(Debug)]
struct OverLimit(u64);

impl fmt::Display for OverLimit {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "more than {} bytes of JSON", self.0)
    }
}

impl std::error::Error for OverLimit {}

/// A reader that fails once more than `left` bytes have come through it.
struct Bounded<R> {
    inner: R,
    limit: u64,
    left: u64,
}

impl<R: Read> Read for Bounded<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.left = self.left.checked_sub(n as u64).ok_or_else(|| std::io::Error::other(OverLimit(self.limit)))?;
        Ok(n)
    }
}

/// Calls `sink` with every event of the trace at `path`, in file order, within the default limits.
pub fn for_each_event(path: &Path, sink: &mut dyn FnMut(RawEvent<'_>)) -> Result<ReadStats, TraceError> {
    for_each_event_within(path, None, sink)
}

/// [`for_each_event`] with the decompressed-size limit `max_json` in bytes (None: [`json_limit`]'s
/// default). A gzip stream is inflated as it is read, so a bomb stops at the limit, not at its end.
pub fn for_each_event_within(path: &Path, max_json: Option<u64>, sink: &mut dyn FnMut(RawEvent<'_>)) -> Result<ReadStats, TraceError> {
    events_within(path, max_json, STREAM_IDLE, sink)
}

/// [`for_each_event_within`] with a stream's allowed silence `idle`.
fn events_within(
    path: &Path,
    max_json: Option<u64>,
    idle: std::time::Duration,
    sink: &mut dyn FnMut(RawEvent<'_>),
) -> Result<ReadStats, TraceError> {
    let open = |e: std::io::Error| match e.get_ref().and_then(|i| i.downcast_ref::<Silent>()) {
        Some(s) => TraceError::Stalled { path: path.display().to_string(), secs: s.0.as_secs() },
        None => TraceError::Open { path: path.display().to_string(), source: e },
    };
    // A FIFO's open blocks until a writer comes, and a pipe or a device may never send its end:
    // anything but a regular file (or a folder, refused by the read) is opened and read on a
    // thread, and a stream silent for STREAM_IDLE ends with an error.
    let meta = std::fs::metadata(path).map_err(open)?;
    let file: Box<dyn Read> = if meta.is_file() || meta.is_dir() {
        Box::new(File::open(path).map_err(open)?)
    } else {
        Box::new(IdleDeadline::spawn(path.to_path_buf(), idle))
    };
    let mut buf = BufReader::with_capacity(1 << 16, file);
    let gz = {
        use std::io::BufRead;
        let head = buf.fill_buf().map_err(open)?;
        head.starts_with(&[0x1f, 0x8b])
    };
    let reader: Box<dyn Read> = if gz { Box::new(flate2::read::MultiGzDecoder::new(buf)) } else { Box::new(buf) };
    let reader: Box<dyn Read> = match json_limit(max_json, gz, &meta) {
        Some(limit) => Box::new(Bounded { inner: reader, limit, left: limit }),
        None => reader,
    };
    read_events(reader, sink).map_err(|e| classify_error(path, gz, e))
}

/// How long a pipe or a device may send nothing before the read gives up: a FIFO nobody writes
/// to, or a writer that never sends, would otherwise block `trace` forever. The figure is the
/// other file inputs' deadline (`servetune_io::STREAM_DEADLINE`), here counted from the last
/// byte so that a long trace streamed through a pipe is not cut off while it flows.
pub const STREAM_IDLE: std::time::Duration = std::time::Duration::from_secs(30);

/// A stream silent for longer than its deadline (told apart from other read errors by its type).
#[derive(Debug)]
struct Silent(std::time::Duration);

impl fmt::Display for Silent {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "nothing arrived for {} s", self.0.as_secs())
    }
}

impl std::error::Error for Silent {}

/// Reads a path that is not a regular file on a helper thread, in chunks passed over a channel,
/// and fails when none arrives within `idle`. A thread left blocked in `open` or `read` stays so
/// until the process exits; it holds no lock.
struct IdleDeadline {
    rx: std::sync::mpsc::Receiver<std::io::Result<Vec<u8>>>,
    idle: std::time::Duration,
    chunk: Vec<u8>,
    at: usize,
    done: bool,
}

impl IdleDeadline {
    fn spawn(path: std::path::PathBuf, idle: std::time::Duration) -> Self {
        // A bound of a few chunks: the reader thread waits for the parser, memory stays small.
        let (tx, rx) = std::sync::mpsc::sync_channel(4);
        std::thread::spawn(move || {
            let mut f = match File::open(&path) {
                Ok(f) => f,
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return;
                }
            };
            loop {
                let mut chunk = vec![0u8; 1 << 16];
                match f.read(&mut chunk) {
                    Ok(n) => {
                        chunk.truncate(n);
                        if tx.send(Ok(chunk)).is_err() || n == 0 {
                            return;
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        let _ = tx.send(Err(e));
                        return;
                    }
                }
            }
        });
        IdleDeadline { rx, idle, chunk: Vec::new(), at: 0, done: false }
    }
}

impl Read for IdleDeadline {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        while self.at == self.chunk.len() {
            if self.done {
                return Ok(0);
            }
            match self.rx.recv_timeout(self.idle) {
                Ok(Ok(c)) => {
                    self.done = c.is_empty();
                    (self.chunk, self.at) = (c, 0);
                }
                Ok(Err(e)) => return Err(e),
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, Silent(self.idle)))
                }
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return Ok(0),
            }
        }
        let n = out.len().min(self.chunk.len() - self.at);
        out[..n].copy_from_slice(&self.chunk[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

/// Streams events out of any reader (exposed for tests).
pub fn read_events(reader: impl Read, sink: &mut dyn FnMut(RawEvent<'_>)) -> Result<ReadStats, ScanError> {
    let found = scan(reader, &mut |bytes| {
        let ev: RawEvent<'_> =
            serde_json::from_slice(bytes).map_err(|e| ScanError::Syntax(format!("a traceEvents entry is not an event object: {e}")))?;
        sink(ev);
        Ok(())
    })?;
    Ok(ReadStats { events: found.events, had_events: found.had_events })
}

fn classify_error(path: &Path, gz: bool, e: ScanError) -> TraceError {
    let path = path.display().to_string();
    match e {
        ScanError::Io(e) if e.get_ref().is_some_and(|i| i.is::<OverLimit>()) => {
            let limit = e.get_ref().and_then(|i| i.downcast_ref::<OverLimit>()).map_or(0, |o| o.0);
            let what = if gz { "once decompressed it holds" } else { "it holds" };
            TraceError::TooLarge {
                path,
                reason: format!(
                    "{what} more than {} of JSON, the limit for this file (a gzip bomb?); give a real trace, or raise the limit with --max-json-mb if this one is (memory grows with it)",
                    size(limit)
                ),
            }
        }
        ScanError::Io(e) if e.get_ref().is_some_and(|i| i.is::<Silent>()) => {
            let secs = e.get_ref().and_then(|i| i.downcast_ref::<Silent>()).map_or(0, |s| s.0.as_secs());
            TraceError::Stalled { path, secs }
        }
        ScanError::TooLarge(what) => TraceError::TooLarge {
            path,
            reason: format!("{what}; a profiler's event is well under a KB, so this is not a Kineto trace (or it is damaged)"),
        },
        ScanError::Io(e) => {
            let what = if gz { "the gzip stream is truncated or corrupt" } else { "the file could not be read" };
            TraceError::Truncated { path, reason: format!("{what} ({e})") }
        }
        ScanError::Eof => TraceError::Truncated { path, reason: "the JSON ends before its last value closes".into() },
        ScanError::Syntax(what) => TraceError::NotATrace { path, reason: format!("not Chrome-trace JSON: {what}") },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A FIFO made with mkfifo(1) in a fresh temporary folder.
    fn fifo() -> (tempfile::TempDir, std::path::PathBuf) {
        let d = tempfile::tempdir().expect("tmp");
        let p = d.path().join("trace.fifo");
        let ok = std::process::Command::new("mkfifo").arg(&p).status().expect("mkfifo").success();
        assert!(ok, "mkfifo");
        (d, p)
    }

    /// A writer thread that opens the FIFO at `p`, sends `bytes` and keeps it open for `hold`.
    fn send_and_hold(p: &Path, bytes: &'static [u8], hold: std::time::Duration) -> std::thread::JoinHandle<()> {
        let p = p.to_path_buf();
        std::thread::spawn(move || {
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new().write(true).open(&p).expect("open for write");
            f.write_all(bytes).expect("send");
            std::thread::sleep(hold);
        })
    }

    #[test]
    fn a_fifo_nobody_writes_to_ends_with_an_error_naming_it_instead_of_blocking() {
        let (_d, p) = fifo();
        let idle = std::time::Duration::from_millis(300);
        let e = events_within(&p, None, idle, &mut |_| {}).expect_err("no writer");
        assert!(matches!(e, TraceError::Stalled { .. }), "{e}");
        assert!(e.to_string().contains("trace.fifo") && e.to_string().contains("FIFO"), "{e}");
        // A writer that opens the FIFO and never sends is silent too.
        let (_d2, p2) = fifo();
        let held = send_and_hold(&p2, b"", std::time::Duration::from_millis(1500));
        let e = events_within(&p2, None, idle, &mut |_| {}).expect_err("silent writer");
        assert!(matches!(e, TraceError::Stalled { .. }), "{e}");
        held.join().expect("writer");
    }

    #[test]
    fn a_fifo_whose_writer_stalls_mid_trace_ends_with_an_error_naming_it() {
        let (_d, p) = fifo();
        let half = br#"{"traceEvents":[{"ph":"X","cat":"kernel","name":"k1","ts":1,"dur":2},"#;
        let held = send_and_hold(&p, half, std::time::Duration::from_secs(6));
        let mut seen = 0;
        // The allowed silence is long enough for the writer's thread to start on a loaded machine.
        let e = events_within(&p, None, std::time::Duration::from_secs(2), &mut |_| seen += 1).expect_err("stalled");
        assert!(matches!(e, TraceError::Stalled { .. }), "{e}");
        assert_eq!(seen, 1, "the event before the stall was read");
        held.join().expect("writer");
    }

    #[test]
    fn a_trace_written_into_a_fifo_is_read_to_its_end() {
        let (_d, p) = fifo();
        let w = p.clone();
        let writer = std::thread::spawn(move || {
            let doc = br#"{"traceEvents":[{"ph":"X","cat":"kernel","name":"k1","ts":1,"dur":2},{"ph":"X","cat":"kernel","name":"k2","ts":4,"dur":2}]}"#;
            std::fs::write(&w, doc).expect("write the FIFO");
        });
        let mut names = Vec::new();
        let stats = events_within(&p, None, std::time::Duration::from_secs(10), &mut |e| names.push(e.name.into_owned())).expect("reads");
        writer.join().expect("writer");
        assert_eq!((stats.events, names), (2, vec!["k1".to_string(), "k2".to_string()]));
    }

    #[test]
    fn a_collective_name_in_args_is_read_whatever_its_spelling_and_anything_else_is_other() {
        for (v, want) in [
            ("allreduce", Collective::AllReduce),
            ("all_reduce_coalesced", Collective::AllReduce),
            ("_allgather_base", Collective::AllGather),
            ("all_gather_into_tensor_coalesced", Collective::AllGather),
            ("broadcast", Collective::Other),
            ("_reduce_scatter_base", Collective::Other),
        ] {
            assert_eq!(Collective::from_name(v), want, "{v}");
        }
        for args in
            [r#"{"Collective name": 3}"#, r#"{"Collective name": [1]}"#, r#"{"Collective name": {"a": 1}}"#, r#"{"Collective name": true}"#]
        {
            let a: EventArgs = serde_json::from_str(args).expect(args);
            assert_eq!(a.collective, Some(Collective::Other), "{args}");
        }
        let a: EventArgs = serde_json::from_str(r#"{"Collective name": null, "correlation": 4}"#).expect("null");
        assert_eq!((a.collective, a.correlation), (None, Some(4)));
    }

    #[test]
    fn streams_events_from_an_object_and_skips_other_keys() {
        let doc = br#"{"schemaVersion":1,"deviceProperties":[{"id":0}],"traceEvents":[
            {"ph":"X","cat":"kernel","name":"k1","pid":0,"tid":7,"ts":10.5,"dur":2,"args":{"correlation":5,"stream":7,"device":0,"grid":[1,1,1]}},
            {"ph":"M","name":"process_name","pid":0,"tid":0,"args":{"name":"GPU 0"}}
        ],"traceName":"x"}"#;
        let mut seen = Vec::new();
        let stats = read_events(&doc[..], &mut |e| seen.push((e.cat, e.args.correlation, e.ts, e.ph, e.name.into_owned()))).expect("reads");
        assert_eq!(stats.events, 2);
        assert_eq!(seen[0], (EventCat::Kernel, Some(5), Some(10.5), Some(Phase::Complete), "k1".to_string()));
        assert_eq!(seen[1].3, Some(Phase::Other));
    }

    #[test]
    fn a_bounded_reader_fails_past_its_limit_with_the_limit_named() {
        let mut r = Bounded { inner: &[0u8; 100][..], limit: 40, left: 40 };
        let mut out = Vec::new();
        let e = r.read_to_end(&mut out).expect_err("over");
        assert!(e.get_ref().is_some_and(|i| i.is::<OverLimit>()), "{e}");
        let e = classify_error(Path::new("t.json.gz"), true, ScanError::Io(e));
        assert_eq!(
            e.to_string(),
            "t.json.gz: once decompressed it holds more than 40 bytes of JSON, the limit for this file (a gzip bomb?); \
             give a real trace, or raise the limit with --max-json-mb if this one is (memory grows with it)"
        );
    }

    #[test]
    fn a_gzipped_trace_may_expand_a_hundredfold_with_a_floor() {
        let dir = std::env::temp_dir();
        let meta = std::fs::metadata(&dir).expect("meta");
        assert_eq!(json_limit(Some(5), true, &meta), Some(5));
        let f = tempfile_with(10 << 20);
        let meta = std::fs::metadata(f.path()).expect("meta");
        assert_eq!(json_limit(None, true, &meta), Some(1000 << 20));
        assert_eq!(json_limit(None, false, &meta), None);
        let small = tempfile_with(10);
        assert_eq!(json_limit(None, true, &std::fs::metadata(small.path()).expect("meta")), Some(GZIP_FLOOR));
    }

    fn tempfile_with(len: u64) -> tempfile::NamedTempFile {
        let f = tempfile::NamedTempFile::new().expect("tmp");
        f.as_file().set_len(len).expect("len");
        f
    }

    #[test]
    fn a_truncated_document_is_an_eof_error() {
        let doc = br#"{"traceEvents":[{"ph":"X","cat":"kernel","name":"k1","ts":1,"dur":2},"#;
        let err = read_events(&doc[..], &mut |_| {}).expect_err("truncated");
        assert!(matches!(err, ScanError::Eof), "{err:?}");
    }
}
