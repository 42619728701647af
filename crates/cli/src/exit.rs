//! The exit codes of every command, named once.
//!
//! A script that runs `servetune` branches on these, so they are part of the interface
//! (docs/design.md, "Command line"): 0 success; 1 a runtime failure (a server that did not answer, a
//! file that cannot be written); 2 bad usage or bad input (clap's own code for a bad argument, and the
//! code of every error that names an input and how to fix it). The campaign adds two outcomes that
//! are not errors: 3, it stopped to ask a person, and 4, nothing is left to do. A run stopped by a
//! signal (SIGHUP, SIGINT, SIGTERM) after writing what it had ends with 128 + the signal's number, as
//! a shell reports a process the signal killed.

use std::fmt;

/// How a command ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitCode {
    /// 0: the command did what it was asked.
    Ok,
    /// 1: it failed at run time (network, files, a server, a bug).
    Failure,
    /// 2: bad usage or bad input; the message names the input and the fix.
    Usage,
    /// 3: the campaign stopped to ask a person (`campaign answer` goes on).
    NeedsPerson,
    /// 4: the campaign has nothing left to do: the goal is met, or no step has a positive expected gain.
    NothingLeft,
    /// 128 + the number: stopped by this signal, after writing what it had (SIGINT gives 130).
    Signal(u8),
}

/// SIGHUP's number.
pub const SIGHUP: u8 = 1;
/// SIGINT's number (Ctrl-C).
pub const SIGINT: u8 = 2;
/// SIGTERM's number.
pub const SIGTERM: u8 = 15;

impl ExitCode {
    /// The process exit status.
    pub fn code(self) -> u8 {
        match self {
            ExitCode::Ok => 0,
            ExitCode::Failure => 1,
            ExitCode::Usage => 2,
            ExitCode::NeedsPerson => 3,
            ExitCode::NothingLeft => 4,
            ExitCode::Signal(n) => 128u8.saturating_add(n),
        }
    }

    /// Whether the code is a campaign outcome (a question, nothing left) rather than an error, so the
    /// message is printed without `error:`.
    pub fn is_outcome(self) -> bool {
        matches!(self, ExitCode::NeedsPerson | ExitCode::NothingLeft)
    }
}

impl fmt::Display for ExitCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.code())
    }
}

impl From<ExitCode> for std::process::ExitCode {
    fn from(c: ExitCode) -> Self {
        std::process::ExitCode::from(c.code())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_codes_are_the_documented_numbers() {
        let codes = [ExitCode::Ok, ExitCode::Failure, ExitCode::Usage, ExitCode::NeedsPerson, ExitCode::NothingLeft];
        assert_eq!(codes.map(ExitCode::code), [0, 1, 2, 3, 4]);
        assert_eq!([SIGHUP, SIGINT, SIGTERM].map(|s| ExitCode::Signal(s).code()), [129, 130, 143]);
        assert_eq!(ExitCode::Signal(SIGINT).to_string(), "130");
    }

    #[test]
    fn only_campaign_outcomes_are_not_errors() {
        assert!(ExitCode::NeedsPerson.is_outcome() && ExitCode::NothingLeft.is_outcome());
        assert!(![ExitCode::Ok, ExitCode::Failure, ExitCode::Usage, ExitCode::Signal(SIGINT)].iter().any(|c| c.is_outcome()));
    }
}
