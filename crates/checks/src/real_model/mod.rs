//! `cargo xtask real-model`: the report's recipe on its own model,
//! mlx-audio's MossFormer2_SE, over many independent processes
//! (docs/findings/013).
//!
//! A cell is a library set (the fork's pristine or patched wheels of the
//! selected base, the official wheels of its release, or the Rust port over
//! mlx-rs linked to a variant) and the recipe's switches
//! (`tests/python/mossformer_cycles.py`, `mossformer2-cycles`). Each process runs a few
//! cycles and its record is appended to `docs/real-model/<base>/<cell>.jsonl`
//! as soon as it ends, so a run stopped at any point goes on where it was:
//! the next process takes the next seeds. Cells run side by side, one
//! process of each at a time, so that the cells of one run share the
//! machine's conditions. `--report` prints the table of what is recorded.

pub mod judge;

use mlx_harness::python_env::{mlx_audio_env, mlx_audio_env_with, python_root};
use mlx_harness::error::{anyhow, Context, Result};
use mlx_harness::paths::workspace_root;
use judge::{Cycle, Process, Tally};
use mlx_patched::pin::{Base, BASES};
use mlx_patched::{CommandVars, Env, Variant};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

const SCRIPT: &str = "tests/python/mossformer_cycles.py";

/// The fixed heap layout as a library to preload into Python
/// (`tests/support/fixed_layout_preload.cpp`, finding 013), compiled with
/// g++ into the target directory when its sources changed.
pub fn fixed_layout_library() -> Result<PathBuf> {
    let root = workspace_root();
    let sources = [
        root.join("tests/support/fixed_layout_preload.cpp"),
        root.join("crates/probes/cpp/fixed_layout.h"),
    ];
    let mut key = mlx_patched::Fingerprint::new("fixed layout 1");
    for s in &sources {
        key.file(s)?;
    }
    let key = key.finish();
    let dir = mlx_harness::paths::target_dir()?.join("fixed-layout");
    let lib = dir.join("libfixed_layout.so");
    let stamp = dir.join("built.sha256");
    if lib.is_file() && std::fs::read_to_string(&stamp).is_ok_and(|s| s.trim() == key) {
        return Ok(lib);
    }
    std::fs::create_dir_all(&dir)?;
    mlx_harness::process::run(
        Command::new("g++")
            .args(["-std=c++17", "-O2", "-shared", "-fPIC", "-o"])
            .arg(&lib)
            .arg(&sources[0]),
    )?;
    std::fs::write(&stamp, key)?;
    Ok(lib)
}

/// Where a cell's libraries come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Libs {
    /// The fork's wheels of a variant, on the selected base.
    Fork(Variant),
    /// The official wheels of the selected base's release.
    Official,
    /// The Rust port (`crates/mossformer2`) over mlx-rs, its drop-in
    /// mlx-sys linked to a variant of the selected base.
    Rust(Variant),
}

/// How a cell's processes are started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Launch {
    Plain,
    /// `taskset -c 0`: every thread on one core.
    OneCore,
    /// `setarch -R`: no address-space randomization.
    NoAslr,
    /// The fixed heap layout preloaded ([`fixed_layout_library`]); the
    /// script's `--fixed-layout` gives each cycle its own layout.
    FixedLayout,
}

/// One cell of the experiment.
#[derive(Clone, Copy, Debug)]
pub struct Cell {
    pub name: &'static str,
    pub libs: Libs,
    /// Switches of the script.
    pub args: &'static [&'static str],
    pub launch: Launch,
}

/// Every cell, control first. Cells are named for their libraries and the
/// switch they change.
pub const CELLS: &[Cell] = &[
    Cell {
        name: Variant::PRISTINE.name,
        libs: Libs::Fork(Variant::PRISTINE),
        args: &[],
        launch: Launch::Plain,
    },
    Cell {
        name: Variant::PATCHED.name,
        libs: Libs::Fork(Variant::PATCHED),
        args: &[],
        launch: Launch::Plain,
    },
    Cell {
        name: "official",
        libs: Libs::Official,
        args: &[],
        launch: Launch::Plain,
    },
    Cell {
        name: "pristine-slices",
        libs: Libs::Fork(Variant::PRISTINE),
        args: &["--slices"],
        launch: Launch::Plain,
    },
    Cell {
        name: "pristine-no-eval",
        libs: Libs::Fork(Variant::PRISTINE),
        args: &["--no-eval"],
        launch: Launch::Plain,
    },
    Cell {
        name: "pristine-gc-off",
        libs: Libs::Fork(Variant::PRISTINE),
        args: &["--gc-off"],
        launch: Launch::Plain,
    },
    Cell {
        name: "pristine-erase",
        libs: Libs::Fork(Variant::PRISTINE),
        args: &["--erase"],
        launch: Launch::Plain,
    },
    Cell {
        name: "pristine-one-core",
        libs: Libs::Fork(Variant::PRISTINE),
        args: &[],
        launch: Launch::OneCore,
    },
    Cell {
        name: "pristine-no-aslr",
        libs: Libs::Fork(Variant::PRISTINE),
        args: &[],
        launch: Launch::NoAslr,
    },
    Cell {
        name: "pristine-fixed-layout",
        libs: Libs::Fork(Variant::PRISTINE),
        args: &["--fixed-layout", "16"],
        launch: Launch::FixedLayout,
    },
    Cell {
        name: "patched-fixed-layout",
        libs: Libs::Fork(Variant::PATCHED),
        args: &["--fixed-layout", "16"],
        launch: Launch::FixedLayout,
    },
    // The same recipe through mlx-rs (`mossformer2-cycles`), control first.
    Cell {
        name: "rust-pristine",
        libs: Libs::Rust(Variant::PRISTINE),
        args: &[],
        launch: Launch::Plain,
    },
    Cell {
        name: "rust-patched",
        libs: Libs::Rust(Variant::PATCHED),
        args: &[],
        launch: Launch::Plain,
    },
    Cell {
        name: "rust-patched-without-0008",
        libs: Libs::Rust(Variant::PATCHED_WITHOUT_0008),
        args: &[],
        launch: Launch::Plain,
    },
    Cell {
        name: "rust-suggested",
        libs: Libs::Rust(Variant::SUGGESTED),
        args: &[],
        launch: Launch::Plain,
    },
    Cell {
        name: "rust-pristine-slices",
        libs: Libs::Rust(Variant::PRISTINE),
        args: &["--slices"],
        launch: Launch::Plain,
    },
    Cell {
        name: "rust-pristine-no-eval",
        libs: Libs::Rust(Variant::PRISTINE),
        args: &["--no-eval"],
        launch: Launch::Plain,
    },
];

pub fn cell(name: &str) -> Result<&'static Cell> {
    CELLS.iter().find(|c| c.name == name).ok_or_else(|| {
        let names: Vec<&str> = CELLS.iter().map(|c| c.name).collect();
        anyhow!("unknown cell `{name}`: expected one of {}", names.join(", "))
    })
}

/// The real model over many processes.
#[derive(clap::Args, Debug)]
pub struct RealModelArgs {
    /// Cells to run side by side (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "pristine,patched", value_parser = cell)]
    pub cells: Vec<&'static Cell>,
    /// Cycles each cell must have recorded when the run ends (those already
    /// recorded count).
    #[arg(long, default_value_t = 200)]
    pub cycles: u32,
    /// Cycles per process.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..))]
    pub per_process: u32,
    /// Print the table of every recorded cell and run nothing.
    #[arg(long)]
    pub report: bool,
    /// Keep the records here instead of `docs/real-model`.
    #[arg(long)]
    pub records: Option<PathBuf>,
}

/// Where the experiment's records are kept: `<root>/<base>/<cell>.jsonl`.
pub fn records_root() -> PathBuf {
    workspace_root().join("docs/real-model")
}

fn records_file(root: &Path, base: &Base, cell: &Cell) -> PathBuf {
    root.join(base.dir_name()).join(format!("{}.jsonl", cell.name))
}

/// A cell's recorded processes on `base` under `root` (none if it has no
/// file yet). A line that does not parse is an error naming the file and
/// the line.
pub fn recorded(root: &Path, base: &Base, cell: &Cell) -> Result<Vec<Process>> {
    let path = records_file(root, base, cell);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("{}", path.display())),
    };
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l).with_context(|| format!("{}:{}", path.display(), i + 1))
        })
        .collect()
}

/// What a cell's processes run: the Rust port's experiment binary, or the
/// interpreter of the cell's Python environment.
fn program_for(libs: Libs) -> Result<PathBuf> {
    match libs {
        Libs::Rust(v) => {
            let base = Env::process().base()?;
            if base.mlxc.is_none() {
                return Err(anyhow!(
                    "the Rust cells need mlx-rs, whose mlx-c compiles only against MLX {}; \
                     this run's base is {}",
                    BASES[0].version,
                    base.version
                ));
            }
            Ok(crate::mossformer2::build(v, crate::mossformer2::Profile::Release)?.join(RUST_BINARY))
        }
        _ => python_for(libs),
    }
}

const RUST_BINARY: &str = "mossformer2-cycles";

/// The interpreter of a cell's environment: its wheels, then mlx-audio and
/// what it imports, without dependencies.
pub fn python_for(libs: Libs) -> Result<PathBuf> {
    match libs {
        Libs::Rust(_) => Err(anyhow!("a Rust cell has no Python environment")),
        Libs::Fork(v) => mlx_audio_env(v),
        Libs::Official => {
            let base = Env::process().base()?;
            let files = crate::provenance::official_wheels(base)?
                .map_err(|why| anyhow!("the official {} wheels: {why}", base.version))?;
            mlx_audio_env_with(&python_root()?.join("official"), &files)
        }
    }
}

fn command(cell: &Cell, python: &Path, seed: u64, per_process: u32, kernels: &Path) -> Result<Command> {
    if let Libs::Rust(_) = cell.libs {
        let mut cmd = Command::new(python);
        cmd.args(["--cycles", &per_process.to_string()])
            .args(["--seed", &seed.to_string()])
            .args(cell.args)
            .var(mlx_patched::other_vars::TMPDIR, kernels)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        return Ok(cmd);
    }
    let mut cmd = match cell.launch {
        Launch::Plain | Launch::FixedLayout => Command::new(python),
        Launch::OneCore => {
            let mut c = Command::new("taskset");
            c.args(["-c", "0"]).arg(python);
            c
        }
        Launch::NoAslr => {
            let mut c = Command::new("setarch");
            c.arg("-R").arg(python);
            c
        }
    };
    if cell.launch == Launch::FixedLayout {
        cmd.env(mlx_patched::probes::PRELOAD, fixed_layout_library()?);
    }
    cmd.arg(workspace_root().join(SCRIPT))
        .args(["--cycles", &per_process.to_string()])
        .args(["--seed", &seed.to_string()])
        .args(cell.args)
        .var(mlx_patched::other_vars::TMPDIR, kernels)
        .var(
            mlx_patched::other_vars::PYTHONPATH,
            workspace_root().join("tests/python"),
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    Ok(cmd)
}

/// A process's output as its record.
pub fn parse_process(seed: u64, stdout: &str, exit: String, ok: bool) -> Process {
    let cycles = stdout
        .lines()
        .filter(|l| l.starts_with('{'))
        .filter_map(|l| serde_json::from_str::<Cycle>(l).ok())
        .collect();
    Process {
        seed,
        cycles,
        exit,
        ok,
    }
}

struct Running {
    cell: &'static Cell,
    seed: u64,
    child: Child,
}

pub fn run(a: RealModelArgs) -> Result<()> {
    let root = a.records.clone().unwrap_or_else(records_root);
    if a.report {
        return report(&root);
    }
    mlx_harness::deps::install()?;
    mlx_patched::system::cpu_compile_works()?;
    // mlx-audio's package `__init__` imports sounddevice, which loads PortAudio.
    mlx_harness::deps::install_debian(&["libportaudio2"])?;
    let base = Env::process().base()?;
    std::fs::create_dir_all(root.join(base.dir_name()))?;
    // Prepare every environment before the first process: builds print
    // progress of their own and would interleave with the run's.
    let mut pythons = Vec::new();
    for c in &a.cells {
        let python = program_for(c.libs)?;
        let kernels = python_root()?.join("real-model-kernels").join(c.name);
        std::fs::create_dir_all(&kernels)?;
        pythons.push((*c, python, kernels));
    }
    let started = Instant::now();
    let mut running: Vec<Running> = Vec::new();
    loop {
        // One process of each cell at a time, each with the next seeds.
        for (c, python, kernels) in &pythons {
            if running.iter().any(|r| r.cell.name == c.name) {
                continue;
            }
            let done = recorded(&root, base, c)?;
            let cycles: u32 = done.iter().map(|p| p.cycles.len() as u32).sum();
            if cycles >= a.cycles {
                continue;
            }
            let seed = done
                .iter()
                .map(|p| p.seed + a.per_process as u64)
                .max()
                .unwrap_or(0);
            let per = a.per_process.min(a.cycles - cycles);
            let child = command(c, python, seed, per, kernels)?
                .spawn()
                .with_context(|| format!("cannot start {}", python.display()))?;
            running.push(Running {
                cell: c,
                seed,
                child,
            });
        }
        if running.is_empty() {
            break;
        }
        // Wait for the first to end.
        let finished = loop {
            if let Some(i) = running
                .iter_mut()
                .position(|r| matches!(r.child.try_wait(), Ok(Some(_))))
            {
                break running.swap_remove(i);
            }
            std::thread::sleep(std::time::Duration::from_millis(200));
        };
        let out = finished.child.wait_with_output()?;
        let p = parse_process(
            finished.seed,
            &String::from_utf8_lossy(&out.stdout),
            out.status.to_string(),
            out.status.success(),
        );
        if !p.ok {
            eprintln!(
                "real-model: {} (seed {}) failed ({}), its {} cycles kept:\n{}",
                finished.cell.name,
                finished.seed,
                out.status,
                p.cycles.len(),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        append(&root, base, finished.cell, &p)?;
        let t = Tally::of(&recorded(&root, base, finished.cell)?);
        eprintln!(
            "real-model: {:18} {:>5}/{} cycles, {} leaked{} ({} elapsed)",
            finished.cell.name,
            t.cycles,
            a.cycles,
            t.leaked(),
            if t.leaks.is_empty() {
                String::new()
            } else {
                format!(
                    ": {} MiB",
                    t.leaks
                        .iter()
                        .map(|b| format!("{:.1}", *b as f64 / 1048576.0))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            },
            mlx_patched::progress::elapsed(started.elapsed())
        );
        if !p.ok && p.cycles.is_empty() {
            return Err(anyhow!(
                "{} cannot run a cycle on {}; stopping",
                SCRIPT,
                finished.cell.name
            ));
        }
    }
    report(&root)
}

fn append(root: &Path, base: &Base, cell: &Cell, p: &Process) -> Result<()> {
    let path = records_file(root, base, cell);
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .with_context(|| format!("{}", path.display()))?;
    writeln!(f, "{}", serde_json::to_string(p)?)?;
    Ok(())
}

/// The tables of every cell recorded on any base, each row named by its
/// base: the Python cells against the control on the first base (mlx-rs's),
/// the Rust cells against the Rust control.
pub fn report(root: &Path) -> Result<()> {
    println!("MossFormer2_SE (records in {}):", root.display());
    for rust in [false, true] {
        let mut rows = Vec::new();
        for base in BASES {
            for c in CELLS.iter().filter(|c| matches!(c.libs, Libs::Rust(_)) == rust) {
                let done = recorded(root, base, c)?;
                if !done.is_empty() {
                    rows.push((format!("{} {}", base.version, c.name), Tally::of(&done)));
                }
            }
        }
        if rows.is_empty() {
            continue;
        }
        let first = CELLS.iter().find(|c| matches!(c.libs, Libs::Rust(_)) == rust).expect("a control");
        let control = format!("{} {}", BASES[0].version, first.name);
        println!("\n{}:\n", if rust { "Rust, over mlx-rs (crates/mossformer2)" } else { "Python, mlx-audio" });
        print!("{}", judge::render(&rows, &control));
    }
    Ok(())
}
