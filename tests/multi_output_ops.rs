//! Every multi-output operation the CPU backend runs (every public caller of
//! `array::make_arrays`) inside a compiled function capturing weights
//! evaluated outside it (`multi_output_ops.cpp`). Fixed variants must retain
//! nothing; all variants must compute the same bits. Which of them leak on
//! the control is recorded in the summary table.

use mlx_fork::{bit_identical, report, run_on_all, Variant};
use std::process::Command;

fn multi_output_ops(v: &Variant) -> &'static str {
    v.probe(mlx_patched::probes::MULTI_OUTPUT_OPS)
}

/// 8 blocks of 96x96 f32: the weight set a leaking cycle pins.
const WEIGHT_BYTES: i64 = 8 * 96 * 96 * 4;

/// Ops whose group feeds the compiled function's output directly: on the
/// control, compile's own bookkeeping drops their last reference by
/// assignment, so every cycle leaks the whole weight set.
const LEAK_EVERY_CYCLE_ON_CONTROL: &[&str] = &[
    "split2",
    "split3",
    "split_at_indices",
    "qr",
    "eigh",
    "depends",
    "custom_vjp",
];

fn all_ops() -> Vec<String> {
    let out = Command::new(mlx_fork::VARIANTS[0].probe(mlx_patched::probes::MULTI_OUTPUT_OPS))
        .arg("--list")
        .output()
        .expect("run the probe");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(String::from)
        .collect()
}

#[test]
fn every_multi_output_op_compiled_over_evaluated_captures() {
    let ops = all_ops();
    for op in [
        "split2",
        "split3",
        "split_at_indices",
        "divmod",
        "qr",
        "svd",
        "eigh",
        "eig",
        "lu",
        "lu_factor",
        "quantize",
        "depends",
        "custom_vjp",
    ] {
        assert!(ops.iter().any(|o| o == op), "the probe lost op {op}");
    }
    let mut leaked_on_control = Vec::new();
    for op in &ops {
        let runs = run_on_all(multi_output_ops, &["--op", op, "--cycles", "10"]);
        for run in &runs {
            let retained = run.retained();
            if run.variant.leak_free() {
                assert!(
                    retained.iter().all(|&b| b == 0),
                    "{op}: {} must retain nothing, retained {retained:?}",
                    run.variant.name
                );
            } else {
                if LEAK_EVERY_CYCLE_ON_CONTROL.contains(&op.as_str()) {
                    assert!(retained.iter().all(|&b| b >= WEIGHT_BYTES), "{op}: the control must leak the weights every cycle, retained {retained:?}");
                }
                let leaking = retained.iter().filter(|&&b| b > 0).count();
                if leaking > 0 {
                    leaked_on_control.push(format!("{op} ({leaking}/10)"));
                }
            }
        }
        assert!(
            bit_identical(&runs),
            "{op}: the variants computed different bits"
        );
        report(
            &format!("compiled {op} over 288 KiB of evaluated weights"),
            &runs,
        );
    }
    println!(
        "leak on the control (cycles that leaked): {}",
        leaked_on_control.join(", ")
    );
}
