//! The live-group guarantee through the plain C++ API on every variant: an
//! output of an unevaluated split or divmod, held while its siblings and
//! their consumers are dropped, still evaluates to the right values.

use mlx_fork::control_and_fixes;
use std::process::Command;

#[test]
fn held_output_of_unevaluated_multi_output_op_on_both_variants() {
    for variant in control_and_fixes() {
        let out = Command::new(variant.probe(mlx_patched::probes::HELD_OUTPUT))
            .output()
            .expect("run the C++ probe");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{}: {}\n{stdout}{}",
            variant.name,
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            stdout.lines().filter(|l| l.starts_with("ok ")).count(),
            7,
            "{}: {stdout}",
            variant.name
        );
    }
}
