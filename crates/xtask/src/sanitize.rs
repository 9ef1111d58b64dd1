//! `cargo xtask sanitize [address|thread] [--record]`: every variant built
//! with sanitizers (and the fork-only live-descriptor census), the
//! project's test load run against each, every report collected by tool
//! and kind, and the expectations asserted:
//!
//! * fixed variants: no report, except one that the control shows too
//!   (then it is upstream's, and listed with its stack); under TSan, no
//!   race with an access in a file the fix changes; clean exits;
//! * the control: LeakSanitizer reports the orphaned group, allocated
//!   through `make_arrays`, in the report's scenario; the census sees it;
//! * wrong fixes: AddressSanitizer reports the held-output probe's crash;
//! * the census: fixed variants back at their baseline after every cycle
//!   of every scenario.
//!
//! The report goes to `<target>/sanitize/<sanitizer>/report.md`; with
//! `--record` also to `docs/sanitize/<sanitizer>.md`, stamped with the
//! fingerprint of the tree, the whole series, the probes and this runner.
//! The sanitizer builds cost more than CI can spend (see the README), so
//! `cargo xtask rebase --apply` runs this before it moves the pin, and
//! `cargo xtask test` checks that the recorded report is current.

use crate::{cargo, target_dir, workspace_root, Result};
use mlx_patched::{Artifacts, Env, Expect, Sanitizer};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

const USAGE: &str = "usage: cargo xtask sanitize [address|thread] [--record]";

/// The probes run under sanitizers (the benchmark's loops are left out).
const PROBES: &[&str] = &["leak_scenario", "held_output", "multi_output_ops", "transformer"];

/// One program run against one variant.
struct Scenario {
    name: String,
    program: PathBuf,
    args: Vec<String>,
}

/// What a sanitizer said once: its tool and kind, a one-line summary, the
/// first stack of the report (the access, or the allocation of a leak) and,
/// for a race or a use after free, the second (the other access, or the
/// free), as function names, and where in MLX's sources each was made.
#[derive(Clone, Debug)]
pub struct Report {
    pub tool: &'static str,
    pub kind: String,
    pub summary: String,
    pub frames: Vec<String>,
    pub other: Vec<String>,
    /// Per stack, the source file (without the line) of its first frame in
    /// MLX's own sources: the MLX code that made the access or allocation,
    /// not a standard header it inlined, nor its callers.
    pub sites: Vec<String>,
    pub bytes: u64,
}

impl Report {
    /// Equal for the same finding on another variant or in another run:
    /// the tool, the kind and the top frames that name a function; for a
    /// race, the MLX file of each access, in either order.
    fn signature(&self) -> String {
        let named = |s: &[String], n: usize| -> Vec<String> { s.iter().filter(|f| !f.starts_with('(') && !is_runtime_frame(f)).take(n).cloned().collect() };
        if self.tool == "TSan" {
            // Which of two racing functions TSan pairs first varies from
            // run to run (a counter written under a lock in two places and
            // read without it); the source files of the two accesses don't.
            let mut sites = self.sites.clone();
            sites.sort();
            return format!("TSan {}: {}", self.kind, sites.join(" | "));
        }
        format!("{} {}: {}", self.tool, self.kind, named(&self.frames, 4).join(" < "))
    }

    /// Whether the MLX code of one of the report's stacks (its `sites`) is
    /// in one of `files` (paths in MLX's tree, e.g. `mlx/array.cpp`).
    fn touches(&self, files: &[&str]) -> bool {
        self.sites.iter().any(|site| files.iter().any(|f| site == f || site.ends_with(&format!("/{f}"))))
    }
}

fn is_runtime_frame(f: &str) -> bool {
    ["operator new", "operator delete", "malloc", "calloc", "realloc", "free", "posix_memalign", "__interceptor_", "__asan", "__ubsan", "__sanitizer", "__tsan"]
        .iter()
        .any(|p| f.starts_with(p))
}

/// One frame line, as its function and its source location. ASan writes
/// `#3 0x7f.. in fn(args) /path/file.cpp:12` (or `(/lib/x.so+0x1234)` for
/// the location), TSan `#3 fn(args) const /path/file.cpp:12 (x.so+0x1234)`;
/// a frame without a symbol is named by its module.
fn frame(line: &str) -> Option<(String, Option<String>)> {
    let t = line.trim_start();
    if !t.starts_with('#') {
        return None;
    }
    let mut rest = t.split_once(char::is_whitespace).map(|(_, r)| r.trim()).unwrap_or("");
    if rest.starts_with("0x") {
        match rest.find(" in ") {
            Some(at) => rest = &rest[at + 4..],
            // `#3 0x7f.. (/lib/x.so+0x1234)`: no symbol.
            None => return Some((rest.split_whitespace().nth(1).unwrap_or("(unknown)").to_string(), None)),
        }
    }
    // The module, then the source location, off the end.
    if let Some((f, module)) = rest.rsplit_once(' ') {
        if module.starts_with('(') && module.ends_with(')') && module.contains("+0x") {
            rest = f.trim_end();
        }
    }
    let mut location = None;
    if let Some((f, loc)) = rest.rsplit_once(' ') {
        if loc.starts_with('/') || loc.starts_with("../") || loc == "<null>" {
            location = (loc != "<null>").then(|| loc.to_string());
            rest = f.trim_end();
        }
    }
    let function = if rest == "<null>" || rest.is_empty() { "(unknown)" } else { rest };
    Some((function.to_string(), location))
}

/// Reads the reports out of a sanitizer log (`log_path` files hold one
/// process's reports each).
pub fn parse_reports(text: &str) -> Vec<Report> {
    let mut reports = Vec::new();
    let lines: Vec<&str> = text.lines().collect();
    // The frames of the stack starting at line i.
    let stack_at = |i: usize| -> Vec<(String, Option<String>)> { lines[i..].iter().take_while(|l| !l.trim().is_empty()).filter_map(|l| frame(l)).collect() };
    // The next stack from line i, and the line after it; a stack belongs to
    // this report only if no other report starts before it.
    let next_stack = |i: usize| -> Option<(Vec<(String, Option<String>)>, usize)> {
        let j = (i..lines.len()).take_while(|&j| j == i || !starts_report(lines[j])).find(|&j| lines[j].trim_start().starts_with("#0"))?;
        let stack = stack_at(j);
        Some((stack.clone(), j + stack.len()))
    };
    let report = |tool: &'static str, kind: String, summary: String, bytes: u64, i: usize, stacks: usize| -> Report {
        let mut found = Vec::new();
        let mut at = i;
        while found.len() < stacks {
            let Some((stack, next)) = next_stack(at) else { break };
            found.push(stack);
            at = next;
        }
        let functions = |k: usize| found.get(k).map(|s| s.iter().map(|(f, _)| f.clone()).collect()).unwrap_or_default();
        // The file as a path in MLX's tree (`mlx/array.cpp`), whether the
        // compiler saw it relative to the build (as with ccache) or absolute.
        let file = |l: &str| {
            let path = l.split(':').next().unwrap_or(l);
            ["src/mlx/", "include/mlx/"]
                .iter()
                .find_map(|m| path.rfind(m).map(|at| path[at + m.len() - "mlx/".len()..].to_string()))
                .unwrap_or_else(|| path.trim_start_matches("../").to_string())
        };
        // MLX compiled from its tree (`../src/mlx/..`) or inlined from its
        // installed headers (`<prefix>/include/mlx/..`).
        let in_mlx = |l: &&str| (l.contains("src/mlx/") || l.contains("include/mlx/")) && !l.starts_with("/usr/");
        let sites = found
            .iter()
            .map(|s| {
                let locs: Vec<&str> = s.iter().filter_map(|(_, l)| l.as_deref()).collect();
                locs.iter().find(|l| in_mlx(l)).or(locs.first()).map(|l| file(l)).unwrap_or_else(|| "(unknown)".into())
            })
            .collect();
        Report { tool, kind, summary, frames: functions(0), other: functions(1), sites, bytes }
    };
    for (i, line) in lines.iter().enumerate() {
        if let Some(rest) = line.split_once("ERROR: AddressSanitizer: ").map(|(_, r)| r) {
            let kind = rest.split_whitespace().next().unwrap_or("error").to_string();
            reports.push(report("ASan", kind, rest.trim().to_string(), 0, i + 1, 2));
        } else if let Some(rest) = line.trim_start().strip_prefix("Direct leak of ").or_else(|| line.trim_start().strip_prefix("Indirect leak of ")) {
            let kind = if line.trim_start().starts_with("Direct") { "direct leak" } else { "indirect leak" };
            let bytes = rest.split_whitespace().next().and_then(|b| b.parse().ok()).unwrap_or(0);
            reports.push(report("LSan", kind.into(), line.trim().to_string(), bytes, i + 1, 1));
        } else if let Some((_, msg)) = line.split_once(": runtime error: ") {
            // `file:line:col: runtime error: <what>`; with print_stacktrace
            // the stack follows. The kind without its values: `signed
            // integer overflow`, `load of misaligned address`, ...
            let head = msg.split(':').next().unwrap_or(msg);
            let kind = head.split_whitespace().take_while(|w| !w.starts_with("0x") && !w.starts_with('\'') && !w.starts_with(|c: char| c.is_ascii_digit())).collect::<Vec<_>>().join(" ");
            let at = line.split(": runtime error").next().unwrap_or("").rsplit('/').next().unwrap_or("").to_string();
            let mut r = if lines.get(i + 1).is_some_and(|l| l.trim_start().starts_with("#0")) { report("UBSan", kind.clone(), String::new(), 0, i + 1, 1) } else { report("UBSan", kind.clone(), String::new(), 0, lines.len(), 0) };
            r.summary = format!("{at}: {}", msg.trim());
            reports.push(r);
        } else if let Some(rest) = line.split_once("WARNING: ThreadSanitizer: ").map(|(_, r)| r) {
            let kind = rest.split(" (").next().unwrap_or(rest).trim().to_string();
            reports.push(report("TSan", kind, rest.trim().to_string(), 0, i + 1, 2));
        }
    }
    reports
}

/// Whether a log line starts a new report (a stack after it is not the
/// previous report's).
fn starts_report(line: &str) -> bool {
    let t = line.trim_start();
    line.contains("ERROR: AddressSanitizer: ") || t.starts_with("Direct leak of ") || t.starts_with("Indirect leak of ") || line.contains(": runtime error: ") || line.contains("WARNING: ThreadSanitizer: ")
}

/// One scenario's run on one variant.
struct Outcome {
    scenario: String,
    status: String,
    success: bool,
    reports: Vec<Report>,
    /// `census <cycle> descriptors_retained <n>` lines, in order.
    census: Vec<i64>,
}

pub fn run(args: &[String]) -> Result<()> {
    let mut sanitizer = Sanitizer::Address;
    let mut record = false;
    for a in args {
        match a.as_str() {
            "--record" => record = true,
            s if !s.starts_with('-') => sanitizer = Sanitizer::parse(s).map_err(|e| e.to_string())?,
            _ => return Err(USAGE.into()),
        }
    }
    let started = std::time::Instant::now();
    let mut opts = crate::options()?;
    opts.sanitizer = Some(sanitizer);
    // MLX's own suite runs under AddressSanitizer; ThreadSanitizer runs the
    // threaded scenarios only.
    opts.tests = sanitizer == Sanitizer::Address;
    let variants = crate::variants_to_build();
    let built = mlx_patched::build_all(&variants, &opts).map_err(|e| e.to_string())?;
    let build_time = started.elapsed();
    eprintln!("sanitizer variants built in {}", mlx_patched::progress::elapsed(build_time));

    let out = target_dir()?.join("sanitize").join(sanitizer.name());
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out).map_err(|e| e.to_string())?;
    let env = Env::process();
    let runtime = runtime_library(sanitizer)?;
    let suppressions = write_suppressions(sanitizer, &out)?;

    // Rust test binaries (the Rust API's tests), built once per Rust-API
    // variant against the sanitizer prefixes.
    let rust_tests = if sanitizer == Sanitizer::Address { rust_test_binaries(&opts.root, sanitizer)? } else { BTreeMap::new() };

    let mut results: Vec<(&Artifacts, Expect, Vec<Outcome>)> = Vec::new();
    for (variant, mlx) in variants.iter().zip(&built) {
        let dir = out.join(&mlx.name);
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let mut programs = BTreeMap::new();
        for probe in PROBES {
            let src = workspace_root().join("crates/probes/cpp").join(format!("{probe}.cpp"));
            let exe = dir.join(probe);
            mlx_patched::compile_program(mlx, &src, &exe, &env).map_err(|e| e.to_string())?;
            programs.insert(*probe, exe);
        }
        let mut scenarios = scenarios(sanitizer, mlx, &programs)?;
        for (name, exe) in rust_tests.get(mlx.name.as_str()).into_iter().flatten() {
            // The runtime must come first, and only in this process: MLX
            // runs the C++ compiler to see whether it can JIT, and with
            // LD_PRELOAD the compiler would inherit the runtime, report its
            // own leaks and fail, and MLX would silently stop compiling.
            // The dynamic loader's `--preload` leaves the environment alone.
            let args = ["--preload".to_string(), runtime.display().to_string(), exe.display().to_string(), "--test-threads=1".into()];
            scenarios.push(Scenario { name: format!("rust {name}"), program: interpreter(exe)?, args: args.into() });
        }
        let mut outcomes = Vec::new();
        for s in &scenarios {
            eprintln!("sanitize {}: {} on {}", sanitizer.name(), s.name, mlx.name);
            outcomes.push(run_scenario(s, sanitizer, &dir, suppressions.as_deref())?);
        }
        results.push((mlx, variant.expect, outcomes));
    }

    let touched = fix_files(&opts)?;
    let (text, failures) = report(sanitizer, &results, started.elapsed(), build_time, &touched);
    print!("{text}");
    let path = out.join("report.md");
    std::fs::write(&path, &text).map_err(|e| e.to_string())?;
    println!("\nreport: {}", path.display());
    if !failures.is_empty() {
        return Err(format!("the sanitizer run does not show what it must:\n- {}", failures.join("\n- ")));
    }
    if record {
        let recorded = recorded_path(sanitizer);
        std::fs::create_dir_all(recorded.parent().unwrap()).map_err(|e| e.to_string())?;
        let stamp = format!("<!-- measured-for {} -->\n", fingerprint(&opts)?);
        std::fs::write(&recorded, stamp + &text).map_err(|e| e.to_string())?;
        println!("recorded: {}", recorded.display());
    }
    Ok(())
}

/// Where `--record` keeps the last report of a sanitizer.
pub fn recorded_path(sanitizer: Sanitizer) -> PathBuf {
    workspace_root().join("docs/sanitize").join(format!("{}.md", sanitizer.name()))
}

/// What a recorded report must have been measured on: upstream's tree and
/// the whole series, the fork-only patches and the probes included.
pub fn fingerprint(opts: &mlx_patched::Options) -> Result<String> {
    let upstream = mlx_patched::upstream(opts).map_err(|e| e.to_string())?;
    let mut inputs = mlx_patched::patch::series(&opts.patches_dir).map_err(|e| e.to_string())?;
    let probes = workspace_root().join("crates/probes/cpp");
    let mut sources: Vec<PathBuf> = std::fs::read_dir(&probes).map_err(|e| e.to_string())?.filter_map(|e| e.ok().map(|e| e.path())).collect();
    sources.sort();
    inputs.extend(sources);
    inputs.push(workspace_root().join("crates/xtask/src/sanitize.rs"));
    mlx_patched::patch::fingerprint(&upstream.tree_id, &inputs).map_err(|e| e.to_string())
}

/// CI's check of a recorded report (`cargo xtask test`): it exists, it was
/// measured on this tree, series, probes and runner, and its expectations
/// held. A sanitizer run takes too long for CI; this keeps its evidence
/// from going stale silently.
pub fn check_recorded(sanitizer: Sanitizer, opts: &mlx_patched::Options) -> Result<String> {
    let path = recorded_path(sanitizer);
    let rerun = format!("rerun `cargo xtask sanitize {} --record` (about 40 minutes on 2 cores)", sanitizer.name());
    let text = std::fs::read_to_string(&path).map_err(|_| format!("there is no recorded {} report ({}): {rerun}", sanitizer.name(), path.display()))?;
    verify_recorded(&text, &fingerprint(opts)?).map_err(|e| format!("{}: {e}; {rerun}", path.display()))
}

/// The stamp of a recorded report against the fingerprint it must have,
/// and its expectations; returns its first summary line.
fn verify_recorded(text: &str, expected: &str) -> Result<String> {
    let stamp = text.lines().next().and_then(|l| l.strip_prefix("<!-- measured-for ")).and_then(|l| l.strip_suffix(" -->"));
    match stamp {
        None => return Err("it has no `measured-for` stamp".into()),
        Some(s) if s != expected => return Err(format!("it was measured for {s}, but the tree, series, probes and runner now give {expected}")),
        Some(_) => {}
    }
    let expectations: Vec<&str> = text.lines().skip_while(|l| !l.starts_with("## Expectations")).skip(1).take_while(|l| !l.starts_with("## ")).filter(|l| l.starts_with("- ")).collect();
    if expectations.is_empty() {
        return Err("it lists no expectations".into());
    }
    if let Some(failed) = expectations.iter().find(|l| !l.starts_with("- ok:")) {
        return Err(format!("an expectation did not hold: {failed}"));
    }
    Ok(format!("{} expectations held", expectations.len()))
}

/// MLX's library files the fix changes (its tests left out).
fn fix_files(opts: &mlx_patched::Options) -> Result<Vec<String>> {
    let mut files = BTreeSet::new();
    for p in mlx_patched::patch::fix_series(&opts.patches_dir).map_err(|e| e.to_string())? {
        let text = std::fs::read_to_string(&p).map_err(|e| format!("cannot read {}: {e}", p.display()))?;
        for line in text.lines() {
            if let Some(path) = line.strip_prefix("diff --git a/").and_then(|r| r.split_whitespace().next()) {
                if path.starts_with("mlx/") {
                    files.insert(path.to_string());
                }
            }
        }
    }
    Ok(files.into_iter().collect())
}

/// The scenarios every variant runs: MLX's suite, then each probe.
fn scenarios(sanitizer: Sanitizer, mlx: &Artifacts, programs: &BTreeMap<&str, PathBuf>) -> Result<Vec<Scenario>> {
    let s = |name: &str, probe: &str, args: &[&str]| Scenario {
        name: name.to_string(),
        program: programs[probe].clone(),
        args: args.iter().map(|a| a.to_string()).collect(),
    };
    if sanitizer == Sanitizer::Thread {
        // The threaded scenario, and the compile cache filled and emptied
        // from two threads at once, with small weights.
        return Ok(vec![
            s("threads", "leak_scenario", &["--threads", "2", "--cycles", "5", "--blocks", "4", "--dim", "128"]),
            s("threads, two shapes", "leak_scenario", &["--threads", "2", "--cycles", "5", "--blocks", "4", "--dim", "128", "--shapes", "2"]),
        ]);
    }
    let mut list = vec![Scenario {
        name: "MLX's C++ suite".into(),
        program: mlx.mlx_tests.clone(),
        args: vec![mlx_patched::mlx_tests_filter()],
    }];
    list.extend([
        s("report's scenario", "leak_scenario", &["--cycles", "3"]),
        s("two slices", "leak_scenario", &["--cycles", "3", "--slices"]),
        s("not evaluated outside", "leak_scenario", &["--cycles", "3", "--no-eval-outside"]),
        s("eager", "leak_scenario", &["--cycles", "3", "--no-compile"]),
        s("two shapes", "leak_scenario", &["--cycles", "3", "--shapes", "2"]),
        s("threads", "leak_scenario", &["--threads", "2", "--cycles", "5", "--blocks", "4", "--dim", "256"]),
        s("held output", "held_output", &[]),
        s("transformer", "transformer", &["--cycles", "3", "--layers", "2", "--d-model", "128", "--heads", "4", "--ffn", "256", "--seq", "16"]),
    ]);
    let listed = Command::new(&programs["multi_output_ops"]).arg("--list").output().map_err(|e| e.to_string())?;
    let ops = String::from_utf8_lossy(&listed.stdout).into_owned();
    if !listed.status.success() || ops.trim().is_empty() {
        return Err(format!("multi_output_ops --list failed on {}: {}", mlx.name, String::from_utf8_lossy(&listed.stderr)));
    }
    for op in ops.lines() {
        list.push(s(&format!("multi-output op {op}"), "multi_output_ops", &["--op", op, "--cycles", "3"]));
    }
    Ok(list)
}

/// The sanitizer's runtime library, for programs that do not link it (Rust
/// binaries): preloaded, it comes first, as AddressSanitizer requires.
fn runtime_library(sanitizer: Sanitizer) -> Result<PathBuf> {
    let name = match sanitizer {
        Sanitizer::Address => "libasan.so",
        Sanitizer::Thread => "libtsan.so",
    };
    let cxx = Env::process().cxx_or_default();
    let out = Command::new(&cxx).arg(format!("-print-file-name={name}")).output().map_err(|e| format!("cannot run {}: {e}", cxx.to_string_lossy()))?;
    let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    let path = path.canonicalize().map_err(|_| format!("the C++ compiler has no {name} ({}): install its sanitizer runtime", path.display()))?;
    Ok(path)
}

/// The dynamic loader an ELF executable names (its `PT_INTERP`).
fn interpreter(exe: &Path) -> Result<PathBuf> {
    let bytes = std::fs::read(exe).map_err(|e| format!("cannot read {}: {e}", exe.display()))?;
    let bad = || format!("{} is not a 64-bit little-endian ELF executable with an interpreter", exe.display());
    let u16_at = |o: usize| bytes.get(o..o + 2).map(|b| u16::from_le_bytes([b[0], b[1]]) as usize);
    let u64_at = |o: usize| bytes.get(o..o + 8).map(|b| u64::from_le_bytes(b.try_into().unwrap()) as usize);
    if !bytes.starts_with(b"\x7fELF\x02\x01") {
        return Err(bad());
    }
    let (phoff, phentsize, phnum) = (u64_at(0x20).ok_or_else(bad)?, u16_at(0x36).ok_or_else(bad)?, u16_at(0x38).ok_or_else(bad)?);
    for i in 0..phnum {
        let ph = phoff + i * phentsize;
        const PT_INTERP: u32 = 3;
        if bytes.get(ph..ph + 4).map(|b| u32::from_le_bytes(b.try_into().unwrap())) == Some(PT_INTERP) {
            let (offset, size) = (u64_at(ph + 8).ok_or_else(bad)?, u64_at(ph + 32).ok_or_else(bad)?);
            let name = bytes.get(offset..offset + size).ok_or_else(bad)?;
            let name = name.split(|&b| b == 0).next().unwrap_or_default();
            return Ok(PathBuf::from(String::from_utf8_lossy(name).into_owned()));
        }
    }
    Err(bad())
}

/// ThreadSanitizer's suppressions, each with its reason; none for the
/// address sanitizer.
fn write_suppressions(sanitizer: Sanitizer, out: &Path) -> Result<Option<PathBuf>> {
    if sanitizer != Sanitizer::Thread {
        return Ok(None);
    }
    let text = "\
# OpenBLAS (Debian's, not instrumented) runs its own thread pool; TSan
# cannot see its synchronisation, so its internals look racy.
called_from_lib:libopenblas.so.0
called_from_lib:libblas.so.3
called_from_lib:liblapack.so.3
";
    let path = out.join("tsan.supp");
    std::fs::write(&path, text).map_err(|e| e.to_string())?;
    Ok(Some(path))
}

fn run_scenario(s: &Scenario, sanitizer: Sanitizer, dir: &Path, suppressions: Option<&Path>) -> Result<Outcome> {
    let slug: String = s.name.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect();
    let logs = dir.join(format!("{slug}.log"));
    let mut cmd = Command::new(&s.program);
    cmd.args(&s.args);
    let log = logs.display();
    match sanitizer {
        Sanitizer::Address => {
            // Memory errors stop the program (a report is a failure);
            // leaks are reported at exit.
            cmd.env("ASAN_OPTIONS", format!("detect_leaks=1:log_path={log}.asan:symbolize=1:detect_odr_violation=0"));
            cmd.env("UBSAN_OPTIONS", format!("print_stacktrace=1:log_path={log}.ubsan"));
        }
        Sanitizer::Thread => {
            let supp = suppressions.map(|p| format!(":suppressions={}", p.display())).unwrap_or_default();
            // exitcode=0: a race is counted from the log, and the exit
            // status stays the program's own.
            cmd.env("TSAN_OPTIONS", format!("log_path={log}.tsan:second_deadlock_stack=1:exitcode=0{supp}"));
        }
    }
    let output = cmd.output().map_err(|e| format!("cannot run {}: {e}", s.program.display()))?;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    std::fs::write(dir.join(format!("{slug}.stdout")), &stdout).map_err(|e| e.to_string())?;
    std::fs::write(dir.join(format!("{slug}.stderr")), &output.stderr).map_err(|e| e.to_string())?;
    let mut reports = Vec::new();
    let prefix = format!("{slug}.log.");
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| e.to_string())?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with(&prefix)))
        .collect();
    files.sort();
    for f in files {
        reports.extend(parse_reports(&std::fs::read_to_string(&f).unwrap_or_default()));
    }
    let census = stdout
        .lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (w.len() == 4 && w[0] == "census" && w[2] == "descriptors_retained").then(|| w[3].parse().ok()).flatten()
        })
        .collect();
    Ok(Outcome { scenario: s.name.clone(), status: exit_status(&output.status), success: output.status.success(), reports, census })
}

fn exit_status(status: &std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exit {c}"),
        (None, Some(s)) => format!("signal {s}"),
        _ => "unknown".into(),
    }
}

/// Builds the Rust API's test binaries against each sanitizer prefix of a
/// variant the Rust API can link (patched, and pristine with the feature),
/// in their own Cargo target directory; returns them by variant.
fn rust_test_binaries(root: &Path, sanitizer: Sanitizer) -> Result<BTreeMap<&'static str, Vec<(String, PathBuf)>>> {
    let target = target_dir()?.join("sanitize").join("cargo");
    let mut all = BTreeMap::new();
    for (variant, features) in [("patched", None), ("pristine", Some("pristine"))] {
        let mut cmd = cargo();
        cmd.args(["test", "--no-run", "--message-format=json-render-diagnostics", "-p", "mlx-bridge", "-p", "mlx-fork", "--test", "api", "--test", "rust_api_leak", "--test", "semantics"]);
        if let Some(f) = features {
            cmd.args(["--features", &format!("mlx-fork/{f},mlx-bridge/{f}")]);
        }
        cmd.env("CARGO_TARGET_DIR", &target).env("MLX_PATCHED_BUILD_DIR", root).env("MLX_PATCHED_SANITIZER", sanitizer.name());
        eprintln!("sanitize: building the Rust API's tests against {variant}-{}", sanitizer.suffix());
        let out = cmd.stderr(std::process::Stdio::inherit()).output().map_err(|e| format!("cannot run cargo: {e}"))?;
        if !out.status.success() {
            return Err(format!("building the Rust API's tests against {variant}-{} failed", sanitizer.suffix()));
        }
        let mut binaries = Vec::new();
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let Ok(msg) = serde_json::from_str::<serde_json::Value>(line) else { continue };
            if let (Some(exe), Some(name)) = (msg["executable"].as_str(), msg["target"]["name"].as_str()) {
                if msg["profile"]["test"].as_bool() == Some(true) {
                    binaries.push((name.to_string(), PathBuf::from(exe)));
                }
            }
        }
        all.insert(variant, binaries);
    }
    Ok(all)
}

/// The report: per variant, the reports by tool and kind; per scenario,
/// what each variant showed; each distinct finding with its stack; the
/// expectations checked (the failures are returned).
fn report(sanitizer: Sanitizer, results: &[(&Artifacts, Expect, Vec<Outcome>)], total: std::time::Duration, build: std::time::Duration, touched: &[String]) -> (String, Vec<String>) {
    let mut t = String::new();
    let mut failures = Vec::new();
    let names: Vec<&str> = results.iter().map(|(a, _, _)| a.name.as_str()).collect();
    writeln!(t, "# Sanitizer run: {}\n", match sanitizer {
        Sanitizer::Address => "AddressSanitizer + UndefinedBehaviorSanitizer + LeakSanitizer",
        Sanitizer::Thread => "ThreadSanitizer",
    })
    .unwrap();
    writeln!(t, "Variants (GCC, -O1, frame pointers, -g1, census on) built or found built in {}; everything in {}.\n", mlx_patched::progress::elapsed(build), mlx_patched::progress::elapsed(total)).unwrap();

    // Reports by tool and kind, per variant.
    let mut kinds: BTreeMap<String, BTreeMap<&str, usize>> = BTreeMap::new();
    for (a, _, outcomes) in results {
        for o in outcomes {
            for r in &o.reports {
                *kinds.entry(format!("{} {}", r.tool, r.kind)).or_default().entry(a.name.as_str()).or_default() += 1;
            }
        }
    }
    writeln!(t, "## Reports by kind\n\n| report | {} |\n|---|{}", names.join(" | "), "---|".repeat(names.len())).unwrap();
    if kinds.is_empty() {
        writeln!(t, "| (none) |{}", " 0 |".repeat(names.len())).unwrap();
    }
    for (kind, per) in &kinds {
        let cells: Vec<String> = names.iter().map(|n| per.get(n).copied().unwrap_or(0).to_string()).collect();
        writeln!(t, "| {kind} | {} |", cells.join(" | ")).unwrap();
    }
    let totals: Vec<String> = results.iter().map(|(_, _, o)| o.iter().map(|o| o.reports.len()).sum::<usize>().to_string()).collect();
    writeln!(t, "| **all** | {} |", totals.join(" | ")).unwrap();

    // Per scenario.
    writeln!(t, "\n## Per scenario\n\nEach cell: exit status; reports (by tool); live descriptors retained after each cycle (census).\n").unwrap();
    writeln!(t, "| scenario | {} |\n|---|{}", names.join(" | "), "---|".repeat(names.len())).unwrap();
    let scenario_names: Vec<&str> = results.first().map(|(_, _, o)| o.iter().map(|o| o.scenario.as_str()).collect()).unwrap_or_default();
    let all_scenarios: BTreeSet<&str> = results.iter().flat_map(|(_, _, o)| o.iter().map(|o| o.scenario.as_str())).collect();
    let ordered: Vec<&str> = scenario_names.iter().copied().chain(all_scenarios.iter().copied().filter(|s| !scenario_names.contains(s))).collect();
    for s in &ordered {
        let cells: Vec<String> = results
            .iter()
            .map(|(_, _, outcomes)| match outcomes.iter().find(|o| o.scenario == *s) {
                None => "not run".into(),
                Some(o) => {
                    let mut by: BTreeMap<&str, usize> = BTreeMap::new();
                    for r in &o.reports {
                        *by.entry(r.tool).or_default() += 1;
                    }
                    let reports = if by.is_empty() { "no report".to_string() } else { by.iter().map(|(k, v)| format!("{k} {v}")).collect::<Vec<_>>().join(", ") };
                    let census = if o.census.is_empty() { String::new() } else { format!("; census {:?}", o.census) };
                    format!("{}; {reports}{census}", o.status)
                }
            })
            .collect();
        writeln!(t, "| {s} | {} |", cells.join(" | ")).unwrap();
    }

    // The control's findings, by signature: what an upstream report on a
    // fixed variant must match.
    let control: Vec<&Outcome> = results.iter().filter(|(_, e, _)| *e == Expect::Leaks).flat_map(|(_, _, o)| o.iter()).collect();
    let control_signatures: BTreeSet<String> = control.iter().flat_map(|o| o.reports.iter().map(Report::signature)).collect();

    writeln!(t, "\n## Expectations\n").unwrap();
    let mut check = |ok: bool, what: String, t: &mut String| {
        writeln!(t, "- {} {what}", if ok { "ok:" } else { "FAILED:" }).unwrap();
        if !ok {
            failures.push(what);
        }
    };
    for (a, expect, outcomes) in results {
        let name = &a.name;
        match expect {
            Expect::Fixed => {
                let own: Vec<(&str, &Report)> = outcomes.iter().flat_map(|o| o.reports.iter().map(move |r| (o.scenario.as_str(), r))).collect();
                let unexplained: Vec<String> = own.iter().filter(|(_, r)| !control_signatures.contains(&r.signature())).map(|(s, r)| format!("{s}: {}", r.signature())).collect();
                check(
                    unexplained.is_empty(),
                    format!("{name}: no report the control does not show too ({} reports in all, {} not on the control{})", own.len(), unexplained.len(), if unexplained.is_empty() { String::new() } else { format!(": {}", unexplained.iter().take(5).cloned().collect::<Vec<_>>().join("; ")) }),
                    &mut t,
                );
                {
                    let off: Vec<String> = outcomes.iter().filter(|o| o.census.iter().any(|&n| n != 0)).map(|o| format!("{} {:?}", o.scenario, o.census)).collect();
                    let counted = outcomes.iter().filter(|o| !o.census.is_empty()).count();
                    check(counted > 0 && off.is_empty(), format!("{name}: the census is back at its baseline after every cycle of every scenario ({counted} scenarios counted{})", if off.is_empty() { String::new() } else { format!("; not in {}", off.join(", ")) }), &mut t);
                }
                if sanitizer == Sanitizer::Thread {
                    let files: Vec<&str> = touched.iter().map(String::as_str).collect();
                    let ours: Vec<String> = own.iter().filter(|(_, r)| r.touches(&files)).map(|(s, r)| format!("{s}: {}", r.signature())).collect();
                    check(ours.is_empty(), format!("{name}: no race with an access in a file the fix changes ({}){}", files.join(", "), if ours.is_empty() { String::new() } else { format!(": {}", ours.join("; ")) }), &mut t);
                }
                let failed: Vec<&str> = outcomes.iter().filter(|o| !o.success).map(|o| o.scenario.as_str()).collect();
                check(failed.is_empty(), format!("{name}: every scenario runs to a clean exit{}", if failed.is_empty() { String::new() } else { format!(" (not: {})", failed.join(", ")) }), &mut t);
            }
            Expect::Leaks if sanitizer == Sanitizer::Address => {
                let cell = outcomes.iter().find(|o| o.scenario == "report's scenario");
                let leaks: Vec<&Report> = cell.map(|o| o.reports.iter().filter(|r| r.tool == "LSan").collect()).unwrap_or_default();
                let through = leaks.iter().filter(|r| r.frames.iter().any(|f| f.contains("make_arrays"))).count();
                let bytes: u64 = leaks.iter().map(|r| r.bytes).sum();
                check(through > 0, format!("{name}: LeakSanitizer reports the orphaned group in the report's scenario ({} leak records, {bytes} bytes, {through} allocated through make_arrays)", leaks.len()), &mut t);
                let census = cell.map(|o| o.census.clone()).unwrap_or_default();
                check(census.iter().all(|&n| n > 0) && !census.is_empty(), format!("{name}: the census does not return to its baseline in the report's scenario (retained after each cycle: {census:?})"), &mut t);
            }
            Expect::Wrong if sanitizer == Sanitizer::Address => {
                let held = outcomes.iter().find(|o| o.scenario == "held output");
                let asan: Vec<&Report> = held.map(|o| o.reports.iter().filter(|r| r.tool == "ASan").collect()).unwrap_or_default();
                check(
                    !asan.is_empty(),
                    format!("{name}: AddressSanitizer reports the held-output probe's crash ({})", asan.first().map(|r| format!("{}, in {}", r.kind, r.frames.iter().take(3).cloned().collect::<Vec<_>>().join(" < "))).unwrap_or("no report".into())),
                    &mut t,
                );
            }
            _ => {}
        }
    }

    // Each distinct finding once, with its stack: all of a fixed variant's;
    // of the control's and the wrong fixes' (hundreds of leak records), the
    // first few per scenario, memory errors and direct leaks first, then
    // leaks allocated through make_arrays.
    writeln!(t, "\n## Findings, with their first stack\n").unwrap();
    let mut seen = BTreeSet::new();
    let mut shown = 0;
    for (a, expect, outcomes) in results {
        for o in outcomes {
            let mut distinct: Vec<&Report> = Vec::new();
            for r in &o.reports {
                if seen.insert((a.name.clone(), r.signature())) {
                    distinct.push(r);
                }
            }
            let rank = |r: &Report| match (r.tool, r.kind.as_str()) {
                ("LSan", "direct leak") => 1,
                ("LSan", _) if r.frames.iter().any(|f| f.contains("make_arrays")) => 2,
                ("LSan", _) => 3,
                _ => 0,
            };
            distinct.sort_by_key(|r| rank(r));
            let limit = if *expect == Expect::Fixed { distinct.len() } else { 3 };
            for r in distinct.iter().take(limit) {
                let sig = r.signature();
                let count = o.reports.iter().filter(|x| x.signature() == sig).count();
                writeln!(t, "### {} / {}: {} {} ({count}x in this scenario)\n\n{}\n\n```", a.name, o.scenario, r.tool, r.kind, r.summary).unwrap();
                for (i, f) in r.frames.iter().take(12).enumerate() {
                    writeln!(t, "#{i} {f}").unwrap();
                }
                if !r.other.is_empty() {
                    writeln!(t, "{}", if r.tool == "TSan" { "-- the other access:" } else { "-- then:" }).unwrap();
                    for (i, f) in r.other.iter().take(8).enumerate() {
                        writeln!(t, "#{i} {f}").unwrap();
                    }
                }
                writeln!(t, "```\n").unwrap();
                shown += 1;
            }
            if distinct.len() > limit {
                writeln!(t, "({} / {}: {} more distinct findings, in the run's logs, `<target>/sanitize/{}/{}/`)\n", a.name, o.scenario, distinct.len() - limit, sanitizer.name(), a.name).unwrap();
            }
        }
    }
    if shown == 0 {
        writeln!(t, "(none)").unwrap();
    }
    (t, failures)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_leaks_errors_and_runtime_errors_with_their_stacks() {
        let log = "\
=================================================================
==12==ERROR: LeakSanitizer: detected memory leaks

Direct leak of 96 byte(s) in 1 object(s) allocated from:
    #0 0x7f1 in operator new(unsigned long) ../../src/libsanitizer/asan/asan_new_delete.cpp:95
    #1 0x7f2 in mlx::core::array::make_arrays(std::vector<int>) /x/src/mlx/array.cpp:60
    #2 0x7f3 in main /x/leak.cpp:10

Indirect leak of 32 byte(s) in 2 object(s) allocated from:
    #0 0x7f1 in malloc (/usr/lib/x86_64-linux-gnu/libasan.so.8+0xbc)
    #1 0x7f4 (/usr/lib/libopenblas.so.0+0x10)

SUMMARY: AddressSanitizer: 128 byte(s) leaked in 3 allocation(s).
==13==ERROR: AddressSanitizer: heap-use-after-free on address 0x6020 at pc 0x1 bp 0x2 sp 0x3
READ of size 8 at 0x6020 thread T0
    #0 0x7f5 in mlx::core::array::eval() /x/src/mlx/array.cpp:99

/x/src/mlx/ops.cpp:12:5: runtime error: signed integer overflow: 1 + 2147483647 cannot be represented in type 'int'
    #0 0x7f6 in mlx::core::add() /x/src/mlx/ops.cpp:12
";
        let r = parse_reports(log);
        assert_eq!(r.len(), 4, "{r:?}");
        assert_eq!((r[0].tool, r[0].kind.as_str(), r[0].bytes), ("LSan", "direct leak", 96));
        assert_eq!(r[0].frames[1], "mlx::core::array::make_arrays(std::vector<int>)");
        assert_eq!(r[1].kind, "indirect leak");
        assert_eq!(r[1].frames, vec!["malloc".to_string(), "(/usr/lib/libopenblas.so.0+0x10)".to_string()]);
        assert_eq!((r[2].tool, r[2].kind.as_str()), ("ASan", "heap-use-after-free"));
        assert_eq!(r[2].frames, vec!["mlx::core::array::eval()".to_string()]);
        assert_eq!((r[3].tool, r[3].kind.as_str()), ("UBSan", "signed integer overflow"));
        assert!(r[3].summary.starts_with("ops.cpp:12:5: signed integer overflow"));
        // The runtime's own frames do not tell findings apart.
        assert_eq!(r[0].signature(), "LSan direct leak: mlx::core::array::make_arrays(std::vector<int>) < main");
    }

    #[test]
    fn a_recorded_report_must_be_current_and_all_ok() {
        let good = "<!-- measured-for abc -->\n# Sanitizer run\n\n## Expectations\n\n- ok: patched: clean\n- ok: pristine: leaks\n\n## Findings\n";
        assert_eq!(verify_recorded(good, "abc").unwrap(), "2 expectations held");
        // Measured on another tree, series or probe set: stale.
        assert!(verify_recorded(good, "abd").unwrap_err().contains("measured for abc"));
        assert!(verify_recorded(&good.replace("- ok: pristine", "- FAILED: pristine"), "abc").unwrap_err().contains("did not hold"));
        assert!(verify_recorded(&good.replace("<!-- measured-for abc -->\n", ""), "abc").unwrap_err().contains("no `measured-for`"));
        assert!(verify_recorded("<!-- measured-for abc -->\n# nothing\n", "abc").unwrap_err().contains("no expectations"));
    }

    #[test]
    fn the_interpreter_of_an_executable_is_read_from_its_program_headers() {
        let me = std::env::current_exe().unwrap();
        let ld = interpreter(&me).unwrap();
        assert!(ld.is_absolute() && ld.exists(), "{}", ld.display());
        assert!(ld.file_name().unwrap().to_string_lossy().starts_with("ld-"), "{}", ld.display());
        let not_elf = std::env::temp_dir().join("sanitize-not-elf");
        std::fs::write(&not_elf, b"#!/bin/sh\n").unwrap();
        assert!(interpreter(&not_elf).unwrap_err().contains("not a 64-bit"));
    }

    #[test]
    fn reads_a_race_with_both_accesses_and_where_mlx_made_them() {
        let log = "\
==================
WARNING: ThreadSanitizer: data race (pid=11247)
  Write of size 4 at 0x7b3400000000 by thread T4 (mutexes: write M158):
    #0 mlx::core::scheduler::Scheduler::notify_new_task(mlx::core::Stream const&) ../src/mlx/scheduler.h:39 (libmlx.so+0xdd935b)
    #1 std::function<void ()>::operator()() const /usr/include/c++/12/bits/std_function.h:591 (libmlx.so+0x1)
    #2 <null> <null> (libstdc++.so.6+0xd44a2)

  Previous read of size 4 at 0x7b3400000000 by thread T3:
    #0 mlx::core::scheduler::Scheduler::n_active_tasks() const ../src/mlx/scheduler.h:53 (libmlx.so+0x279119)
    #1 mlx::core::array::eval() ../src/mlx/array.cpp:120 (libmlx.so+0x2)

  Location is heap block of size 208 at 0x7b3400000000 allocated by main thread:
    #0 operator new(unsigned long) ../../../../src/libsanitizer/tsan/tsan_new_delete.cpp:64 (libtsan.so.2+0x87323)

SUMMARY: ThreadSanitizer: data race ../src/mlx/scheduler.h:39 in mlx::core::scheduler::Scheduler::notify_new_task(mlx::core::Stream const&)
";
        let r = parse_reports(log);
        assert_eq!(r.len(), 1, "{r:?}");
        assert_eq!((r[0].tool, r[0].kind.as_str()), ("TSan", "data race"));
        assert_eq!(r[0].frames, vec!["mlx::core::scheduler::Scheduler::notify_new_task(mlx::core::Stream const&)", "std::function<void ()>::operator()() const", "(unknown)"]);
        assert_eq!(r[0].other, vec!["mlx::core::scheduler::Scheduler::n_active_tasks() const", "mlx::core::array::eval()"]);
        // A race is where MLX's code made the access, not where its callers
        // are: array.cpp only calls into the scheduler here.
        assert!(r[0].touches(&["mlx/scheduler.h"]));
        assert!(!r[0].touches(&["mlx/array.cpp"]));
        // Through a standard header inlined into array.cpp, it is array.cpp's.
        let inlined = log.replace(
            "    #0 mlx::core::scheduler::Scheduler::n_active_tasks() const ../src/mlx/scheduler.h:53 (libmlx.so+0x279119)\n",
            "    #0 std::__shared_ptr<int>::get() const /usr/include/c++/12/bits/shared_ptr_base.h:1666 (libmlx.so+0x1)\n",
        );
        assert!(parse_reports(&inlined)[0].touches(&["mlx/array.cpp"]));
        // The same race seen from the other thread first is the same finding.
        let mut swapped = r[0].clone();
        std::mem::swap(&mut swapped.frames, &mut swapped.other);
        swapped.sites.reverse();
        assert_eq!(swapped.signature(), r[0].signature());
        assert_eq!(r[0].signature(), "TSan data race: mlx/scheduler.h | mlx/scheduler.h");
        // Built without ccache the paths are absolute, in the variant's
        // directory: the same finding on every variant.
        let absolute = parse_reports(&log.replace("../src/mlx/", "/w/target/mlx/patched-tsan/src/mlx/"));
        assert_eq!(absolute[0].signature(), r[0].signature());
        assert!(absolute[0].touches(&["mlx/scheduler.h"]));
    }

    #[test]
    fn a_log_without_reports_has_none() {
        assert!(parse_reports("all good\n==1== some note\n").is_empty());
    }
}
