//! Reads mlx-sys's metadata as a dependent does and compiles `csrc/add.c`
//! (which includes `mlx/c/mlx.h`) with it. Each variable must be present;
//! `DEP_MLX_DEFINES` may be empty.
use std::env;

fn dep(name: &str) -> String {
    println!("cargo:rerun-if-env-changed={name}");
    env::var(name).unwrap_or_else(|_| panic!("mlx-sys did not give {name}"))
}

fn main() {
    let include = dep("DEP_MLX_INCLUDE");
    let defines = dep("DEP_MLX_DEFINES");
    let version = dep("DEP_MLX_VERSION");
    let mut build = cc::Build::new();
    build.file("csrc/add.c");
    // mlx-c's array.h defines a static it does not use.
    build.flag_if_supported("-Wno-unused-variable");
    for dir in env::split_paths(&include) {
        build.include(dir);
    }
    for define in defines.split([',', ' ']).filter(|d| !d.is_empty()) {
        match define.split_once('=') {
            Some((k, v)) => build.define(k, v),
            None => build.define(define, None),
        };
    }
    build.compile("mlx_sys_dependent");
    println!("cargo:rerun-if-changed=csrc/add.c");
    println!("cargo:rustc-env=DEP_MLX_VERSION_SEEN={version}");
    println!("cargo:rustc-env=DEP_MLX_DEFINES_SEEN={defines}");
}
