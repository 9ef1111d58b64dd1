//! MLX's Python bindings (`mlx.core`) for a built variant: the variant's own
//! `python/src`, compiled by `python/CMakeLists.txt` against the variant's
//! installed library, so the extension's inline MLX code (array assignments
//! included) comes from the same headers as the library it loads. Kept in
//! `<variant>/python-<tag>/`, with a stamp like the variant's own.

use crate::build::{configure, configure_inputs, run_cmake, Artifacts, Options};
use crate::{io, lock_file, Error, Fingerprint};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The interpreter the extension is built for, and where nanobind's CMake
/// package is (`python -m nanobind --cmake_dir`).
#[derive(Clone, Debug)]
pub struct PythonTarget {
    pub python: PathBuf,
    pub nanobind_cmake_dir: PathBuf,
}

impl PythonTarget {
    /// `cp311`-style tag and full version of the interpreter.
    fn identity(&self) -> Result<(String, String), Error> {
        let out = Command::new(&self.python)
            .args(["-c", "import sys; print(f'cp{sys.version_info[0]}{sys.version_info[1]}'); print(sys.version)"])
            .output()
            .map_err(io(format!("cannot run {}", self.python.display())))?;
        let text = String::from_utf8_lossy(&out.stdout);
        let mut lines = text.lines();
        match (out.status.success(), lines.next(), lines.next()) {
            (true, Some(tag), Some(version)) => Ok((tag.to_string(), version.to_string())),
            _ => Err(Error::new(format!(
                "{} did not report its version: {}",
                self.python.display(),
                String::from_utf8_lossy(&out.stderr)
            ))),
        }
    }
}

/// The built extension module and the pure-Python package beside it.
#[derive(Clone, Debug)]
pub struct Bindings {
    /// `core.<abi tag>.so`, with its rpath at `$ORIGIN/lib`.
    pub module: PathBuf,
    /// The variant's `python/mlx`: the package the module belongs in.
    pub package_dir: PathBuf,
    /// `cp311`-style tag of the interpreter it was built for.
    pub python_tag: String,
    pub cached: bool,
}

fn our_cmake_project() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("python")
}

/// Builds (or finds up to date) the bindings of `mlx` for `target`.
pub fn build_bindings(
    mlx: &Artifacts,
    target: &PythonTarget,
    opts: &Options,
) -> Result<Bindings, Error> {
    if mlx.build_key.is_empty() {
        return Err(Error::new(format!(
            "{} was not built by mlx-patched: its tree is unknown, so are its bindings' sources",
            mlx.name
        )));
    }
    let (tag, version) = target.identity()?;
    let dir = mlx
        .prefix
        .parent()
        .ok_or_else(|| Error::new("a prefix has a parent"))?
        .join(format!("python-{tag}"));
    fs::create_dir_all(&dir).map_err(io(format!("cannot create {}", dir.display())))?;
    let build = dir.join("build");
    let args = vec![
        "-G".to_string(),
        "Ninja".into(),
        "-DCMAKE_BUILD_TYPE=Release".into(),
        format!("-DMLX_TREE={}", mlx.source_dir.display()),
        format!("-DMLX_DIR={}", mlx.prefix.join("share/cmake/MLX").display()),
        format!("-Dnanobind_DIR={}", target.nanobind_cmake_dir.display()),
        format!("-DPython_EXECUTABLE={}", target.python.display()),
    ];
    let inputs = configure_inputs(&args, opts, false);
    let mut key = Fingerprint::new("bindings 1");
    key.text("variant", &mlx.build_key)
        .text("python", &version)
        .text("configure", &inputs);
    key.file(&our_cmake_project().join("CMakeLists.txt"))?;
    key.bytes(
        "nanobind",
        &fs::read(
            target
                .nanobind_cmake_dir
                .join("nanobind-config-version.cmake"),
        )
        .unwrap_or_default(),
    );
    let key = key.finish();

    let _lock = lock_file(&dir.join("lock"))?;
    let stamp = dir.join("stamp");
    let find_module = || -> Option<PathBuf> {
        fs::read_dir(&build)
            .ok()?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .find(|p| {
                p.file_name().is_some_and(|n| {
                    let n = n.to_string_lossy();
                    n.starts_with("core.")
                        && (n.ends_with(".so") || n.ends_with(".dylib") || n.ends_with(".pyd"))
                })
            })
    };
    let package_dir = mlx.source_dir.join("python/mlx");
    if fs::read_to_string(&stamp).is_ok_and(|s| s.trim() == key) {
        if let Some(module) = find_module() {
            return Ok(Bindings {
                module,
                package_dir,
                python_tag: tag,
                cached: true,
            });
        }
    }
    let _ = fs::remove_file(&stamp);
    let label = format!("MLX {}: Python bindings for {tag}", mlx.name);
    let log_path = dir.join("build.log");
    let log = fs::File::create(&log_path).map_err(io("cannot create build.log"))?;
    opts.progress.say(&format!(
        "{label}: building from {} against {} (log: {})",
        package_dir.parent().unwrap().join("src").display(),
        mlx.prefix.display(),
        log_path.display()
    ));
    let what = format!("the Python bindings of MLX {}", mlx.name);
    configure(
        &our_cmake_project(),
        &build,
        &args,
        &inputs,
        &log,
        &log_path,
        &format!("{label}: configuring"),
        opts.progress,
        &what,
    )?;
    let mut compile = Command::new("cmake");
    compile
        .arg("--build")
        .arg(&build)
        .arg("--parallel")
        .arg(opts.jobs.to_string());
    run_cmake(
        &mut compile,
        &log,
        &log_path,
        &format!("{label}: compiling"),
        opts.progress,
        &what,
        "build",
    )?;
    let module = find_module().ok_or_else(|| {
        Error::new(format!(
            "the bindings built, but no core module is in {} (log: {})",
            build.display(),
            log_path.display()
        ))
    })?;
    fs::write(&stamp, &key).map_err(io("cannot write the stamp"))?;
    Ok(Bindings {
        module,
        package_dir,
        python_tag: tag,
        cached: false,
    })
}
