//! The files a probe reads, through one seam: a filesystem root (`/` live, a snapshot offline), and
//! a recorder that remembers every path read so `--capture` can copy exactly those.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Read-only access to a filesystem under a root. Paths are absolute as on the real machine.
#[derive(Debug)]
pub struct Root {
    root: PathBuf,
    /// Paths read (files), links read and directories listed, when recording.
    record: Option<Mutex<Recorded>>,
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
        Self { root: PathBuf::from("/"), record: None }
    }

    /// A snapshot tree.
    pub fn at(root: &Path) -> Self {
        Self { root: root.to_path_buf(), record: None }
    }

    /// The live filesystem, remembering what is read.
    pub fn recording() -> Self {
        Self { root: PathBuf::from("/"), record: Some(Mutex::new(Recorded::default())) }
    }

    /// What was read so far (empty unless recording).
    pub fn recorded(&self) -> Recorded {
        self.record.as_ref().and_then(|r| r.lock().ok().map(|r| r.clone())).unwrap_or_default()
    }

    fn path(&self, p: &str) -> PathBuf {
        self.root.join(p.trim_start_matches('/'))
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
        let s = std::fs::read(self.path(p)).ok()?;
        self.note(|r| {
            r.files.insert(p.to_string());
        });
        Some(String::from_utf8_lossy(&s).trim().to_string())
    }

    /// A file's bytes.
    pub fn read_bytes(&self, p: &str) -> Option<Vec<u8>> {
        let s = std::fs::read(self.path(p)).ok()?;
        self.note(|r| {
            r.files.insert(p.to_string());
        });
        Some(s)
    }

    /// Whether the path exists (file or directory).
    pub fn exists(&self, p: &str) -> bool {
        let e = self.path(p).exists();
        if e {
            self.note(|r| {
                if self.path(p).is_dir() {
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
        let mut v: Vec<String> = std::fs::read_dir(self.path(p))
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

    /// A symlink's target, as written.
    pub fn readlink(&self, p: &str) -> Option<String> {
        let t = std::fs::read_link(self.path(p)).ok()?;
        self.note(|r| {
            r.links.insert(p.to_string());
        });
        Some(t.to_string_lossy().to_string())
    }
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
        let Ok(bytes) = std::fs::read(&canon) else { continue };
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
