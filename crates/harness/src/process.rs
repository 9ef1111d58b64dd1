//! Running other programs: Cargo in the workspace, a command that must
//! succeed, git confined to a folder, and a finished process as evidence.

use crate::error::{anyhow, Context, Result};
use crate::paths::workspace_root;
use mlx_patched::Env;
use std::process::Command;

/// Cargo as the developer invoked it (`$CARGO`), in the workspace root.
pub fn cargo() -> Command {
    let mut cmd = Command::new(Env::process().cargo());
    cmd.current_dir(workspace_root());
    cmd
}

/// A finished process as evidence for a judge: its status and its output
/// as text.
#[derive(Clone, Debug, Default)]
pub struct Ran {
    pub success: bool,
    pub status: String,
    pub stdout: String,
    pub stderr: String,
}

impl From<&std::process::Output> for Ran {
    fn from(o: &std::process::Output) -> Ran {
        Ran {
            success: o.status.success(),
            status: o.status.to_string(),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }
}

pub fn run(cmd: &mut Command) -> Result<()> {
    let status = cmd
        .status()
        .with_context(|| format!("cannot run {cmd:?}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(anyhow!("{cmd:?} failed ({status})"))
    }
}

/// `git <args>` in `dir`, confined to it (`mlx_patched::git`).
pub fn git(dir: &std::path::Path, args: &[&str]) -> Result<String> {
    Ok(mlx_patched::git::git(dir, args)?)
}
