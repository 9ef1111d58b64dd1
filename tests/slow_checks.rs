//! The slow checks, one test each, generated from the claim registry
//! (`mlx_workflows::claims`): each runs only under `MLX_FORK_SLOW_CHECKS=1`,
//! which `cargo xtask test` sets; one alone:
//! `MLX_FORK_SLOW_CHECKS=1 cargo test --test slow_checks -- --exact python_package`.

mlx_workflows::slow_check_tests!();
