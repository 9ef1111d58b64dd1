//! The ways a user installs, replaces and removes the fork's wheels, each
//! tried in a clean virtual environment with `--no-index`: the fork's two
//! wheels and upstream's official ones (fetched by pip, checksums pinned)
//! are the only packages there are. And the wheels' type stubs, through a
//! type checker.
//!
//! Every path ends in the report's script: 0 MiB retained where the fork is
//! installed, upstream's 24 where upstream is.

use mlx_harness::python_env::{python_root, run_python, sha256_hex, venv_with};
use mlx_harness::wheel::Wheels;
use mlx_harness::error::{anyhow, Context, Result};
use mlx_harness::process::Ran;
use mlx_harness::paths::workspace_root;
use mlx_patched::CommandVars;
use mlx_patched::{pin, Variant};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

pub mod judge;
use judge::{Evidence, Expected, Mypy, State, Tags};

/// Each installed distribution's normalized name and version.
pub fn installed(python: &Path) -> Result<BTreeMap<String, String>> {
    let out = Command::new(python)
        .args([
            "-c",
            "import importlib.metadata as m\nfor d in m.distributions(): print(d.metadata['Name'], d.version)",
        ])
        .output()
        ?;
    if !out.status.success() {
        return Err(anyhow!(
            "{} cannot list its distributions: {}",
            python.display(),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(n, v)| (n.to_lowercase().replace('_', "-"), v.to_string()))
        .collect())
}

/// The MLX left in an environment: `mlx`/`mlx_cpu` metadata, any file in
/// the `mlx` package folder, and the console scripts; then the empty
/// folders left (pip 23.2 leaves `mlx/include` and `mlx/share/cmake` when
/// it removes upstream's pair too, measured, so they are reported, not
/// judged).
fn leftovers(python: &Path) -> Result<(Vec<String>, Vec<String>)> {
    let out = Command::new(python)
        .args([
            "-c",
            "import sysconfig, pathlib
             paths = sysconfig.get_paths()
             for d in sorted({paths['purelib'], paths['platlib']}):
                 for p in sorted(pathlib.Path(d).iterdir()):
                     if p.name.lower().startswith(('mlx-', 'mlx_')): print('file', p)
                     if p.name == 'mlx':
                         for f in sorted(p.rglob('*')): print('file' if not f.is_dir() else 'dir', f)
             for p in sorted(pathlib.Path(paths['scripts']).iterdir()):
                 if p.name.startswith('mlx.'): print('file', p)",
        ])
        .output()
        ?;
    let mut files = Vec::new();
    let mut dirs = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        match line.split_once(' ') {
            Some(("file", p)) => files.push(p.to_string()),
            Some(("dir", p)) => dirs.push(p.to_string()),
            _ => {}
        }
    }
    Ok((files, dirs))
}

/// The libmlx a fresh interpreter loads with `import mlx.core`, and the
/// sha256 of its bytes.
fn loaded_libmlx(python: &Path) -> Result<(String, String)> {
    let out = Command::new(python)
        .args([
            "-c",
            "import mlx.core\nfrom loaded_libmlx import loaded_libmlx\nprint(*loaded_libmlx())",
        ])
        .var(
            mlx_patched::other_vars::PYTHONPATH,
            workspace_root().join("tests/python"),
        )
        .output()?;
    let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !out.status.success() || path.is_empty() || path.contains(' ') {
        return Err(anyhow!(
            "import mlx.core in {}: {} ({path:?}) {}",
            python.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .unwrap_or("")
        ));
    }
    let bytes = std::fs::read(&path).with_context(|| path.to_string())?;
    Ok((path, sha256_hex(&bytes)))
}

/// The sha256 of the libmlx inside a library wheel.
pub fn libmlx_in_wheel(python: &Path, wheel: &Path) -> Result<String> {
    let out = Command::new(python)
        .args([
            "-c",
            "import hashlib, sys, zipfile\nprint(hashlib.sha256(zipfile.ZipFile(sys.argv[1]).read(sys.argv[2])).hexdigest())",
        ])
        .arg(wheel)
        .arg(format!(
            "mlx/lib/{}mlx{}",
            std::env::consts::DLL_PREFIX,
            std::env::consts::DLL_SUFFIX
        ))
        .output()
        ?;
    if !out.status.success() {
        return Err(anyhow!(
            "{} holds no mlx/lib/libmlx: {}",
            wheel.display(),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn state(python: &Path, want: Expected) -> Result<State> {
    let have = installed(python)?;
    let versions = ["mlx", "mlx-cpu"]
        .iter()
        .map(|n| have.get(*n).cloned())
        .collect();
    let loaded = loaded_libmlx(python);
    let (script, _) = mlx_harness::python_env::report_script()?;
    let mib = report_mib(&run_python(python, &script, &[])?);
    println!("{}: report.py prints {mib:?} MiB retained", want.what);
    Ok(State {
        want,
        versions,
        loaded,
        mib,
    })
}

/// The MiB figures the report's script printed, one per cycle.
pub fn report_mib(stdout: &str) -> Vec<i64> {
    stdout
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1).and_then(|m| m.parse().ok()))
        .collect()
}

/// A clean environment at `target/python/v<base>/<name>`.
fn clean_venv(name: &str) -> Result<PathBuf> {
    let venv = python_root()?.join(name);
    let _ = std::fs::remove_dir_all(&venv);
    venv_with(&venv, &[], &[])
}

fn pip(python: &Path, args: &[String]) -> Result<()> {
    println!("  pip {}", args.join(" "));
    mlx_harness::process::run(
        Command::new(python)
            .args(["-m", "pip", "--quiet", "--disable-pip-version-check"])
            .args(args),
    )
}

fn files(w: &[PathBuf]) -> Vec<String> {
    w.iter().map(|p| p.display().to_string()).collect()
}

/// Runs every path and reads the wheels, judging nothing.
pub fn collect(python: &Path, wheels: &Wheels) -> Result<Evidence> {
    let mut e = Evidence::default();
    paths(&mut e)?;
    e.mypy = Some(type_check(python, wheels)?);
    e.packed_twice = reproducible(Variant::PATCHED)?;
    e.tags = platform_tags(wheels)?;
    Ok(e)
}

/// The install, upgrade and removal paths.
fn paths(e: &mut Evidence) -> Result<()> {
    let fork = mlx_harness::python_env::build_wheel(Variant::PATCHED)?;
    let expectations = mlx_harness::config::expectations();
    let fork_lib = libmlx_in_wheel(mlx_patched::Env::process().python().as_ref(), &fork.library)?;
    let fork_state = |what: &str| Expected {
        what: what.to_string(),
        version: fork.version.clone(),
        libmlx: fork_lib.clone(),
        verdict: expectations.verdict(&Variant::PATCHED),
    };

    // The fork alone, as the README installs it.
    println!("the fork's wheels in a clean environment:");
    let py = clean_venv("clean-venv")?;
    let mut install = vec!["install".to_string(), "--no-index".into()];
    install.extend(files(&fork.files()));
    pip(&py, &install)?;
    e.states
        .push(state(&py, fork_state("the fork's wheels alone"))?);
    e.uninstalls
        .push(uninstall(&py, "the fork's wheels alone")?);

    let base = mlx_harness::config::options()?.base;
    let official = match crate::provenance::official_wheels(base)? {
        Ok(w) => w,
        Err(why) => {
            e.skipped = Some(why);
            return Ok(());
        }
    };
    let interpreter = Command::new(mlx_patched::Env::process().python())
        .args([
            "-c",
            "import sys; print(f'{sys.version_info[0]}.{sys.version_info[1]}')",
        ])
        .output()?;
    let interpreter = String::from_utf8_lossy(&interpreter.stdout)
        .trim()
        .to_string();
    if interpreter != pin::WHEEL_PYTHON {
        e.skipped = Some(format!(
            "the pinned official wheels are for CPython {}, this interpreter is {interpreter}",
            pin::WHEEL_PYTHON
        ));
        return Ok(());
    }
    let official_dir = official[0].parent().unwrap().display().to_string();
    let official_lib =
        libmlx_in_wheel(mlx_patched::Env::process().python().as_ref(), &official[1])?;
    let upstream_state = |what: &str| Expected {
        what: what.to_string(),
        version: base.version.to_string(),
        libmlx: official_lib.clone(),
        // Upstream's wheel is the untouched control of this base.
        verdict: expectations.verdict(&Variant::PRISTINE),
    };
    let from_official = |args: &[&str]| -> Vec<String> {
        ["install", "--no-index", "--find-links", &official_dir]
            .iter()
            .chain(args)
            .map(|s| s.to_string())
            .collect()
    };

    // Upstream's `mlx[cpu]` first, then the fork's wheels over it.
    println!("upstream's mlx[cpu], then the fork's wheels:");
    let py = clean_venv("upgrade-venv")?;
    pip(
        &py,
        &from_official(&[&format!("mlx[cpu]=={}", base.version)]),
    )?;
    e.states
        .push(state(&py, upstream_state("upstream's mlx[cpu] alone"))?);
    pip(&py, &install)?;
    e.states
        .push(state(&py, fork_state("the fork's wheels over upstream's"))?);
    e.uninstalls
        .push(uninstall(&py, "the fork's wheels over upstream's")?);

    // The fork first, then back to upstream with the README's command.
    println!("the fork's wheels, then back to upstream:");
    let py = clean_venv("downgrade-venv")?;
    pip(&py, &install)?;
    let back = back_to_upstream(base);
    pip(
        &py,
        &from_official(&back.iter().map(String::as_str).collect::<Vec<_>>()),
    )?;
    e.states.push(state(
        &py,
        upstream_state("upstream's wheels over the fork's"),
    )?);
    e.uninstalls
        .push(uninstall(&py, "upstream's wheels over the fork's")?);
    Ok(())
}

/// What the README gives to replace the fork with upstream: a plain
/// `pip install mlx==0.32.2` would not, since `==0.32.2` also matches the
/// fork's `0.32.2+fork.<series>` (PEP 440 ignores a local label there).
pub fn back_to_upstream(base: &mlx_patched::pin::Base) -> Vec<String> {
    vec![
        "--force-reinstall".into(),
        format!("mlx=={}", base.version),
        format!("mlx-cpu=={}", base.version),
    ]
}

/// `pip uninstall -y mlx mlx-cpu`, then what of MLX remains.
fn uninstall(python: &Path, what: &str) -> Result<(String, Vec<String>, Vec<String>)> {
    pip(
        python,
        &[
            "uninstall".into(),
            "-y".into(),
            "mlx".into(),
            "mlx-cpu".into(),
        ],
    )?;
    let (files, dirs) = leftovers(python)?;
    if !dirs.is_empty() {
        println!("  (pip left {} empty folders under mlx/)", dirs.len());
    }
    Ok((what.to_string(), files, dirs))
}

/// The stubs, through mypy in an environment with the fork's wheels: the
/// report's script, and a wrong use of `mx.sum`. Without the stubs both
/// fail (measured: mypy then finds no attribute `sum` or `zeros` in
/// `mlx.core`).
fn type_check(python: &Path, wheels: &Wheels) -> Result<Mypy> {
    let cache = python_root()?.join("mypy-cache");
    let mypy = |file: &Path| -> Result<(bool, String)> {
        let out = Command::new(python)
            .args(["-m", "mypy", "--no-incremental", "--cache-dir"])
            .arg(&cache)
            .arg(file)
            .output()
            .with_context(|| format!("cannot run mypy with {}", python.display()))?;
        let ran = Ran::from(&out);
        Ok((ran.success, ran.stdout + &ran.stderr))
    };
    let (script, _) = mlx_harness::python_env::report_script()?;
    let report = mypy(&script)?;
    let wrong = python_root()?.join("ill_typed.py");
    std::fs::write(
        &wrong,
        "import mlx.core as mx\n\ntotal: str = mx.sum(mx.zeros((2, 2)))\n",
    )?;
    let ill_typed = mypy(&wrong)?;
    println!(
        "mypy on a str assigned from mx.sum: {}",
        ill_typed
            .1
            .lines()
            .find(|l| l.contains("error"))
            .unwrap_or("no error")
    );
    Ok(Mypy {
        version: wheels.version.clone(),
        report,
        ill_typed,
    })
}

/// Packs the variant's wheels once more: the same build must give the
/// same files, or every environment keyed by them reinstalls and no one
/// can check a published wheel against its source.
fn reproducible(variant: Variant) -> Result<Vec<(String, String, String)>> {
    let first = mlx_harness::python_env::build_wheel(variant)?;
    let digests = |w: &Wheels| -> Result<Vec<String>> {
        w.files()
            .iter()
            .map(|f| {
                std::fs::read(f)
                    .map(|b| sha256_hex(&b))
                    .with_context(|| format!("{}", f.display()))
            })
            .collect()
    };
    let before = digests(&first)?;
    let second = mlx_harness::python_env::rebuild_wheel(variant)?;
    let after = digests(&second)?;
    Ok(second
        .files()
        .iter()
        .zip(before)
        .zip(after)
        .map(|((file, a), b)| {
            let name = file
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned();
            (name, a, b)
        })
        .collect())
}

/// auditwheel's own reading of each repaired wheel (`auditwheel show
/// --json`), Linux only.
fn platform_tags(wheels: &Wheels) -> Result<Vec<Tags>> {
    if !cfg!(target_os = "linux") {
        return Ok(Vec::new());
    }
    let python = mlx_harness::python_env::build_target()?.python;
    let mut tags = Vec::new();
    for (w, frontend) in [(&wheels.frontend, true), (&wheels.library, false)] {
        let out = Command::new(&python)
            .args(["-m", "auditwheel", "show", "--json"])
            .arg(w)
            .output()
            .context("cannot run auditwheel")?;
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        let tag = |k: &str| json[k].as_str().unwrap_or("").to_string();
        tags.push(Tags {
            name: w
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned(),
            frontend,
            ran: Ran::from(&out),
            found: if frontend {
                tag("sym_tag")
            } else {
                tag("overall_tag")
            },
            outside: json["external_libs"]
                .as_object()
                .map(|m| m.keys().cloned().collect())
                .unwrap_or_default(),
            size: std::fs::metadata(w).map(|m| m.len()).unwrap_or(0),
        });
    }
    Ok(tags)
}

#[cfg(test)]
mod tests;
