//! Reads the metadata mlx-sys gives its dependents: the published
//! crate's `DEP_MLX_VERSION`, and the fork's `DEP_MLX_VARIANT`, which only
//! the fork's mlx-sys gives (`none` otherwise).
fn main() {
    for (from, to) in [
        ("DEP_MLX_VERSION", "DEP_MLX_VERSION_SEEN"),
        ("DEP_MLX_VARIANT", "DEP_MLX_VARIANT_SEEN"),
    ] {
        println!("cargo:rerun-if-env-changed={from}");
        let value = std::env::var(from).unwrap_or_else(|_| "none".into());
        println!("cargo:rustc-env={to}={value}");
    }
}
