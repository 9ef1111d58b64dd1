//! The fork under mlx-lm 0.32.2, a peer's code (docs/mlx-lm.md; a slow check).

use mlx_workflows::checks;

#[test]
fn mlx_lm_on_both_variants() {
    checks::run("mlx_lm_check", mlx_workflows::mlx_lm::check);
}
