//! `cargo xtask leak-curve`: the report's scale on both variants through
//! mlx-lm's model server, checked and drawn as docs/leak-curve.svg.

use mlx_checks::mlx_lm::{compile_works, cycles_of, environment, mib, server_run};
use mlx_expectations::{ServerCell, SERVER_CELLS};
use mlx_harness::error::{anyhow, Context, Result};
use mlx_harness::paths::workspace_root;
use mlx_patched::Variant;
use std::path::Path;

/// The report's scale: the cell, and its cycles.
const CURVE: (&str, &str, u32) = ("llama", "quantized-prefill", 20);

/// `cargo xtask leak-curve`: the report's scale on both variants, checked
/// (pristine retains at least a quarter of the weights every cycle, so it
/// grows linearly; patched retains 0 in every cycle) and drawn.
pub fn run() -> Result<()> {
    mlx_harness::deps::install()?;
    compile_works()?;
    let expectations = mlx_harness::config::expectations();
    let (arch, workload, cycles) = CURVE;
    let cell = SERVER_CELLS
        .iter()
        .find(|c| c.arch == arch && c.workload == workload)
        .context("the curve's cell is not among SERVER_CELLS")?;
    let mut series = Vec::new();
    let mut failures = Vec::new();
    let mut weights = 0;
    for v in [Variant::PRISTINE, Variant::PATCHED] {
        let python = environment(v)?;
        eprintln!("the report's scale on {}: {cycles} cycles", v.name);
        let records = server_run(
            v,
            &python,
            &[
                "--arch",
                arch,
                "--cell",
                workload,
                "--size",
                "report",
                "--cycles",
                &cycles.to_string(),
            ],
        )?;
        weights = records
            .iter()
            .find(|r| r.kind == "weights")
            .and_then(|r| r.number("weights"))
            .unwrap_or(0);
        let per_cycle = cycles_of(&records, "retained_bytes");
        let expect = cell.expect(expectations.verdict(&v));
        if let Err(e) = ServerCell::judge(expect, weights, std::slice::from_ref(&per_cycle)) {
            failures.push(format!("{}: {e:#}", v.name));
        }
        println!(
            "{} ({} of weights): {} retained after {cycles} cycles",
            v.name,
            mib(weights),
            mib(per_cycle.iter().sum())
        );
        series.push((v.name, cycles_of(&records, "total_bytes")));
    }
    let data = workspace_root().join("docs/leak-curve.tsv");
    let mut tsv = format!(
        "# cargo xtask leak-curve: mlx-lm {arch}, {workload}, {} of weights; MiB retained after each cycle\ncycle",
        mib(weights)
    );
    for (name, _) in &series {
        tsv += &format!("\t{name}");
    }
    tsv.push('\n');
    for i in 0..cycles as usize {
        tsv += &format!("{}", i + 1);
        for (_, totals) in &series {
            tsv += &format!(
                "\t{:.2}",
                totals.get(i).copied().unwrap_or(0) as f64 / 1048576.0
            );
        }
        tsv.push('\n');
    }
    std::fs::write(&data, tsv)?;
    let svg = workspace_root().join("docs/leak-curve.svg");
    draw(&svg, &series, weights)?;
    println!("wrote {} and {}", svg.display(), data.display());
    match failures.is_empty() {
        true => Ok(()),
        false => Err(anyhow!(failures.join("; "))),
    }
}

/// Retained MiB against cycle, one line per variant.
fn draw(path: &Path, series: &[(&str, Vec<i64>)], weights: i64) -> Result<()> {
    use plotters::prelude::*;
    let e = |e: &dyn std::fmt::Display| anyhow!("cannot draw {}: {e}", path.display());
    let cycles = series.iter().map(|(_, s)| s.len()).max().unwrap_or(1) as u32;
    let top = series
        .iter()
        .flat_map(|(_, s)| s.iter().copied())
        .max()
        .unwrap_or(0) as f64
        / 1048576.0;
    let root = SVGBackend::new(path, (760, 420)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "A model server's load/unload loop: mlx-lm llama, {:.0} MiB of weights",
                weights as f64 / 1048576.0
            ),
            ("sans-serif", 18),
        )
        .margin(14)
        .x_label_area_size(40)
        .y_label_area_size(64)
        .build_cartesian_2d(0u32..cycles, 0f64..(top * 1.05).max(1.0))
        .map_err(|x| e(&x))?;
    chart
        .configure_mesh()
        .x_desc("cycle (build, evaluate, compiled prefill, drop)")
        .y_desc("MiB retained")
        .draw()
        .map_err(|x| e(&x))?;
    let colors = [RGBColor(200, 40, 40), RGBColor(30, 90, 200)];
    for ((name, totals), color) in series.iter().zip(colors) {
        let points: Vec<(u32, f64)> = std::iter::once((0, 0.0))
            .chain(
                totals
                    .iter()
                    .enumerate()
                    .map(|(i, &b)| (i as u32 + 1, b as f64 / 1048576.0)),
            )
            .collect();
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(3)))
            .map_err(|x| e(&x))?
            .label(*name)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 24, y)], color.stroke_width(3))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE)
        .border_style(BLACK)
        .draw()
        .map_err(|x| e(&x))?;
    root.present().map_err(|x| e(&x))?;
    Ok(())
}
