//! The fork as a Python package (docs/python.md; a slow check).

use mlx_workflows::{checks, workspace::Tally};

#[test]
fn the_fork_reaches_python_users() {
    checks::run("python_package", |rows| {
        let (passed, failures) = mlx_workflows::python::check(rows)?;
        Ok(Tally { passed, failures })
    });
}
