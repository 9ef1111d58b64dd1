//! System prerequisites of the MLX build, and the offline dependency folders
//! that point MLX's FetchContent at Debian's packages.

use crate::{Backend, Error};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

pub use mlx_facts::packages::DEBIAN_PACKAGES;

struct Need {
    what: &'static str,
    debian: &'static str,
    present: fn() -> bool,
    /// Needed only when MLX's own tests are configured.
    tests_only: bool,
}

fn has_cmd(cmd: &str, arg: &str) -> bool {
    Command::new(cmd)
        .arg(arg)
        .output()
        .is_ok_and(|o| o.status.success())
}

fn cmake_is_new_enough() -> bool {
    let Ok(out) = Command::new("cmake").arg("--version").output() else {
        return false;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let version = text.split_whitespace().nth(2).unwrap_or("0");
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0)) >= (3, 25)
}

fn any_file(paths: &[&str]) -> bool {
    paths.iter().any(|p| Path::new(p).exists())
}

const LINUX_NEEDS: &[Need] = &[
    Need {
        what: "cmake >= 3.25",
        debian: "cmake",
        present: cmake_is_new_enough,
        tests_only: false,
    },
    Need {
        what: "ninja",
        debian: "ninja-build",
        present: || has_cmd("ninja", "--version"),
        tests_only: false,
    },
    Need {
        what: "git",
        debian: "git",
        present: || has_cmd("git", "--version"),
        tests_only: false,
    },
    Need {
        what: "a C++20 compiler",
        debian: "g++",
        present: || has_cmd("c++", "--version"),
        tests_only: false,
    },
    Need {
        what: "BLAS (cblas.h)",
        debian: "libopenblas-dev",
        present: || {
            any_file(&[
                "/usr/include/cblas.h",
                "/usr/include/x86_64-linux-gnu/cblas.h",
                "/usr/include/aarch64-linux-gnu/cblas.h",
                "/usr/include/openblas/cblas.h",
            ])
        },
        tests_only: false,
    },
    Need {
        what: "LAPACKE (lapacke.h)",
        debian: "liblapacke-dev",
        present: || any_file(&["/usr/include/lapacke.h", "/usr/include/openblas/lapacke.h"]),
        tests_only: false,
    },
    Need {
        what: "nlohmann json",
        debian: "nlohmann-json3-dev",
        present: || any_file(&["/usr/include/nlohmann/json.hpp"]),
        tests_only: false,
    },
    Need {
        what: "doctest",
        debian: "doctest-dev",
        present: || {
            any_file(&["/usr/include/doctest/doctest.h"])
                && any_file(&["/usr/lib/cmake/doctest/doctest.cmake"])
        },
        tests_only: true,
    },
    Need {
        what: "fmt",
        debian: "libfmt-dev",
        present: || any_file(&["/usr/include/fmt/format.h"]),
        tests_only: false,
    },
];

/// What the Metal build needs from Homebrew, besides the Xcode command line
/// tools (the macOS workflow installs exactly these).
pub const BREW_PACKAGES: &[&str] = &["cmake", "ninja"];

/// Checks what the build needs (with MLX's own tests when `tests`) and
/// names the exact install command for what is missing.
pub fn check_system(backend: Backend, tests: bool) -> Result<(), Error> {
    if backend == Backend::Metal {
        let missing: Vec<&str> = BREW_PACKAGES
            .iter()
            .copied()
            .filter(|p| match *p {
                "cmake" => !cmake_is_new_enough(),
                other => !has_cmd(other, "--version"),
            })
            .collect();
        if !missing.is_empty() {
            return Err(Error::new(format!(
                "the MLX build needs {} (cmake >= 3.25). Install with:\n    brew install {}\nand the Xcode command line tools (xcode-select --install) for the Metal compiler.",
                missing.join(" and "),
                missing.join(" ")
            )));
        }
        return Ok(());
    }
    let cuda = [Need {
        what: "the CUDA toolkit (nvcc) and cuDNN",
        debian: "nvidia-cuda-toolkit nvidia-cudnn",
        present: || has_cmd("nvcc", "--version"),
        tests_only: false,
    }];
    let extra: &[Need] = if backend == Backend::Cuda { &cuda } else { &[] };
    let missing: Vec<&Need> = LINUX_NEEDS
        .iter()
        .chain(extra)
        .filter(|n| tests || !n.tests_only)
        .filter(|n| !(n.present)())
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let what: Vec<&str> = missing.iter().map(|n| n.what).collect();
    let pkgs: Vec<&str> = missing.iter().map(|n| n.debian).collect();
    Err(Error::new(format!(
        "the MLX build needs system packages that are missing: {}.\n\
         On Debian/Ubuntu install them with:\n    sudo apt-get update && sudo apt-get install -y {}\n\
         (or run `cargo xtask deps`, which installs everything the build and the tests need).",
        what.join(", "),
        pkgs.join(" ")
    )))
}

/// `-DFETCHCONTENT_SOURCE_DIR_*` arguments that make MLX's FetchContent use
/// Debian's json, and doctest when MLX's tests are configured (`tests`),
/// instead of downloading them.
pub fn offline_dep_dirs(root: &Path, backend: Backend, tests: bool) -> Result<Vec<String>, Error> {
    if backend == Backend::Metal {
        return Ok(Vec::new());
    }
    let deps = root.join("deps");
    // MLX includes <json.hpp> from `single_include/nlohmann` of the json source.
    let json = deps.join("json");
    let nlohmann = json.join("single_include/nlohmann");
    if fs::read_link(&nlohmann).ok().as_deref() != Some(Path::new("/usr/include/nlohmann")) {
        fs::create_dir_all(json.join("single_include"))
            .map_err(|e| Error::new(format!("cannot create {}: {e}", json.display())))?;
        let _ = fs::remove_file(&nlohmann);
        std::os::unix::fs::symlink("/usr/include/nlohmann", &nlohmann)
            .map_err(|e| Error::new(format!("cannot link {}: {e}", nlohmann.display())))?;
    }
    let json_arg = format!("-DFETCHCONTENT_SOURCE_DIR_JSON={}", json.display());
    if !tests {
        return Ok(vec![json_arg]);
    }
    // MLX's tests need a `doctest` target and `scripts/cmake/doctest.cmake`.
    let doctest = deps.join("doctest");
    write_if_changed(
        &doctest.join("CMakeLists.txt"),
        b"cmake_minimum_required(VERSION 3.16)\nproject(doctest_from_system LANGUAGES CXX)\nadd_library(doctest INTERFACE)\ntarget_include_directories(doctest INTERFACE /usr/include)\n",
    )?;
    for script in ["doctest.cmake", "doctestAddTests.cmake"] {
        let from = PathBuf::from("/usr/lib/cmake/doctest").join(script);
        let bytes = fs::read(&from).map_err(|e| {
            Error::new(format!(
                "cannot read {} (package doctest-dev): {e}",
                from.display()
            ))
        })?;
        write_if_changed(&doctest.join("scripts/cmake").join(script), &bytes)?;
    }
    Ok(vec![
        json_arg,
        format!("-DFETCHCONTENT_SOURCE_DIR_DOCTEST={}", doctest.display()),
    ])
}

/// The files of the system packages that stand in for MLX's downloaded
/// dependencies (json, fmt, and doctest when MLX's tests are configured),
/// hashed: another version of them is another build. A missing file hashes
/// as missing; the build's own check then names the package.
pub fn dependency_fingerprint(backend: Backend, tests: bool) -> String {
    if backend == Backend::Metal {
        return "dependencies fetched by MLX's CMake".to_string();
    }
    let mut f = crate::Fingerprint::new("system dependencies 1");
    let doctest = [
        "/usr/lib/cmake/doctest/doctest.cmake",
        "/usr/lib/cmake/doctest/doctestAddTests.cmake",
        "/usr/include/doctest/doctest.h",
    ];
    let doctest: &[&str] = if tests { &doctest } else { &[] };
    let paths = std::iter::once("/usr/include/nlohmann/json.hpp")
        .chain(doctest.iter().copied())
        .chain(["/usr/include/fmt/core.h"]);
    for path in paths {
        f.text("path", path).bytes(
            "bytes",
            &fs::read(path).unwrap_or_else(|_| b"missing".to_vec()),
        );
    }
    f.finish()
}

fn write_if_changed(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    if fs::read(path).ok().as_deref() == Some(bytes) {
        return Ok(());
    }
    fs::create_dir_all(path.parent().unwrap())
        .map_err(|e| Error::new(format!("cannot create {}: {e}", path.display())))?;
    fs::write(path, bytes).map_err(|e| Error::new(format!("cannot write {}: {e}", path.display())))
}

/// Refuses to run where MLX's CPU `compile` does nothing (no working g++,
/// or `MLX_DISABLE_COMPILE`): there neither the leak nor the kernel cache
/// can show, and a check that passed would say nothing.
pub fn cpu_compile_works() -> Result<(), Error> {
    if crate::Env::process()
        .other(crate::other_vars::MLX_DISABLE_COMPILE)
        .is_some()
    {
        return Err(Error::new(
            "MLX_DISABLE_COMPILE is set: compile does nothing, so the leak checks cannot see the leak; unset it",
        ));
    }
    match Command::new("g++").arg("--version").output() {
        Ok(o) if o.status.success() => Ok(()),
        _ => Err(Error::new(
            "`g++ --version` fails: MLX's CPU backend compiles nothing without it, so the leak checks cannot see the leak (Debian/Ubuntu: apt-get install g++)",
        )),
    }
}
