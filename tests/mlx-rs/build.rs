//! The rpath of the libmlx that mlx-sys linked, so the program runs without
//! LD_LIBRARY_PATH: the line a user adds (docs/mlx-rs.md).
fn main() {
    println!("cargo:rerun-if-env-changed=DEP_MLX_LIB_DIR");
    if let Ok(lib) = std::env::var("DEP_MLX_LIB_DIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{lib}");
    }
}
