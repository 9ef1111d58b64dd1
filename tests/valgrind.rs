//! Heap evidence independent of MLX's own accounting: valgrind's leak checker
//! sees the orphaned sibling cycle on pristine, and nothing on patched.

use mlx_fork::{control_and_fixes, Variant};
use std::process::Command;

/// One loss record of valgrind's leak report: its kind and the frames of
/// its allocation stack.
#[derive(Debug)]
struct LossRecord {
    kind: String,
    frames: Vec<String>,
}

/// The loss records in valgrind's report (stderr). A record starts with
/// `N bytes in M blocks are <kind> lost in loss record i of n` and its stack
/// is the `at`/`by` lines right after it; anything else ends it.
fn loss_records(report: &str) -> Vec<LossRecord> {
    let mut records: Vec<LossRecord> = Vec::new();
    let mut in_stack = false;
    for line in report.lines() {
        // Strip the `==pid== ` prefix.
        let body = line
            .strip_prefix("==")
            .and_then(|l| l.split_once("== "))
            .map(|(_, rest)| rest)
            .unwrap_or(line);
        if let Some((_, rest)) = body.split_once(" are ") {
            if let Some((kind, _)) = rest.split_once(" lost in loss record ") {
                records.push(LossRecord {
                    kind: kind.trim_start_matches("possibly ").to_string(),
                    frames: Vec::new(),
                });
                in_stack = true;
                continue;
            }
        }
        let frame = body.trim_start();
        if in_stack && (frame.starts_with("at ") || frame.starts_with("by ")) {
            records.last_mut().unwrap().frames.push(frame.to_string());
        } else {
            in_stack = false;
        }
    }
    records
}

/// Definitely and indirectly lost bytes for a small scenario run, and
/// whether a lost block's allocation stack goes through `make_arrays`.
fn lost_bytes(variant: &Variant, extra: &[&str]) -> (u64, u64, bool) {
    let out = Command::new("valgrind")
        .args([
            "--leak-check=full",
            "--show-leak-kinds=definite,indirect",
            "--num-callers=30",
        ])
        .args(["--errors-for-leak-kinds=none", "--error-exitcode=0"])
        .arg(variant.probe(mlx_patched::probes::LEAK_SCENARIO))
        .args([
            "--cycles", "2", "--blocks", "4", "--dim", "64", "--batch", "2",
        ])
        .args(extra)
        .output()
        .expect("valgrind must be installed (cargo xtask deps installs it)");
    assert!(
        out.status.success(),
        "valgrind run failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = String::from_utf8_lossy(&out.stderr);
    let lost = |kind: &str| -> u64 {
        report
            .lines()
            .find_map(|l| {
                l.split_once(&format!("{kind} lost: "))
                    .map(|(_, rest)| rest)
            })
            .map(|rest| {
                rest.split(" bytes")
                    .next()
                    .unwrap()
                    .replace(',', "")
                    .trim()
                    .parse()
                    .unwrap()
            })
            .unwrap_or(0)
    };
    assert!(
        report.contains("LEAK SUMMARY") || report.contains("All heap blocks were freed"),
        "no leak report:\n{report}"
    );
    let records = loss_records(&report);
    let through_make_arrays = records
        .iter()
        .filter(|r| r.kind == "definitely" || r.kind == "indirectly")
        .any(|r| r.frames.iter().any(|f| f.contains("make_arrays")));
    (lost("definitely"), lost("indirectly"), through_make_arrays)
}

#[test]
fn loss_records_are_read_from_their_own_stacks_only() {
    let report = "\
==7== HEAP SUMMARY:
==7==     in use at exit: 10 bytes in 1 blocks
==7== 
==7== 8 bytes in 1 blocks are definitely lost in loss record 1 of 2
==7==    at 0x1: operator new(unsigned long) (vg_replace_malloc.c:422)
==7==    by 0x2: mlx::core::array::array(...) (in /lib/libmlx.so)
==7== 
==7== note: make_arrays appears here, outside any stack
==7== 2 bytes in 1 blocks are indirectly lost in loss record 2 of 2
==7==    at 0x1: malloc (vg_replace_malloc.c:381)
==7==    by 0x3: mlx::core::array::make_arrays(...) (in /lib/libmlx.so)
";
    let records = loss_records(report);
    assert_eq!(records.len(), 2);
    assert_eq!(
        (records[0].kind.as_str(), records[0].frames.len()),
        ("definitely", 2)
    );
    assert!(!records[0].frames.iter().any(|f| f.contains("make_arrays")));
    assert_eq!(records[1].kind, "indirectly");
    assert!(records[1].frames[1].contains("make_arrays"));
}

#[test]
fn valgrind_sees_the_orphaned_cycle_only_on_the_control() {
    for variant in control_and_fixes() {
        let (definitely, indirectly, through_make_arrays) = lost_bytes(variant, &[]);
        println!(
            "{}: definitely lost {definitely} B, indirectly lost {indirectly} B",
            variant.name
        );
        if variant.leak_free() {
            assert_eq!(
                (definitely, indirectly),
                (0, 0),
                "{}: nothing may be lost",
                variant.name
            );
        } else {
            assert!(definitely > 0 && indirectly > 0, "{}: valgrind must see the orphaned group ({definitely} definitely, {indirectly} indirectly lost)", variant.name);
            assert!(
                through_make_arrays,
                "{}: the lost blocks must be allocated through make_arrays",
                variant.name
            );
            let slices = lost_bytes(variant, &["--slices"]);
            assert_eq!(
                (slices.0, slices.1),
                (0, 0),
                "{} with two slices: nothing lost",
                variant.name
            );
        }
    }
}
