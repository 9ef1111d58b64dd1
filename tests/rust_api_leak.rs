//! The report's scenario through the Rust API, in process: a Rust closure
//! capturing the weights is compiled, called, and dropped with them. Linked to
//! pristine (`--features pristine`) the whole weight set must leak every cycle;
//! linked to patched, nothing may be retained.

use mlx_fork::{linked, run_probe, Cell};
use mlx_probes::{run, Config};
use std::path::{Path, PathBuf};
use std::process::Command;

fn retained(cfg: &Config) -> (Vec<i64>, u64) {
    let cycles = run(cfg, |_, _| {}).expect("scenario runs");
    (
        cycles.iter().map(|c| c.retained_bytes).collect(),
        cycles[0].digest,
    )
}

/// The libmlx files mapped into this process.
#[cfg(target_os = "linux")]
fn loaded_libmlx() -> Vec<PathBuf> {
    let maps = std::fs::read_to_string("/proc/self/maps").expect("read /proc/self/maps");
    let mut found: Vec<PathBuf> = maps
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .map(Path::new)
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("libmlx.so"))
        })
        .map(|p| p.canonicalize().unwrap_or_else(|_| p.to_path_buf()))
        .collect();
    found.dedup();
    found
}

/// The process has loaded exactly one libmlx, the one installed in the
/// prefix of the variant the suite believes it linked, and that library is
/// the variant's code: it exports the patch's `array::release_group` exactly
/// when the variant's installed `array.h` declares it (only the patched
/// variant, with this repository's series).
#[test]
#[cfg(target_os = "linux")]
fn the_loaded_library_is_the_linked_variants() {
    mlx_bridge::memory::active();
    let loaded = loaded_libmlx();
    assert_eq!(
        loaded.len(),
        1,
        "expected one libmlx in the process, found {loaded:?}"
    );
    let lib_dir = Path::new(linked().prefix)
        .join("lib")
        .canonicalize()
        .expect("the variant's lib directory");
    assert_eq!(
        loaded[0].parent(),
        Some(lib_dir.as_path()),
        "libmlx was loaded from outside the {} prefix",
        linked().name
    );

    let nm = Command::new("nm")
        .args(["-D", "--defined-only", "-C"])
        .arg(&loaded[0])
        .output()
        .expect("nm (binutils) lists the library's symbols");
    assert!(
        nm.status.success(),
        "nm failed: {}",
        String::from_utf8_lossy(&nm.stderr)
    );
    let exports = String::from_utf8_lossy(&nm.stdout).contains("mlx::core::array::release_group(");
    let header = std::fs::read_to_string(Path::new(linked().prefix).join("include/mlx/array.h"))
        .expect("the variant's array.h");
    assert_eq!(
        exports,
        header.contains("release_group("),
        "the loaded library and the {} headers disagree",
        linked().name
    );
    if mlx_patched::Env::process().series_dir().is_none() {
        // The leak fix adds it; a base whose upstream fixed the leak its
        // own way (0.32.4's `release`) leaves the fix out.
        let carries_the_fix = mlx_patched::run_series()
            .unwrap()
            .iter()
            .any(|p| p.file_stem().is_some_and(|s| s == mlx_patched::pin::LEAK_FIX));
        assert_eq!(
            exports,
            linked().name == mlx_patched::Variant::PATCHED.name && carries_the_fix,
            "{}: release_group exported: {exports}",
            linked().name
        );
    }
}

#[test]
fn report_scenario_through_the_rust_api() {
    let (bytes, _) = retained(&Config {
        cycles: 3,
        ..Config::default()
    });
    let bound = Cell::REPORT.bound(linked().expect);
    assert!(
        bytes.len() == 3 && bound.admits_all(&bytes),
        "{} must retain {bound} every cycle: {bytes:?}",
        linked().name
    );
}

#[test]
fn ablations_do_not_leak_and_compute_the_same_bits() {
    let (_, reference) = retained(&Config {
        cycles: 1,
        ..Config::default()
    });
    let ablations = [
        (
            "two slices",
            Config {
                split: false,
                ..Config::default()
            },
        ),
        (
            "weights not evaluated outside",
            Config {
                eval_outside: false,
                ..Config::default()
            },
        ),
        (
            "not compiled",
            Config {
                compile: false,
                ..Config::default()
            },
        ),
    ];
    for (name, cfg) in ablations {
        let cfg = Config { cycles: 2, ..cfg };
        let (bytes, digest) = retained(&cfg);
        // Without evaluating the weights, pristine still leaks the PRNG
        // keys they are sampled from, but no longer the weights.
        let bound = Cell {
            split: cfg.split,
            eval_outside: cfg.eval_outside,
            compile: cfg.compile,
        }
        .bound(linked().expect);
        assert!(
            bytes.len() == 2 && bound.admits_all(&bytes),
            "{name} on {}: must retain {bound} every cycle: {bytes:?}",
            linked().name
        );
        // Unevaluated weights are sampled inside the compiled graph, where
        // compile fuses the sampling: other weight bits, so other outputs.
        if cfg.eval_outside {
            assert_eq!(
                digest, reference,
                "{name}: same output bits as split + compile"
            );
        }
    }
}

#[test]
fn rust_api_and_cpp_api_compute_the_same_bits() {
    let (_, digest) = retained(&Config {
        cycles: 1,
        ..Config::default()
    });
    let cpp = run_probe(linked(), |v| v.probe(mlx_patched::probes::LEAK_SCENARIO), &["--cycles", "1"]);
    assert_eq!(format!("{digest:016x}"), cpp.digest());
}
