//! Upstream-facing workflows: the series as a branch for a pull request, and
//! a dry run of the series against another upstream tree.

use crate::{target_dir, workspace_root, Result};
use mlx_patched::{patch, pin, Env};
use std::path::{Path, PathBuf};
use std::process::Command;

fn git(dir: &Path, args: &[&str]) -> Result<String> {
    let out = Command::new("git")
        .current_dir(dir)
        .env("GIT_CEILING_DIRECTORIES", dir.parent().unwrap_or(dir))
        .args(["-c", "user.name=mlx-fork", "-c", "user.email=mlx-fork@localhost", "-c", "commit.gpgsign=false"])
        .args(args)
        .output()
        .map_err(|e| format!("cannot run git: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "git {} failed in {}:\n{}{}",
            args.join(" "),
            dir.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// A fresh repository holding the pinned upstream tree as one commit, with
/// the series applied by `git am`: exactly what a maintainer would do.
pub fn upstream_pr(args: &[String]) -> Result<()> {
    let out = match args {
        [] => target_dir()?.join("upstream-pr"),
        [flag, dir] if flag == "--out" => PathBuf::from(dir),
        _ => return Err("usage: cargo xtask upstream-pr [--out DIR]".into()),
    };
    let upstream = mlx_patched::upstream(&Env::process()).map_err(|e| e.to_string())?;
    let series = patch::series(&patch::series_dir()).map_err(|e| e.to_string())?;
    if series.is_empty() {
        return Err("patches/ holds no patch: nothing to send upstream".into());
    }
    let _ = std::fs::remove_dir_all(&out);
    mlx_patched::copy_tree(&upstream.dir, &out).map_err(|e| e.to_string())?;
    git(&out, &["init", "-q", "-b", "main"])?;
    git(&out, &["add", "-A"])?;
    let tree = git(&out, &["write-tree"])?;
    if tree != upstream.tree_id {
        return Err(format!("the copied tree hashes to {tree}, expected {}", upstream.tree_id));
    }
    git(&out, &["commit", "-q", "-m", &format!("MLX v{} (upstream tree {tree})", pin::UPSTREAM_VERSION)])?;
    let mut am = vec!["am", "--quiet"];
    let paths: Vec<String> = series.iter().map(|p| p.display().to_string()).collect();
    am.extend(paths.iter().map(String::as_str));
    if let Err(e) = git(&out, &am) {
        let _ = git(&out, &["am", "--abort"]);
        return Err(format!("the series does not apply with git am onto upstream v{}: {e}", pin::UPSTREAM_VERSION));
    }
    // MLX's clang-format keeps lines within 80 columns.
    let diff = git(&out, &["diff", "HEAD~", "--", "*.h", "*.cpp"])?;
    let long: Vec<&str> = diff.lines().filter(|l| l.starts_with('+') && !l.starts_with("+++") && l.chars().count() > 81).collect();
    println!("{}", git(&out, &["log", "--format=%h %s", &format!("HEAD~{}..HEAD", series.len())])?);
    println!("{}", git(&out, &["diff", "--stat", &format!("HEAD~{}", series.len())])?);
    if !long.is_empty() {
        return Err(format!("added lines longer than 80 columns (MLX's clang-format):\n{}", long.join("\n")));
    }
    println!(
        "\nThe series applies with `git am` onto upstream v{} (commit {}, tree {}).\n\
         Branch `main` of {} holds it; push it to your fork of ml-explore/mlx and open the pull request\n\
         (rebase onto upstream main first: `git -C {} rebase --onto <upstream-main> HEAD~{}`).",
        pin::UPSTREAM_VERSION,
        pin::UPSTREAM_COMMIT,
        upstream.tree_id,
        out.display(),
        out.display(),
        series.len()
    );
    Ok(())
}

/// Dry run of a rebase: fetch the tree another carrier version holds, print
/// its tree id, and check each patch against it in order.
pub fn rebase(args: &[String]) -> Result<()> {
    let [version] = args else { return Err("usage: cargo xtask rebase <carrier-version>   (e.g. 0.2.17 carries upstream 0.32.2)".into()) };
    let probe = target_dir()?.join("rebase").join(version);
    std::fs::create_dir_all(probe.join("src")).map_err(|e| e.to_string())?;
    std::fs::write(probe.join("src/lib.rs"), "").map_err(|e| e.to_string())?;
    std::fs::write(
        probe.join("Cargo.toml"),
        format!(
            "[package]\nname = \"rebase-probe\"\nversion = \"0.0.0\"\nedition = \"2021\"\n\n[workspace]\n\n\
             [target.'cfg(any())'.dependencies]\n{} = \"={version}\"\n",
            pin::CARRIER_CRATE
        ),
    )
    .map_err(|e| e.to_string())?;
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let tree = mlx_patched::carrier_dir(&cargo, &probe.join("Cargo.toml"), version).map_err(|e| e.to_string())?;
    let tree_id = mlx_patched::tree_id(&tree).map_err(|e| e.to_string())?;
    println!("{} {version}: upstream tree {tree_id} in {}", pin::CARRIER_CRATE, tree.display());
    let staging = probe.join("tree");
    let _ = std::fs::remove_dir_all(&staging);
    mlx_patched::copy_tree(&tree, &staging).map_err(|e| e.to_string())?;
    let series = patch::series(&patch::series_dir()).map_err(|e| e.to_string())?;
    patch::apply_series(&staging, &series, &format!("tree {tree_id}"), None).map_err(|e| e.to_string())?;
    println!(
        "all {} patches apply. To move the pin: set mlx-patched/src/pin.rs (version, commit, tree {tree_id}, carrier {version}) \
         and the carrier requirement in mlx-patched/Cargo.toml, then `cargo xtask test` (see {}).",
        series.len(),
        workspace_root().join("README.md").display()
    );
    Ok(())
}
