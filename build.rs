//! Builds both MLX variants and, against each, the plain C++ probe programs
//! of `crates/probes/cpp/`, linked the way any C++ user would link a prefix.
//! The regression suite finds them through the `MLX_FORK_*` variables set here.

use mlx_patched::{Env, Error, Options};
use std::path::{Path, PathBuf};

const CPP_PROBES: &[&str] = &["leak_scenario", "held_output", "graph_bench"];

fn main() -> Result<(), Error> {
    let env = Env::build_script();
    let out_dir = PathBuf::from(env.var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let cuda = env.var_os("CARGO_FEATURE_CUDA").is_some();
    let opts = Options::from_env(env, &mlx_patched::target_dir_of_out_dir(&out_dir), cuda);
    println!("cargo:rerun-if-changed={}", opts.patches_dir.display());

    for mlx in mlx_patched::build_all(&opts)? {
        let upper = mlx.name.to_uppercase();
        println!("cargo:rustc-env=MLX_FORK_{upper}_PREFIX={}", mlx.prefix.display());
        println!("cargo:rustc-env=MLX_FORK_{upper}_MLX_TESTS={}", mlx.mlx_tests.display());
        for probe in CPP_PROBES {
            let src = Path::new("crates/probes/cpp").join(format!("{probe}.cpp"));
            println!("cargo:rerun-if-changed={}", src.display());
            let exe = out_dir.join(format!("{probe}-{}", mlx.name));
            mlx_patched::compile_program(&mlx, &src, &exe, &env)?;
            println!("cargo:rustc-env=MLX_FORK_{upper}_{}={}", probe.to_uppercase(), exe.display());
        }
    }

    // rpath of the Rust API's library for this package's own test binaries.
    if let Some(lib) = env.var("DEP_MLX_FORK_LIB_DIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{lib}");
    }
    Ok(())
}
