//! Builds every MLX variant (`mlx_patched::VARIANTS`), with MLX's own tests,
//! and, against each, the plain C++ probe programs of `crates/probes/cpp/`,
//! linked the way any C++ user would link a prefix (once per variant build,
//! shared by every feature set: `probes::build_probes`). The suite reads the
//! result from the generated `variants.rs` (see `src/lib.rs`), so a new
//! variant needs no change here.

use mlx_patched::{probes, Env, Error, Expectations, Options};
use std::fmt::Write;

fn main() -> Result<(), Error> {
    let env = Env::build_script();
    let out_dir = env.out_dir()?;
    let target_dir = mlx_patched::target_dir_of_out_dir(&out_dir);
    let mut opts = Options::from_env(env, &target_dir, env.cargo_feature("cuda"))?;
    opts.tests = true;

    // What each variant must show in this run (on an upstream that fixed
    // the leak, `cargo xtask rebase` sets MLX_FORK_UPSTREAM_FIXED).
    let expectations = Expectations::from_env(&env);
    let variants = expectations.variants();
    let mut table = String::from("&[\n");
    // The probes and the headers they share.
    env.track_file(&probes::sources_dir());
    for (variant, mlx) in variants
        .iter()
        .zip(mlx_patched::build_all(&variants, &opts)?)
    {
        let mut built = String::new();
        for (name, exe) in probes::build_probes(&mlx, &opts)? {
            write!(built, "({name:?}, {:?}), ", exe.display().to_string()).unwrap();
        }
        let expect = expectations.verdict(variant);
        writeln!(
            table,
            "    Variant {{ name: {:?}, expect: Expect::{expect:?}, prefix: {:?}, mlx_tests: {:?}, probes: &[{probes}] }},",
            mlx.name(),
            mlx.prefix().display().to_string(),
            mlx.mlx_tests().display().to_string(),
            probes = built
        )
        .unwrap();
    }
    table.push(']');
    std::fs::write(out_dir.join("variants.rs"), table)
        .map_err(|e| Error::new(format!("cannot write variants.rs: {e}")))?;

    // rpath of the Rust API's library for this package's own test binaries.
    mlx_patched::print_rpath_of_dependency(&env, "mlx_fork")
}
