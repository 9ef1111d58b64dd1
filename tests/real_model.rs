//! The report's own model, mlx-audio's MossFormer2_SE, in the short form
//! of `cargo xtask real-model` (finding 013). Not a CI gate: it installs
//! mlx-audio and runs the 210.8 MiB model, so it is ignored unless asked
//! for: `cargo test --test real_model -- --ignored`.
//!
//! Under the fixed heap layout each cycle's walk order is fixed, so one
//! process of the pristine cell that leaked replays its leak exactly: the
//! same seed, run again, leaks at the same cycle on the control, and at no
//! cycle on the fix.

use mlx_patched::{CommandVars, Variant};
use mlx_workflows::real_model::{fixed_layout_library, parse_process, python_for, Libs};
use std::process::Command;

/// A process of `pristine-fixed-layout` that leaked, from its record in
/// `docs/real-model/v0.32.2/pristine-fixed-layout.jsonl`: its seed, and
/// the cycle that leaked.
const SEED: u64 = 0;
const LEAKING_CYCLE: usize = 0;

fn replay(variant: Variant) -> Vec<i64> {
    let python = python_for(Libs::Fork(variant)).expect("the cell's environment");
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let kernels = std::env::temp_dir().join(format!("real-model-{}", variant.name));
    std::fs::create_dir_all(&kernels).unwrap();
    let out = Command::new(&python)
        .arg(root.join("tests/python/mossformer_cycles.py"))
        .args(["--seed", &SEED.to_string()])
        .args(["--cycles", &(LEAKING_CYCLE + 1).to_string()])
        .args(["--fixed-layout", "16"])
        .env(mlx_patched::probes::PRELOAD, fixed_layout_library().unwrap())
        .var(mlx_patched::other_vars::TMPDIR, &kernels)
        .var(mlx_patched::other_vars::PYTHONPATH, root.join("tests/python"))
        .output()
        .expect("run the model");
    let p = parse_process(
        SEED,
        &String::from_utf8_lossy(&out.stdout),
        out.status.to_string(),
        out.status.success(),
    );
    assert!(
        p.ok,
        "{}: the model failed ({}):\n{}",
        variant.name,
        p.exit,
        String::from_utf8_lossy(&out.stderr)
    );
    p.cycles.iter().map(|c| c.retained_bytes).collect()
}

#[test]
#[ignore = "installs mlx-audio and runs the 210.8 MiB model: cargo test --test real_model -- --ignored"]
fn a_recorded_leak_of_the_real_model_replays_under_the_fixed_layout_on_the_control_only() {
    let control = replay(Variant::PRISTINE);
    assert_eq!(control.len(), LEAKING_CYCLE + 1);
    assert!(
        control[LEAKING_CYCLE] > 100 << 20,
        "the control must keep most of the model at cycle {LEAKING_CYCLE}: {control:?}"
    );
    let fix = replay(Variant::PATCHED);
    assert!(
        fix.iter().all(|&b| b < 1 << 10),
        "the fix must keep nothing: {fix:?}"
    );
}
