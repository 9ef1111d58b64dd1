//! A precompiled copy of MLX's CPU kernel preamble in the checks' Python
//! environments.
//!
//! `mx.compile` on the CPU writes each fused kernel as a C++ file that
//! includes the preamble header shipped in the wheel, and runs g++ on it
//! (`mlx_facts::kernels`). Parsing that header is most of each compile.
//! When `<header>.gch` sits beside it, precompiled by the same g++ with the
//! same flags, g++ reads that instead and writes the same kernel: 0.2 s of
//! CPU instead of about 1 s a kernel here, and the same bytes (the Python
//! check shows both). The checks compile well over a thousand kernels.
//!
//! g++ never looks at the header again once a valid `.gch` is beside it,
//! so a `.gch` must not outlive its header: it is written only into an
//! environment built around one variant's wheels, stamped with the
//! header's hash and g++'s version, and made again when either changes.

use crate::error::{anyhow, Context, Result};
use mlx_facts::kernels::{COMPILE_FLAGS, PREAMBLE_HEADER};
use mlx_patched::CommandVars;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The include folder of the mlx package in the environment of `python`
/// (`<venv>/lib/python3.X/site-packages/mlx/include`), if it has one.
pub fn include_dir(python: &Path) -> Option<PathBuf> {
    let venv = python.parent()?.parent()?;
    std::fs::read_dir(venv.join("lib"))
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| e.path().join("site-packages/mlx/include"))
        .find(|d| d.join(PREAMBLE_HEADER).is_file())
}

/// The precompiled header's path for the include folder `include`.
pub fn gch_of(include: &Path) -> PathBuf {
    let mut name = include.join(PREAMBLE_HEADER).into_os_string();
    name.push(".gch");
    PathBuf::from(name)
}

/// g++ with MLX's kernel flags, its include folder `include`.
pub fn gxx(include: &Path) -> Command {
    let mut c = Command::new("g++");
    c.args(COMPILE_FLAGS).arg("-I").arg(include);
    c
}

/// The stamp beside a precompiled header: the [`key`] it was made for.
fn stamp_of(gch: &Path) -> PathBuf {
    gch.with_extension("gch.sha256")
}

/// What a precompiled copy of `header` depends on: the header's bytes,
/// g++'s version and the flags.
fn key(header: &Path) -> Result<String> {
    let version = Command::new("g++")
        .arg("--version")
        .output()
        .context("cannot run g++ --version")?;
    let mut key = mlx_patched::Fingerprint::new("kernel preamble 1");
    key.file(header)?
        .text("g++", String::from_utf8_lossy(&version.stdout))
        .text("flags", COMPILE_FLAGS.join(" "));
    Ok(key.finish())
}

/// Runs a compile of g++'s, which prints its warnings: they are shown only
/// when it fails.
fn run_gxx(cmd: &mut Command, what: &Path) -> Result<()> {
    let out = cmd.output().context("cannot run g++")?;
    if out.status.success() {
        return Ok(());
    }
    Err(anyhow!(
        "g++ could not compile {} ({}):\n{}",
        what.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    ))
}

/// Precompiles the preamble beside its header in the environment of
/// `python`, unless the one there was made from the same header by the
/// same g++. An environment without MLX's headers is left alone.
pub fn precompile(python: &Path) -> Result<()> {
    let Some(include) = include_dir(python) else {
        return Ok(());
    };
    let header = include.join(PREAMBLE_HEADER);
    let gch = gch_of(&include);
    let key = key(&header)?;
    if gch.is_file() && std::fs::read_to_string(stamp_of(&gch)).is_ok_and(|s| s.trim() == key) {
        return Ok(());
    }
    // Neither stays behind a failed or stale compile.
    remove_in(&include);
    run_gxx(
        gxx(&include)
            .args(["-x", "c++-header"])
            .arg(&header)
            .arg("-o")
            .arg(&gch),
        &header,
    )?;
    std::fs::write(stamp_of(&gch), key)?;
    Ok(())
}

/// Removes the precompiled preamble from the environment of `python`:
/// before anything installs another MLX there.
pub fn remove(python: &Path) {
    if let Some(include) = include_dir(python) {
        remove_in(&include);
    }
}

/// What one compile of a kernel source read and wrote.
pub struct Compiled {
    /// The shared library's bytes.
    pub library: Vec<u8>,
    /// Whether g++ parsed the preamble header (it names it among the
    /// source's dependencies) rather than its precompiled copy.
    pub parsed_header: bool,
}

/// Compiles the kernel source `source` as MLX does, against `include`, in
/// the scratch folder `dir`.
pub fn compile_kernel(include: &Path, source: &Path, dir: &Path) -> Result<Compiled> {
    std::fs::create_dir_all(dir)?;
    let library = dir.join("kernel.so");
    let deps = dir.join("kernel.d");
    let _ = std::fs::remove_file(&deps);
    run_gxx(
        gxx(include)
            .arg("-shared")
            .arg(source)
            .arg("-o")
            .arg(&library)
            .var(mlx_patched::other_vars::DEPENDENCIES_OUTPUT, &deps),
        source,
    )?;
    Ok(Compiled {
        library: std::fs::read(&library)?,
        parsed_header: names_the_header(
            &std::fs::read_to_string(&deps)
                .with_context(|| format!("g++ wrote no dependencies to {}", deps.display()))?,
        ),
    })
}

/// Whether a dependency list g++ wrote (`DEPENDENCIES_OUTPUT`) names the
/// preamble header: g++ lists a header it parsed, and not one whose
/// precompiled copy it read.
pub fn names_the_header(deps: &str) -> bool {
    deps.contains(PREAMBLE_HEADER)
}

/// How the environment of `python` compiles MLX's kernels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Use {
    /// MLX's own compile of a fresh kernel, run in the environment, parsed
    /// the header (false: it read the precompiled copy).
    pub mlx_parsed_header: bool,
    /// g++ on one of the kernels MLX wrote, with the environment's
    /// headers and with a copy of them that has no precompiled preamble:
    /// whether each parsed the header.
    pub parsed_with: bool,
    pub parsed_without: bool,
    /// Whether the two compiles wrote the same bytes.
    pub same_bytes: bool,
}

/// Shows how the environment of `python` compiles kernels (see [`Use`]),
/// in the scratch folder `dir`: `kernels` is a kernel folder MLX filled
/// from that environment (a `TMPDIR`).
pub fn check_use(python: &Path, kernels: &Path, dir: &Path) -> Result<Use> {
    let include =
        include_dir(python).ok_or_else(|| anyhow!("{} has no MLX headers", python.display()))?;
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir)?;
    // MLX's own compile, from an empty kernel folder.
    let deps = dir.join("mlx.d");
    let tmp = dir.join("tmp");
    std::fs::create_dir_all(&tmp)?;
    let out = Command::new(python)
        .args([
            "-c",
            concat!(
                "import mlx.core as mx\n",
                "f = mx.compile(lambda x: mx.exp(x) * 3 + 1)\n",
                "mx.eval(f(mx.ones(8)))\n",
            ),
        ])
        .var(mlx_patched::other_vars::TMPDIR, &tmp)
        .var(mlx_patched::other_vars::DEPENDENCIES_OUTPUT, &deps)
        .output()
        .with_context(|| format!("cannot run {}", python.display()))?;
    if !out.status.success() {
        return Err(anyhow!(
            "a compiled function in {} failed ({}): {}",
            python.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let mlx_deps = std::fs::read_to_string(&deps).with_context(|| {
        format!(
            "MLX compiled no kernel with g++ ({} is missing)",
            deps.display()
        )
    })?;
    // One of the kernels MLX wrote, both ways.
    let source = walk_for_source(kernels)?
        .ok_or_else(|| anyhow!("no kernel source under {}", kernels.display()))?;
    let bare = dir.join("include");
    mlx_patched::copy_tree(&include, &bare)?;
    remove_in(&bare);
    let with = compile_kernel(&include, &source, &dir.join("with"))?;
    let without = compile_kernel(&bare, &source, &dir.join("without"))?;
    Ok(Use {
        mlx_parsed_header: names_the_header(&mlx_deps),
        parsed_with: with.parsed_header,
        parsed_without: without.parsed_header,
        same_bytes: with.library == without.library,
    })
}

fn remove_in(include: &Path) {
    let gch = gch_of(include);
    let _ = std::fs::remove_file(stamp_of(&gch));
    let _ = std::fs::remove_file(gch);
}

/// The first kernel source (`*.cpp`) under `dir`, in name order.
fn walk_for_source(dir: &Path) -> Result<Option<PathBuf>> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("{}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    for e in &entries {
        if e.extension().is_some_and(|x| x == "cpp") {
            return Ok(Some(e.clone()));
        }
    }
    for e in entries.iter().filter(|e| e.is_dir()) {
        if let Some(found) = walk_for_source(e)? {
            return Ok(Some(found));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On a header of its own: precompiled once, used, the same bytes as
    /// without it, made again when the header changes, and left alone in an
    /// environment without MLX's headers.
    #[test]
    fn the_preamble_is_precompiled_used_and_remade_with_its_header() {
        let dir = std::env::temp_dir().join(format!("kernel-preamble-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let include = dir.join("venv/lib/python3.11/site-packages/mlx/include");
        let header = include.join(PREAMBLE_HEADER);
        std::fs::create_dir_all(header.parent().unwrap()).unwrap();
        std::fs::write(
            &header,
            "#pragma once\n#include <cmath>\ninline float twice(float x) { return 2 * x; }\n",
        )
        .unwrap();
        let python = dir.join("venv/bin/python");
        assert_eq!(include_dir(&python), Some(include.clone()));
        let source = dir.join("kernel.cpp");
        std::fs::write(
            &source,
            format!("#include \"{PREAMBLE_HEADER}\"\nextern \"C\" float k(float x) {{ return twice(x); }}\n"),
        )
        .unwrap();
        let without = compile_kernel(&include, &source, &dir.join("without")).unwrap();
        assert!(without.parsed_header);

        precompile(&python).unwrap();
        let gch = gch_of(&include);
        let made = std::fs::metadata(&gch).unwrap().modified().unwrap();
        let with = compile_kernel(&include, &source, &dir.join("with")).unwrap();
        assert!(!with.parsed_header);
        assert_eq!(with.library, without.library);

        // The same header: kept. Another header: made again.
        precompile(&python).unwrap();
        assert_eq!(std::fs::metadata(&gch).unwrap().modified().unwrap(), made);
        std::fs::write(
            &header,
            "#pragma once\ninline float twice(float x) { return x + x; }\n",
        )
        .unwrap();
        precompile(&python).unwrap();
        let stamp = std::fs::read_to_string(stamp_of(&gch)).unwrap();
        assert_eq!(stamp, key(&header).unwrap());

        // No headers: nothing to do.
        precompile(&dir.join("empty/bin/python")).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
