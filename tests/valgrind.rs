//! Heap evidence independent of MLX's own accounting: valgrind's leak checker
//! sees the orphaned sibling cycle on pristine, and nothing on patched.

use mlx_fork::{Variant, PATCHED, PRISTINE};
use std::process::Command;

/// (definitely lost bytes, indirectly lost bytes) for a small scenario run.
fn lost_bytes(variant: &Variant, extra: &[&str]) -> (u64, u64) {
    let out = Command::new("valgrind")
        .args(["--leak-check=full", "--errors-for-leak-kinds=none", "--error-exitcode=0"])
        .arg(variant.leak_scenario)
        .args(["--cycles", "2", "--blocks", "4", "--dim", "64", "--batch", "2"])
        .args(extra)
        .output()
        .expect("valgrind must be installed (cargo xtask deps installs it)");
    assert!(out.status.success(), "valgrind run failed: {}", String::from_utf8_lossy(&out.stderr));
    let report = String::from_utf8_lossy(&out.stderr);
    let lost = |kind: &str| -> u64 {
        report
            .lines()
            .find_map(|l| l.split_once(&format!("{kind} lost: ")).map(|(_, rest)| rest))
            .map(|rest| rest.split(" bytes").next().unwrap().replace(',', "").trim().parse().unwrap())
            .unwrap_or(0)
    };
    assert!(report.contains("LEAK SUMMARY") || report.contains("All heap blocks were freed"), "no leak report:\n{report}");
    (lost("definitely"), lost("indirectly"))
}

#[test]
fn valgrind_sees_the_orphaned_cycle_only_on_pristine() {
    let (definitely, indirectly) = lost_bytes(&PRISTINE, &[]);
    assert!(definitely > 0 && indirectly > 0, "pristine: valgrind must see the orphaned group ({definitely} definitely, {indirectly} indirectly lost)");
    assert_eq!(lost_bytes(&PATCHED, &[]), (0, 0), "patched: nothing may be lost");
    assert_eq!(lost_bytes(&PRISTINE, &["--slices"]), (0, 0), "pristine with two slices: nothing lost");
}
