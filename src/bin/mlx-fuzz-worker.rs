//! The fuzzer's worker on the variant this package links (`--features
//! pristine` for the control): programs in, outcomes out (see
//! `mlx_fuzz::campaign`).

fn main() {
    std::process::exit(mlx_fuzz_exec::worker_main());
}
