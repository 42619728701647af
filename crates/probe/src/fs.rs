//! The files a probe reads, through one seam: a filesystem root (`/` live, a snapshot offline), and
//! a recorder that remembers every path read so `--capture` can copy exactly those.
//!
//! A snapshot is someone else's tree: its symlinks are resolved here, component by component,
//! inside the root (an absolute target means the captured machine's path, so it is taken under
//! the root; a `..` above the root is refused), and only regular files are opened, at most
//! [`MAX_FILE`] bytes each. A FIFO, a device node or a link out of the snapshot is skipped with
//! a note ([`Root::notes`]), never read.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;

/// The most one file of a probe may hold: sysfs attributes are at most a page, PCI config space
/// 4 KB, `/proc/cpuinfo` of a 512-thread machine under 1 MB.
pub const MAX_FILE: u64 = 16 << 20;

/// Symlinks followed for one path before it is taken as a loop (Linux's own limit).
const MAX_LINK_HOPS: usize = 40;

/// Read-only access to a filesystem under a root. Paths are absolute as on the real machine.
#[derive(Debug)]
pub struct Root {
    root: PathBuf,
    /// Paths read (files), links read and directories listed, when recording.
    record: Option<Mutex<Recorded>>,
    /// Paths skipped, with why (a FIFO, a device, a link out of the root, a file too large).
    notes: Mutex<Vec<String>>,
}

/// What a recording root saw, as absolute paths on the real machine.
#[derive(Debug, Default, Clone)]
pub struct Recorded {
    /// Files read, or found to exist.
    pub files: BTreeSet<String>,
    /// Symlinks read.
    pub links: BTreeSet<String>,
    /// Directories listed, or found to exist.
    pub dirs: BTreeSet<String>,
}

impl Root {
    /// The live filesystem.
    pub fn live() -> Self {
        Self { root: PathBuf::from("/"), record: None, notes: Mutex::default() }
    }

    /// A snapshot tree.
    pub fn at(root: &Path) -> Self {
        Self { root: root.to_path_buf(), record: None, notes: Mutex::default() }
    }

    /// The live filesystem, remembering what is read.
    pub fn recording() -> Self {
        Self { root: PathBuf::from("/"), record: Some(Mutex::new(Recorded::default())), notes: Mutex::default() }
    }

    /// The paths skipped so far and why, one sentence each (empty when nothing was skipped).
    pub fn notes(&self) -> Vec<String> {
        self.notes.lock().map(|n| n.clone()).unwrap_or_default()
    }

    /// Notes `why` once: a path skipped, or a value read that is shown as unknown.
    pub(crate) fn skip(&self, why: String) {
        if let Ok(mut n) = self.notes.lock() {
            if !n.contains(&why) {
                n.push(why);
            }
        }
    }

    /// What was read so far (empty unless recording).
    pub fn recorded(&self) -> Recorded {
        self.record.as_ref().and_then(|r| r.lock().ok().map(|r| r.clone())).unwrap_or_default()
    }

    /// Where `p` (absolute, as on the real machine) is under the root, its symlinks resolved
    /// inside the root. `Err` says why the path leaves the root or cannot be resolved.
    fn resolve(&self, p: &str) -> Result<PathBuf, String> {
        let mut todo: Vec<OsString> = components(Path::new(p)).into_iter().rev().collect();
        let mut at: Vec<OsString> = Vec::new();
        let mut hops = 0;
        while let Some(c) = todo.pop() {
            if c == ".." {
                if at.pop().is_none() {
                    return Err(format!("{p}: a symlink on its way leads out of the snapshot, so it is not read"));
                }
                continue;
            }
            let here: PathBuf = self.root.iter().chain(at.iter().map(|s| s.as_os_str())).chain([c.as_os_str()]).collect();
            match std::fs::symlink_metadata(&here) {
                Ok(m) if m.file_type().is_symlink() => {
                    hops += 1;
                    if hops > MAX_LINK_HOPS {
                        return Err(format!("{p}: more than {MAX_LINK_HOPS} symlinks on its way (a loop), so it is not read"));
                    }
                    let target = std::fs::read_link(&here).map_err(|e| format!("{p}: {e}"))?;
                    if target.is_absolute() {
                        at.clear();
                    }
                    todo.extend(components(&target).into_iter().rev());
                }
                _ => at.push(c),
            }
        }
        Ok(self.root.iter().chain(at.iter().map(|s| s.as_os_str())).collect())
    }

    /// [`Self::resolve`], with a refused path noted.
    fn path(&self, p: &str) -> Option<PathBuf> {
        self.resolve(p).map_err(|why| self.skip(why)).ok()
    }

    /// The bytes of the regular file at `p`: `Ok(None)` when it is missing, `Err` (saying why) when
    /// it is there but is not read: a FIFO, a device, a link out of the root, too large,
    /// unreadable.
    pub fn read_file(&self, p: &str) -> Result<Option<Vec<u8>>, String> {
        let path = self.resolve(p)?;
        match servetune_io::read_regular(&path, p, MAX_FILE) {
            Ok(b) => Ok(Some(b)),
            Err(servetune_io::ReadError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                // A link whose target is not there (an absolute one is looked up inside the
                // root) is not a missing file: the file was there and is not read.
                let at: PathBuf = self.root.iter().chain(components(Path::new(p)).iter().map(|c| c.as_os_str())).collect();
                match std::fs::read_link(&at) {
                    Ok(target) => Err(format!(
                        "{p}: a symlink to {}, which is not in the snapshot (an absolute target is looked up inside it), so it is not read",
                        target.display()
                    )),
                    Err(_) => Ok(None),
                }
            }
            Err(e) => Err(e.to_string()),
        }
    }

    /// [`Self::read_file`], a skipped file noted.
    fn bytes(&self, p: &str) -> Option<Vec<u8>> {
        self.read_file(p).unwrap_or_else(|why| {
            self.skip(why);
            None
        })
    }

    fn note(&self, f: impl FnOnce(&mut Recorded)) {
        if let Some(r) = &self.record {
            if let Ok(mut r) = r.lock() {
                f(&mut r);
            }
        }
    }

    /// A file's text, trimmed; `None` when missing or unreadable.
    pub fn read(&self, p: &str) -> Option<String> {
        let s = self.bytes(p)?;
        self.note(|r| {
            r.files.insert(p.to_string());
        });
        Some(String::from_utf8_lossy(&s).trim().to_string())
    }

    /// A file's bytes.
    pub fn read_bytes(&self, p: &str) -> Option<Vec<u8>> {
        let s = self.bytes(p)?;
        self.note(|r| {
            r.files.insert(p.to_string());
        });
        Some(s)
    }

    /// Whether the path exists (file or directory).
    pub fn exists(&self, p: &str) -> bool {
        let Some(path) = self.path(p) else { return false };
        let e = path.symlink_metadata().is_ok();
        if e {
            self.note(|r| {
                if path.is_dir() {
                    r.dirs.insert(p.to_string());
                } else {
                    r.files.insert(p.to_string());
                }
            });
        }
        e
    }

    /// Entry names of a directory, sorted.
    pub fn list(&self, p: &str) -> Vec<String> {
        let Some(path) = self.path(p) else { return Vec::new() };
        let mut v: Vec<String> = std::fs::read_dir(path)
            .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().to_string()).collect())
            .unwrap_or_default();
        v.sort();
        if !v.is_empty() {
            self.note(|r| {
                r.dirs.insert(p.to_string());
            });
        }
        v
    }

    /// A symlink's target, as written (the link is read, not followed).
    pub fn readlink(&self, p: &str) -> Option<String> {
        let (parent, name) = p.trim_end_matches('/').rsplit_once('/')?;
        let t = std::fs::read_link(self.path(if parent.is_empty() { "/" } else { parent })?.join(name)).ok()?;
        self.note(|r| {
            r.links.insert(p.to_string());
        });
        Some(t.to_string_lossy().to_string())
    }
}

/// A path's names, without the root and `.` (`..` kept, to be resolved).
fn components(p: &Path) -> Vec<OsString> {
    p.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_os_string()),
            Component::ParentDir => Some(OsString::from("..")),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => None,
        })
        .collect()
}

/// Copies what `rec` lists from the live root into `dir`, laid out as on the real filesystem:
/// symlinks as symlinks (relative targets kept), files by content under their real location.
pub fn copy_recorded(rec: &Recorded, dir: &Path) -> std::io::Result<usize> {
    let mut n = 0;
    let dst = |p: &str| dir.join(p.trim_start_matches('/'));
    let mut links: Vec<&String> = rec.links.iter().collect();
    links.sort_by_key(|l| l.len());
    for l in links {
        let Ok(target) = std::fs::read_link(l) else { continue };
        let d = dst(l);
        if let Some(parent) = d.parent() {
            std::fs::create_dir_all(parent)?;
        }
        if d.symlink_metadata().is_err() {
            std::os::unix::fs::symlink(&target, &d)?;
            n += 1;
        }
    }
    for f in &rec.files {
        // Store under the canonical path so files read through symlinked directories land where
        // the captured links point.
        let canon = std::fs::canonicalize(f).unwrap_or_else(|_| PathBuf::from(f));
        // The same rule as a snapshot's reader: a regular file, at most MAX_FILE.
        let Ok(bytes) = servetune_io::read_regular(&canon, f, MAX_FILE) else { continue };
        let d = dst(&canon.to_string_lossy());
        if let Some(parent) = d.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&d, bytes)?;
        n += 1;
    }
    for d in &rec.dirs {
        let canon = std::fs::canonicalize(d).unwrap_or_else(|_| PathBuf::from(d));
        std::fs::create_dir_all(dst(&canon.to_string_lossy()))?;
    }
    Ok(n)
}
