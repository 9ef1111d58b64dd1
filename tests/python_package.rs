//! The fork as a Python package (docs/python.md; a slow check).

use mlx_workflows::checks;

#[test]
fn the_fork_reaches_python_users() {
    checks::run("python_package", mlx_workflows::python::check);
}
