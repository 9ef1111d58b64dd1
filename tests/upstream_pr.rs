//! Each fix of the series applies alone onto a clean upstream tree, staged
//! as its own pull request (a slow check; last in `cargo xtask test`).

use mlx_workflows::checks;

#[test]
fn each_fix_applies_alone_upstream() {
    checks::run("upstream_pr", |_| mlx_workflows::upstream::check());
}
