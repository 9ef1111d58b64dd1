//! rpath of the linked MLX variant for this package's binaries.
fn main() {
    println!("cargo:rerun-if-env-changed=DEP_MLX_FORK_LIB_DIR");
    if let Ok(lib) = std::env::var("DEP_MLX_FORK_LIB_DIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{lib}");
    }
}
