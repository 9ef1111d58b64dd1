//! `cargo xtask <command>`: the front door to the fork's workflows. Each
//! command is parsed here and is one call into `mlx_workflows`.

use clap::{Parser, Subcommand};
use mlx_workflows as w;
use mlx_workflows::Variant;
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(
    name = "xtask",
    bin_name = "cargo xtask",
    about = "The fork's workflows"
)]
struct Cli {
    #[arg(long, global = true, value_parser = w::workspace::base, help = w::workspace::base_help())]
    base: Option<&'static w::Base>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Install the system packages the build and tests need (Debian/Ubuntu;
    /// elsewhere prints what to install).
    Deps,
    /// Print a variant's install prefix (patched, pristine, suggested),
    /// building it if needed; progress goes to stderr.
    Prefix {
        #[arg(value_parser = w::workspace::variant)]
        variant: Variant,
    },
    /// The leak report's scenario on pristine and on patched, through the
    /// Rust API and a plain C++ program.
    Demo(w::demo::DemoArgs),
    /// The whole regression suite (what CI runs on the default base).
    Test(w::suite::TestArgs),
    /// MLX's own C++ test suite built from a variant; the rest goes to doctest.
    MlxTests {
        #[arg(value_parser = w::workspace::variant)]
        variant: Variant,
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        doctest_args: Vec<String>,
    },
    /// What a user of mlx-rs adds to get this fork's fix.
    MlxRs,
    /// mlx-rs 0.33 through the drop-in mlx-sys, on patched and pristine.
    MlxRsCheck,
    /// MossFormer2_SE's Rust port against mlx-audio, bit for bit, on patched
    /// and pristine (docs/mossformer2.md).
    Mossformer2Check,
    /// Build MLX's Python bindings for a variant into a virtual environment
    /// and print its python.
    Python {
        #[arg(value_parser = w::workspace::variant)]
        variant: Variant,
    },
    /// Build the patched variant's `mlx` and `mlx-cpu` wheels; print their paths.
    Wheel,
    /// The fork as a Python package, on patched and pristine (docs/python.md).
    PythonCheck,
    /// mlx-lm 0.32.2 on patched and pristine (docs/mlx-lm.md).
    MlxLmCheck,
    /// mlx-audio 0.6.2 over the fork: its install on every base; on 0.32.4
    /// its suite and MossFormer2_SE's server loop (docs/mlx-audio.md).
    MlxAudioCheck,
    /// The report's scale on both variants, drawn as docs/leak-curve.svg.
    LeakCurve,
    /// Compare the pinned tree with the official wheels of its release.
    Provenance,
    /// Stage each fix of the series as its own pull request.
    UpstreamPr(w::upstream::UpstreamPrArgs),
    /// Replay the series onto another upstream tree and give a verdict per patch.
    Rebase(w::rebase::RebaseArgs),
    /// Every variant under a sanitizer, or whether the recorded run is current.
    Sanitize(w::sanitize::SanitizeArgs),
    /// Random-program search over MLX's graph lifetimes (docs/fuzzing.md).
    Fuzz(w::fuzz::FuzzArgs),
    /// The release race at length, over several processes.
    Race(w::race::RaceArgs),
    /// The report's own model, MossFormer2_SE, over many processes; resumable.
    RealModel(w::real_model::RealModelArgs),
    /// Write the pages generated from the code (docs/variables.md).
    Docs,
    /// Build upstream plus a candidate fix and measure it like the series.
    Try(w::candidate::TryArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Some(base) = cli.base {
        w::workspace::select_base(base);
    }
    let result = match cli.command {
        Command::Deps => w::deps::install(),
        Command::Prefix { variant } => w::mlx::prefix(variant),
        Command::Demo(a) => w::demo::run(a),
        Command::Test(a) => w::suite::run(a),
        Command::MlxTests {
            variant,
            doctest_args,
        } => w::mlx::mlx_tests(variant, &doctest_args),
        Command::MlxRs => w::mlx_rs::print_setup(),
        Command::MlxRsCheck => w::mlx_rs::check_cmd(),
        Command::Mossformer2Check => w::mossformer2::check_cmd(),
        Command::Python { variant } => w::python_env::python_cmd(variant),
        Command::Wheel => w::python_env::wheel_cmd(),
        Command::PythonCheck => w::python::check_cmd(),
        Command::MlxLmCheck => w::mlx_lm::check_cmd(),
        Command::MlxAudioCheck => w::mlx_audio::check_cmd(),
        Command::LeakCurve => w::mlx_lm::curve_cmd(),
        Command::Provenance => w::provenance::run(),
        Command::UpstreamPr(a) => w::upstream::upstream_pr(a),
        Command::Rebase(a) => w::rebase::run(a),
        Command::Sanitize(a) => w::sanitize::run(a),
        Command::Fuzz(a) => w::fuzz::run(a),
        Command::Race(a) => w::race::run(a),
        Command::RealModel(a) => w::real_model::run(a),
        Command::Docs => w::docs::write(),
        Command::Try(a) => w::candidate::run(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
