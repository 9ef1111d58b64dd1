//! What a sanitizer run runs on each variant, and how: the table of
//! scenarios, the Rust API's test binaries, the sanitizers' options, and one
//! scenario's run with its reports and census read back.

use super::logs::{read_log, Report};
use mlx_harness::error::{anyhow, Context, Result};
use mlx_harness::process::cargo;
use mlx_harness::paths::target_dir;
use mlx_expectations::record::parse_records;
use mlx_patched::CommandVars;
use mlx_patched::{Artifacts, Sanitizer, Variant};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The program a scenario runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Program {
    /// MLX's own C++ suite of the variant.
    MlxSuite,
    /// A C++ probe of `mlx_patched::probes`.
    Probe(&'static str),
    /// A Rust test binary of the Rust API (see [`RUST_TESTS`]).
    RustTest(&'static str),
}

/// One row of the table: what runs on every variant.
#[derive(Clone, Debug)]
pub struct Planned {
    pub name: String,
    pub program: Program,
    pub args: Vec<String>,
}

fn planned(name: &str, program: Program, args: &[&str]) -> Planned {
    Planned {
        name: name.to_string(),
        program,
        args: args.iter().map(|a| a.to_string()).collect(),
    }
}

/// The Rust API's tests run under AddressSanitizer: (package, test target).
/// Each must be found for each variant the Rust API links.
pub const RUST_TESTS: &[(&str, &str)] = &[
    ("mlx-bridge", "api"),
    ("mlx-fork", "rust_api_leak"),
    ("mlx-fork", "semantics"),
];

/// The table every variant runs, but the multi-output ops, which the
/// probe lists itself (`multi_output_ops --list`) and [`expand`] adds.
pub fn table(sanitizer: Sanitizer) -> Vec<Planned> {
    use Program::*;
    if sanitizer == Sanitizer::Thread {
        // The threaded scenario, the compile cache filled and emptied from
        // two threads at once, with small weights, and the release race.
        return vec![
            planned(
                "threads",
                Probe(mlx_patched::probes::LEAK_SCENARIO),
                &[
                    "--threads",
                    "2",
                    "--cycles",
                    "5",
                    "--blocks",
                    "4",
                    "--dim",
                    "128",
                ],
            ),
            planned(
                "threads, two shapes",
                Probe(mlx_patched::probes::LEAK_SCENARIO),
                &[
                    "--threads",
                    "2",
                    "--cycles",
                    "5",
                    "--blocks",
                    "4",
                    "--dim",
                    "128",
                    "--shapes",
                    "2",
                ],
            ),
            // A group's outputs let go of on two and three threads at once,
            // and against an evaluation or a copy of a sibling.
            planned(RELEASE_RACE, Probe(mlx_patched::probes::RELEASE_RACE), &["100"]),
        ];
    }
    let mut list = vec![
        Planned {
            name: "MLX's C++ suite".into(),
            program: MlxSuite,
            args: vec![mlx_patched::mlx_tests_filter()],
        },
        planned(
            "report's scenario",
            Probe(mlx_patched::probes::LEAK_SCENARIO),
            &["--cycles", "3"],
        ),
        planned(
            "two slices",
            Probe(mlx_patched::probes::LEAK_SCENARIO),
            &["--cycles", "3", "--slices"],
        ),
        planned(
            "not evaluated outside",
            Probe(mlx_patched::probes::LEAK_SCENARIO),
            &["--cycles", "3", "--no-eval-outside"],
        ),
        planned(
            "eager",
            Probe(mlx_patched::probes::LEAK_SCENARIO),
            &["--cycles", "3", "--no-compile"],
        ),
        planned(
            "two shapes",
            Probe(mlx_patched::probes::LEAK_SCENARIO),
            &["--cycles", "3", "--shapes", "2"],
        ),
        planned(
            "threads",
            Probe(mlx_patched::probes::LEAK_SCENARIO),
            &[
                "--threads",
                "2",
                "--cycles",
                "5",
                "--blocks",
                "4",
                "--dim",
                "256",
            ],
        ),
        planned("held output", Probe(mlx_patched::probes::HELD_OUTPUT), &[]),
        planned(RELEASE_RACE, Probe(mlx_patched::probes::RELEASE_RACE), &["100"]),
        planned(
            mlx_patched::probes::TRANSFORMER,
            Probe(mlx_patched::probes::TRANSFORMER),
            &[
                "--cycles",
                "3",
                "--layers",
                "2",
                "--d-model",
                "128",
                "--heads",
                "4",
                "--ffn",
                "256",
                "--seq",
                "16",
            ],
        ),
    ];
    list.extend(
        RUST_TESTS
            .iter()
            .map(|(_, t)| planned(&format!("rust {t}"), RustTest(t), &["--test-threads=1"])),
    );
    list
}

/// The table with one scenario per multi-output op the probe lists (under
/// AddressSanitizer): what the run must have an outcome for, on every
/// variant the programs exist for.
pub fn expand(sanitizer: Sanitizer, ops: &[String]) -> Vec<Planned> {
    let mut list = table(sanitizer);
    if sanitizer == Sanitizer::Address {
        for op in ops {
            list.push(planned(
                &format!("multi-output op {op}"),
                Program::Probe(mlx_patched::probes::MULTI_OUTPUT_OPS),
                &["--op", op, "--cycles", "3"],
            ));
        }
    }
    list
}

/// The multi-output ops the probe built against `mlx` lists.
pub fn multi_output_ops(program: &Path, variant: &str) -> Result<Vec<String>> {
    let listed = Command::new(program).arg("--list").output()?;
    let ops: Vec<String> = String::from_utf8_lossy(&listed.stdout)
        .lines()
        .map(String::from)
        .collect();
    if !listed.status.success() || ops.is_empty() {
        return Err(anyhow!(
            "multi_output_ops --list failed on {variant}: {}",
            String::from_utf8_lossy(&listed.stderr)
        ));
    }
    Ok(ops)
}

/// How each sanitizer is told to report. AddressSanitizer stops a program
/// at its first memory error (a report is a failure) and LeakSanitizer
/// reports at exit. ThreadSanitizer keeps the program's own exit status
/// (`exitcode=0`): a race is counted from the log.
pub fn options(sanitizer: Sanitizer) -> &'static [(&'static str, &'static str)] {
    match sanitizer {
        Sanitizer::Address => &[
            ("ASAN_OPTIONS", "detect_leaks=1:symbolize=1"),
            ("UBSAN_OPTIONS", "print_stacktrace=1"),
        ],
        Sanitizer::Thread => &[("TSAN_OPTIONS", "second_deadlock_stack=1:exitcode=0")],
        Sanitizer::Coverage => &[],
    }
}

/// ThreadSanitizer's suppressions, each with its reason. AddressSanitizer
/// has none.
pub fn suppressions(sanitizer: Sanitizer) -> Option<&'static str> {
    (sanitizer == Sanitizer::Thread).then_some(
        "\
# OpenBLAS (Debian's, not instrumented) runs its own thread pool; TSan
# cannot see its synchronisation, so its internals look racy.
called_from_lib:libopenblas.so.0
called_from_lib:libblas.so.3
called_from_lib:liblapack.so.3
",
    )
}

/// A scenario ready to run: the program's path and arguments.
pub struct Scenario {
    pub name: String,
    pub program: PathBuf,
    pub args: Vec<String>,
    /// Whether the program prints the live-descriptor census (every probe
    /// does, after each cycle; MLX's suite and the Rust tests do not).
    pub counts_census: bool,
}

/// One scenario's run on one variant.
pub struct Outcome {
    pub scenario: String,
    pub status: String,
    pub success: bool,
    pub reports: Vec<Report>,
    /// `census <cycle> descriptors_retained <n>` records, in order.
    pub census: Vec<i64>,
    /// Whether the program must print them ([`Scenario::counts_census`]).
    pub counts_census: bool,
}

/// The scenarios of `table` for one variant: each program resolved, the
/// Rust tests started through the dynamic loader with the sanitizer's
/// runtime preloaded.
pub fn resolve(
    table: &[Planned],
    mlx: &Artifacts,
    probes: &BTreeMap<&str, PathBuf>,
    rust: Option<&BTreeMap<String, PathBuf>>,
    runtime: &Path,
) -> Result<Vec<Scenario>> {
    let mut list = Vec::new();
    for p in table {
        let (program, args) = match &p.program {
            Program::MlxSuite => (mlx.mlx_tests().to_path_buf(), p.args.clone()),
            Program::Probe(name) => (
                probes.get(name).cloned().with_context(|| {
                    format!("the probe {name} was not built for {}", mlx.name())
                })?,
                p.args.clone(),
            ),
            Program::RustTest(name) => {
                // Only the variants the Rust API links have these.
                let Some(exe) = rust.and_then(|r| r.get(*name)) else {
                    continue;
                };
                // The runtime must come first, and only in this process: MLX
                // runs the C++ compiler to see whether it can JIT, and with
                // LD_PRELOAD the compiler would inherit the runtime, report
                // its own leaks and fail, and MLX would silently stop
                // compiling. The dynamic loader's `--preload` leaves the
                // environment alone.
                let mut args = vec![
                    "--preload".to_string(),
                    runtime.display().to_string(),
                    exe.display().to_string(),
                ];
                args.extend(p.args.iter().cloned());
                (super::elf::interpreter(exe)?, args)
            }
        };
        list.push(Scenario {
            name: p.name.clone(),
            program,
            args,
            counts_census: matches!(p.program, Program::Probe(_)),
        });
    }
    Ok(list)
}

/// The sanitizer's runtime library, for programs that do not link it (Rust
/// binaries): preloaded, it comes first, as AddressSanitizer requires.
pub fn runtime_library(sanitizer: Sanitizer) -> Result<PathBuf> {
    let name = match sanitizer {
        Sanitizer::Address => "libasan.so",
        Sanitizer::Thread => "libtsan.so",
        Sanitizer::Coverage => return Err(anyhow!("the coverage build has no runtime to preload")),
    };
    let cxx = mlx_patched::Env::process().cxx_or_default();
    let out = Command::new(&cxx)
        .arg(format!("-print-file-name={name}"))
        .output()
        .with_context(|| format!("cannot run {}", cxx.to_string_lossy()))?;
    let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    path.canonicalize().map_err(|_| {
        anyhow!(
            "the C++ compiler has no {name} ({}): install its sanitizer runtime",
            path.display()
        )
    })
}

/// The scenario where threads let go of a group's outputs at once.
pub const RELEASE_RACE: &str = "release race";

pub fn run_scenario(
    s: &Scenario,
    sanitizer: Sanitizer,
    dir: &Path,
    suppressions: Option<&Path>,
) -> Result<Outcome> {
    let slug: String = s
        .name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let logs = dir.join(format!("{slug}.log"));
    let mut cmd = Command::new(&s.program);
    cmd.args(&s.args);
    // A kernel cache of the variant's own: variants of one version share
    // kernel names, and their kernels' code differs where the series
    // changes it.
    let kernels = dir.join("kernels");
    std::fs::create_dir_all(&kernels)?;
    cmd.var(mlx_patched::other_vars::TMPDIR, &kernels);
    let suffix = match sanitizer {
        Sanitizer::Address => [("ASAN_OPTIONS", "asan"), ("UBSAN_OPTIONS", "ubsan")].as_slice(),
        Sanitizer::Thread => [("TSAN_OPTIONS", "tsan")].as_slice(),
        Sanitizer::Coverage => [].as_slice(),
    };
    for (var, value) in options(sanitizer) {
        let ext = suffix
            .iter()
            .find(|(v, _)| v == var)
            .map(|(_, e)| *e)
            .unwrap_or("log");
        let supp = suppressions
            .filter(|_| *var == "TSAN_OPTIONS")
            .map(|p| format!(":suppressions={}", p.display()))
            .unwrap_or_default();
        cmd.env(
            var,
            format!("{value}:log_path={}.{ext}{supp}", logs.display()),
        );
    }
    let output = cmd
        .output()
        .with_context(|| format!("cannot run {}", s.program.display()))?;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    std::fs::write(dir.join(format!("{slug}.stdout")), &stdout)?;
    std::fs::write(dir.join(format!("{slug}.stderr")), &output.stderr)?;
    let prefix = format!("{slug}.log.");
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(&prefix))
        })
        .collect();
    files.sort();
    let mut reports = Vec::new();
    for f in files {
        reports.extend(read_log(&f)?);
    }
    let census = parse_records(&stdout)
        .iter()
        .filter(|r| r.kind == "census")
        .filter_map(|r| r.number("descriptors_retained"))
        .collect();
    Ok(Outcome {
        scenario: s.name.clone(),
        status: exit_status(&output.status),
        success: output.status.success(),
        reports,
        census,
        counts_census: s.counts_census,
    })
}

fn exit_status(status: &std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exit {c}"),
        (None, Some(s)) => format!("signal {s}"),
        _ => "unknown".into(),
    }
}

/// Builds the Rust API's test binaries ([`RUST_TESTS`]) against each
/// sanitizer prefix of a variant the Rust API can link, in their own Cargo
/// target directory; returns them by variant. A test binary that is not
/// found is an error: the run would claim what it did not run.
pub fn rust_test_binaries(
    root: &Path,
    sanitizer: Sanitizer,
) -> Result<BTreeMap<&'static str, BTreeMap<String, PathBuf>>> {
    let target = target_dir()?.join("sanitize").join("cargo");
    let mut all = BTreeMap::new();
    for (variant, feature) in Variant::LINKABLE.map(|v| (v.name, v.feature())) {
        let mut cmd = cargo();
        cmd.args([
            "test",
            "--no-run",
            "--message-format=json-render-diagnostics",
        ]);
        for (package, test) in RUST_TESTS {
            cmd.args(["-p", package, "--test", test]);
        }
        if let Some(f) = feature {
            cmd.args(["--features", &format!("mlx-fork/{f},mlx-bridge/{f}")]);
        }
        cmd.var(mlx_patched::vars::CARGO_TARGET_DIR, &target)
            .var(mlx_patched::vars::MLX_PATCHED_BUILD_DIR, root)
            .var(mlx_patched::vars::MLX_PATCHED_SANITIZER, sanitizer.name());
        eprintln!(
            "sanitize: building the Rust API's tests against {variant}-{}",
            sanitizer.suffix()
        );
        let out = cmd
            .stderr(std::process::Stdio::inherit())
            .output()
            .context("cannot run cargo")?;
        if !out.status.success() {
            return Err(anyhow!(
                "building the Rust API's tests against {variant}-{} failed",
                sanitizer.suffix()
            ));
        }
        let mut binaries = BTreeMap::new();
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let Ok(msg) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            if let (Some(exe), Some(name)) =
                (msg["executable"].as_str(), msg["target"]["name"].as_str())
            {
                if msg["profile"]["test"].as_bool() == Some(true) {
                    binaries.insert(name.to_string(), PathBuf::from(exe));
                }
            }
        }
        let missing: Vec<&str> = RUST_TESTS
            .iter()
            .map(|(_, t)| *t)
            .filter(|t| !binaries.contains_key(*t))
            .collect();
        if !missing.is_empty() {
            return Err(anyhow!("cargo built no test binary {missing:?} against {variant}-{}: the run would not cover the Rust API", sanitizer.suffix()));
        }
        all.insert(variant, binaries);
    }
    Ok(all)
}
