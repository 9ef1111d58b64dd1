//! The primitive table (`mlx_fuzz::primitives::ROWS`, rendered as
//! docs/primitives.md) against upstream's own headers: every class, its
//! base and the transform rules it declares, in order. A rebase that adds,
//! removes or changes a primitive fails here until the table says so.

#[test]
fn the_primitive_table_is_what_upstreams_headers_declare() {
    let workspace = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let env = mlx_patched::Env::process();
    let target = env
        .cargo_target_dir()
        .map(|t| workspace.join(t))
        .unwrap_or_else(|| workspace.join("target"));
    let opts = mlx_patched::Options::from_env(env, &target, false).expect("options");
    // Present wherever MLX has been built, and required under `cargo xtask test`.
    let upstream = match mlx_patched::upstream(&opts) {
        Ok(u) => u,
        Err(e) if env.report_file().is_none() => {
            eprintln!("the upstream tree is not here ({e}): nothing to compare");
            return;
        }
        Err(e) => panic!("the upstream tree is needed: {e}"),
    };
    if opts.base.version != mlx_patched::pin::Base::default_base().version {
        eprintln!("the table is of the default base's headers: not compared on {}", opts.base.version);
        return;
    }
    for header in ["primitives.h", "fast_primitives.h"] {
        let path = upstream.dir.join("mlx").join(header);
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let declared = mlx_fuzz::primitives::declared(&text);
        assert!(declared.len() > 10, "{}: no classes read", path.display());
        assert_eq!(
            mlx_fuzz::primitives::as_declared(header),
            declared,
            "crates/fuzz/src/primitives.rs against {}",
            path.display()
        );
    }
}
