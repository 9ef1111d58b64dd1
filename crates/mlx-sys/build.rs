//! Builds mlx-c against an installed MLX and generates its bindings.
//!
//! 1. MLX: by default this fork's patched variant, built through
//!    mlx-patched when it is not built yet, and linked **statically**, as the
//!    published crate links MLX: an archive of the objects the variant's
//!    shared build compiled (no second compile), so binaries need nothing
//!    at run time. Or the prefix in `MLX_SYS_PREFIX`, linked dynamically.
//! 2. mlx-c: the tree of the published mlx-sys 0.7.0, checked against its
//!    pinned tree id, compiled out of tree with `MLX_C_USE_SYSTEM_MLX=ON`
//!    against that MLX's headers (never MLX's own copy), once per MLX: in a
//!    folder beside the variants that every target directory shares.
//! 3. The float16/bfloat16 accessors mlx-rs needs off ARM (`shims/`).
//! 4. bindgen over mlx-c's public headers.
//! 5. The link lines, then the published crate's metadata for dependents:
//!    `DEP_MLX_INCLUDE` (a path list: MLX's headers and mlx-c's),
//!    `DEP_MLX_DEFINES` and `DEP_MLX_VERSION`.

use mlx_patched::plan::Linkage;
use mlx_patched::{Artifacts, Env, Error, Options, StaticLink, Variant};
use std::path::{Path, PathBuf};

/// How libmlx reaches the binaries.
enum Link {
    /// Inside them: the default.
    Static(StaticLink),
    /// `libmlx.so` of `MLX_SYS_PREFIX`, found at run time through an rpath
    /// or `LD_LIBRARY_PATH` that the user provides.
    Dynamic,
}

fn main() -> Result<(), Error> {
    let env = Env::build_script();
    let out_dir = env.out_dir()?;
    // First: a base no mlx-c compiles against is refused before any build.
    let base = env.base()?;
    let mlxc_src = mlx_patched::mlxc_source(&env, base)?;
    let (mlx, link) = linked_mlx(&env, base, &out_dir)?;

    let mlxc = build_mlxc(
        &mlxc_src,
        &mlx,
        &mlxc_build_dir(&env, &out_dir, &mlxc_src, &mlx),
    )?;
    let plan = mlx.plan();
    if plan.half_accessors {
        build_shims(&mlxc_src, &mlx)?;
    }
    println!("cargo:rerun-if-changed=shims");
    generate_bindings(&mlxc_src, &out_dir)?;

    // mlx-c before the MLX it calls: a static archive, and with
    // --as-needed a shared library, listed before what needs it is dropped.
    println!(
        "cargo:rustc-link-search=native={}",
        mlxc.join("lib").display()
    );
    println!("cargo:rustc-link-lib=static=mlxc");
    match &link {
        Link::Static(s) => {
            s.print_cargo_metadata();
            mlx.print_sanitizer_runtime();
        }
        Link::Dynamic => mlx.print_dynamic_link(),
    }
    println!("cargo:rustc-link-lib=dylib={}", plan.cxx_runtime);

    // What dependents read as DEP_MLX_*: the published crate's keys, then
    // the fork's (mlx_patched::plan::dep_metadata says which and why).
    let version = mlx_patched::version_of(mlx.include_dir())?;
    let exported = mlx_patched::plan::Exported {
        linkage: match link {
            Link::Static(_) => Linkage::Static,
            Link::Dynamic => Linkage::Dynamic,
        },
        prefix: mlx.prefix(),
        mlxc_include: &mlxc_src,
        version: &version,
        variant: mlx.name(),
        metallib: plan.metallib.as_deref(),
    };
    for (key, value) in mlx_patched::plan::dep_metadata(&exported)? {
        println!("cargo:{key}={value}");
    }
    Ok(())
}

/// The MLX this crate links: `MLX_SYS_PREFIX` (shared), or the patched
/// variant (static).
fn linked_mlx(
    env: &Env,
    base: &mlx_patched::pin::Base,
    out_dir: &Path,
) -> Result<(Artifacts, Link), Error> {
    if let Some(prefix) = env.mlx_sys_prefix()? {
        let mlx = Artifacts::from_prefix(&prefix)?;
        // mlx-c's inline code and the bindings are written for the base's
        // release: another MLX's headers may compile and still disagree.
        let found = mlx_patched::version_of(mlx.include_dir())?;
        if found != base.version {
            return Err(Error::new(format!(
                "MLX_SYS_PREFIX={} holds MLX {found}, but this mlx-sys is built for MLX {} (the fork's base): give a prefix of MLX {}",
                prefix.display(),
                base.version,
                base.version
            )));
        }
        // A prefix rebuilt in place: mlx-c's inline array code must follow its headers.
        env.track_file(&mlx.include_dir().join("mlx"));
        env.track_file(mlx.lib_dir());
        return Ok((mlx, Link::Dynamic));
    }
    let mut opts = Options::from_env(*env, &mlx_patched::target_dir_of_out_dir(out_dir), false)?;
    if env.target_cfg("target_os").as_deref() == Some("macos") {
        if !env.cargo_feature("metal") {
            println!("cargo:warning=mlx-sys: MLX is built with Metal on macOS whatever the `metal` feature says");
        }
        if !env.cargo_feature("accelerate") {
            println!("cargo:warning=mlx-sys: the `accelerate` feature is ignored: MLX's CMake uses Accelerate whenever it finds it on macOS");
        }
        opts.host.metal_jit = env.cargo_feature("metal-jit");
    }
    let mlx = mlx_patched::build(Variant::PATCHED, &opts)?;
    let link = mlx.static_link(env)?;
    Ok((mlx, Link::Static(link)))
}

/// Where mlx-c is built: one folder per MLX it compiles against, shared by
/// every target directory that builds this crate against that MLX (this
/// crate's tests, a dependent project, mlx-rs's own tests), so that each is
/// compiled once. It lives beside the variants, under `MLX_PATCHED_BUILD_DIR`
/// (default `<target>/mlx`). The folder is named by the MLX prefix, mlx-c's
/// tree, the target and the compilers; within it CMake tracks the rest (the
/// headers it includes, the flags), as it did in OUT_DIR.
fn mlxc_build_dir(env: &Env, out_dir: &Path, src: &Path, mlx: &Artifacts) -> PathBuf {
    let root = env
        .build_dir()
        .unwrap_or_else(|| mlx_patched::target_dir_of_out_dir(out_dir).join("mlx"));
    let mut key = mlx_patched::Fingerprint::new("mlx-c build folder 1");
    key.text("mlx prefix", mlx.prefix().display())
        .text("mlx-c", src.display())
        .text("cc", env.cc().unwrap_or_default().to_string_lossy())
        .text("cxx", env.cxx_or_default().to_string_lossy());
    for cfg in ["target_arch", "target_os", "target_env", "target_vendor"] {
        key.text(cfg, env.target_cfg(cfg).unwrap_or_default());
    }
    root.join("mlx-c").join(&key.finish()[..16])
}

/// Configures, builds and installs mlx-c (a static library) into `dir`,
/// holding its lock: two builds of one folder at once would corrupt it.
fn build_mlxc(src: &Path, mlx: &Artifacts, dir: &Path) -> Result<PathBuf, Error> {
    std::fs::create_dir_all(dir)
        .map_err(|e| Error::new(format!("cannot create {}: {e}", dir.display())))?;
    let _lock = mlx_patched::lock_file(&dir.join("lock"))?;
    // The header is force-included from inside the shared folder, not from
    // this crate's: a checkout at another path (a git dependency's, under
    // Cargo's home) must not change mlx-c's flags and recompile it. Copied
    // only when its bytes change, so that its mtime means a change.
    let shim = Path::new(env!("CARGO_MANIFEST_DIR")).join("shims/std_format.h");
    let bytes = std::fs::read(&shim)
        .map_err(|e| Error::new(format!("cannot read {}: {e}", shim.display())))?;
    let compat = dir.join("std_format.h");
    if std::fs::read(&compat).ok().as_deref() != Some(&bytes[..]) {
        std::fs::write(&compat, &bytes)
            .map_err(|e| Error::new(format!("cannot write {}: {e}", compat.display())))?;
    }
    let mut config = cmake::Config::new(src);
    // The flags are CMake's Release flags and ours, not the ones the `cc`
    // crate derives, which vary with the version that a project's lock file
    // picks: one folder must mean one compile for every project.
    config
        .out_dir(dir)
        .no_default_flags(true)
        .define("CMAKE_POSITION_INDEPENDENT_CODE", "ON");
    // ccache, as MLX's own CMake uses it (a second checkout or a cleaned
    // build folder then compiles nothing again).
    if std::process::Command::new("ccache")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        config
            .define("CMAKE_C_COMPILER_LAUNCHER", "ccache")
            .define("CMAKE_CXX_COMPILER_LAUNCHER", "ccache")
            .env(mlx_patched::other_vars::CCACHE_BASEDIR.name, "/")
            .env(mlx_patched::other_vars::CCACHE_NOHASHDIR.name, "1");
    }
    Ok(config
        // std::format for standard libraries without it (see the header).
        .cxxflag(format!("-include {}", compat.display()))
        .define("MLX_C_USE_SYSTEM_MLX", "ON")
        .define("MLX_C_BUILD_EXAMPLES", "OFF")
        .define("BUILD_SHARED_LIBS", "OFF")
        // This prefix's MLX package and nothing else on the system: mlx-c's
        // inline array code must come from the headers of the library it links.
        .define("MLX_DIR", mlx.prefix().join("share/cmake/MLX"))
        .define("CMAKE_INSTALL_LIBDIR", "lib")
        .profile("Release")
        .build())
}

/// What mlx-rs needs that mlx-c leaves out off ARM: the float16/bfloat16
/// accessors. (`mach_approximate_time`, needed off Apple, is Rust: src/lib.rs.)
fn build_shims(mlxc_src: &Path, mlx: &Artifacts) -> Result<(), Error> {
    cc::Build::new()
        .cpp(true)
        .std("c++20")
        .include(mlxc_src)
        .include(mlx.include_dir())
        // MLX's and mlx-c's headers trip these; the shim itself is clean.
        .flag_if_supported("-Wno-unused-parameter")
        .flag_if_supported("-Wno-unused-variable")
        .file("shims/half_accessors.cpp")
        .try_compile("mlx_sys_half_accessors")
        .map_err(|e| Error::new(format!("cannot compile shims/half_accessors.cpp: {e}")))
}

/// bindgen over every public header of mlx-c (`mlx/c/*.h`), as the
/// published crate does, into OUT_DIR/bindings.rs.
fn generate_bindings(mlxc_src: &Path, out_dir: &Path) -> Result<(), Error> {
    let dir = mlxc_src.join("mlx/c");
    let mut headers: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map_err(|e| Error::new(format!("cannot read {}: {e}", dir.display())))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "h"))
        .collect();
    headers.sort();
    let mut builder = bindgen::Builder::default()
        .rust_target(
            bindgen::RustTarget::stable(73, 0)
                .map_err(|e| Error::new(format!("bindgen target: {e}")))?,
        )
        .clang_arg(format!("-I{}", mlxc_src.display()))
        // The allocator functions come along with <stdlib.h>; their size
        // types do not match Rust's own declarations of them.
        .blocklist_function("malloc")
        .blocklist_function("realloc")
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()));
    for h in &headers {
        builder = builder.header(h.to_string_lossy());
    }
    let bindings = builder.generate().map_err(|e| {
        Error::new(format!(
            "bindgen could not generate the mlx-c bindings ({e}). It needs libclang: on Debian/Ubuntu \
             `apt-get install libclang-dev` (cargo xtask deps installs it), elsewhere set LIBCLANG_PATH."
        ))
    })?;
    bindings
        .write_to_file(out_dir.join("bindings.rs"))
        .map_err(|e| Error::new(format!("cannot write the bindings: {e}")))
}
