//! Bounded reads of the files servetune is given: every read has a size limit, a FIFO or a device
//! is read with a deadline, and a snapshot's files are opened only when they are regular files.
//!
//! `std::fs::read` on a user's path reads `/dev/zero` until memory runs out and blocks forever
//! on a FIFO nobody writes to; the readers here end both with an error that names the input, the
//! limit and the fix. The API is a few functions and one error:
//!
//! - [`read_bytes`] and [`read_text`]: a path a user named (a flag's file). Symlinks are followed
//!   (`/dev/stdin` and `<(cmd)` are fine); a regular file is checked against the limit before it
//!   is read; anything else (a pipe, a device) is read on a helper thread within
//!   [`STREAM_DEADLINE`].
//! - [`read_regular`]: a file inside a tree someone else wrote (a probe snapshot). It is opened
//!   only when it is a regular file and not a symlink, so a FIFO or a device node there is never
//!   opened for reading. [`read_tail`] reads the end of such a file (a log's last lines).

#![warn(missing_docs)]

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

/// How long a read from a pipe or a device may take in all. A config or a measurement document
/// piped from another command arrives in well under a second; a FIFO that nobody writes to
/// would otherwise block the command forever.
pub const STREAM_DEADLINE: Duration = Duration::from_secs(30);

/// One mebibyte, for limits.
pub const MIB: u64 = 1 << 20;

/// Why an input could not be read. Each message starts with the input's name as the caller gave
/// it (e.g. `--model-config /dev/zero`), says what is wrong and how to fix it.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The file could not be opened or read.
    #[error("{input}: cannot read it ({source})")]
    Io {
        /// The input's name.
        input: String,
        /// The operating system's reason.
        source: std::io::Error,
    },
    /// A directory was given where a file was expected.
    #[error("{input}: is a directory; give a file")]
    Directory {
        /// The input's name.
        input: String,
    },
    /// A snapshot entry that is not a regular file (a FIFO, a device node, a socket, a symlink).
    #[error("{input}: is a {kind}, not a regular file, so it is not read; a capture holds only regular files and symlinks")]
    NotRegular {
        /// The input's name.
        input: String,
        /// What it is, in words.
        kind: &'static str,
    },
    /// The input is larger than its limit.
    #[error("{input}: larger than {}, the most this input may hold; give the file itself (not a device or an endless stream)", size(*limit))]
    TooLarge {
        /// The input's name.
        input: String,
        /// The limit in bytes.
        limit: u64,
    },
    /// A pipe or a device did not reach its end within the deadline.
    #[error("{input}: did not reach its end within {} s (a FIFO or a device nobody writes to?); give a regular file, or make the writer finish", deadline.as_secs_f64())]
    TimedOut {
        /// The input's name.
        input: String,
        /// The deadline that passed.
        deadline: Duration,
    },
    /// The input is not UTF-8 text (or holds a NUL byte).
    #[error("{input}: not UTF-8 text (a NUL or invalid byte at offset {offset}: binary data?); give the text file itself")]
    NotText {
        /// The input's name.
        input: String,
        /// Where the first invalid byte is.
        offset: usize,
    },
}

fn size(bytes: u64) -> String {
    if bytes >= MIB && bytes.is_multiple_of(MIB) {
        format!("{} MiB", bytes / MIB)
    } else {
        format!("{bytes} bytes")
    }
}

/// Reads the file a user named, at most `max_bytes` of it. `input` names it in errors (the flag
/// and the path, e.g. `--fabric f.json`). A pipe or a device must reach its end within
/// [`STREAM_DEADLINE`].
pub fn read_bytes(path: &Path, input: &str, max_bytes: u64) -> Result<Vec<u8>, ReadError> {
    read_within(path, input, max_bytes, STREAM_DEADLINE)
}

/// [`read_bytes`] of UTF-8 text. The check runs as the bytes arrive, so a binary file or device
/// (`/dev/zero`, `/dev/urandom`) given for a text input stops at its first byte that is not text
/// (invalid UTF-8, or a NUL, which no JSON, TOML or YAML text holds) instead of at the size limit.
pub fn read_text(path: &Path, input: &str, max_bytes: u64) -> Result<String, ReadError> {
    let bytes = read_impl(path, input, max_bytes, STREAM_DEADLINE, true)?;
    String::from_utf8(bytes).map_err(|e| ReadError::NotText { input: input.to_string(), offset: e.utf8_error().valid_up_to() })
}

/// [`read_bytes`] with its own deadline for a pipe or a device (a regular file is read in place:
/// its size is known before it is read).
pub fn read_within(path: &Path, input: &str, max_bytes: u64, deadline: Duration) -> Result<Vec<u8>, ReadError> {
    read_impl(path, input, max_bytes, deadline, false)
}

fn read_impl(path: &Path, input: &str, max_bytes: u64, deadline: Duration, text: bool) -> Result<Vec<u8>, ReadError> {
    let io = |source| ReadError::Io { input: input.to_string(), source };
    let meta = std::fs::metadata(path).map_err(io)?;
    if meta.is_dir() {
        return Err(ReadError::Directory { input: input.to_string() });
    }
    if meta.is_file() {
        if meta.len() > max_bytes {
            return Err(ReadError::TooLarge { input: input.to_string(), limit: max_bytes });
        }
        let f = File::open(path).map_err(io)?;
        return if text { take_text(f, input, max_bytes) } else { take(f, input, max_bytes) };
    }
    // A pipe or a device: opening a FIFO blocks until a writer comes, and reading either may
    // never end, so both happen on a thread the caller stops waiting for at the deadline. A
    // thread left behind stays blocked in the kernel until the process exits; it holds no lock.
    let (tx, rx) = mpsc::channel();
    let (p, name) = (path.to_path_buf(), input.to_string());
    std::thread::spawn(move || {
        let r = File::open(&p).map_err(|source| ReadError::Io { input: name.clone(), source }).and_then(|f| {
            if text {
                take_text(f, &name, max_bytes)
            } else {
                take(f, &name, max_bytes)
            }
        });
        let _ = tx.send(r);
    });
    rx.recv_timeout(deadline).unwrap_or_else(|_| Err(ReadError::TimedOut { input: input.to_string(), deadline }))
}

/// Reads a file of a tree someone else wrote (a snapshot), at most `max_bytes`. Only a regular
/// file is opened: a symlink, a FIFO, a device node or a socket is refused before any read (it
/// is checked before opening, and the opened file again, so a swap in between is caught too).
pub fn read_regular(path: &Path, input: &str, max_bytes: u64) -> Result<Vec<u8>, ReadError> {
    let io = |source| ReadError::Io { input: input.to_string(), source };
    let meta = std::fs::symlink_metadata(path).map_err(io)?;
    check_regular(&meta, input)?;
    // O_NOFOLLOW: a symlink put in place since the check is not followed; O_NONBLOCK: a FIFO put
    // there does not block the open (it is then refused by the check below).
    let f = OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(path).map_err(io)?;
    let meta = f.metadata().map_err(io)?;
    check_regular(&meta, input)?;
    if meta.len() > max_bytes {
        return Err(ReadError::TooLarge { input: input.to_string(), limit: max_bytes });
    }
    take(f, input, max_bytes)
}

/// The last `max_bytes` of a regular file of a tree someone else wrote (a log, a task's stderr):
/// opened as [`read_regular`] opens it, so never a symlink, a FIFO or a device.
pub fn read_tail(path: &Path, input: &str, max_bytes: u64) -> Result<Vec<u8>, ReadError> {
    use std::io::{Seek, SeekFrom};
    let io = |source| ReadError::Io { input: input.to_string(), source };
    let meta = std::fs::symlink_metadata(path).map_err(io)?;
    check_regular(&meta, input)?;
    let mut f = OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(path).map_err(io)?;
    let meta = f.metadata().map_err(io)?;
    check_regular(&meta, input)?;
    f.seek(SeekFrom::Start(meta.len().saturating_sub(max_bytes))).map_err(io)?;
    let mut out = Vec::new();
    f.take(max_bytes).read_to_end(&mut out).map_err(io)?;
    Ok(out)
}

fn check_regular(meta: &std::fs::Metadata, input: &str) -> Result<(), ReadError> {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    let kind = if t.is_file() {
        return Ok(());
    } else if t.is_dir() {
        return Err(ReadError::Directory { input: input.to_string() });
    } else if t.is_symlink() {
        "symlink"
    } else if t.is_fifo() {
        "FIFO"
    } else if t.is_char_device() {
        "character device"
    } else if t.is_block_device() {
        "block device"
    } else if t.is_socket() {
        "socket"
    } else {
        "special file"
    };
    Err(ReadError::NotRegular { input: input.to_string(), kind })
}

/// Reads `r` to its end, refusing more than `max_bytes` (one byte past the limit is read to know).
fn take(r: impl Read, input: &str, max_bytes: u64) -> Result<Vec<u8>, ReadError> {
    let mut out = Vec::new();
    r.take(max_bytes.saturating_add(1)).read_to_end(&mut out).map_err(|source| ReadError::Io { input: input.to_string(), source })?;
    if out.len() as u64 > max_bytes {
        return Err(ReadError::TooLarge { input: input.to_string(), limit: max_bytes });
    }
    Ok(out)
}

/// [`take`] of text: read in chunks, each checked as it arrives (UTF-8, no NUL), so that a binary
/// stream is refused at its first bad byte, not after `max_bytes` of it.
fn take_text(mut r: impl Read, input: &str, max_bytes: u64) -> Result<Vec<u8>, ReadError> {
    let io = |source| ReadError::Io { input: input.to_string(), source };
    let not_text = |offset| ReadError::NotText { input: input.to_string(), offset };
    let mut out: Vec<u8> = Vec::new();
    let mut chunk = vec![0u8; 1 << 16];
    // Bytes before `valid` are checked; a character cut at a chunk's end is checked with the next.
    let mut valid = 0usize;
    loop {
        let n = match r.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(io(e)),
        };
        out.extend_from_slice(&chunk[..n]);
        if out.len() as u64 > max_bytes {
            return Err(ReadError::TooLarge { input: input.to_string(), limit: max_bytes });
        }
        // The first bad byte, whichever it is: a NUL, or a byte that is not UTF-8.
        let nul = out[valid..].iter().position(|b| *b == 0).map(|at| valid + at);
        let (bad, checked) = match std::str::from_utf8(&out[valid..]) {
            Ok(_) => (None, out.len()),
            Err(e) if e.error_len().is_some() => (Some(valid + e.valid_up_to()), valid),
            Err(e) => (None, valid + e.valid_up_to()),
        };
        if let Some(at) = [nul, bad].into_iter().flatten().min() {
            return Err(not_text(at));
        }
        valid = checked;
    }
    if valid < out.len() {
        return Err(not_text(valid));
    }
    Ok(out)
}

/// Opens `path` for writing, emptied (`truncate`) or not, without following a symbolic link at
/// it: a file servetune writes in a folder it owns (a campaign's lock, a step's log) must not
/// become a write to wherever a planted link points. A link is refused saying so.
pub fn open_plain_for_write(path: &Path, truncate: bool) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) {
        return Err(std::io::Error::other(format!(
            "{} is a symbolic link; servetune writes its own files there only as plain files: remove the link",
            path.display()
        )));
    }
    std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(truncate).custom_flags(libc::O_NOFOLLOW).open(path)
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_link_is_never_written_through_and_a_plain_file_is() {
        let d = tempfile::tempdir().expect("tmp");
        let victim = d.path().join("victim");
        std::fs::write(&victim, "precious").expect("write");
        let link = d.path().join("lock");
        std::os::unix::fs::symlink(&victim, &link).expect("link");
        let e = super::open_plain_for_write(&link, true).expect_err("a link");
        assert!(e.to_string().contains("is a symbolic link"), "{e}");
        assert_eq!(std::fs::read_to_string(&victim).expect("kept"), "precious");
        let plain = d.path().join("plain");
        std::fs::write(&plain, "old").expect("write");
        use std::io::Write;
        super::open_plain_for_write(&plain, true).expect("plain").write_all(b"new").expect("write");
        assert_eq!(std::fs::read_to_string(&plain).expect("read"), "new");
    }
    use super::*;

    fn mkfifo(p: &Path) {
        let ok = std::process::Command::new("mkfifo").arg(p).status().expect("mkfifo runs").success();
        assert!(ok, "mkfifo {}", p.display());
    }

    #[test]
    fn a_binary_stream_given_as_text_stops_at_its_first_bad_byte_not_at_the_limit() {
        // /dev/zero under a 1 GiB limit: refused at offset 0, after one chunk, not 1 GiB in.
        match read_text(Path::new("/dev/zero"), "--dataset /dev/zero", 1 << 30) {
            Err(ReadError::NotText { offset: 0, .. }) => {}
            other => panic!("{other:?}"),
        }
        let e = read_text(Path::new("/dev/urandom"), "--dataset /dev/urandom", 1 << 30).expect_err("random bytes");
        assert!(matches!(e, ReadError::NotText { .. }), "{e:?}");
        assert!(e.to_string().starts_with("--dataset /dev/urandom: not UTF-8 text"), "{e}");
        let dir = tempfile::tempdir().expect("tmp");
        // A character cut at the 64 KiB chunk's end is text; a bad byte later is found at its offset.
        let mut text = vec![b'a'; (1 << 16) - 1];
        text.extend_from_slice("é and more".as_bytes());
        let p = dir.path().join("ok.jsonl");
        std::fs::write(&p, &text).expect("write");
        assert_eq!(read_text(&p, "ok", 1 << 20).expect("text").len(), text.len());
        let mut bad = text.clone();
        bad.extend_from_slice(b"\xff tail");
        std::fs::write(&p, &bad).expect("write");
        match read_text(&p, "bad", 1 << 20) {
            Err(ReadError::NotText { offset, .. }) => assert_eq!(offset, text.len()),
            other => panic!("{other:?}"),
        }
        // The first bad byte is named, an invalid one before a NUL as a NUL before an invalid one.
        std::fs::write(&p, b"ab\xffc\0d").expect("write");
        assert!(matches!(read_text(&p, "x", 64), Err(ReadError::NotText { offset: 2, .. })));
        std::fs::write(&p, b"ab\0c\xffd").expect("write");
        assert!(matches!(read_text(&p, "x", 64), Err(ReadError::NotText { offset: 2, .. })));
        // A file ending inside a character is not text either.
        std::fs::write(&p, &"é".as_bytes()[..1]).expect("write");
        assert!(matches!(read_text(&p, "cut", 64), Err(ReadError::NotText { offset: 0, .. })));
    }

    #[test]
    fn a_regular_file_within_its_limit_is_read_whole() {
        let dir = tempfile::tempdir().expect("tmp");
        let p = dir.path().join("c.json");
        std::fs::write(&p, "{\"a\": 1}").expect("write");
        assert_eq!(read_text(&p, "--model-config c.json", 64).expect("read"), "{\"a\": 1}");
        assert_eq!(read_regular(&p, "c.json", 64).expect("read"), b"{\"a\": 1}");
    }

    #[test]
    fn a_file_over_its_limit_is_refused_naming_the_input_and_the_limit() {
        let dir = tempfile::tempdir().expect("tmp");
        let p = dir.path().join("big");
        std::fs::write(&p, vec![b'x'; 2 * MIB as usize + 1]).expect("write");
        for e in [read_bytes(&p, "--fabric big", 2 * MIB).expect_err("big"), read_regular(&p, "sys/x", 2 * MIB).expect_err("big")] {
            assert!(matches!(e, ReadError::TooLarge { limit, .. } if limit == 2 * MIB), "{e}");
        }
        let e = read_bytes(&p, "--fabric big", 2 * MIB).expect_err("big");
        assert_eq!(
            e.to_string(),
            "--fabric big: larger than 2 MiB, the most this input may hold; give the file itself (not a device or an endless stream)"
        );
    }

    #[test]
    fn an_endless_device_stops_at_the_limit() {
        let e = read_bytes(Path::new("/dev/zero"), "--model-config /dev/zero", MIB).expect_err("endless");
        assert!(matches!(e, ReadError::TooLarge { .. }), "{e}");
        assert!(e.to_string().starts_with("--model-config /dev/zero: larger than 1 MiB"), "{e}");
    }

    #[test]
    fn a_fifo_nobody_writes_to_times_out() {
        let dir = tempfile::tempdir().expect("tmp");
        let p = dir.path().join("fifo");
        mkfifo(&p);
        let e = read_within(&p, "--engines fifo", MIB, Duration::from_millis(100)).expect_err("nobody writes");
        assert!(matches!(e, ReadError::TimedOut { .. }), "{e}");
        assert!(e.to_string().contains("--engines fifo: did not reach its end within 0.1 s"), "{e}");
    }

    #[test]
    fn a_fifo_with_a_writer_is_read() {
        let dir = tempfile::tempdir().expect("tmp");
        let p = dir.path().join("fifo");
        mkfifo(&p);
        let w = p.clone();
        let writer = std::thread::spawn(move || std::fs::write(w, "hello"));
        assert_eq!(read_text(&p, "fifo", 64).expect("read"), "hello");
        writer.join().expect("writer").expect("write");
    }

    #[test]
    fn a_snapshot_reader_never_opens_a_fifo_a_device_or_a_symlink() {
        let dir = tempfile::tempdir().expect("tmp");
        let fifo = dir.path().join("fifo");
        mkfifo(&fifo);
        let e = read_regular(&fifo, "sys/fifo", MIB).expect_err("fifo");
        assert!(matches!(e, ReadError::NotRegular { kind: "FIFO", .. }), "{e}");
        let e = read_regular(Path::new("/dev/zero"), "dev/zero", MIB).expect_err("device");
        assert!(matches!(e, ReadError::NotRegular { kind: "character device", .. }), "{e}");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink("/etc/hostname", &link).expect("symlink");
        let e = read_regular(&link, "link", MIB).expect_err("symlink");
        assert!(matches!(e, ReadError::NotRegular { kind: "symlink", .. }), "{e}");
        let e = read_regular(dir.path(), "dir", MIB).expect_err("dir");
        assert!(matches!(e, ReadError::Directory { .. }), "{e}");
    }

    #[test]
    fn a_tail_read_keeps_only_the_end_and_refuses_a_fifo() {
        let dir = tempfile::tempdir().expect("tmp");
        let p = dir.path().join("err");
        std::fs::write(&p, "first line\nlast line\n").expect("write");
        assert_eq!(read_tail(&p, "err", 10).expect("tail"), b"last line\n");
        assert_eq!(read_tail(&p, "err", 1000).expect("tail"), b"first line\nlast line\n");
        let fifo = dir.path().join("fifo");
        mkfifo(&fifo);
        let e = read_tail(&fifo, "fifo", 10).expect_err("fifo");
        assert!(matches!(e, ReadError::NotRegular { kind: "FIFO", .. }), "{e}");
    }

    #[test]
    fn text_that_is_not_utf8_names_the_offset() {
        let dir = tempfile::tempdir().expect("tmp");
        let p = dir.path().join("t");
        std::fs::write(&p, b"ab\xffcd").expect("write");
        let e = read_text(&p, "--engines t", 64).expect_err("binary");
        assert_eq!(
            e.to_string(),
            "--engines t: not UTF-8 text (a NUL or invalid byte at offset 2: binary data?); give the text file itself"
        );
    }
}
