//! The series replayed onto the target tree in a scratch repository: the
//! pinned tree with the series committed by `git am`, then each commit
//! cherry-picked onto the target, each patch reported as clean, merged or
//! conflicting.

use mlx_harness::process::git;
use mlx_harness::error::{Context, Result};
use mlx_patched::patch;
use std::path::{Path, PathBuf};

#[derive(Debug, PartialEq)]
pub(crate) enum Replay {
    Clean,
    ThreeWay,
    /// It conflicts; its port to the target (`patches/v<version>/`) applies.
    Ported,
    Conflict(String),
}

/// `git format-patch` of the last `series.len()` commits into `out`, each
/// file keeping the name of the patch it refreshes.
pub(crate) fn write_refreshed(repo: &Path, series: &[PathBuf], out: &Path) -> Result<()> {
    let _ = std::fs::remove_dir_all(out);
    std::fs::create_dir_all(out)?;
    if series.is_empty() {
        return Ok(());
    }
    let fresh = out.with_extension("format-patch");
    let _ = std::fs::remove_dir_all(&fresh);
    git(
        repo,
        &[
            "format-patch",
            "-q",
            "--zero-commit",
            "-o",
            &fresh.display().to_string(),
            &format!("HEAD~{}", series.len()),
        ],
    )?;
    let written = patch::series(&fresh)?;
    for (new, old) in written.iter().zip(series) {
        std::fs::rename(new, out.join(old.file_name().unwrap()))?;
    }
    let _ = std::fs::remove_dir_all(&fresh);
    Ok(())
}

/// Replays `series` (written against the tree `base`) onto `target` in a
/// scratch repository, leaving out each patch that conflicts; writes the
/// refreshed patches that applied to `out`. With `base`
/// None the series is written for `target` and applied to it directly.
pub(crate) fn replay(
    base: Option<&Path>,
    target: &Path,
    series: &[PathBuf],
    ports: &Path,
    repo: &Path,
    out: &Path,
) -> Result<Vec<(String, Replay)>> {
    let _ = std::fs::remove_dir_all(repo);
    std::fs::create_dir_all(repo)?;
    git(repo, &["init", "-q", "-b", "pinned"])?;
    let load = |tree: &Path, message: &str| -> Result<()> {
        // Replace the work tree with `tree`, keep .git.
        for entry in std::fs::read_dir(repo)? {
            let p = entry?.path();
            if p.file_name() != Some(".git".as_ref()) {
                if p.is_dir() {
                    std::fs::remove_dir_all(&p)
                } else {
                    std::fs::remove_file(&p)
                }?;
            }
        }
        mlx_patched::copy_tree(tree, repo)?;
        git(repo, &["add", "-A"])?;
        git(repo, &["commit", "-q", "--allow-empty", "-m", message])?;
        Ok(())
    };
    let Some(base) = base else {
        load(target, "target upstream")?;
        let mut results = Vec::new();
        for file in series {
            let name = file.file_name().unwrap().to_string_lossy().to_string();
            let path = file.display().to_string();
            if let Err(e) = git(repo, &["am", "--quiet", &path]) {
                let _ = git(repo, &["am", "--abort"]);
                results.push((name, Replay::Conflict(format!("{e:#}"))));
                return Ok(results);
            }
            results.push((name, Replay::Clean));
        }
        write_refreshed(repo, series, out)?;
        return Ok(results);
    };
    load(base, "pinned upstream")?;
    if !series.is_empty() {
        let mut am = vec!["am", "--quiet"];
        let paths: Vec<String> = series.iter().map(|p| p.display().to_string()).collect();
        am.extend(paths.iter().map(String::as_str));
        git(repo, &am).context("the series does not apply to the pinned tree itself")?;
    }
    let range = format!("HEAD~{}..HEAD", series.len());
    let commits: Vec<String> = git(repo, &["rev-list", "--reverse", &range])?
        .lines()
        .map(String::from)
        .collect();
    git(repo, &["checkout", "-q", "--orphan", "target"])?;
    load(target, "target upstream")?;
    let mut results = Vec::new();
    // A patch that conflicts is left out and the replay goes on: the other
    // fixes may still be needed on the target (upstream may have fixed
    // one bug in its own way and not the others).
    let mut applied = Vec::new();
    for (file, commit) in series.iter().zip(&commits) {
        let name = file.file_name().unwrap().to_string_lossy().to_string();
        let clean = mlx_patched::git::command(repo)
            .args(["apply", "--check"])
            .arg(file)
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false);
        match git(repo, &["cherry-pick", "--allow-empty", commit]) {
            Ok(_) => {
                results.push((
                    name,
                    if clean {
                        Replay::Clean
                    } else {
                        Replay::ThreeWay
                    },
                ));
                applied.push(file.clone());
            }
            Err(_) => {
                let merged = git(
                    repo,
                    &["diff", "--cached", "--name-only", "--diff-filter=M"],
                )
                .unwrap_or_default();
                let unmerged =
                    git(repo, &["diff", "--name-only", "--diff-filter=U"]).unwrap_or_default();
                let merged: Vec<&str> = merged
                    .lines()
                    .filter(|f| !unmerged.lines().any(|u| u == *f))
                    .collect();
                let merged = if merged.is_empty() {
                    "none".to_string()
                } else {
                    merged.join(", ")
                };
                let hunks = format!(
                    "merged without conflict: {merged}\n{}",
                    git(repo, &["diff"]).unwrap_or_default()
                );
                let _ = git(repo, &["cherry-pick", "--abort"]);
                // A fix whose code upstream changed, ported to the target by
                // hand, goes in its place (three-way: it is written against
                // the target's own files).
                let port = ports.join(&name);
                if port.is_file() {
                    let path = port.display().to_string();
                    if git(repo, &["am", "-3", "--quiet", &path]).is_ok() {
                        results.push((name, Replay::Ported));
                        applied.push(port);
                        continue;
                    }
                    let _ = git(repo, &["am", "--abort"]);
                }
                results.push((name, Replay::Conflict(hunks)));
            }
        }
    }
    write_refreshed(repo, &applied, out)?;
    Ok(results)
}
