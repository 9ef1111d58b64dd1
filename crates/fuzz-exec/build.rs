//! rpath of the linked MLX variant for this package's binaries.
fn main() -> Result<(), mlx_patched::Error> {
    mlx_patched::print_rpath_of_dependency(&mlx_patched::Env::build_script(), "mlx_fork")
}
