//! The rpath of the libmlx that mlx-sys linked, so the program runs without
//! LD_LIBRARY_PATH when that is a shared prefix (`MLX_SYS_PREFIX`, the
//! control): the line such a user adds (docs/mlx-rs.md). Harmless for the
//! default static link.
fn main() {
    println!("cargo:rerun-if-env-changed=DEP_MLX_LIB_DIR");
    if let Ok(lib) = std::env::var("DEP_MLX_LIB_DIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{lib}");
    }
}
