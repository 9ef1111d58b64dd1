//! What a build does on a host, as data: the CMake options, the libraries
//! a static link of libmlx names, the C++ runtime, the shims mlx-sys
//! compiles, where `mlx.metallib` goes, and the `DEP_MLX_*` metadata. Pure
//! functions of the host and the paths, so every host's row is
//! unit-tested here on Linux; the build (`cmake.rs`, `archive.rs`,
//! `crates/mlx-sys/build.rs`) does what the plan says.

use crate::{Env, Error};
use std::path::{Path, PathBuf};

/// How a library is linked, as Cargo's `rustc-link-lib` spells it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LinkKind {
    Static,
    Dylib,
    Framework,
}

/// Which MLX backend to build.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// Linux default: the CPU backend with system BLAS/LAPACK.
    Cpu,
    /// macOS default: Metal plus Accelerate.
    Metal,
    /// Linux with the `cuda` feature: the CUDA backend (and the CPU one).
    Cuda,
}

impl Backend {
    pub fn for_host(cuda: bool) -> Self {
        Self::for_target(None, cuda)
    }

    /// The backend for the target whose `target_os` a build script reads
    /// (`CARGO_CFG_TARGET_OS`); `None` is the host, for a program that
    /// builds for where it runs. A cross build from Linux to macOS gets
    /// Metal, and the reverse gets the CPU backend.
    pub fn for_target(target_os: Option<&str>, cuda: bool) -> Self {
        let macos = match target_os {
            Some(os) => os == "macos",
            None => cfg!(target_os = "macos"),
        };
        if cuda {
            Backend::Cuda
        } else if macos {
            Backend::Metal
        } else {
            Backend::Cpu
        }
    }
}

/// The target a build is for, as Cargo describes it to a build script
/// (`CARGO_CFG_TARGET_*`), and what the features ask for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Host {
    /// `target_os`: `linux`, `macos`.
    pub os: String,
    /// `target_arch`: `x86_64`, `aarch64`.
    pub arch: String,
    /// `target_vendor`: `apple`, `unknown`.
    pub vendor: String,
    /// The CUDA backend (mlx-bridge's `cuda` feature).
    pub cuda: bool,
    /// Metal kernels compiled at run time (mlx-sys's `metal-jit` feature).
    pub metal_jit: bool,
}

impl Host {
    pub fn new(os: &str, arch: &str, vendor: &str) -> Host {
        Host {
            os: os.into(),
            arch: arch.into(),
            vendor: vendor.into(),
            cuda: false,
            metal_jit: false,
        }
    }

    /// The target of the build script `env` reads for; outside a build
    /// script (no `CARGO_CFG_*`), this process's own.
    pub fn of_target(env: &Env, cuda: bool) -> Host {
        let here = Host::here(cuda);
        let cfg = |key: &str, default: String| env.target_cfg(key).unwrap_or(default);
        Host {
            os: cfg("target_os", here.os),
            arch: cfg("target_arch", here.arch),
            vendor: cfg("target_vendor", here.vendor),
            ..here
        }
    }

    /// This process's own target, for programs that build for where they run.
    pub fn here(cuda: bool) -> Host {
        let vendor = if cfg!(target_vendor = "apple") {
            "apple"
        } else {
            "unknown"
        };
        Host {
            cuda,
            ..Host::new(std::env::consts::OS, std::env::consts::ARCH, vendor)
        }
    }

    pub fn backend(&self) -> Backend {
        Backend::for_target(Some(&self.os), self.cuda)
    }
}

/// Where a build's outputs go, and whether MLX's tests are configured.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    pub prefix: PathBuf,
    /// The CMake build folder.
    pub build: PathBuf,
    pub tests: bool,
    /// Where a Metal build writes `mlx.metallib` ([`metallib_dir`]); None
    /// leaves MLX's default, inside the build folder.
    pub metallib_dir: Option<PathBuf>,
}

/// What the build does on one host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BuildPlan {
    pub backend: Backend,
    /// Every CMake option but a sanitizer's and the user's
    /// (`MLX_PATCHED_CMAKE_ARGS`), which follow them.
    pub cmake_args: Vec<String>,
    /// The system libraries MLX's CMake links libmlx with, in its order: a
    /// static link of libmlx names them after it. gguflib, built with MLX,
    /// is not one of them. The archive's own link line is read from MLX's
    /// build (`archive.rs`) and checked against this.
    pub system_libs: Vec<(LinkKind, String)>,
    /// The C++ runtime MLX's and mlx-c's objects need.
    pub cxx_runtime: &'static str,
    /// mlx-sys compiles the float16/bfloat16 accessors, which mlx-c
    /// declares on ARM only.
    pub half_accessors: bool,
    /// Where `mlx.metallib` is written, and the path compiled into libmlx
    /// (`METAL_PATH`); Metal only.
    pub metallib: Option<PathBuf>,
}

/// The plan for `host`, with its outputs where `layout` says.
pub fn plan(host: &Host, layout: &Layout) -> BuildPlan {
    let backend = host.backend();
    let mut args: Vec<String> = [
        "-G",
        "Ninja",
        "-DCMAKE_BUILD_TYPE=Release",
        "-DBUILD_SHARED_LIBS=ON",
        "-DCMAKE_INSTALL_LIBDIR=lib",
        "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON",
        // MLX's CMake configures its tests unless told not to, and they
        // need doctest, which a library build must not.
        if layout.tests {
            "-DMLX_BUILD_TESTS=ON"
        } else {
            "-DMLX_BUILD_TESTS=OFF"
        },
        "-DMLX_BUILD_EXAMPLES=OFF",
        "-DMLX_BUILD_BENCHMARKS=OFF",
        "-DMLX_BUILD_PYTHON_BINDINGS=OFF",
        "-DMLX_BUILD_GGUF=ON",
    ]
    .map(String::from)
    .to_vec();
    args.push(format!(
        "-DCMAKE_INSTALL_PREFIX={}",
        layout.prefix.display()
    ));
    let on = |s: &[&str]| s.iter().map(|a| a.to_string()).collect::<Vec<_>>();
    let blas = [
        (LinkKind::Dylib, "dl"),
        (LinkKind::Dylib, "pthread"),
        (LinkKind::Dylib, "openblas"),
        (LinkKind::Dylib, "m"),
    ];
    let (backend_args, libs): (Vec<String>, Vec<(LinkKind, &str)>) = match backend {
        // Offline: every dependency comes from system packages. Debian's
        // OpenBLAS is both the BLAS and the LAPACK MLX's CMake finds.
        Backend::Cpu => (
            on(&[
                "-DMLX_BUILD_METAL=OFF",
                "-DMLX_BUILD_CUDA=OFF",
                "-DUSE_SYSTEM_FMT=ON",
                "-DFETCHCONTENT_FULLY_DISCONNECTED=ON",
            ]),
            blas.to_vec(),
        ),
        // CUDA fetches cuDNN's frontend through FetchContent. The libraries
        // are the ones MLX's CUDA CMake names; never built here.
        Backend::Cuda => (
            on(&[
                "-DMLX_BUILD_METAL=OFF",
                "-DMLX_BUILD_CUDA=ON",
                "-DUSE_SYSTEM_FMT=ON",
            ]),
            blas.into_iter()
                .chain(
                    [
                        "cudart_static",
                        "cublasLt",
                        "cufft",
                        "nvrtc",
                        "cuda",
                        "cudnn",
                    ]
                    .map(|l| (LinkKind::Dylib, l)),
                )
                .collect(),
        ),
        // metal-cpp is fetched by MLX's CMake; Accelerate is used whenever
        // it is found, which on macOS is always.
        Backend::Metal => {
            let mut a = on(&["-DMLX_BUILD_METAL=ON", "-DMLX_BUILD_CUDA=OFF"]);
            if host.metal_jit {
                a.push("-DMLX_METAL_JIT=ON".into());
            }
            if let Some(dir) = &layout.metallib_dir {
                a.push(format!("-DMLX_METAL_PATH={}", dir.display()));
            }
            let frameworks = ["Metal", "Foundation", "QuartzCore", "Accelerate"];
            (a, frameworks.map(|f| (LinkKind::Framework, f)).to_vec())
        }
    };
    args.extend(backend_args);
    let metallib = (backend == Backend::Metal).then(|| match &layout.metallib_dir {
        Some(dir) => dir.join("mlx.metallib"),
        None => layout.build.join("mlx/backend/metal/kernels/mlx.metallib"),
    });
    BuildPlan {
        backend,
        cmake_args: args,
        system_libs: libs.into_iter().map(|(k, n)| (k, n.to_string())).collect(),
        cxx_runtime: if host.vendor == "apple" {
            "c++"
        } else {
            "stdc++"
        },
        half_accessors: host.arch != "aarch64",
        metallib,
    }
}

/// Where a Metal build writes `mlx.metallib` and the path it compiles in:
/// `<cargo home>/mlx-fork/metallib/v<release>/<key>`. Outside any target
/// directory, because `cargo install` builds in a temporary one and removes
/// it, and the binary it installed still looks at that path. Named by what
/// the metallib is built from (`key`), so that builds of the same inputs
/// (every `cargo install` of one version) share one file, and no other
/// build overwrites it. The cargo home is `CARGO_HOME`, else `~/.cargo`;
/// with neither (or a relative one), None: MLX's default, the build folder.
pub fn metallib_dir(
    cargo_home: Option<&Path>,
    home: Option<&Path>,
    release: &str,
    key: &str,
) -> Option<PathBuf> {
    let root = cargo_home
        .filter(|p| p.is_absolute())
        .map(Path::to_path_buf)
        .or_else(|| home.filter(|p| p.is_absolute()).map(|h| h.join(".cargo")))?;
    let short = &key[..key.len().min(16)];
    Some(root.join(format!("mlx-fork/metallib/v{release}/{short}")))
}

/// How libmlx reaches a binary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Linkage {
    /// An archive inside the binary (mlx-sys's default).
    Static,
    /// A shared libmlx of a prefix, found at run time.
    Dynamic,
}

/// The inputs of the metadata dependents read: MLX's prefix, mlx-c's
/// headers, MLX's release and the variant's name.
pub struct Exported<'a> {
    pub linkage: Linkage,
    pub prefix: &'a Path,
    pub mlxc_include: &'a Path,
    pub version: &'a str,
    pub variant: &'a str,
    pub metallib: Option<&'a Path>,
}

/// The `cargo:<key>=<value>` lines mlx-sys prints, which dependents read as
/// `DEP_MLX_<KEY>`. The published crate's three (`include`, a path list of
/// the folders with `mlx/*.h` and `mlx/c/*.h`; `defines`, `MLX_STATIC` for a
/// static MLX as it says; `version`), then the fork's own (`lib_dir`,
/// `prefix`, `variant`, and on Metal `metallib`, for a dependent that copies
/// it beside its binary).
pub fn dep_metadata(e: &Exported) -> Result<Vec<(&'static str, String)>, Error> {
    let include = std::env::join_paths([e.prefix.join("include"), e.mlxc_include.to_path_buf()])
        .map_err(|err| {
            Error::new(format!(
                "an include folder holds the path-list separator: {err}"
            ))
        })?;
    let mut lines = vec![
        ("include", include.to_string_lossy().into_owned()),
        (
            "defines",
            if e.linkage == Linkage::Static {
                "MLX_STATIC"
            } else {
                ""
            }
            .to_string(),
        ),
        ("version", e.version.to_string()),
        ("lib_dir", e.prefix.join("lib").display().to_string()),
        ("prefix", e.prefix.display().to_string()),
        ("variant", e.variant.to_string()),
    ];
    if let Some(m) = e.metallib {
        lines.push(("metallib", m.display().to_string()));
    }
    Ok(lines)
}

/// Where a static link named other system libraries than the plan: the
/// ones only MLX's link line has, and the ones only the plan has (sets:
/// the order of shared libraries and frameworks does not matter).
pub fn libs_differ(plan: &[(LinkKind, String)], linked: &[(LinkKind, String)]) -> Option<String> {
    let only = |a: &[(LinkKind, String)], b: &[(LinkKind, String)]| -> Vec<String> {
        a.iter()
            .filter(|l| !b.contains(l))
            .map(|(k, n)| format!("{k:?} {n}"))
            .collect()
    };
    let (extra, missing) = (only(linked, plan), only(plan, linked));
    (!extra.is_empty() || !missing.is_empty())
        .then(|| format!("MLX's link line also names {extra:?} and lacks {missing:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use mlx_facts::variants::Variant;
    use LinkKind::*;

    fn layout(metallib_dir: Option<PathBuf>) -> Layout {
        Layout {
            prefix: PathBuf::from("/t/mlx/v0.32.2/patched/prefix"),
            build: PathBuf::from("/t/mlx/v0.32.2/patched/build"),
            tests: false,
            metallib_dir,
        }
    }

    fn libs(l: &[(LinkKind, &str)]) -> Vec<(LinkKind, String)> {
        l.iter().map(|(k, n)| (k.clone(), n.to_string())).collect()
    }

    fn has(args: &[String], want: &[&str]) {
        for w in want {
            assert!(args.iter().any(|a| a == w), "{w} not in {args:?}");
        }
    }

    fn lacks(args: &[String], prefix: &str) {
        assert!(
            !args.iter().any(|a| a.starts_with(prefix)),
            "{prefix}… in {args:?}"
        );
    }

    const COMMON: &[&str] = &[
        "-DCMAKE_BUILD_TYPE=Release",
        "-DBUILD_SHARED_LIBS=ON",
        "-DMLX_BUILD_TESTS=OFF",
        "-DMLX_BUILD_GGUF=ON",
        "-DCMAKE_INSTALL_PREFIX=/t/mlx/v0.32.2/patched/prefix",
    ];

    #[test]
    fn macos_arm64_builds_metal_with_its_frameworks_and_a_lasting_metallib() {
        let mut host = Host::new("macos", "aarch64", "apple");
        let dir = metallib_dir(
            None,
            Some(Path::new("/Users/u")),
            "0.32.2",
            "0123456789abcdef99",
        );
        let p = plan(&host, &layout(dir));
        assert_eq!(p.backend, Backend::Metal);
        has(&p.cmake_args, COMMON);
        has(
            &p.cmake_args,
            &[
                "-DMLX_BUILD_METAL=ON",
                "-DMLX_BUILD_CUDA=OFF",
                "-DMLX_METAL_PATH=/Users/u/.cargo/mlx-fork/metallib/v0.32.2/0123456789abcdef",
            ],
        );
        // metal-cpp is downloaded by MLX's CMake: not offline.
        lacks(&p.cmake_args, "-DFETCHCONTENT_FULLY_DISCONNECTED");
        lacks(&p.cmake_args, "-DMLX_METAL_JIT");
        assert_eq!(
            p.system_libs,
            libs(&[
                (Framework, "Metal"),
                (Framework, "Foundation"),
                (Framework, "QuartzCore"),
                (Framework, "Accelerate")
            ])
        );
        assert_eq!(p.cxx_runtime, "c++");
        assert!(!p.half_accessors, "mlx-c declares them on ARM");
        assert_eq!(
            p.metallib.as_deref(),
            Some(Path::new(
                "/Users/u/.cargo/mlx-fork/metallib/v0.32.2/0123456789abcdef/mlx.metallib"
            ))
        );
        host.metal_jit = true;
        has(
            &plan(&host, &layout(None)).cmake_args,
            &["-DMLX_METAL_JIT=ON"],
        );
        // Without a home, MLX's default: the build folder.
        assert_eq!(
            plan(&host, &layout(None)).metallib.as_deref(),
            Some(Path::new(
                "/t/mlx/v0.32.2/patched/build/mlx/backend/metal/kernels/mlx.metallib"
            ))
        );
        lacks(&plan(&host, &layout(None)).cmake_args, "-DMLX_METAL_PATH");
    }

    #[test]
    fn linux_x86_64_builds_the_cpu_backend_offline_with_openblas() {
        let host = Host::new("linux", "x86_64", "unknown");
        // A Linux build never asks where a metallib goes.
        let p = plan(&host, &layout(Some(PathBuf::from("/ignored"))));
        assert_eq!(p.backend, Backend::Cpu);
        has(&p.cmake_args, COMMON);
        has(
            &p.cmake_args,
            &[
                "-DMLX_BUILD_METAL=OFF",
                "-DMLX_BUILD_CUDA=OFF",
                "-DUSE_SYSTEM_FMT=ON",
                "-DFETCHCONTENT_FULLY_DISCONNECTED=ON",
            ],
        );
        lacks(&p.cmake_args, "-DMLX_METAL_PATH");
        assert_eq!(
            p.system_libs,
            libs(&[
                (Dylib, "dl"),
                (Dylib, "pthread"),
                (Dylib, "openblas"),
                (Dylib, "m")
            ])
        );
        assert_eq!(p.cxx_runtime, "stdc++");
        assert!(p.half_accessors);
        assert_eq!(p.metallib, None);
    }

    #[test]
    fn linux_aarch64_differs_from_x86_64_only_in_the_shims() {
        let x86 = plan(&Host::new("linux", "x86_64", "unknown"), &layout(None));
        let arm = plan(&Host::new("linux", "aarch64", "unknown"), &layout(None));
        assert!(!arm.half_accessors);
        assert_eq!(
            BuildPlan {
                half_accessors: true,
                ..arm
            },
            x86
        );
    }

    #[test]
    fn linux_with_cuda_builds_the_cuda_backend_and_links_its_libraries() {
        let host = Host {
            cuda: true,
            ..Host::new("linux", "x86_64", "unknown")
        };
        let p = plan(&host, &layout(None));
        assert_eq!(p.backend, Backend::Cuda);
        has(
            &p.cmake_args,
            &[
                "-DMLX_BUILD_METAL=OFF",
                "-DMLX_BUILD_CUDA=ON",
                "-DUSE_SYSTEM_FMT=ON",
            ],
        );
        // MLX's CMake fetches the cuDNN frontend.
        lacks(&p.cmake_args, "-DFETCHCONTENT_FULLY_DISCONNECTED");
        for lib in [
            "openblas",
            "cudart_static",
            "cublasLt",
            "cufft",
            "nvrtc",
            "cuda",
            "cudnn",
        ] {
            assert!(p.system_libs.contains(&(Dylib, lib.into())), "{lib}");
        }
        assert_eq!(p.cxx_runtime, "stdc++");
        assert_eq!(p.metallib, None);
        // The tests' switch follows the layout on every backend.
        let tested = plan(
            &host,
            &Layout {
                tests: true,
                ..layout(None)
            },
        );
        has(&tested.cmake_args, &["-DMLX_BUILD_TESTS=ON"]);
    }

    #[test]
    fn the_metallib_folder_is_the_users_and_named_by_what_it_is_built_from() {
        let home = Some(Path::new("/home/u"));
        let a = metallib_dir(None, home, "0.32.2", "aaaaaaaaaaaaaaaa1111").unwrap();
        assert_eq!(
            a,
            Path::new("/home/u/.cargo/mlx-fork/metallib/v0.32.2/aaaaaaaaaaaaaaaa")
        );
        // CARGO_HOME wins over the home folder; a relative one is no place.
        assert_eq!(
            metallib_dir(
                Some(Path::new("/opt/cargo")),
                home,
                "0.32.2",
                "aaaaaaaaaaaaaaaa"
            ),
            Some(PathBuf::from(
                "/opt/cargo/mlx-fork/metallib/v0.32.2/aaaaaaaaaaaaaaaa"
            ))
        );
        assert_eq!(
            metallib_dir(Some(Path::new("rel")), home, "0.32.2", "aaaaaaaaaaaaaaaa"),
            Some(a.clone())
        );
        assert_eq!(metallib_dir(None, None, "0.32.2", "aaaa"), None);
        // Another build's inputs, another base: another folder; and none
        // under a target directory, which `cargo install` removes.
        assert_ne!(
            metallib_dir(None, home, "0.32.2", "bbbbbbbbbbbbbbbb"),
            Some(a.clone())
        );
        assert_ne!(
            metallib_dir(None, home, "0.32.4", "aaaaaaaaaaaaaaaa"),
            Some(a.clone())
        );
        assert!(!a.components().any(|c| c.as_os_str() == "target"));
    }

    #[test]
    fn dependents_get_the_published_keys_then_the_fork_s() {
        let e = Exported {
            linkage: Linkage::Static,
            prefix: Path::new("/t/p"),
            mlxc_include: Path::new("/reg/mlx-sys-0.7.0/src/mlx-c"),
            version: "0.32.2",
            variant: Variant::PATCHED.name,
            metallib: None,
        };
        let got = dep_metadata(&e).unwrap();
        let keys: Vec<&str> = got.iter().map(|(k, _)| *k).collect();
        assert_eq!(
            keys,
            ["include", "defines", "version", "lib_dir", "prefix", "variant"]
        );
        assert_eq!(got[0].1, "/t/p/include:/reg/mlx-sys-0.7.0/src/mlx-c");
        assert_eq!(got[1].1, "MLX_STATIC");
        assert_eq!(got[3].1, "/t/p/lib");
        let shared = Exported {
            linkage: Linkage::Dynamic,
            metallib: Some(Path::new("/m/mlx.metallib")),
            ..e
        };
        let got = dep_metadata(&shared).unwrap();
        assert_eq!(got[1].1, "", "nothing to define for a shared MLX");
        assert_eq!(got.last().unwrap(), &("metallib", "/m/mlx.metallib".into()));
    }

    #[test]
    fn a_link_line_with_other_libraries_than_the_plan_is_named() {
        let plan = libs(&[(Dylib, "dl"), (Dylib, "openblas")]);
        assert_eq!(
            libs_differ(&plan, &libs(&[(Dylib, "openblas"), (Dylib, "dl")])),
            None
        );
        let other = libs_differ(&plan, &libs(&[(Dylib, "dl"), (Dylib, "flexiblas")])).unwrap();
        assert!(
            other.contains("flexiblas") && other.contains("openblas"),
            "{other}"
        );
    }
}
