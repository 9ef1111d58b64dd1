//! The patch series: `patches/NNNN-topic.patch`, applied in file-name order.
//! Most patches are the fix, sent upstream. A patch whose message has a
//! `Fork-only:` line is a debug aid the fork keeps for itself: it is built
//! only into the builds that ask for it (the sanitizer builds), on every
//! variant, and never sent upstream. A fix that changes code another fix
//! adds names it in a `Depends-on:` line: its pull request is staged on top
//! of that one's. A patch with an `Upstream-since: <release>` line is the
//! fork's own change for a bug upstream fixed itself in that release: a
//! base at or after it leaves the patch out, and it is never sent upstream.

use crate::Error;
use std::path::{Path, PathBuf};

/// The series directory of this repository.
pub fn series_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../patches")
}

/// The patches of the series in `dir` ported by hand to upstream `version`,
/// where upstream changed the code a fix touches: `<dir>/v<version>/`, each
/// under the name of the patch it replaces.
pub fn ports_dir(dir: &Path, version: &str) -> PathBuf {
    dir.join(format!("v{version}"))
}

/// Every patch file, fork-only ones included, sorted by name (what a rebase
/// replays). A missing directory is an empty series.
pub fn series(dir: &Path) -> Result<Vec<PathBuf>, Error> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(Vec::new());
    };
    let mut patches: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "patch"))
        .collect();
    patches.sort();
    Ok(patches)
}

/// The line that marks a patch's message as fork-only (see the module docs).
pub const FORK_ONLY_MARKER: &str = "Fork-only:";

/// The lines of the message of `patch`: the part before its first `---`.
fn message_lines(patch: &Path) -> Result<Vec<String>, Error> {
    let text = std::fs::read_to_string(patch)
        .map_err(|e| Error::new(format!("cannot read {}: {e}", patch.display())))?;
    Ok(text
        .lines()
        .take_while(|l| *l != "---")
        .map(str::to_string)
        .collect())
}

/// Whether the message of `patch` marks it fork-only.
pub fn is_fork_only(patch: &Path) -> Result<bool, Error> {
    Ok(message_lines(patch)?
        .iter()
        .any(|l| l.starts_with(FORK_ONLY_MARKER)))
}

/// The line that names a fix this one applies on top of (see the module docs).
pub const DEPENDS_ON_MARKER: &str = "Depends-on:";

/// The fixes `patch` applies on top of, as files of `dir`, in the order
/// its message names them. A name that is not a patch of `dir` is an error.
pub fn depends_on(patch: &Path, dir: &Path) -> Result<Vec<PathBuf>, Error> {
    message_lines(patch)?
        .iter()
        .filter_map(|l| l.strip_prefix(DEPENDS_ON_MARKER))
        .map(|stem| {
            let file = dir.join(format!("{}.patch", stem.trim()));
            if file.is_file() {
                Ok(file)
            } else {
                Err(Error::new(format!(
                    "{} depends on `{}`, which is not a patch of {}",
                    patch.display(),
                    stem.trim(),
                    dir.display()
                )))
            }
        })
        .collect()
}

/// The line that names the upstream release that made a fix itself (see
/// the module docs).
pub const UPSTREAM_SINCE_MARKER: &str = "Upstream-since:";

/// The upstream release from which upstream has the fix of `patch`, if its
/// message names one; a line that names no release is an error.
pub fn upstream_since(patch: &Path) -> Result<Option<String>, Error> {
    let lines = message_lines(patch)?;
    let Some(rest) = lines
        .iter()
        .find_map(|l| l.strip_prefix(UPSTREAM_SINCE_MARKER))
    else {
        return Ok(None);
    };
    let release = rest.trim();
    if release_key(release).is_none() {
        return Err(Error::new(format!(
            "{}: `{UPSTREAM_SINCE_MARKER}` must name a release such as 0.32.3, not `{release}`",
            patch.display()
        )));
    }
    Ok(Some(release.to_string()))
}

/// A release's numbers, for ordering (`0.32.3` -> [0, 32, 3]).
fn release_key(release: &str) -> Option<Vec<u32>> {
    release
        .trim_start_matches('v')
        .split('.')
        .map(|n| n.parse().ok())
        .collect()
}

/// Whether upstream `release` is `since` or later.
pub fn release_at_or_after(release: &str, since: &str) -> bool {
    matches!((release_key(release), release_key(since)), (Some(r), Some(s)) if r >= s)
}

/// The patches of `series` that are upstream's own fixes carried back
/// (an `Upstream-since:` line), in series order.
pub fn carried_back(series: &[PathBuf]) -> Result<Vec<PathBuf>, Error> {
    let mut out = Vec::new();
    for p in series {
        if upstream_since(p)?.is_some() {
            out.push(p.clone());
        }
    }
    Ok(out)
}

/// The file names of `patches`, as messages and checks name them.
pub fn names(patches: &[PathBuf]) -> Vec<String> {
    patches
        .iter()
        .map(|p| {
            p.file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned()
        })
        .collect()
}

/// The series applied on `base` from `dir`: the base's series of the
/// workspace's `patches/`, or every patch of another directory (a series
/// named by `MLX_PATCHED_SERIES_DIR`, such as a rebase's, is applied whole).
pub fn series_on(base: &crate::pin::Base, dir: &Path) -> Result<Vec<PathBuf>, Error> {
    if dir == series_dir() {
        base_series(base, dir)
    } else {
        series(dir)
    }
}

/// A base's series: the patches of `dir` (the workspace's `patches/`) that
/// upstream still lacks there, in file-name order, each replaced by its
/// port from `dir/v<version>/` where it has one.
pub fn base_series(base: &crate::pin::Base, dir: &Path) -> Result<Vec<PathBuf>, Error> {
    let all = series(dir)?;
    for f in base.fixed_upstream {
        if !all
            .iter()
            .any(|p| p.file_stem().is_some_and(|s| s == f.patch))
        {
            return Err(Error::new(format!(
                "the base {} leaves out {}, which is not a patch of {}",
                base.version,
                f.patch,
                dir.display()
            )));
        }
    }
    let ports = ports_dir(dir, base.version);
    let mut kept = Vec::new();
    for p in all {
        let upstream_has = match upstream_since(&p)? {
            Some(since) => release_at_or_after(base.version, &since),
            None => base.fixes_upstream(&p.file_name().unwrap_or_default().to_string_lossy()),
        };
        if !upstream_has {
            kept.push(p);
        }
    }
    Ok(kept
        .into_iter()
        .map(|p| {
            let port = ports.join(p.file_name().unwrap_or_default());
            if port.is_file() {
                port
            } else {
                p
            }
        })
        .collect())
}

/// The fix: the series without its fork-only patches. This is what the
/// variants are built from and what goes upstream.
pub fn fix_series(series: &[PathBuf]) -> Result<Vec<PathBuf>, Error> {
    Ok(split_series(series)?.0)
}

/// The fork-only patches of the series (debug aids), in series order.
pub fn fork_only(series: &[PathBuf]) -> Result<Vec<PathBuf>, Error> {
    Ok(split_series(series)?.1)
}

/// The series as (fix, fork-only), each in series order.
fn split_series(series: &[PathBuf]) -> Result<(Vec<PathBuf>, Vec<PathBuf>), Error> {
    let (mut fix, mut aids) = (Vec::new(), Vec::new());
    for p in series {
        if is_fork_only(p)? {
            aids.push(p.clone())
        } else {
            fix.push(p.clone())
        }
    }
    Ok((fix, aids))
}

/// Applies each patch to `tree` (a plain directory, not a repository), checking
/// it with `git apply --check` first. A patch that does not apply is an error
/// naming the patch, the upstream tree and git's report of the rejected hunk.
/// `only` limits the series to paths matching a pattern (e.g. `tests/*`).
pub fn apply_series(
    tree: &Path,
    patches: &[PathBuf],
    upstream: &str,
    only: Option<&str>,
) -> Result<(), Error> {
    for patch in patches {
        let name = patch.file_name().unwrap().to_string_lossy();
        let check = git_apply(tree, patch, Mode::Check, only)?;
        if !check.status.success() {
            return Err(Error::new(format!(
                "patch {name} does not apply to upstream {upstream}; nothing was built.\n\
                 git apply --check reported:\n{}",
                String::from_utf8_lossy(&check.stderr).trim_end()
            )));
        }
        let apply = git_apply(tree, patch, Mode::Apply, only)?;
        if !apply.status.success() {
            return Err(Error::new(format!(
                "patch {name} passed --check but failed to apply to upstream {upstream}:\n{}",
                String::from_utf8_lossy(&apply.stderr).trim_end()
            )));
        }
    }
    Ok(())
}

/// Reverses one patch on `tree`, checking first that all of it reverses.
/// The error is git's report of the hunk that does not.
pub fn reverse(tree: &Path, patch: &Path) -> Result<(), Error> {
    for mode in [Mode::CheckReverse, Mode::Reverse] {
        let out = git_apply(tree, patch, mode, None)?;
        if !out.status.success() {
            return Err(Error::new(format!(
                "git apply --reverse reported:\n{}",
                String::from_utf8_lossy(&out.stderr).trim_end()
            )));
        }
    }
    Ok(())
}

/// A fingerprint of what the patched variant is made of: the upstream tree
/// id and every patch of the series (name and bytes). Figures measured for
/// one fingerprint are stale for any other.
pub fn fingerprint(upstream_tree_id: &str, series: &[PathBuf]) -> Result<String, Error> {
    let mut f = crate::Fingerprint::new("tree and series 1");
    f.text("tree", upstream_tree_id);
    for p in series {
        f.file(p)?;
    }
    Ok(f.finish())
}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Check,
    Apply,
    CheckReverse,
    Reverse,
}

fn git_apply(
    tree: &Path,
    patch: &Path,
    mode: Mode,
    only: Option<&str>,
) -> Result<std::process::Output, Error> {
    // Confined: without a ceiling git would apply relative to the
    // workspace's repository and silently skip every path outside the tree.
    let mut cmd = crate::git::command(tree);
    cmd.args(["apply", "--verbose", "--whitespace=nowarn"]);
    if matches!(mode, Mode::Check | Mode::CheckReverse) {
        cmd.arg("--check");
    }
    if matches!(mode, Mode::Reverse | Mode::CheckReverse) {
        cmd.arg("--reverse");
    }
    if let Some(pattern) = only {
        cmd.arg(format!("--include={pattern}")).arg("--allow-empty");
    }
    cmd.arg(patch)
        .output()
        .map_err(|e| Error::new(format!("cannot run git apply: {e}")))
}

#[cfg(test)]
mod base_series_tests {
    use super::*;
    use crate::pin::Base;

    #[test]
    fn a_base_series_leaves_out_upstream_fixes_and_takes_ports() {
        let dir = std::env::temp_dir().join(format!("mlx-base-series-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("v0.32.4")).unwrap();
        for name in [
            "0001-release-sibling-groups-on-every-path.patch",
            "0002-b.patch",
            "0009-cpu-kernels-built-under-their-own-name.patch",
            "0010-c.patch",
        ] {
            std::fs::write(dir.join(name), "").unwrap();
        }
        std::fs::write(dir.join("v0.32.4/0010-c.patch"), "").unwrap();
        let names = |b: &Base| -> Vec<String> {
            base_series(b, &dir)
                .unwrap()
                .iter()
                .map(|p| p.strip_prefix(&dir).unwrap().display().to_string())
                .collect()
        };
        assert_eq!(names(&Base::V0_32_2).len(), 4);
        assert_eq!(
            names(&Base::V0_32_4),
            ["0002-b.patch", "v0.32.4/0010-c.patch"]
        );
        assert!(Base::V0_32_2.control_leaks() && !Base::V0_32_4.control_leaks());
        // A base that leaves out a patch the series lacks is refused.
        std::fs::remove_file(dir.join("0002-b.patch")).unwrap();
        std::fs::remove_file(dir.join("0009-cpu-kernels-built-under-their-own-name.patch"))
            .unwrap();
        let e = base_series(&Base::V0_32_4, &dir).unwrap_err().to_string();
        assert!(e.contains("0009-cpu-kernels"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn every_patch_a_base_leaves_out_is_in_the_series() {
        let dir = series_dir();
        for b in crate::pin::BASES {
            base_series(b, &dir).unwrap();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pin::Base;

    /// A series directory of its own, with one patch a message each.
    fn series_of(name: &str, messages: &[(&str, &str)]) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("mlx-series-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for (stem, message) in messages {
            let text = format!("Subject: [PATCH] {stem}\n\n{message}\n---\n a | 1 +\n");
            std::fs::write(dir.join(format!("{stem}.patch")), text).unwrap();
        }
        dir
    }

    #[test]
    fn a_base_at_or_after_the_release_upstream_fixed_it_in_leaves_a_carried_back_fix_out() {
        let dir = series_of(
            "since",
            &[
                ("0001-ours", "A fix upstream lacks."),
                (
                    "0002-theirs",
                    "Upstream's fix, ours.\n\nUpstream-since: 0.32.3",
                ),
                ("0003-later", "Upstream-since: 0.33.0"),
            ],
        );
        let stems = |base: &Base| -> Vec<String> {
            base_series(base, &dir)
                .unwrap()
                .iter()
                .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
                .collect()
        };
        // 0.32.4's row also leaves out the fixes it names: give it none here.
        let v0_32_4 = Base {
            fixed_upstream: &[],
            ..Base::V0_32_4
        };
        assert_eq!(
            stems(&Base::V0_32_2),
            ["0001-ours", "0002-theirs", "0003-later"]
        );
        assert_eq!(stems(&v0_32_4), ["0001-ours", "0003-later"]);
        let all = series(&dir).unwrap();
        assert_eq!(
            names(&carried_back(&all).unwrap()),
            ["0002-theirs.patch", "0003-later.patch"]
        );
        assert!(release_at_or_after("0.32.3", "0.32.3"));
        assert!(release_at_or_after("0.32.10", "0.32.9"));
        assert!(!release_at_or_after("0.32.2", "0.32.3"));
    }

    #[test]
    fn an_upstream_since_line_that_names_no_release_is_an_error() {
        let dir = series_of("bad-since", &[("0001-vague", "Upstream-since: soon")]);
        let err = base_series(&Base::V0_32_2, &dir).unwrap_err().to_string();
        assert!(
            err.contains("must name a release") && err.contains("`soon`"),
            "{err}"
        );
    }
}
