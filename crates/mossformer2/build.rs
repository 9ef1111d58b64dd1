//! The rpath of the libmlx that mlx-sys linked, so that the binaries run
//! without LD_LIBRARY_PATH when that is a shared prefix (`MLX_SYS_PREFIX`,
//! as the unpatched control is linked). Nothing to do for the default,
//! static link.
fn main() {
    println!("cargo:rerun-if-env-changed=DEP_MLX_LIB_DIR");
    if let Ok(lib) = std::env::var("DEP_MLX_LIB_DIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{lib}");
    }
}
