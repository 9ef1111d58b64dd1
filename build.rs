//! Builds every MLX variant (`mlx_patched::VARIANTS`) and, against each, the
//! plain C++ probe programs of `crates/probes/cpp/`, linked the way any C++
//! user would link a prefix. The suite reads the result from the generated
//! `variants.rs` (see `src/lib.rs`), so a new variant needs no change here.

use mlx_patched::{Env, Error, Options, VARIANTS};
use std::fmt::Write;
use std::path::{Path, PathBuf};

/// One probe program per file in `crates/probes/cpp/`, built per variant.
const CPP_PROBES: &[&str] = &["leak_scenario", "held_output", "graph_bench", "multi_output_ops", "transformer"];

fn main() -> Result<(), Error> {
    let env = Env::build_script();
    let out_dir = PathBuf::from(env.var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let cuda = env.var_os("CARGO_FEATURE_CUDA").is_some();
    let target_dir = mlx_patched::target_dir_of_out_dir(&out_dir);
    let opts = Options::from_env(env, &target_dir, cuda);
    // Tests append their rows of the summary table here; `cargo xtask test` prints it.
    println!("cargo:rustc-env=MLX_FORK_REPORT_DIR={}", target_dir.join("suite-report").display());
    println!("cargo:rerun-if-changed={}", opts.patches_dir.display());

    // Set by `cargo xtask rebase` when upstream no longer leaks: the suite
    // then expects every variant, the control included, to be leak-free.
    let upstream_fixed = env.var_os("MLX_FORK_UPSTREAM_FIXED").is_some();
    let mut table = String::from("&[\n");
    // The probes and the headers they share.
    println!("cargo:rerun-if-changed=crates/probes/cpp");
    for (variant, mlx) in VARIANTS.iter().zip(mlx_patched::build_all(&opts)?) {
        let mut probes = String::new();
        for probe in CPP_PROBES {
            let src = Path::new("crates/probes/cpp").join(format!("{probe}.cpp"));
            let exe = out_dir.join(format!("{probe}-{}", mlx.name));
            mlx_patched::compile_program(&mlx, &src, &exe, &env)?;
            write!(probes, "{probe}: {:?}, ", exe.display().to_string()).unwrap();
        }
        writeln!(
            table,
            "    Variant {{ name: {:?}, leak_free: {}, prefix: {:?}, mlx_tests: {:?}, {probes}}},",
            mlx.name,
            variant.leak_free || upstream_fixed,
            mlx.prefix.display().to_string(),
            mlx.mlx_tests.display().to_string()
        )
        .unwrap();
    }
    table.push(']');
    std::fs::write(out_dir.join("variants.rs"), table).map_err(|e| Error::new(format!("cannot write variants.rs: {e}")))?;

    // rpath of the Rust API's library for this package's own test binaries.
    if let Some(lib) = env.var("DEP_MLX_FORK_LIB_DIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{lib}");
    }
    Ok(())
}
