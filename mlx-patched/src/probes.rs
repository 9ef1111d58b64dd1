//! The plain C++ probe programs (`crates/probes/cpp/<name>.cpp`), each built
//! against a prefix the way any C++ user links one ([`crate::compile_program`]).
//! The one list of them: the suite's build script builds all of them per
//! variant, the sanitizer runner those that run under sanitizers, the demo
//! and the checks the ones they name.

use crate::CommandVars;
use std::path::{Path, PathBuf};

pub use mlx_facts::probes::*;

/// The directory of the probes' sources and the headers they share.
pub fn sources_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap_or(Path::new(".."))
        .join("crates/probes/cpp")
}

/// The source of the probe called `name`.
pub fn source(name: &str) -> PathBuf {
    sources_dir().join(format!("{name}.cpp"))
}

/// Every file of the probes' sources (the programs and their headers), sorted.
pub fn source_files() -> Result<Vec<PathBuf>, crate::Error> {
    let dir = sources_dir();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map_err(|e| crate::Error::new(format!("cannot read {}: {e}", dir.display())))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    files.sort();
    Ok(files)
}

/// One round of `kernel_cache_race` (the probe built at `exe`): `processes`
/// copies started on one empty cache folder `dir` (their `TMPDIR`), released
/// at one instant, each told to build `kernels` kernels. Each process's
/// outcome: `Ok`, or its exit status and output when it failed.
pub fn kernel_cache_round(
    exe: &Path,
    dir: &Path,
    processes: usize,
    kernels: i64,
) -> Result<Vec<Result<(), String>>, crate::Error> {
    use std::process::{Command, Stdio};
    let io = |what: &str, e: std::io::Error| crate::Error::new(format!("{what}: {e}"));
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).map_err(|e| io(&dir.display().to_string(), e))?;
    let start = dir.join("start");
    let mut children = Vec::new();
    for _ in 0..processes {
        children.push(
            Command::new(exe)
                .arg(&start)
                .var(crate::other_vars::TMPDIR, dir)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|e| io(&format!("run {}", exe.display()), e))?,
        );
    }
    // Long enough for every process to load MLX and wait at the start line;
    // one that is late only races less.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    std::fs::write(&start, "").map_err(|e| io(&start.display().to_string(), e))?;
    let built = format!("kernels built {kernels}");
    let mut outcomes = Vec::new();
    for c in children {
        let out = c
            .wait_with_output()
            .map_err(|e| io(&format!("wait for {}", exe.display()), e))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        outcomes.push(
            if out.status.success() && stdout.lines().any(|l| l == built) {
                Ok(())
            } else {
                Err(format!(
                    "{}: {}{}",
                    out.status,
                    stdout.trim(),
                    String::from_utf8_lossy(&out.stderr).trim()
                ))
            },
        );
    }
    Ok(outcomes)
}

/// Whether a kernel-cache failure is the race (a process loaded a library
/// another was still writing), not a broken probe.
pub fn is_kernel_cache_race(failure: &str) -> bool {
    failure.contains("Could not load C++ shared library")
        || failure.contains("Failed to load compiled function")
}

/// A shared library that aborts the process as it unloads, after `main`
/// returned and every report was written: a stand-in for a crash in a
/// static destructor (`tests/support/abort_at_exit.c`), built with `cc`
/// into `dir`. The checks preload it to show they see such a crash.
pub fn abort_at_exit_library(dir: &Path) -> Result<PathBuf, crate::Error> {
    let source = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap_or(Path::new(".."))
        .join("tests/support/abort_at_exit.c");
    std::fs::create_dir_all(dir)
        .map_err(|e| crate::Error::new(format!("{}: {e}", dir.display())))?;
    let lib = dir.join("abort_at_exit.so");
    let status = std::process::Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&lib)
        .arg(&source)
        .status()
        .map_err(|e| crate::Error::new(format!("cannot run cc: {e}")))?;
    if !status.success() {
        return Err(crate::Error::new(format!(
            "cc could not build {} ({status})",
            source.display()
        )));
    }
    Ok(lib)
}

/// The variable that makes the dynamic loader preload a library.
pub const PRELOAD: &str = if cfg!(target_os = "macos") {
    "DYLD_INSERT_LIBRARIES"
} else {
    "LD_PRELOAD"
};

/// Every probe of [`CPP_PROBES`] built against `mlx`: (name, executable).
///
/// The executables live beside the variant's build, under
/// `<root>/<variant>/probes/<key>/`, keyed on the variant's build, every file
/// of the probes' sources, the compiler and the flags. A crate built with
/// another feature set (the suite's control pass) or built again reuses them
/// instead of compiling 7 programs per variant once more; what is missing
/// compiles as many at once as the jobs allow (Cargo's jobserver inside a
/// build script). Each is written under a name of its own and renamed into
/// place, so two builds at once never see a half-written one.
pub fn build_probes(
    mlx: &crate::Artifacts,
    opts: &crate::Options,
) -> Result<Vec<(&'static str, PathBuf)>, crate::Error> {
    let cxx = opts.env.cxx_or_default();
    let mut key = crate::Fingerprint::new("probe executables v1");
    key.text("variant", &mlx.name)
        .text("build", &mlx.build_key)
        .text("compiler", cxx.to_string_lossy())
        .text(
            "flags",
            format!("{:?}", mlx.sanitizer.map(|s| s.compile_flags())),
        );
    for file in source_files()? {
        key.file(&file)?;
    }
    let key = key.finish();
    let dir = opts.root.join(&mlx.name).join("probes").join(&key[..16]);
    std::fs::create_dir_all(&dir)
        .map_err(|e| crate::Error::new(format!("cannot create {}: {e}", dir.display())))?;
    let built: Vec<(&'static str, PathBuf)> = CPP_PROBES
        .iter()
        .map(|p| (p.name, dir.join(p.name)))
        .collect();
    let missing: Vec<&(&'static str, PathBuf)> =
        built.iter().filter(|(_, exe)| !exe.is_file()).collect();
    if missing.is_empty() {
        return Ok(built);
    }
    let tokens = crate::jobs::acquire(
        crate::jobs::cargo_jobserver(&opts.env),
        opts.jobs,
        crate::jobs::WAIT,
    );
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: Vec<Result<(), crate::Error>> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..tokens.jobs().min(missing.len()))
            .map(|_| {
                s.spawn(|| {
                    let mut results = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some((name, exe)) = missing.get(i) else {
                            return results;
                        };
                        let partial = exe.with_extension(format!("partial-{}", std::process::id()));
                        results.push(
                            crate::compile_program(mlx, &source(name), &partial, &opts.env)
                                .and_then(|()| {
                                    std::fs::rename(&partial, exe).map_err(|e| {
                                        crate::Error::new(format!(
                                            "cannot rename {} to {}: {e}",
                                            partial.display(),
                                            exe.display()
                                        ))
                                    })
                                }),
                        );
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().expect("a probe compile thread panicked"))
            .collect()
    });
    drop(tokens);
    results.into_iter().collect::<Result<(), _>>()?;
    Ok(built)
}
