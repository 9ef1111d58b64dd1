//! The ways a user installs, replaces and removes the fork's wheels, each
//! tried in a clean virtual environment with `--no-index`: the fork's two
//! wheels and upstream's official ones (fetched by pip, checksums pinned)
//! are the only packages there are. And the wheels' type stubs, through a
//! type checker.
//!
//! Every path ends in the report's script: 0 MiB retained where the fork is
//! installed, upstream's 24 where upstream is.

use crate::python_env::{python_root, run_python, sha256_hex, venv_with};
use crate::wheel::Wheels;
use crate::workspace::{anyhow, Context};
use crate::workspace::{workspace_root, Result, Tally};
use mlx_expectations::report::Row;
use mlx_expectations::Cell;
use mlx_patched::CommandVars;
use mlx_patched::{pin, Expect, Variant};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

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

/// One installed state, judged: the versions pip records, the library the
/// interpreter loads and the report's script.
struct Expected<'a> {
    what: &'a str,
    version: &'a str,
    libmlx: &'a str,
    verdict: Expect,
}

fn judge(t: &mut Tally, rows: &mut Vec<Row>, python: &Path, want: &Expected) -> Result<()> {
    let have = installed(python)?;
    let versions: Vec<Option<&String>> = ["mlx", "mlx-cpu"].iter().map(|n| have.get(*n)).collect();
    t.check(
        versions
            .iter()
            .all(|v| *v == Some(&want.version.to_string())),
        || {
            format!(
                "{}: mlx and mlx-cpu are {versions:?}, expected {} for both",
                want.what, want.version
            )
        },
    );
    let lib = loaded_libmlx(python);
    t.check(
        lib.as_ref().is_ok_and(|(_, sha)| sha == want.libmlx),
        || {
            format!(
                "{}: the loaded libmlx is {lib:?}, expected the bytes {}",
                want.what,
                &want.libmlx[..16]
            )
        },
    );
    let (script, _) = crate::python_env::report_script()?;
    let mib = report_mib(&run_python(python, &script, &[])?);
    let bound = Cell::REPORT.bound(want.verdict);
    let line = format!("{}: report.py prints {mib:?} MiB retained", want.what);
    println!("{line}");
    rows.push(Row::note(format!("Python install paths: {line}")));
    t.check(
        mib.len() == 10 && mib.iter().all(|&m| bound.admits_mib(m)),
        || format!("{line}, expected {bound} every cycle"),
    );
    Ok(())
}

/// The MiB figures the report's script printed, one per cycle.
pub fn report_mib(stdout: &str) -> Vec<i64> {
    stdout
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1).and_then(|m| m.parse().ok()))
        .collect()
}

/// A clean environment at `target/python/<name>`.
fn clean_venv(name: &str) -> Result<PathBuf> {
    let venv = python_root()?.join(name);
    let _ = std::fs::remove_dir_all(&venv);
    venv_with(&venv, &[], &[])
}

fn pip(python: &Path, args: &[String]) -> Result<()> {
    println!("  pip {}", args.join(" "));
    crate::workspace::run(
        Command::new(python)
            .args(["-m", "pip", "--quiet", "--disable-pip-version-check"])
            .args(args),
    )
}

fn files(w: &[PathBuf]) -> Vec<String> {
    w.iter().map(|p| p.display().to_string()).collect()
}

/// The install, upgrade and removal paths; `rows` gets what they printed.
pub fn check(t: &mut Tally, rows: &mut Vec<Row>) -> Result<()> {
    let fork = crate::python_env::build_wheel(Variant::PATCHED)?;
    let expectations = crate::workspace::expectations();
    let fork_lib = libmlx_in_wheel(mlx_patched::Env::process().python().as_ref(), &fork.library)?;
    let fork_state = |what| Expected {
        what,
        version: &fork.version,
        libmlx: &fork_lib,
        verdict: expectations.verdict(&Variant::PATCHED),
    };

    // The fork alone, as the README installs it.
    println!("the fork's wheels in a clean environment:");
    let py = clean_venv("clean-venv")?;
    let mut install = vec!["install".to_string(), "--no-index".into()];
    install.extend(files(&fork.files()));
    pip(&py, &install)?;
    judge(t, rows, &py, &fork_state("the fork's wheels alone"))?;
    uninstall_leaves_nothing(t, &py, "the fork's wheels alone")?;

    let official = match crate::provenance::official_wheels()? {
        Ok(w) => w,
        Err(why) => {
            let line =
                format!("the paths between upstream's wheels and the fork's: skipped: {why}");
            println!("{line}");
            rows.push(Row::note(line.to_string()));
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
        let line = format!(
            "the paths between upstream's wheels and the fork's: skipped: the pinned official wheels are for CPython {}, this interpreter is {interpreter}",
            pin::WHEEL_PYTHON
        );
        println!("{line}");
        rows.push(Row::note(line.to_string()));
        return Ok(());
    }
    let official_dir = official[0].parent().unwrap().display().to_string();
    let official_lib =
        libmlx_in_wheel(mlx_patched::Env::process().python().as_ref(), &official[1])?;
    let upstream_state = |what| Expected {
        what,
        version: pin::UPSTREAM_VERSION,
        libmlx: &official_lib,
        verdict: Expect::Leaks,
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
        &from_official(&[&format!("mlx[cpu]=={}", pin::UPSTREAM_VERSION)]),
    )?;
    judge(t, rows, &py, &upstream_state("upstream's mlx[cpu] alone"))?;
    pip(&py, &install)?;
    judge(
        t,
        rows,
        &py,
        &fork_state("the fork's wheels over upstream's"),
    )?;
    uninstall_leaves_nothing(t, &py, "the fork's wheels over upstream's")?;

    // The fork first, then back to upstream with the README's command.
    println!("the fork's wheels, then back to upstream:");
    let py = clean_venv("downgrade-venv")?;
    pip(&py, &install)?;
    let back = back_to_upstream();
    pip(
        &py,
        &from_official(&back.iter().map(String::as_str).collect::<Vec<_>>()),
    )?;
    judge(
        t,
        rows,
        &py,
        &upstream_state("upstream's wheels over the fork's"),
    )?;
    uninstall_leaves_nothing(t, &py, "upstream's wheels over the fork's")?;
    Ok(())
}

/// What the README gives to replace the fork with upstream: a plain
/// `pip install mlx==0.32.2` would not, since `==0.32.2` also matches the
/// fork's `0.32.2+fork.<series>` (PEP 440 ignores a local label there).
pub fn back_to_upstream() -> Vec<String> {
    vec![
        "--force-reinstall".into(),
        format!("mlx=={}", pin::UPSTREAM_VERSION),
        format!("mlx-cpu=={}", pin::UPSTREAM_VERSION),
    ]
}

/// `pip uninstall -y mlx mlx-cpu`, then no file of MLX may remain.
fn uninstall_leaves_nothing(t: &mut Tally, python: &Path, what: &str) -> Result<()> {
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
    t.check(files.is_empty(), || {
        format!("{what}, then `pip uninstall -y mlx mlx-cpu`: left {files:?}")
    });
    Ok(())
}

/// The stubs, through mypy in an environment with the fork's wheels: the
/// report's script type-checks, and a wrong use of `mx.sum` is caught by
/// the type the stubs give it. Without the stubs both fail (measured: mypy
/// then finds no attribute `sum` or `zeros` in `mlx.core`).
pub fn type_check(
    t: &mut Tally,
    rows: &mut Vec<Row>,
    python: &Path,
    wheels: &Wheels,
) -> Result<()> {
    let cache = python_root()?.join("mypy-cache");
    let mypy = |file: &Path| -> Result<(bool, String)> {
        let out = Command::new(python)
            .args(["-m", "mypy", "--no-incremental", "--cache-dir"])
            .arg(&cache)
            .arg(file)
            .output()?;
        Ok((
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        ))
    };
    let (script, _) = crate::python_env::report_script()?;
    let (ok, said) = mypy(&script)?;
    let line = format!(
        "mypy on report.py against mlx {}: {}",
        wheels.version,
        said.lines().last().unwrap_or("")
    );
    println!("{line}");
    rows.push(Row::note(line.to_string()));
    t.check(ok, || format!("{line}\n{said}"));
    let wrong = python_root()?.join("ill_typed.py");
    std::fs::write(
        &wrong,
        "import mlx.core as mx\n\ntotal: str = mx.sum(mx.zeros((2, 2)))\n",
    )?;
    let (ok, said) = mypy(&wrong)?;
    let caught =
        !ok && said.contains("Incompatible types in assignment") && said.contains("\"array\"");
    println!(
        "mypy on a str assigned from mx.sum: {}",
        said.lines()
            .find(|l| l.contains("error"))
            .unwrap_or("no error")
    );
    t.check(caught, || {
        format!("mypy did not see mx.sum's type through the stubs:\n{said}")
    });
    Ok(())
}

/// Packs the variant's wheels once more and compares the bytes: the
/// same build must give the same files, or every environment keyed by them
/// reinstalls and no one can check a published wheel against its source.
pub fn reproducible(t: &mut Tally, rows: &mut Vec<Row>, variant: Variant) -> Result<()> {
    let first = crate::python_env::build_wheel(variant)?;
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
    let second = crate::python_env::rebuild_wheel(variant)?;
    let after = digests(&second)?;
    for ((file, a), b) in second.files().iter().zip(&before).zip(&after) {
        let line = format!(
            "{} packed twice: sha256 {} then {}",
            file.file_name().unwrap_or_default().to_string_lossy(),
            &a[..16],
            &b[..16]
        );
        println!("{line}");
        rows.push(Row::note(line.to_string()));
        t.check(a == b, || line.clone());
    }
    Ok(())
}

/// auditwheel's own reading of each repaired wheel (`auditwheel show
/// --json`): the tag in the file's name must be the one auditwheel finds.
/// For the library wheel that is its overall tag. The front end's binaries
/// need libmlx, which only the library wheel provides, so its overall tag
/// stays `linux_*` (upstream's front end reads the same); its symbol
/// versions' tag must be the name's, and libmlx its only outside library.
/// Sizes and what was vendored are printed (Linux only).
pub fn platform_tags(t: &mut Tally, rows: &mut Vec<Row>, wheels: &Wheels) -> Result<()> {
    if !cfg!(target_os = "linux") {
        return Ok(());
    }
    let python = crate::python_env::build_target()?.python;
    for (w, frontend) in [(&wheels.frontend, true), (&wheels.library, false)] {
        let name = w
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        let out = Command::new(&python)
            .args(["-m", "auditwheel", "show", "--json"])
            .arg(w)
            .output()?;
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        let tag = |k: &str| json[k].as_str().unwrap_or("").to_string();
        let outside: Vec<String> = json["external_libs"]
            .as_object()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        let (what, found) = if frontend {
            ("symbol versions", tag("sym_tag"))
        } else {
            ("overall", tag("overall_tag"))
        };
        let size = std::fs::metadata(w).map(|m| m.len()).unwrap_or(0);
        let line = format!(
            "{name}: {:.1} MiB; auditwheel show: {what} tag {found:?}, outside libraries {outside:?}",
            size as f64 / 1048576.0
        );
        println!("{line}");
        rows.push(Row::note(line.to_string()));
        let allowed: &[&str] = if frontend { &["libmlx.so"] } else { &[] };
        t.check(
            out.status.success()
                && found.starts_with("manylinux")
                && name.ends_with(&format!("-{found}.whl"))
                && outside.iter().all(|l| allowed.contains(&l.as_str())),
            || {
                format!(
                    "{line} ({}): {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr)
                )
            },
        );
    }
    Ok(())
}
