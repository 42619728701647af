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
    servetune completions bash > ~/.local/share/bash-completion/completions/servetune\n  \
    servetune completions zsh > ~/.zfunc/_servetune     # with fpath+=(~/.zfunc) before compinit in ~/.zshrc\n  \
    servetune completions fish > ~/.config/fish/completions/servetune.fish")]
pub struct CompletionsArgs {
    /// The shell to complete for
    #[arg(value_enum)]
    pub shell: Shell,
}

/// Print the man page (roff) to stdout.
#[derive(Debug, Args)]
#[command(after_help = "Install:\n  \
    mkdir -p ~/.local/share/man/man1 && servetune man > ~/.local/share/man/man1/servetune.1\n  \
    man servetune")]
pub struct ManArgs {}

/// Writes the completion script of `cmd` for `a.shell` to stdout.
pub fn completions(a: CompletionsArgs, cmd: clap::Command) -> Result<(), Failure> {
    write_stdout(&script(a.shell, cmd))
}

/// Writes the man page of `cmd` to stdout.
pub fn man(cmd: clap::Command) -> Result<(), Failure> {
    write_stdout(&page(cmd)?)
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
    fn man_page_is_roff_with_every_visible_subcommand() {
        let roff = String::from_utf8(page(crate::Cli::command()).expect("page")).expect("utf8");
        assert!(roff.contains(".TH servetune 1"), "{}", &roff[..roff.len().min(200)]);
        for sub in ["demo", "probe", "fabric", "bench", "plan", "sim", "completions", "man"] {
            assert!(roff.contains(&format!("servetune\\-{sub}(1)")), "{sub} missing from the man page");
        }
    }
}
