//! The tree the build uses is the official release (docs/provenance.md; a
//! slow check).

use mlx_workflows::checks;

#[test]
fn the_tree_is_the_official_release() {
    checks::run("provenance", |_| mlx_workflows::provenance::check_tree());
}
