//! `cargo xtask <command>`: the front door to the fork's workflows. Each
//! command is parsed here and is one call into `mlx_workflows`; the slow
//! checks' commands (`python-check`, …) come from its claim registry.

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use mlx_harness::cli;
use mlx_workflows as w;
use mlx_workflows::claims::{self, SLOW_CHECKS};
use mlx_workflows::Variant;
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(
    name = "xtask",
    bin_name = "cargo xtask",
    about = "The fork's workflows"
)]
struct Cli {
    #[arg(long, global = true, value_parser = cli::base, help = cli::base_help())]
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
        #[arg(value_parser = cli::variant)]
        variant: Variant,
    },
    /// The leak report's scenario on pristine and on patched, through the
    /// Rust API and a plain C++ program.
    Demo(w::demo::DemoArgs),
    /// The whole regression suite (what CI runs on the default base).
    Test(w::test::TestArgs),
    /// MLX's own C++ test suite built from a variant; the rest goes to doctest.
    MlxTests {
        #[arg(value_parser = cli::variant)]
        variant: Variant,
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        doctest_args: Vec<String>,
    },
    /// What a user of mlx-rs adds to get this fork's fix.
    MlxRs,
    /// Build MLX's Python bindings for a variant into a virtual environment
    /// and print its python.
    Python {
        #[arg(value_parser = cli::variant)]
        variant: Variant,
    },
    /// Build the patched variant's `mlx` and `mlx-cpu` wheels; print their paths.
    Wheel,
    /// The report's scale on both variants, drawn as docs/leak-curve.svg.
    LeakCurve,
    /// Stage each fix of the series as its own pull request.
    UpstreamPr(w::upstream_pr::UpstreamPrArgs),
    /// Replay the series onto another upstream tree and give a verdict per patch.
    Rebase(w::rebase::RebaseArgs),
    /// Every variant under a sanitizer, or whether the recorded run is current.
    Sanitize(w::sanitize::SanitizeArgs),
    /// Random-program search over MLX's graph lifetimes (docs/fuzzing.md).
    Fuzz(w::fuzz::FuzzArgs),
    /// The release race at length, over several processes.
    Race(w::race::RaceArgs),
    /// The report's own model, MossFormer2_SE, over many processes; resumable.
    RealModel(mlx_checks::real_model::RealModelArgs),
    /// Write the pages generated from the code (docs/variables.md).
    Docs,
    /// Build upstream plus a candidate fix and measure it like the series.
    Try(w::try_fix::TryArgs),
}

fn main() -> ExitCode {
    // The slow checks' commands join the typed ones, from the registry.
    let command = SLOW_CHECKS.iter().fold(Cli::command(), |cmd, check| match check.command {
        Some(name) => cmd.subcommand(clap::Command::new(name).about(check.about)),
        None => cmd,
    });
    let matches = command.get_matches();
    if let Some(base) = matches.get_one::<&'static w::Base>("base") {
        cli::select_base(base);
    }
    if let Some(check) = matches.subcommand_name().and_then(claims::by_command) {
        return exit(claims::run_command(check));
    }
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    let result = match cli.command {
        Command::Deps => mlx_harness::deps::install(),
        Command::Prefix { variant } => w::mlx::prefix(variant),
        Command::Demo(a) => w::demo::run(a),
        Command::Test(a) => w::test::run(a),
        Command::MlxTests {
            variant,
            doctest_args,
        } => w::mlx::mlx_tests(variant, &doctest_args),
        Command::MlxRs => mlx_checks::mlx_rs::print_setup(),
        Command::Python { variant } => mlx_harness::python_env::python_cmd(variant),
        Command::Wheel => mlx_harness::python_env::wheel_cmd(),
        Command::LeakCurve => w::leak_curve::run(),
        Command::UpstreamPr(a) => w::upstream_pr::upstream_pr(a),
        Command::Rebase(a) => w::rebase::run(a),
        Command::Sanitize(a) => w::sanitize::run(a),
        Command::Fuzz(a) => w::fuzz::run(a),
        Command::Race(a) => w::race::run(a),
        Command::RealModel(a) => mlx_checks::real_model::run(a),
        Command::Docs => w::docs::write(),
        Command::Try(a) => w::try_fix::run(a),
    };
    exit(result)
}

fn exit(result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
