//! Developer workflows for the fork: `cargo xtask <command>` (see HELP).

mod candidate;
mod demo;
mod deps;
mod upstream;

use mlx_patched::{Env, Options, Variant};
use std::path::PathBuf;
use std::process::{Command, ExitCode};

const HELP: &str = "\
usage: cargo xtask <command>

  deps                        install the system packages the build and tests need
                              (Debian/Ubuntu; elsewhere prints what to install)
  prefix <patched|pristine>   print the install prefix of that variant, building it if needed
  demo [--cycles N]           the leak report's scenario on pristine and on patched,
                              through the Rust API and a plain C++ program
  test                        the whole regression suite (what CI runs)
  mlx-tests <variant>         run MLX's own C++ test suite built from that variant
  upstream-pr [--out DIR]     check that the patch series applies with `git am` onto a clean
                              upstream tree and leave that branch in DIR for review/sending
  rebase <carrier-version>    dry run: does the series apply to the upstream tree carried by
                              that version of the carrier crate? (prints its tree id)
  try <name> <patch>...       build upstream + a candidate fix (plus the series' tests) and run
                              the leak scenario, the held-output check and MLX's suite on it
";

type Result<T> = std::result::Result<T, String>;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rest = args.get(1..).unwrap_or_default();
    let result = match args.first().map(String::as_str) {
        Some("deps") => deps::install(),
        Some("prefix") => prefix(rest),
        Some("demo") => demo::run(rest),
        Some("test") => test(),
        Some("mlx-tests") => mlx_tests(rest),
        Some("upstream-pr") => upstream::upstream_pr(rest),
        Some("rebase") => upstream::rebase(rest),
        Some("try") => candidate::run(rest),
        Some("help") | Some("--help") | Some("-h") | None => {
            print!("{HELP}");
            Ok(())
        }
        Some(other) => Err(format!("unknown command `{other}`\n\n{HELP}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Cargo as the developer invoked it (`$CARGO`), in the workspace root.
fn cargo() -> Command {
    let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cmd.current_dir(workspace_root());
    cmd
}

fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("workspace root")
}

fn target_dir() -> Result<PathBuf> {
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        return Ok(workspace_root().join(dir));
    }
    let out = cargo()
        .args(["metadata", "--no-deps", "--format-version", "1"])
        .output()
        .map_err(|e| format!("cannot run cargo metadata: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let key = "\"target_directory\":\"";
    let start = text.find(key).ok_or("cargo metadata printed no target_directory")? + key.len();
    let end = start + text[start..].find('"').ok_or("malformed cargo metadata")?;
    Ok(PathBuf::from(&text[start..end]))
}

fn options() -> Result<Options> {
    Ok(Options::from_env(Env::process(), &target_dir()?, false))
}

fn run(cmd: &mut Command) -> Result<()> {
    let status = cmd.status().map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{cmd:?} failed ({status})"))
    }
}

fn prefix(args: &[String]) -> Result<()> {
    let [variant] = args else { return Err("usage: cargo xtask prefix <patched|pristine>".into()) };
    let variant = Variant::parse(variant).map_err(|e| e.to_string())?;
    let mlx = mlx_patched::build(variant, &options()?).map_err(|e| e.to_string())?;
    println!("{}", mlx.prefix.display());
    Ok(())
}

/// MLX's doctest suite of one variant, as built with that variant.
fn mlx_tests(args: &[String]) -> Result<()> {
    let [variant, doctest_args @ ..] = args else { return Err("usage: cargo xtask mlx-tests <patched|pristine> [doctest args]".into()) };
    let variant = Variant::parse(variant).map_err(|e| e.to_string())?;
    let mlx = mlx_patched::build(variant, &options()?).map_err(|e| e.to_string())?;
    run(Command::new(&mlx.mlx_tests).args(doctest_args))
}

/// The whole suite: the workspace's tests with the Rust API on the patched
/// variant, then the variant-dependent tests again on the pristine control,
/// where the leak checks must see the leak.
fn test() -> Result<()> {
    deps::install()?;
    let mut patched = cargo();
    patched.args(["test", "--workspace", "--no-fail-fast"]);
    let mut control = cargo();
    control.args(["test", "--no-fail-fast", "--package", "mlx-fork", "--features", "pristine"]);
    for t in PRISTINE_PASS {
        control.args(["--test", t]);
    }
    let (mut passed, mut failed) = (0, 0);
    let mut outcome = Ok(());
    for cmd in [&mut patched, &mut control] {
        let (p, f, status) = run_counting(cmd)?;
        passed += p;
        failed += f;
        if outcome.is_ok() && !status.success() {
            outcome = Err(format!("{cmd:?} failed ({status})"));
        }
    }
    // The series must stay ready for upstream: `git am` onto a clean tree.
    let upstream = upstream::upstream_pr(&[]);
    passed += upstream.is_ok() as u32;
    failed += upstream.is_err() as u32;
    println!("\nxtask test: {passed} passed, {failed} failed");
    outcome.and(upstream)
}

/// Runs `cargo test`, echoing its output and adding up its result lines.
fn run_counting(cmd: &mut Command) -> Result<(u32, u32, std::process::ExitStatus)> {
    use std::io::{BufRead, BufReader};
    let mut child = cmd.stdout(std::process::Stdio::piped()).spawn().map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    let (mut passed, mut failed) = (0, 0);
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.map_err(|e| e.to_string())?;
        println!("{line}");
        // test result: ok. 4 passed; 0 failed; 0 ignored; ...
        if let Some(rest) = line.strip_prefix("test result: ") {
            let words: Vec<&str> = rest.split_whitespace().map(|w| w.trim_end_matches([';', '.'])).collect();
            let count = |what: &str| words.windows(2).find(|w| w[1] == what).and_then(|w| w[0].parse::<u32>().ok()).unwrap_or(0);
            passed += count("passed");
            failed += count("failed");
        }
    }
    Ok((passed, failed, child.wait().map_err(|e| e.to_string())?))
}

/// Test targets whose expectations depend on the variant the Rust API links.
const PRISTINE_PASS: &[&str] = &["rust_api_leak", "semantics"];
