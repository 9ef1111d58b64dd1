//! A realistic model (`transformer.cpp`): pre-norm transformer blocks whose
//! attention splits one fused QKV projection in three, with rotary position
//! embeddings (`rotate_half` via `split`), returning a KV cache: 192 MiB of
//! weights. Built, evaluated, compiled, run and dropped, 50 times on every
//! fixed variant with memory flat; the control shows the leak.

use mlx_fork::{
    bit_identical, control_and_fixes, report, report_note, run_on_all, run_probe, ProbeRun,
    Variant, MIB,
};

fn transformer(v: &Variant) -> &'static str {
    v.probe(mlx_patched::probes::TRANSFORMER)
}

#[test]
fn transformer_with_fused_qkv_split_stays_flat_for_50_cycles() {
    let fixed: Vec<_> = control_and_fixes()
        .into_iter()
        .filter(|v| v.leak_free())
        .map(|v| run_probe(v, transformer, &["--cycles", "50"]))
        .collect();
    for run in &fixed {
        let model = run.one("model").int("weight_bytes");
        assert!(
            (190 * MIB..=210 * MIB).contains(&model),
            "about 200 MiB of weights: {model}"
        );
        assert_eq!(
            run.retained(),
            vec![0; 50],
            "{}: every cycle must return to the baseline",
            run.variant.name
        );
    }
    // The control, bounded in memory: 4 cycles of the full model.
    let control: Vec<_> = control_and_fixes()
        .into_iter()
        .filter(|v| !v.leak_free())
        .map(|v| run_probe(v, transformer, &["--cycles", "4"]))
        .collect();
    let all: Vec<_> = control.into_iter().chain(fixed).collect();
    assert!(bit_identical(&all), "the variants computed different bits");
    report("transformer, fused QKV split, 192 MiB weights", &all);
}

#[test]
fn control_leaks_the_transformer_in_most_processes() {
    // Which of this model's groups is released last by an assignment depends
    // on hash-map order inside compile, so the control leaks in some cycles
    // and not others, and cycles in one process are not independent trials.
    // Separate processes are. Measured with these arguments: 16 processes of
    // 10 cycles, every one leaked in 1 to 4 of its cycles (40 of 160). The
    // claim tested is weaker than that measurement: the control leaks in at
    // least half of PROCESSES processes, and a fixed variant in none.
    const PROCESSES: usize = 8;
    let args = [
        "--cycles",
        "10",
        "--layers",
        "2",
        "--d-model",
        "256",
        "--heads",
        "4",
        "--ffn",
        "1024",
    ];
    let processes: Vec<Vec<ProbeRun>> = (0..PROCESSES)
        .map(|_| run_on_all(transformer, &args))
        .collect();
    for (i, runs) in processes.iter().enumerate() {
        assert!(
            bit_identical(runs),
            "process {i}: the variants computed different bits"
        );
        for run in runs.iter().filter(|r| r.variant.leak_free()) {
            assert_eq!(
                run.retained(),
                vec![0; 10],
                "{} process {i}: must retain nothing",
                run.variant.name
            );
        }
    }
    for control in control_and_fixes().into_iter().filter(|v| !v.leak_free()) {
        let per_process: Vec<usize> = processes
            .iter()
            .map(|runs| {
                runs.iter()
                    .find(|r| r.variant.name == control.name)
                    .unwrap()
                    .retained()
                    .iter()
                    .filter(|&&b| b > 0)
                    .count()
            })
            .collect();
        let leaking = per_process.iter().filter(|&&n| n > 0).count();
        println!(
            "{}: cycles leaked per process (of 10): {per_process:?}",
            control.name
        );
        assert!(leaking * 2 >= PROCESSES, "{}: the control must leak in at least half of {PROCESSES} processes, leaked in {leaking}: {per_process:?}", control.name);
        report_note(&format!("small transformer (6 MiB), {PROCESSES} processes x 10 cycles: {} leaked in {leaking} of {PROCESSES} processes ({per_process:?} cycles)", control.name));
    }
    report(
        "small transformer (6 MiB), first of 8 processes",
        &processes[0],
    );
}
