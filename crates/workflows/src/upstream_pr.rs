//! Each fix of the series as its own upstream pull request.

use mlx_harness::error::{anyhow, Context, Result};
use mlx_harness::process::git;
use mlx_harness::paths::target_dir;
use mlx_patched::{patch, pin};
use std::path::{Path, PathBuf};

/// Stages each fix of the series as its own pull request: a maintainer
/// takes one fix at a time, so each must apply alone. For every fix,
/// `<out>/<patch-stem>/` gets `tree/` (a fresh repository holding the
/// upstream tree as one commit, with that patch applied by `git am`,
/// exactly what a maintainer would do), `series/` (the patch, tests
/// included) and `pull-request.md` (the description; the fork's first fix,
/// the leak it exists for, quotes the figures of the last suite run).
///
/// Against the pin every fix must apply. With `--target` (a carrier
/// version or an upstream checkout, as for `rebase`) the fixes are staged
/// against that newer tree, where upstream takes fixes, in
/// `<out>/v<version>/`; a fix ported by hand to that version
/// (`patches/v<version>/`) is staged in its place; a fix that no longer
/// applies there is listed, not staged: whether upstream still needs it is
/// `rebase`'s verdict.
/// The series stays ready for upstream (the `upstream_pr` slow check): each fix
/// applies alone with `git am` onto a clean tree of the pin, staged for
/// review. An empty series (a rebase onto a fixed upstream) has nothing to
/// send: no claim.
pub fn check() -> Result<mlx_harness::tally::Tally> {
    let opts = mlx_harness::config::options()?;
    let series = to_send(&opts)?;
    let mut t = mlx_harness::tally::Tally::new();
    if series.is_empty() {
        println!("the series is empty: nothing to send upstream");
        return Ok(t);
    }
    let staged = upstream_pr(UpstreamPrArgs::default());
    t.check(staged.is_ok(), || format!("{:#}", staged.unwrap_err()));
    Ok(t)
}

/// The fixes to send upstream: the base's fix series without the fixes
/// that upstream made itself in a later release (`Upstream-since:`).
fn to_send(opts: &mlx_patched::Options) -> Result<Vec<PathBuf>> {
    let series = patch::fix_series(&opts.series()?)?;
    let theirs = patch::carried_back(&series)?;
    Ok(series.into_iter().filter(|p| !theirs.contains(p)).collect())
}

#[derive(clap::Args, Debug, Default)]
pub struct UpstreamPrArgs {
    /// Where the stagings go (default: target/upstream-pr).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Stage onto a newer upstream: a carrier version or a checkout.
    #[arg(long)]
    pub target: Option<String>,
}

pub fn upstream_pr(a: UpstreamPrArgs) -> Result<()> {
    let UpstreamPrArgs { out, target: to } = a;
    let opts = mlx_harness::config::options()?;
    let series = to_send(&opts)?;
    if series.is_empty() {
        return Err(anyhow!("patches/ holds no patch: nothing to send upstream"));
    }
    let root = out.unwrap_or(target_dir()?.join("upstream-pr"));
    match to {
        None => {
            let upstream = mlx_patched::upstream(&opts)?;
            let fingerprint = patch::fingerprint(&upstream.tree_id, &series)?;
            let dir = root;
            // Only the pin's own stagings: a --target's live beside them.
            clear_stagings(&dir)?;
            let staged = stage(
                &upstream,
                opts.base.version,
                &series,
                &dir,
                Some(&fingerprint),
                None,
            )?;
            if let Some((stem, e)) = staged
                .iter()
                .find_map(|(s, r)| r.as_ref().err().map(|e| (s, e)))
            {
                return Err(anyhow!(
                    "{stem} does not apply alone with git am onto upstream v{}: {e:#}",
                    opts.base.version
                ));
            }
            println!(
                "\nEach of the {} fixes applies with `git am` onto upstream v{} ({}tree {}), alone or on the fixes its `Depends-on:` lines name.\n\
                 {}/<patch>/ holds each pull request: series/ the patch, pull-request.md the description, and branch `main`\n\
                 of tree/ the applied tree (rebase onto upstream main before opening it: `git -C <tree> rebase --onto <upstream-main> HEAD~`).",
                series.len(),
                opts.base.version,
                recorded_commit().map(|c| format!("commit {c}, ")).unwrap_or_default(),
                upstream.tree_id,
                dir.display(),
            );
        }
        Some(to) => {
            let work = target_dir()?
                .join("upstream-pr-work")
                .join(to.replace('/', "_"));
            let upstream = mlx_harness::trees::target_tree(&to, &work)?;
            let version = mlx_patched::version_of(&upstream.dir)?;
            let dir = root.join(format!("v{version}"));
            let _ = std::fs::remove_dir_all(&dir);
            // A fix written against the pin may need a three-way merge: it
            // gets the pin's files as the merge base.
            let pinned = mlx_patched::upstream(&opts)?;
            // A fix ported by hand to this version goes in its place.
            let ports = patch::ports_dir(&opts.patches_dir, &version);
            let series: Vec<PathBuf> = series
                .iter()
                .map(|p| {
                    let port = ports.join(p.file_name().unwrap_or_default());
                    if port.is_file() {
                        println!(
                            "{}: its port {} goes in its place",
                            p.display(),
                            port.display()
                        );
                        port
                    } else {
                        p.clone()
                    }
                })
                .collect();
            let staged = stage(&upstream, &version, &series, &dir, None, Some(&pinned.dir))?;
            let (ok, not): (Vec<_>, Vec<_>) = staged.iter().partition(|(_, r)| r.is_ok());
            println!("\nOnto upstream v{version} (tree {}): {} of {} fixes apply alone (`git am`, three-way where needed), staged in {}/<patch>/.", upstream.tree_id, ok.len(), series.len(), dir.display());
            for (stem, r) in &not {
                let why = r
                    .as_ref()
                    .err()
                    .and_then(|e| {
                        e.lines()
                            .find(|l| l.starts_with("error:") || l.starts_with("CONFLICT"))
                            .map(str::to_string)
                    })
                    .unwrap_or_default();
                println!("  not staged: {stem}: it does not apply there, not even by a three-way merge ({why}); see `cargo xtask rebase --to {to}`");
            }
            if ok.is_empty() {
                return Err(anyhow!(
                    "no fix of the series applies to upstream v{version}"
                ));
            }
        }
    }
    Ok(())
}

/// Removes the pin's stagings (one directory per patch stem, present or
/// past), leaving the `v<version>/` stagings of `--target` runs.
fn clear_stagings(dir: &Path) -> Result<()> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(());
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let versioned =
            name.starts_with('v') && name[1..].chars().next().is_some_and(|c| c.is_ascii_digit());
        if !versioned {
            std::fs::remove_dir_all(e.path()).with_context(|| e.path().display().to_string())?;
        }
    }
    Ok(())
}

/// Stages each fix in `dir/<stem>/` onto `upstream`; per fix, its stem and
/// whether `git am` applied it (a failed one leaves nothing behind). With
/// `base` (the tree the series was written against), a fix that does not
/// apply as it is gets `git am -3` with the base's files as merge base, and
/// the staged patch is the merged one.
fn stage(
    upstream: &mlx_patched::Upstream,
    version: &str,
    series: &[PathBuf],
    dir: &Path,
    fingerprint: Option<&str>,
    base: Option<&Path>,
) -> Result<Vec<(String, std::result::Result<(), String>)>> {
    let mut staged = Vec::new();
    for (i, p) in series.iter().enumerate() {
        let stem = p
            .file_stem()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        let pr = dir.join(&stem);
        let out = pr.join("tree");
        mlx_patched::copy_tree(&upstream.dir, &out)?;
        git(&out, &["init", "-q", "-b", "main"])?;
        git(&out, &["add", "-A"])?;
        let tree = git(&out, &["write-tree"])?;
        if tree != upstream.tree_id {
            return Err(anyhow!(
                "the copied tree hashes to {tree}, expected {}",
                upstream.tree_id
            ));
        }
        git(
            &out,
            &[
                "commit",
                "-q",
                "-m",
                &format!("MLX v{version} (upstream tree {tree})"),
            ],
        )?;
        // The fixes this one is written on top of come first, each its own
        // commit: the pull request builds on theirs.
        let dependencies = patch::depends_on(p, p.parent().unwrap_or(Path::new(".")))?;
        let mut applied = Ok(());
        for d in &dependencies {
            applied = applied
                .and_then(|()| git(&out, &["am", "--quiet", &d.display().to_string()]).map(drop));
        }
        if let Err(e) = applied {
            let _ = git(&out, &["am", "--abort"]);
            let _ = std::fs::remove_dir_all(&pr);
            staged.push((
                stem,
                Err(format!("a fix it depends on does not apply: {e:#}")),
            ));
            continue;
        }
        let path = p.display().to_string();
        if let Err(e) = git(&out, &["am", "--quiet", &path]) {
            let _ = git(&out, &["am", "--abort"]);
            let merged = match base {
                Some(base) => three_way(&out, base, p),
                None => Err(e),
            };
            if let Err(e) = merged {
                let _ = git(&out, &["am", "--abort"]);
                let _ = std::fs::remove_dir_all(&pr);
                staged.push((stem, Err(format!("{e:#}"))));
                continue;
            }
            println!("{stem}: applied by a three-way merge against v{version}");
        }
        // MLX's clang-format keeps lines within 80 columns.
        let diff = git(&out, &["diff", "HEAD~", "--", "*.h", "*.cpp"])?;
        let long: Vec<&str> = diff
            .lines()
            .filter(|l| l.starts_with('+') && !l.starts_with("+++") && l.chars().count() > 81)
            .collect();
        if !long.is_empty() {
            return Err(anyhow!(
                "{stem}: added lines longer than 80 columns (MLX's clang-format):\n{}",
                long.join("\n")
            ));
        }
        git(
            &out,
            &[
                "format-patch",
                "-q",
                "--zero-commit",
                "-o",
                &pr.join("series").display().to_string(),
                &format!("HEAD~{}", dependencies.len() + 1),
            ],
        )?;
        let stat = git(&out, &["diff", "--stat", "HEAD~"])?;
        let mut message = git(&out, &["log", "-1", "--format=%B"])?;
        for d in &dependencies {
            let name = d.file_stem().unwrap_or_default().to_string_lossy();
            message += &format!("\n\nThis pull request builds on {name}, whose commit comes first in its branch and in series/.");
        }
        std::fs::write(
            pr.join("pull-request.md"),
            description(&message, &stat, fingerprint.filter(|_| i == 0)),
        )?;
        println!("{}\n{stat}", git(&out, &["log", "-1", "--format=%h %s"])?);
        staged.push((stem, Ok(())));
    }
    Ok(staged)
}

/// `git am -3` of `patch` in `repo`, after writing the pre-images of the
/// files it touches, taken from `base`, as blobs for the merge to find.
fn three_way(repo: &Path, base: &Path, patch: &Path) -> Result<()> {
    let text = std::fs::read_to_string(patch).with_context(|| format!("{}", patch.display()))?;
    for file in text.lines().filter_map(|l| l.strip_prefix("--- a/")) {
        let pre = base.join(file);
        if pre.is_file() {
            git(repo, &["hash-object", "-w", &pre.display().to_string()])?;
        }
    }
    git(repo, &["am", "--quiet", "-3", &patch.display().to_string()]).map(drop)
}

/// The pull-request description: the commit message (problem, mechanism,
/// fix) and the changes. With `leak_figures` (the series' fingerprint), the
/// leak fix's reproduction and the before/after table of the last suite
/// run, quoted only if that run passed on this very tree and series.
fn description(message: &str, stat: &str, leak_figures: Option<&str>) -> String {
    let (subject, body) = message
        .trim()
        .split_once('\n')
        .unwrap_or((message.trim(), ""));
    let mut text = format!("## {subject}\n\n{}\n\n", body.trim());
    if let Some(fingerprint) = leak_figures {
        text += "### Reproduction\n\n\
            Evaluate some arrays, compile a function that closes over them and calls `split` (or any\n\
            op built with `array::make_arrays`), call it once and drop everything: on Linux CPU,\n\
            `get_active_memory()` stays above its baseline by the captured arrays, every time. Two\n\
            slices instead of `split`, unevaluated captures or no `compile` each make the leak go away.\n\n";
        let report = mlx_harness::paths::report_dir().ok();
        let current = report
            .as_ref()
            .and_then(|r| std::fs::read_to_string(r.join(mlx_harness::paths::MEASURED_FOR)).ok())
            .is_some_and(|f| f.trim() == fingerprint);
        let rows = report.filter(|_| current).and_then(|r| {
            mlx_expectations::report::read(&r.join(mlx_expectations::report::ROWS)).ok()
        });
        match rows {
            Some(rows) => {
                text += "### Before / after (bytes retained per cycle, Linux CPU)\n\n| scenario | before | after | same bits |\n|---|---|---|---|\n";
                for row in &rows {
                    let mlx_expectations::report::Row::Retained { scenario, per_variant, bit_identical } = row else {
                        continue;
                    };
                    let cell = |v: mlx_patched::Variant| {
                        per_variant.iter().find(|(n, _)| n == v.name).map_or("-".to_string(), |(_, b)| b.to_string())
                    };
                    let same = if *bit_identical { "yes" } else { "no" };
                    text += &format!("| {scenario} | {} | {} | {same} |\n", cell(mlx_patched::Variant::PRISTINE), cell(mlx_patched::Variant::PATCHED));
                }
                text += "\n";
            }
            None => text += "(No figures: the last `cargo xtask test` did not pass on this tree and series. Run it first.)\n\n",
        }
    }
    text += &format!("### Changes\n\n```\n{stat}\n```\n");
    text
}

/// The pinned upstream commit, when the pin records one (a carrier may not).
fn recorded_commit() -> Option<&'static str> {
    let c = pin::UPSTREAM_COMMIT;
    (c.len() == 40 && c.chars().all(|ch| ch.is_ascii_hexdigit())).then_some(c)
}
