//! `leak-scenario`: the report's scenario through the Rust API, printing the
//! same lines as the C++ probe (`cycle <i> retained_bytes <n> digest <hex>`).

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let cfg = match mlx_probes::Config::parse(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let result = mlx_probes::run(&cfg, |i, c| {
        println!(
            "cycle {i} retained_bytes {} digest {:016x}",
            c.retained_bytes, c.digest
        )
    });
    match result {
        Ok(cycles) => {
            let mean = cycles.iter().map(|c| c.retained_bytes as f64).sum::<f64>()
                / cycles.len().max(1) as f64;
            let first = cycles.first().map(|c| c.digest).unwrap_or(0);
            println!(
                "summary cycles {} retained_mib_per_cycle {:.2} digest {first:016x}",
                cycles.len(),
                mean / (1024.0 * 1024.0)
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
