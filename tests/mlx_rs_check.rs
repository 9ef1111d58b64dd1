//! mlx-rs 0.33 through the drop-in `mlx-sys`, on patched and pristine
//! (docs/mlx-rs.md; a slow check).

use mlx_workflows::checks;

#[test]
fn mlx_rs_through_the_drop_in_sys_crate() {
    checks::run("mlx_rs_check", mlx_workflows::mlx_rs::check);
}
