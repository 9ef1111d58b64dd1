//! Builds (or finds up to date) the MLX variant this crate links, then
//! compiles the C++ side of the bridge against its headers.

use mlx_patched::{Env, Error, Options, Variant};
use std::path::PathBuf;

/// One bridge module per area; each has a matching `cpp/<area>.cc`.
const AREAS: &[&str] = &["array", "ops", "random", "linalg", "transforms", "memory"];

fn main() -> Result<(), Error> {
    let env = Env::build_script();
    let out_dir = PathBuf::from(env.var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let variant = if env.var_os("CARGO_FEATURE_PRISTINE").is_some() { Variant::PRISTINE } else { Variant::PATCHED };
    let cuda = env.var_os("CARGO_FEATURE_CUDA").is_some();
    let opts = Options::from_env(env, &mlx_patched::target_dir_of_out_dir(&out_dir), cuda);
    println!("cargo:rerun-if-changed={}", opts.patches_dir.display());
    let mlx = mlx_patched::build(variant, &opts)?;

    let bridges: Vec<String> = AREAS.iter().map(|a| format!("src/ffi/{a}.rs")).collect();
    let sources: Vec<String> = AREAS.iter().map(|a| format!("cpp/{a}.cc")).collect();
    cxx_build::bridges(&bridges)
        .files(&sources)
        .include("cpp")
        .include(&mlx.include_dir)
        .std("c++20")
        .flag_if_supported("-Wno-unused-parameter")
        .compile("mlx_bridge");
    for f in bridges.iter().chain(&sources) {
        println!("cargo:rerun-if-changed={f}");
    }
    println!("cargo:rerun-if-changed=cpp/bridge.h");

    let lib = mlx.lib_dir.display();
    println!("cargo:rustc-link-search=native={lib}");
    println!("cargo:rustc-link-lib=dylib=mlx");
    // rpath reaches only this package's own targets; dependents read
    // DEP_MLX_FORK_LIB_DIR and add it to theirs.
    println!("cargo:rustc-link-arg=-Wl,-rpath,{lib}");
    println!("cargo:lib_dir={lib}");
    println!("cargo:prefix={}", mlx.prefix.display());
    println!("cargo:variant={variant}");
    println!("cargo:rustc-env=MLX_BRIDGE_UPSTREAM_VERSION={}", mlx_patched::version_of(&mlx.source_dir)?);
    println!("cargo:rustc-cfg=mlx_variant=\"{variant}\"");
    println!("cargo:rustc-check-cfg=cfg(mlx_variant, values(\"patched\", \"pristine\"))");
    Ok(())
}
