//! Builds (or finds up to date) the MLX variant this crate links, then
//! compiles the C++ side of the bridge against its headers.

use mlx_patched::{Env, Error, Options, Variant};

/// One bridge module per area; each has a matching `cpp/<area>.cc`.
const AREAS: &[&str] = &["array", "ops", "random", "linalg", "transforms", "memory"];

fn main() -> Result<(), Error> {
    let env = Env::build_script();
    let out_dir = env.out_dir()?;
    let variant = Variant::linked_with(env.cargo_feature(mlx_patched::CONTROL_FEATURE));
    let opts = Options::from_env(
        env,
        &mlx_patched::target_dir_of_out_dir(&out_dir),
        env.cargo_feature("cuda"),
    )?;
    let mlx = mlx_patched::build(variant, &opts)?;

    // The fuzzer's release paths exist only where the fuzzer asks for them.
    let fuzz: &[&str] = if env.cargo_feature("fuzz") {
        &["fuzz"]
    } else {
        &[]
    };
    let areas: Vec<&str> = AREAS.iter().chain(fuzz).copied().collect();
    let bridges: Vec<String> = areas.iter().map(|a| format!("src/ffi/{a}.rs")).collect();
    let sources: Vec<String> = areas.iter().map(|a| format!("cpp/{a}.cc")).collect();
    let mut build = cxx_build::bridges(&bridges);
    build
        .files(&sources)
        .include("cpp")
        .include(mlx.include_dir())
        .std("c++20")
        .flag_if_supported("-Wno-unused-parameter");
    // Against a sanitizer build the bridge is instrumented too: MLX's inline
    // header code (array.h's release fast path among it) is compiled here.
    for flag in mlx
        .sanitizer()
        .map(|s| s.compile_flags())
        .unwrap_or_default()
    {
        build.flag(flag);
    }
    build.compile("mlx_bridge");
    for f in bridges.iter().chain(&sources) {
        println!("cargo:rerun-if-changed={f}");
    }
    println!("cargo:rerun-if-changed=cpp/bridge.h");

    // The rpath reaches only this package's own targets; dependents call
    // `mlx_patched::print_rpath_of_dependency` for theirs.
    mlx.print_cargo_metadata();
    println!(
        "cargo:rustc-env=MLX_BRIDGE_UPSTREAM_VERSION={}",
        mlx_patched::version_of(mlx.source_dir())?
    );
    println!("cargo:rustc-env=MLX_BRIDGE_VARIANT={variant}");
    Ok(())
}
