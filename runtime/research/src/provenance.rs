//! Where a result file's commit and date come from, for the reference programs that write one
//! (`fathom-fidelity`, `fathom-drift`).

use std::process::Command;

/// The command-line options that name a result: `--commit`, `--date`, `--no-json`.
#[derive(clap::Args, Clone, Debug, Default, PartialEq, Eq)]
pub struct ResultNaming {
    /// Commit named in the result. Default: `git rev-parse --short HEAD`.
    #[arg(long)]
    pub commit: Option<String>,
    /// Date named in the result (YYYY-MM-DD). Default: today (UTC).
    #[arg(long)]
    pub date: Option<String>,
    /// Print the table only.
    #[arg(long)]
    pub no_json: bool,
}

impl ResultNaming {
    /// The commit given, else the checkout's, else `unknown`.
    pub fn commit(&self) -> String {
        self.commit
            .clone()
            .or_else(current_commit)
            .unwrap_or_else(|| "unknown".into())
    }

    /// The date given, else today's (UTC), else `unknown`.
    pub fn date(&self) -> String {
        self.date
            .clone()
            .or_else(today_utc)
            .unwrap_or_else(|| "unknown".into())
    }
}

/// The trimmed standard output of a program that succeeded and printed something.
pub fn command_output(program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program).args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
}

/// The checkout's short commit, when run inside one with git.
pub fn current_commit() -> Option<String> {
    command_output("git", &["rev-parse", "--short", "HEAD"])
}

/// Today's date in UTC, `YYYY-MM-DD`.
pub fn today_utc() -> Option<String> {
    command_output("date", &["-u", "+%F"])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_names_win_and_a_missing_program_gives_nothing() {
        let named = ResultNaming {
            commit: Some("abc1234".into()),
            date: Some("2026-11-29".into()),
            no_json: false,
        };
        assert_eq!(named.commit(), "abc1234");
        assert_eq!(named.date(), "2026-11-29");
        assert!(!ResultNaming::default().commit().is_empty());
        assert_eq!(command_output("fathom-no-such-program", &[]), None);
    }
}
