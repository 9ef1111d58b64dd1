//! The fuzz commands' shared plumbing: the worker a campaign runs, and how a
//! shrunk finding is kept. A leaf under `fuzz`: the campaign, the guided
//! engine and the coverage command all build on it.

use mlx_harness::error::{anyhow, Context, Result};
use mlx_harness::process::cargo;
use mlx_harness::paths::target_dir;
use mlx_fuzz::campaign::Worker;
use mlx_fuzz::{cpp, Program, Releases};
use mlx_patched::CommandVars;
use mlx_patched::{Sanitizer, Variant};
use std::path::PathBuf;
use std::time::Duration;

/// Distinct findings a campaign shrinks (each takes a few hundred runs).
pub(super) const SHRINK_AT_MOST: usize = 8;

/// Races of MLX's own that ThreadSanitizer reports on every variant, the
/// control included (docs/sanitize/thread.md): unsynchronized memory and
/// task counters, read while another thread frees a buffer or schedules a
/// task. Neither touches the graph's lifetime, which is what the fuzzer
/// looks at; they are suppressed by the counter's own function.
///
/// OpenBLAS is suppressed by module, not by `called_from_lib` as in
/// `cargo xtask sanitize`: the worker maps it twice, and ThreadSanitizer
/// stops at start-up when a `called_from_lib` pattern matches two modules.
const FUZZ_TSAN_SUPPRESSIONS: &str = "\
# OpenBLAS (Debian's, not instrumented) runs its own thread pool.
race:libopenblas.so.0
race:libblas.so.3
race:liblapack.so.3
# MLX's allocator counts memory in plain integers: get_active_memory races
# with a free on the stream's thread.
race:mlx::core::allocator::CommonAllocator::get_active_memory
# The scheduler counts tasks in plain integers.
race:mlx::core::scheduler::Scheduler::n_active_tasks
";

pub(super) struct Args {
    /// The variant the worker links (`--target`: the control's recipe on
    /// another tree).
    pub(super) variant: Option<Variant>,
    pub(super) target: Option<String>,
    pub(super) minutes: f64,
    pub(super) programs: Option<u64>,
    pub(super) seed: u64,
    pub(super) sanitizer: Option<Sanitizer>,
    pub(super) release: bool,
    pub(super) releases: Releases,
    /// On the coverage build: the guided engine instead of the seed's stream.
    pub(super) guided: bool,
    /// Programs a guided campaign starts from (JSON files).
    pub(super) corpus: Option<PathBuf>,
}

impl Args {
    pub(super) fn variant(&self) -> Variant {
        self.variant.expect("parse sets a variant")
    }
}

/// Builds the worker for `a`'s variant and returns it with its label.
pub(super) fn worker(a: &Args) -> Result<(Worker, String)> {
    let profile = if a.release { "release" } else { "debug" };
    let mut label = match &a.target {
        Some(t) => format!("upstream-{t}"),
        None => a.variant().name.to_string(),
    };
    if a.releases == Releases::TwoThreads {
        label = format!("{label}-threads");
    }
    if let Some(s) = a.sanitizer {
        label = format!("{label}-{}", s.suffix());
    }
    let dir = target_dir()?.join("fuzz");
    let mut cmd = cargo();
    cmd.args([
        "build",
        "--bin",
        "mlx-fuzz-worker",
        "-p",
        "mlx-fork",
        "--message-format=json-render-diagnostics",
    ]);
    if a.release {
        cmd.arg("--release");
    }
    if let Some(feature) = a.variant().feature() {
        cmd.args(["--features", feature]);
    }
    // A target dir per variant and flavour: they neither rebuild each other
    // nor overwrite each other's worker, which the differential runs side by
    // side. MLX itself is shared with every other build of the same variant.
    cmd.var(
        mlx_patched::vars::CARGO_TARGET_DIR,
        dir.join(format!("cargo-{label}")),
    );
    // The base's own root, where every other build of the variant is: the
    // worker links the same MLX the suite does.
    let mut build_dir = mlx_harness::config::options()?.root;
    if let Some(t) = &a.target {
        let work = crate::rebase::dirs::work_dir(t)?;
        std::fs::create_dir_all(&work)?;
        let tree = mlx_harness::trees::target_tree(t, &work)?;
        let empty = work.join("empty-series");
        std::fs::create_dir_all(&empty)?;
        build_dir = crate::rebase::dirs::upstream_root(&work);
        cmd.var(mlx_patched::vars::MLX_SOURCE_DIR, &tree.dir)
            .var(mlx_patched::vars::MLX_PATCHED_SERIES_DIR, &empty);
    }
    cmd.var(mlx_patched::vars::MLX_PATCHED_BUILD_DIR, &build_dir);
    if let Some(s) = a.sanitizer {
        cmd.var(mlx_patched::vars::MLX_PATCHED_SANITIZER, s.name());
    }
    eprintln!("fuzz: building the {profile} worker for {label}");
    let out = cmd
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("cannot run cargo")?;
    if !out.status.success() {
        return Err(anyhow!("building the fuzz worker for {label} failed"));
    }
    let exe = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find_map(|m| {
            (m["target"]["name"] == "mlx-fuzz-worker")
                .then(|| m["executable"].as_str().map(PathBuf::from))
                .flatten()
        })
        .context("cargo reported no mlx-fuzz-worker executable")?;
    let (mut env, mut launch, mut program) = (Vec::new(), Vec::new(), exe.clone());
    // The coverage build needs no runtime: libmlx carries its counters.
    if let Some(s) = a.sanitizer.filter(|s| *s != Sanitizer::Coverage) {
        // A Rust binary does not link the runtime: the dynamic loader
        // preloads it for the worker alone (see sanitize::scenarios).
        program = crate::sanitize::elf::interpreter(&exe)?;
        launch = vec![
            "--preload".to_string(),
            crate::sanitize::scenarios::runtime_library(s)?
                .display()
                .to_string(),
            exe.display().to_string(),
        ];
        // Leaks are the fuzzer's own oracle (memory and the census); LSan at
        // exit would report MLX's process-lifetime singletons.
        env.push((
            "ASAN_OPTIONS".to_string(),
            "detect_leaks=0:abort_on_error=1".to_string(),
        ));
        env.push((
            "UBSAN_OPTIONS".to_string(),
            "print_stacktrace=1:halt_on_error=1".to_string(),
        ));
        if s == Sanitizer::Thread {
            // A race halts the worker at the program that made it, so that
            // the finding is that program's. MLX's own counter races, seen
            // on every variant, would halt it at any program.
            let dir = target_dir()?.join("fuzz").join(&label);
            std::fs::create_dir_all(&dir)?;
            let file = dir.join("tsan.supp");
            std::fs::write(&file, FUZZ_TSAN_SUPPRESSIONS)?;
            env.push((
                "TSAN_OPTIONS".to_string(),
                format!(
                    "halt_on_error=1:exitcode=66:second_deadlock_stack=1:suppressions={}",
                    file.display()
                ),
            ));
        }
    }
    Ok((
        Worker {
            exe: program,
            launch,
            env,
            timeout: Duration::from_secs(60),
            releases: a.releases,
        },
        label,
    ))
}

/// The release worker of patched's coverage build, and its label.
pub(super) fn coverage_worker(releases: Releases) -> Result<(Worker, String)> {
    worker(&Args {
        variant: Some(Variant::PATCHED),
        target: None,
        minutes: 0.0,
        programs: None,
        seed: 1,
        sanitizer: Some(Sanitizer::Coverage),
        release: true,
        releases,
        guided: false,
        corpus: None,
    })
}

/// Writes a shrunk finding as JSON, C++ and (if it has one) Python beside
/// each other; returns the C++ file.
pub(super) fn keep(dir: &std::path::Path, stem: &str, p: &Program, title: &str) -> Result<PathBuf> {
    std::fs::write(dir.join(format!("{stem}.json")), p.to_json())?;
    let cpp_file = dir.join(format!("{stem}.cpp"));
    std::fs::write(&cpp_file, cpp::print(p, title))?;
    if let Ok(py) = mlx_fuzz::python::print(p, title) {
        std::fs::write(dir.join(format!("{stem}.py")), py)?;
    }
    Ok(cpp_file)
}
