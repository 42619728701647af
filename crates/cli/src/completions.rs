//! `servetune completions SHELL` and `servetune man`: shell completion scripts and a man page,
//! generated from the clap definition so they list exactly the flags the binary parses.

use std::io::Write;

use clap::{Args, ValueEnum};

use crate::Failure;

/// A shell `servetune completions` writes a script for.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Shell {
    /// bash (with the bash-completion package)
    Bash,
    /// zsh
    Zsh,
    /// fish
    Fish,
}

/// Print a shell completion script to stdout.
#[derive(Debug, Args)]
#[command(after_help = "Install (one of):\n  \
    mkdir -p ~/.local/share/bash-completion/completions && servetune completions bash > ~/.local/share/bash-completion/completions/servetune\n  \
    mkdir -p ~/.zfunc && servetune completions zsh > ~/.zfunc/_servetune     # with fpath+=(~/.zfunc) before compinit in ~/.zshrc\n  \
    mkdir -p ~/.config/fish/completions && servetune completions fish > ~/.config/fish/completions/servetune.fish")]
pub struct CompletionsArgs {
    /// The shell to complete for
    #[arg(value_enum)]
    pub shell: Shell,
}

/// Print the man page (roff) to stdout, or write one page per subcommand to a directory.
#[derive(Debug, Args)]
#[command(after_help = "Install (every page: servetune(1), servetune-plan(1), servetune-campaign-init(1), ...):\n  \
    servetune man --dir ~/.local/share/man/man1\n  \
    man servetune-plan")]
pub struct ManArgs {
    /// Write servetune.1 and one page per subcommand (servetune-plan.1, servetune-campaign-init.1, ...) into DIR, creating it, instead of printing servetune.1
    #[arg(long, value_name = "DIR")]
    pub dir: Option<std::path::PathBuf>,
}

/// Writes the completion script of `cmd` for `a.shell` to stdout.
pub fn completions(a: CompletionsArgs, cmd: clap::Command) -> Result<(), Failure> {
    write_stdout(&script(a.shell, cmd))
}

/// Writes the man page of `cmd` to stdout, or with `--dir` every page into that directory.
pub fn man(a: ManArgs, cmd: clap::Command) -> Result<(), Failure> {
    match a.dir {
        None => write_stdout(&page(cmd)?),
        Some(dir) => {
            pages(cmd, &dir)?;
            let root = dir.parent().filter(|_| dir.ends_with("man1")).unwrap_or(&dir);
            eprintln!(
                "wrote the man pages to {}; read them with `man servetune-plan` and so on (if man does not find them: export MANPATH=\"{}:$MANPATH\")",
                dir.display(),
                root.display()
            );
            Ok(())
        }
    }
}

/// Writes `servetune.1` and a page for every visible subcommand, nested ones included, into `dir`
/// (the pages clap_mangen's `generate_to` names, `servetune-campaign-init.1` and so on). Each page
/// is written as a plain file: a symbolic link at a page's name is refused, not written through.
fn pages(cmd: clap::Command, dir: &std::path::Path) -> Result<(), Failure> {
    if dir.exists() && !dir.is_dir() {
        return Err(Failure::usage(format!(
            "--dir {}: this is a file, not a directory; give a directory to write the man pages into (it is created if missing)",
            dir.display()
        )));
    }
    std::fs::create_dir_all(dir).map_err(|e| Failure::usage(format!("--dir {}: cannot create it: {e}", dir.display())))?;
    fn each(cmd: clap::Command, out: &mut Vec<clap_mangen::Man>) {
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()).cloned() {
            each(sub, out);
        }
        out.push(clap_mangen::Man::new(cmd));
    }
    let mut cmd = cmd.disable_help_subcommand(true);
    cmd.build();
    let mut all = Vec::new();
    each(cmd, &mut all);
    // Every path is checked before any page is written, so a refusal leaves the folder as it was.
    let paths: Vec<std::path::PathBuf> = all.iter().map(|m| dir.join(m.get_filename())).collect();
    if let Some(link) = paths.iter().find(|p| std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_symlink())) {
        return Err(Failure::usage(format!(
            "--dir {}: {} is a symbolic link; servetune writes its man pages only as plain files: remove the link, or give another directory",
            dir.display(),
            link.display()
        )));
    }
    for (m, p) in all.iter().zip(&paths) {
        let fail = |e: std::io::Error| Failure::runtime(format!("--dir {}: cannot write {}: {e}", dir.display(), p.display()));
        let mut text = Vec::new();
        m.render(&mut text).map_err(fail)?;
        servetune_io::open_plain_for_write(p, true).and_then(|mut f| f.write_all(&text)).map_err(fail)?;
    }
    Ok(())
}

/// The completion script of `cmd` for `shell`.
fn script(shell: Shell, mut cmd: clap::Command) -> Vec<u8> {
    let shell = match shell {
        Shell::Bash => clap_complete::Shell::Bash,
        Shell::Zsh => clap_complete::Shell::Zsh,
        Shell::Fish => clap_complete::Shell::Fish,
    };
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut cmd, "servetune", &mut out);
    out
}

/// The man page of `cmd`, in roff.
fn page(cmd: clap::Command) -> Result<Vec<u8>, Failure> {
    let mut out = Vec::new();
    clap_mangen::Man::new(cmd).render(&mut out).map_err(|e| Failure::runtime(format!("cannot render the man page: {e}")))?;
    Ok(out)
}

/// A closed pipe (`servetune man | head`) is not an error.
fn write_stdout(bytes: &[u8]) -> Result<(), Failure> {
    match std::io::stdout().lock().write_all(bytes) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(Failure::runtime(format!("cannot write to stdout: {e}"))),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    fn text(shell: Shell) -> String {
        String::from_utf8(script(shell, crate::Cli::command())).expect("utf8")
    }

    #[test]
    fn bash_completion_is_valid_bash_and_completes_subcommands_and_flags() {
        let s = text(Shell::Bash);
        for word in ["probe", "fabric", "bench", "plan", "sim", "demo", "completions", "--root", "--backend"] {
            assert!(s.contains(word), "{word} missing from the bash script");
        }
        let dir = tempfile::tempdir().expect("tmp");
        let f = dir.path().join("servetune.bash");
        std::fs::write(&f, &s).expect("write");
        let st = std::process::Command::new("bash").arg("-n").arg(&f).status().expect("run bash -n");
        assert!(st.success(), "bash -n rejects the script");
    }

    #[test]
    fn zsh_and_fish_completions_name_the_binary_and_its_subcommands() {
        let zsh = text(Shell::Zsh);
        assert!(zsh.starts_with("#compdef servetune"), "{}", &zsh[..zsh.len().min(80)]);
        let fish = text(Shell::Fish);
        assert!(fish.contains("complete -c servetune") && fish.contains("-a \"probe\""), "fish script lacks the probe subcommand");
    }

    #[test]
    fn man_dir_holds_a_page_per_subcommand_with_every_flag() {
        let dir = tempfile::tempdir().expect("tmp");
        let into = dir.path().join("man1");
        pages(crate::Cli::command(), &into).expect("pages");
        for name in
            ["servetune", "servetune-plan", "servetune-campaign", "servetune-campaign-init", "servetune-fabric-p2p", "servetune-bench"]
        {
            assert!(into.join(format!("{name}.1")).is_file(), "{name}.1 missing");
        }
        let plan = std::fs::read_to_string(into.join("servetune-plan.1")).expect("plan page");
        let mut cmd = crate::Cli::command();
        cmd.build();
        let sub = cmd.find_subcommand("plan").expect("plan");
        for arg in sub.get_arguments().filter(|a| !a.is_hide_set()) {
            if let Some(long) = arg.get_long() {
                assert!(plan.contains(&format!("\\-\\-{}", long.replace('-', "\\-"))), "--{long} missing from servetune-plan(1)");
            }
        }
        assert!(!into.join("servetune-fabric-allreduce-worker.1").exists(), "hidden commands get no page");
    }

    #[test]
    fn man_dir_never_writes_through_a_link_and_refuses_a_file() {
        let dir = tempfile::tempdir().expect("tmp");
        let into = dir.path().join("man1");
        std::fs::create_dir(&into).expect("mkdir");
        let notes = dir.path().join("notes.txt");
        std::fs::write(&notes, "my notes").expect("write");
        std::os::unix::fs::symlink(&notes, into.join("servetune-plan.1")).expect("link");
        let e = pages(crate::Cli::command(), &into).expect_err("a link at a page");
        assert_eq!(e.code, crate::exit::ExitCode::Usage, "{}", e.msg);
        assert!(e.msg.contains("servetune-plan.1 is a symbolic link"), "{}", e.msg);
        assert_eq!(std::fs::read_to_string(&notes).expect("notes"), "my notes");
        assert!(!into.join("servetune.1").exists(), "nothing written before the refusal");
        let e = pages(crate::Cli::command(), &notes).expect_err("a file");
        assert!(e.msg.contains("this is a file, not a directory"), "{}", e.msg);
    }

    /// Every flag and positional argument of every visible command says what it is for.
    #[test]
    fn every_argument_of_every_command_has_help() {
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for arg in cmd.get_arguments().filter(|a| !a.is_hide_set()) {
                if arg.get_help().is_none() && arg.get_long_help().is_none() {
                    missing
                        .push(format!("{path} {}", arg.get_long().map(|l| format!("--{l}")).unwrap_or_else(|| arg.get_id().to_string())));
                }
            }
            for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
                walk(sub, &format!("{path} {}", sub.get_name()), missing);
            }
        }
        let mut cmd = crate::Cli::command();
        cmd.build();
        let mut missing = Vec::new();
        walk(&cmd, "servetune", &mut missing);
        assert!(missing.is_empty(), "arguments without help text:\n  {}", missing.join("\n  "));
    }

    #[test]
    fn man_page_is_roff_with_every_visible_subcommand() {
        let roff = String::from_utf8(page(crate::Cli::command()).expect("page")).expect("utf8");
        assert!(roff.contains(".TH servetune 1"), "{}", &roff[..roff.len().min(200)]);
        for sub in ["demo", "probe", "fabric", "bench", "plan", "sim", "completions", "man"] {
            assert!(roff.contains(&format!("servetune\\-{sub}(1)")), "{sub} missing from the man page");
        }
    }
}
