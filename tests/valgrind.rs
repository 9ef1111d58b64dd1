//! Heap evidence independent of MLX's own accounting: valgrind's leak checker
//! sees the orphaned sibling cycle on pristine, and nothing on patched.

use mlx_fork::{Variant, VARIANTS};
use std::process::Command;

/// Definitely and indirectly lost bytes for a small scenario run, and
/// whether a lost block's allocation stack goes through `make_arrays`.
fn lost_bytes(variant: &Variant, extra: &[&str]) -> (u64, u64, bool) {
    let out = Command::new("valgrind")
        .args(["--leak-check=full", "--show-leak-kinds=definite,indirect", "--num-callers=30"])
        .args(["--errors-for-leak-kinds=none", "--error-exitcode=0"])
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
    // Loss records of the two kinds shown, with their allocation stacks.
    let through_make_arrays = report.split("are definitely lost").chain(report.split("are indirectly lost")).skip(1).any(|r| r.contains("make_arrays"));
    (lost("definitely"), lost("indirectly"), through_make_arrays)
}

#[test]
fn valgrind_sees_the_orphaned_cycle_only_on_the_control() {
    for variant in VARIANTS {
        let (definitely, indirectly, through_make_arrays) = lost_bytes(variant, &[]);
        println!("{}: definitely lost {definitely} B, indirectly lost {indirectly} B", variant.name);
        if variant.leak_free {
            assert_eq!((definitely, indirectly), (0, 0), "{}: nothing may be lost", variant.name);
        } else {
            assert!(definitely > 0 && indirectly > 0, "{}: valgrind must see the orphaned group ({definitely} definitely, {indirectly} indirectly lost)", variant.name);
            assert!(through_make_arrays, "{}: the lost blocks must be allocated through make_arrays", variant.name);
            let slices = lost_bytes(variant, &["--slices"]);
            assert_eq!((slices.0, slices.1), (0, 0), "{} with two slices: nothing lost", variant.name);
        }
    }
}
