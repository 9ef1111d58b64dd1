//! Builds mlx-c against an installed MLX and generates its bindings.
//!
//! 1. MLX: the prefix in `MLX_SYS_PREFIX`, or else this fork's patched
//!    variant, built through mlx-patched when it is not built yet.
//! 2. mlx-c: the tree of the published mlx-sys 0.7.0, checked against its
//!    pinned tree id, compiled out of tree with `MLX_C_USE_SYSTEM_MLX=ON`
//!    against that prefix's headers and library (never MLX's own copy).
//! 3. The float16/bfloat16 accessors mlx-rs needs off ARM (`shims/`).
//! 4. bindgen over mlx-c's public headers.
//! 5. The link lines, said once by the prefix's `Artifacts`, plus mlx-c and
//!    the C++ runtime.

use mlx_patched::{Artifacts, Env, Error, Options, Variant};
use std::path::{Path, PathBuf};

fn main() -> Result<(), Error> {
    let env = Env::build_script();
    let out_dir = env.out_dir()?;
    let mlx = linked_mlx(&env, &out_dir)?;
    let mlxc_src = mlx_patched::mlxc_source(&env)?;

    let mlxc = build_mlxc(&mlxc_src, &mlx);
    build_shims(&mlxc_src, &mlx, &env)?;
    generate_bindings(&mlxc_src, &out_dir)?;

    // mlx-c before the MLX it calls: with --as-needed, a shared library
    // listed before anything needs it is dropped.
    println!(
        "cargo:rustc-link-search=native={}",
        mlxc.join("lib").display()
    );
    println!("cargo:rustc-link-lib=static=mlxc");
    mlx.print_cargo_metadata();
    let apple = env.target_cfg("target_vendor").as_deref() == Some("apple");
    println!(
        "cargo:rustc-link-lib=dylib={}",
        if apple { "c++" } else { "stdc++" }
    );
    // What the published crate tells its dependents, where it applies.
    println!(
        "cargo:version={}",
        mlx_patched::version_of(&mlx.include_dir)?
    );
    // Cargo gives dependents no rpath: say once, when this runs, what binaries need.
    println!(
        "cargo:warning=mlx-sys: libmlx ({}) is in {lib}; binaries need it at run time: add `-C link-arg=-Wl,-rpath,{lib}` to rustflags or set LD_LIBRARY_PATH (cargo xtask mlx-rs prints the lines)",
        mlx.name,
        lib = mlx.lib_dir.display()
    );
    Ok(())
}

/// The MLX this crate links: `MLX_SYS_PREFIX`, or the patched variant.
fn linked_mlx(env: &Env, out_dir: &Path) -> Result<Artifacts, Error> {
    if let Some(prefix) = env.mlx_sys_prefix() {
        let mlx = Artifacts::from_prefix(&prefix)?;
        // A prefix rebuilt in place: mlx-c's inline array code must follow its headers.
        env.track_file(&mlx.include_dir.join("mlx"));
        env.track_file(&mlx.lib_dir);
        return Ok(mlx);
    }
    let mut opts = Options::from_env(*env, &mlx_patched::target_dir_of_out_dir(out_dir), false)?;
    if env.target_cfg("target_os").as_deref() == Some("macos") {
        if !env.cargo_feature("metal") {
            println!("cargo:warning=mlx-sys: MLX is built with Metal on macOS whatever the `metal` feature says");
        }
        if env.cargo_feature("metal-jit") {
            opts.extra_cmake_args.push("-DMLX_METAL_JIT=ON".into());
        }
    }
    mlx_patched::build(Variant::PATCHED, &opts)
}

/// Configures, builds and installs mlx-c (a static library) into OUT_DIR.
fn build_mlxc(src: &Path, mlx: &Artifacts) -> PathBuf {
    let compat = Path::new(env!("CARGO_MANIFEST_DIR")).join("shims/std_format.h");
    cmake::Config::new(src)
        // std::format for standard libraries without it (see the header).
        .cxxflag(format!("-include {}", compat.display()))
        .define("MLX_C_USE_SYSTEM_MLX", "ON")
        .define("MLX_C_BUILD_EXAMPLES", "OFF")
        .define("BUILD_SHARED_LIBS", "OFF")
        // This prefix's MLX package and nothing else on the system: mlx-c's
        // inline array code must come from the headers of the library it links.
        .define("MLX_DIR", mlx.prefix.join("share/cmake/MLX"))
        .define("CMAKE_INSTALL_LIBDIR", "lib")
        .profile("Release")
        .build()
}

/// What mlx-rs needs that mlx-c leaves out off ARM: the float16/bfloat16
/// accessors. (`mach_approximate_time`, needed off Apple, is Rust: src/lib.rs.)
fn build_shims(mlxc_src: &Path, mlx: &Artifacts, env: &Env) -> Result<(), Error> {
    println!("cargo:rerun-if-changed=shims");
    if env.target_cfg("target_arch").as_deref() != Some("aarch64") {
        cc::Build::new()
            .cpp(true)
            .std("c++20")
            .include(mlxc_src)
            .include(&mlx.include_dir)
            // MLX's and mlx-c's headers trip these; the shim itself is clean.
            .flag_if_supported("-Wno-unused-parameter")
            .flag_if_supported("-Wno-unused-variable")
            .file("shims/half_accessors.cpp")
            .try_compile("mlx_sys_half_accessors")
            .map_err(|e| Error::new(format!("cannot compile shims/half_accessors.cpp: {e}")))?;
    }
    Ok(())
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
