//! One controller per campaign: `campaign continue` (and the demo) hold an exclusive lock on
//! `DIR/controller.lock` for as long as they run steps, with their pid written in it, so a second
//! one started on the same campaign stops at once saying which process holds it, instead of
//! racing the first through the planner. The lock is the kernel's (`flock`): it goes with the
//! process, so a `kill -9` leaves no stale lock behind.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::path::Path;

use crate::{CampaignError, Result};

/// The lock file beside the journal.
pub const FILE: &str = "controller.lock";

/// The held lock; dropping it releases it.
#[derive(Debug)]
pub struct Controller {
    _file: File,
}

#[expect(unsafe_code, reason = "flock(2) on a file this process owns; no memory is shared")]
fn try_lock(f: &File) -> std::io::Result<bool> {
    // SAFETY: the descriptor is valid for the call; flock only changes the lock on it.
    let r = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if r == 0 {
        return Ok(true);
    }
    let e = std::io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Ok(false)
    } else {
        Err(e)
    }
}

/// Takes the campaign in `dir` for this process, or says who has it.
pub fn acquire(dir: &Path) -> Result<Controller> {
    // A directory without a campaign is refused as every command refuses it, before any file is made.
    if !crate::journal::path_in(dir).is_file() {
        crate::journal::Journal::open(dir)?;
    }
    let p = dir.join(FILE);
    if let Ok(m) = std::fs::symlink_metadata(&p) {
        if !m.is_file() && !m.file_type().is_symlink() {
            return Err(CampaignError::Input(format!(
                "{}: the campaign's controller lock is not a regular file (a folder, a FIFO or a device): remove it; continue makes a new one",
                p.display()
            )));
        }
    }
    let io = |e: std::io::Error| CampaignError::Runtime(format!("{}: cannot take the campaign's controller lock ({e})", p.display()));
    match lock(&p).map_err(io)? {
        Ok(f) => Ok(Controller { _file: f }),
        Err(pid) => Err(CampaignError::Runtime(format!(
            "{}: another servetune campaign continue{} is running this campaign; wait for it to stop, or stop it (its step is then recorded as interrupted)",
            dir.display(),
            if pid.is_empty() { String::new() } else { format!(" (pid {pid})") }
        ))),
    }
}

/// Takes the exclusive lock on file `p` (made if missing, never through a link) and writes this
/// process's pid in it; or, when another process holds it, returns the pid that one wrote (empty
/// if none). The demo takes its folder's lock with it, and checks the controller's before it
/// removes anything.
pub fn lock(p: &Path) -> std::io::Result<std::result::Result<File, String>> {
    let mut f = servetune_io::open_plain_for_write(p, false)?;
    if !try_lock(&f)? {
        let mut pid = String::new();
        // A pid is a few digits: the file is ours, but bound the read all the same.
        let _ = (&f).take(64).read_to_string(&mut pid);
        return Ok(Err(pid.trim().to_string()));
    }
    f.set_len(0)?;
    f.seek(SeekFrom::Start(0))?;
    write!(f, "{}", std::process::id())?;
    Ok(Ok(f))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_controller_is_told_the_first_ones_pid_and_gets_it_once_released() {
        let d = tempfile::tempdir().expect("tmp");
        assert!(acquire(d.path()).is_err(), "no campaign there");
        std::fs::write(crate::journal::path_in(d.path()), b"").expect("journal file");
        let first = acquire(d.path()).expect("first");
        let e = acquire(d.path()).expect_err("second");
        assert!(e.to_string().contains(&format!("pid {}", std::process::id())), "{e}");
        drop(first);
        assert!(acquire(d.path()).is_ok(), "released with the first");
    }

    /// A lock that is a folder is bad input naming it, not a runtime failure.
    #[test]
    fn a_lock_that_is_a_folder_is_refused_as_input() {
        let d = tempfile::tempdir().expect("tmp");
        std::fs::write(crate::journal::path_in(d.path()), b"").expect("journal file");
        std::fs::create_dir(d.path().join(FILE)).expect("mkdir");
        match acquire(d.path()) {
            Err(CampaignError::Input(m)) => assert!(m.contains("not a regular file"), "{m}"),
            other => panic!("want an input error, got {:?}", other.err()),
        }
    }

    /// A lock planted as a link to another file is refused; the file it names keeps its content.
    #[test]
    fn a_lock_that_is_a_link_is_refused_and_its_target_kept() {
        let d = tempfile::tempdir().expect("tmp");
        std::fs::write(crate::journal::path_in(d.path()), b"").expect("journal file");
        let victim = d.path().join("victim.txt");
        std::fs::write(&victim, "precious").expect("write");
        std::os::unix::fs::symlink(&victim, d.path().join(FILE)).expect("link");
        let e = acquire(d.path()).expect_err("a link");
        assert!(e.to_string().contains("is a symbolic link"), "{e}");
        assert_eq!(std::fs::read_to_string(&victim).expect("kept"), "precious");
    }
}
