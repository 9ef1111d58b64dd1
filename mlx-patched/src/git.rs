//! git, run one way everywhere: confined to the directory it works in, so
//! a tree under `target/` never reaches the workspace's own repository, and
//! independent of the user's configuration (identity, signing, line ends).

use crate::{other_vars, CommandVars, Error};
use std::path::Path;
use std::process::Command;

/// `git` in `dir`, seeing no repository above it and none the caller's
/// environment names, with a fixed identity and no signing.
pub fn command(dir: &Path) -> Command {
    let mut cmd = Command::new("git");
    cmd.current_dir(dir)
        // The trees sit inside the workspace's repository (under target/):
        // without a ceiling git would work on that repository instead.
        .var(
            other_vars::GIT_CEILING_DIRECTORIES,
            dir.parent().unwrap_or(dir),
        )
        .unset(other_vars::GIT_DIR)
        .unset(other_vars::GIT_WORK_TREE)
        .args([
            "-c",
            "user.name=mlx-fork",
            "-c",
            "user.email=mlx-fork@localhost",
            "-c",
            "commit.gpgsign=false",
            "-c",
            "core.autocrlf=false",
        ]);
    cmd
}

/// Runs a git command made by [`command`]: its standard output, trimmed,
/// or an error with the arguments, the directory and what git said.
pub fn run(cmd: &mut Command) -> Result<String, Error> {
    let out = cmd
        .output()
        .map_err(|e| Error::new(format!("cannot run git: {e}")))?;
    if !out.status.success() {
        let args: Vec<String> = cmd
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        return Err(Error::new(format!(
            "git {} failed in {}:\n{}{}",
            args.join(" "),
            cmd.get_current_dir()
                .map_or("?".into(), |d| d.display().to_string()),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// `git <args>` in `dir`.
pub fn git(dir: &Path, args: &[&str]) -> Result<String, Error> {
    run(command(dir).args(args))
}
