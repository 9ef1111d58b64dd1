//! The claim registry: every slow check of the suite, in the order
//! `cargo xtask test` runs them, with the xtask command that runs it alone
//! and the claim it proves. From this one table come the tests of
//! `tests/slow_checks.rs` (one `#[test]` an entry, [`slow_check_tests`]),
//! the runner's order, xtask's `*-check` commands and the slow checks'
//! table in `tests/README.md` (`cargo xtask docs`).

use mlx_expectations::report::Row;
use mlx_harness::error::Result;
use mlx_harness::tally::Tally;

/// A slow check: a claim too slow for `cargo test`, run by `cargo xtask
/// test` after every other test, and alone with `MLX_FORK_SLOW_CHECKS=1`.
pub struct SlowCheck {
    /// The test's name in `tests/slow_checks.rs`, and its tally's.
    pub name: &'static str,
    /// The xtask command that runs it alone, if it has one.
    pub command: Option<&'static str>,
    /// What it checks, in a line (the command's help).
    pub about: &'static str,
    /// The claim it proves, for `tests/README.md`.
    pub claim: &'static str,
    /// Collects, judges and renders; fails only if it could not run.
    pub run: fn(&mut Vec<Row>) -> Result<Tally>,
}

macro_rules! registry {
    ($($name:ident {
        command: $command:expr,
        about: $about:expr,
        run: $run:expr,
        claim: $claim:expr $(,)?
    })*) => {
        /// Every slow check, in the order the suite runs them.
        pub const SLOW_CHECKS: &[SlowCheck] = &[$(SlowCheck {
            name: stringify!($name),
            command: $command,
            about: $about,
            claim: $claim,
            run: $run,
        }),*];

        /// One `#[test]` per slow check, named after it
        /// (`tests/slow_checks.rs` is this macro).
        #[macro_export]
        macro_rules! slow_check_tests {
            () => {$(
                #[test]
                fn $name() {
                    $crate::claims::run_test(stringify!($name));
                }
            )*};
        }
    };
}

registry! {
    fuzz_differential {
        command: None,
        about: "Both variants' fuzz slices agree, program by program",
        run: |_| Ok(crate::fuzz::check_differential(&mlx_harness::slow_check::run_report_dir()?)),
        claim: "The differential oracle over the slice: every program that both variants ran came out the same on both (the same bits, or the same class of error), no program raises on patched that pristine runs (but for a refusal a patch makes on purpose, `RAISED_BY_THE_FIX`; where pristine stopped first at one of its own bugs that varies by process, `RAISED_BY_THE_CONTROL_ALONE`, the rest of the program is not compared), and at least one program was compared. The oracle itself (`mlx_fuzz::oracle::differ`, `differ_runs`) is unit-tested on outcomes whose bits differ, whose errors differ, and where the fix alone raises.",
    }
    mlx_rs_check {
        command: Some("mlx-rs-check"),
        about: "mlx-rs through the drop-in mlx-sys, on patched and pristine (docs/mlx-rs.md)",
        run: mlx_checks::mlx_rs::check,
        claim: "mlx-rs 0.33 works on this fork through the drop-in `crates/mlx-sys`, selected by one `[patch]` entry: `tests/mlx-rs`, the report's scenario written against mlx-rs's public API, retains 0 bytes per cycle on patched and the whole 24 MiB weight set every cycle on pristine (10 cycles), nothing with two slices, only the PRNG keys (under 1 KiB) on pristine with unevaluated weights, with the same output bits on both variants and as the C++ probe; the shims work (a float16 and a bfloat16 round trip and arithmetic, `item` of each, random sampling with the default state seeded through `mach_approximate_time`). The release race in safe Rust (`--race`): the two outputs of one `split` of an evaluated input, moved to two `std::thread`s and dropped at the same instant, leak in some trial of at least one of 4 processes of 5,000 trials on pristine and in no trial on patched. Every build of a test project runs `--offline` behind a proxy that refuses connections, so a download anywhere in it (the drop-in's nested `cargo metadata` included) fails it: `tests/mlx-rs` after one `cargo fetch`, and `tests/mlx-sys-dependent` as a copy whose crates are all `cargo vendor`ed. `tests/mlx-sys-dependent`, a project outside the workspace with only the `[patch]` line and MLX linked statically by default, builds; its build script reads `DEP_MLX_INCLUDE`, `DEP_MLX_DEFINES` and `DEP_MLX_VERSION` and compiles C that includes `mlx/c/mlx.h`; its binary, run directly with no rpath and no `LD_LIBRARY_PATH`, computes 1.5 + 1.5 = 3 through mlx-c and reports the version the metadata gave, `readelf -d` shows no shared libmlx, `cargo run` and `cargo test` pass, and a second build prints no warning. mlx-rs 0.33.0's own unit and integration tests (with `safetensors`) run on patched, and on pristine too when a test failed on patched (the same compiled tests run on both, so the control only serves to excuse a failure): none may pass on pristine and fail on patched, or fail only on patched; those failing on both are listed with their panic message. On a base no mlx-c compiles against (0.32.4), the check is instead one claim: building the drop-in fails before anything is built and says that no mlx-c release compiles against that MLX.",
    }
    git_dependency {
        command: Some("git-dependency-check"),
        about: "The fork's mlx-sys from a git URL, offline, as a team pulls it (docs/mlx-rs.md)",
        run: mlx_checks::git_dependency::check,
        claim: "`[patch.crates-io] mlx-sys = { git = \"<url>\", rev = \"<commit>\" }` works: `tests/mlx-sys-git` (mlx-rs 0.33, and a second crate that depends on the published `mlx-sys` 0.7.0) is copied with its `[patch]` line pointing at this checkout through a `file://` URL, fetched once and built offline. It reuses this checkout's build of MLX (the patched variant's stamp and log unchanged); the report's scenario through mlx-rs retains 0 bytes in every cycle; the second crate gets the fork's mlx-sys (its `DEP_MLX_VARIANT` is patched) and computes through it; nothing is written into Cargo's checkout but Cargo's own mark; a second `cargo build` compiles nothing. Uncommitted work is snapshotted as a commit on `HEAD` through a scratch index.",
    }
    build_plan {
        command: None,
        about: "This host's row of the build plan is what the build here did",
        run: mlx_checks::build_plan::check,
        claim: "The build plan (`mlx_patched::plan`: CMake options, libraries and frameworks linked, the metallib's path, the `DEP_MLX_*` metadata, a pure function of the host, unit-tested for macOS arm64, Linux x86_64 and aarch64, and Linux with CUDA) is, for this host, what the build did: every CMake option it gives is in the patched variant's cache, and mlx-sys's build script linked exactly the plan's system libraries and C++ runtime, the static mlx-c and MLX, the shims the plan says, and printed the plan's `DEP_MLX_*` values.",
    }
    mossformer2_check {
        command: Some("mossformer2-check"),
        about: "MossFormer2_SE's Rust port against mlx-audio, bit for bit, on patched and pristine (docs/mossformer2.md)",
        run: mlx_checks::mossformer2::check,
        claim: "The Rust port of the report's model (`crates/mossformer2`, mlx-audio 0.6.2's MossFormer2_SE `TestNet` over mlx-rs 0.33, docs/mossformer2.md) computes exactly what mlx-audio computes: mlx-audio's own model, built with a fixed seed on the fork's wheel of each variant, writes its 905 parameters, an input and its compiled mask; the port, linked to the same variant through the drop-in, loads the parameters under mlx-audio's names and gives the same mask bit for bit, at 8 frames and at 300 (the attention's padded path), and with two slices in place of `split`, on pristine and on patched. The port's own tests (`cargo test` in `crates/mossformer2`) pass on patched: 905 tensors and 55,262,410 values (210.8 MiB), a saved model loading back to the same bits, and a clear error for a missing tensor, a wrong shape, a wrong type, a tensor of another model, a file that is not safetensors, a missing file and a bad input. The second compiled shape: with the weights loaded from the checkpoint and evaluated before the first call, a second shape adds under 5% of the weights on both variants; loaded lazily and not evaluated first, a second shape adds over 90% of the weights on pristine (each compiled shape reads and keeps a copy of its own: finding 014) and under 5% on patched (`0014`). Three cycles of `mossformer2-cycles` on each variant are printed as figures, not judged: the leak is too rare for three cycles to show it (`cargo xtask real-model` has the Rust cells).",
    }
    python_package {
        command: Some("python-check"),
        about: "The fork as a Python package, on patched and pristine (docs/python.md)",
        run: mlx_checks::python::check,
        claim: "The fork reaches Python users: the report's script, byte for byte (identity checked against the report, or its recorded sha256), prints 24 MiB retained every one of ten cycles with pristine's bindings and 0 with patched's, and 0 along each install path (`mlx_checks::pip_installs`, each in a clean venv with `--no-index`; docs/python.md): the fork's two wheels alone; upstream's official `mlx[cpu]==0.32.2` (checksums pinned) alone, which prints 24, then the fork's wheels over it; the fork's wheels, then the README's way back, `pip install --force-reinstall mlx==0.32.2 mlx-cpu==0.32.2`, which prints 24 again. At each step pip's recorded versions of `mlx` and `mlx-cpu` and the loaded libmlx's bytes must be the expected build's, and `pip uninstall -y mlx mlx-cpu` must leave no file of either: no dist-info, no file under `mlx/`, no `mlx.*` script (the empty folders pip 23.2 leaves, as it does for upstream's pair, are reported) (the paths with upstream's wheels are skipped, saying so, without the index or off CPython 3.11). mypy, against the wheels' stubs, passes on the report's script and rejects a `str` assigned from `mx.sum`, which it can only do when it reads the stubs. The patched wheels packed twice have the same sha256; in patched's environment MLX's CPU compile reads the precompiled kernel preamble the harness puts beside its header (`mlx_harness::kernel_preamble`: the dependency list g++ writes names no header, while g++ without the precompiled copy names it), and a kernel compiled with it has the same bytes as without; the ablation in Python (split, two slices, not evaluated, eager) leaks exactly where the C++ matrix does and is bit-identical between variants and with the C++ probe; two compiled shapes are traced twice and their figures printed (the report's side note); the fixed-layout sweep in Python (`tests/python/fixed_layout_leak.py` with `tests/support/fixed_layout_preload.cpp` preloaded, 300 layouts, twice per variant; finding 013) leaks at the same layouts in both runs on pristine, at some of them, and at none on patched, with the same bits on both; each kept fuzzer finding that Python can express and show (`mlx_fuzz::python`: destructor-only release paths; a leak, crash or error) runs as the printed script on both variants' bindings and must fail on pristine and run clean on patched (today 001, 002 and 004; 003 is an overrun Python cannot see, 005 and 006 use a C++ assignment); MLX's own Python suite (`python/tests` of the patched tree, so the series' new Python tests run on the control too; DEVICE=cpu; a kernel cache per variant) runs through `tests/python/run_mlx_suite.py`, whole on patched (in the background, beside the parts above, but for the timing-dependent tests of `python::judge::RUN_APART`, which run after it, alone; a name there that matches no test is an error) and, on pristine, every test that did not pass on patched and the series' own (`python::judge::control_subset`: every comparison below concerns one of those); each new test that `python::judge::SHOW_THE_BUG` names for a patch of the run's series (`0043` to `0046` on 0.32.2) must fail on pristine, not as a flaky test, and pass on patched (unit-tested, with a test that every patch adding Python test methods names those that show its bug); a failing test is run once more (reported as flaky if it then passes), and no test may pass on pristine and not on patched, or fail on patched alone (`mlx_expectations::outcomes::regressions`, the rule all four upstream suites share); failures on both are listed with their cause. The runner streams each result as it ends, so a crash names the test that was running; flaky tests are reported per variant, and a test flaky on patched, or failing there (its retry too) where pristine passed, runs alone 1000 times on each variant, each run a process of its own (runs in one process are not independent: upstream's `test_async_eval_error_in_synchronize` repeated in one process hangs it, finding 010); a run that hangs is killed and counts as a failure, as does one that dies without a result; it fails the check when patched's failure rate is above pristine's beyond chance (a one-sided binomial test on patched's share of the failures, at 0.001: `flaky_regression`, unit-tested on counts as measured and on runs of unequal number); a run that gives no result to count (skipped, not loadable) is an error. `xtask` unit tests run the runner on a small suite of their own: a pass, a failure, a test failing only its first time (flaky), every test but the named (a name matching none is an error), one that kills the interpreter (named), one that cannot be loaded alone (no count), one that hangs in one of its repeats (killed, one failure, the other runs go on) and one whose process dies (failures).",
    }
    mlx_lm_check {
        command: Some("mlx-lm-check"),
        about: "mlx-lm on patched and pristine (docs/mlx-lm.md)",
        run: mlx_checks::mlx_lm::check,
        claim: "The fork under mlx-lm 0.32.2, a peer's code (docs/mlx-lm.md). Each variant gets an environment of its two wheels and then hash-pinned mlx-lm, and `mlx` and `mlx-cpu` must still be the variant's own there. mlx-lm's offline suite, from its hash-checked sdist, runs on both variants with the exclusions of `tests/python/mlx_lm_excluded.txt`, matched by exact node id, each with its reason (hub, Metal or an optional package); a stale exclusion is an error. pytest's exit on patched must agree with its results (0 with no failure, 1 with failures named; a crash after the last test fails). A test that passes on pristine and not on patched, or fails only on patched, runs again alone 10 times on each variant; it is a regression unless it also failed alone on pristine at a like rate (patched's failures exceeding pristine's by no more than half the runs) (mlx-lm's unseeded gemma3n chunking test fails on both builds in most runs); a rerun without a passed or failed result is an error. Every run records which libmlx it loaded, which must be the variant's own build byte for byte, and which mlx_lm, which must be the installed one. Nothing that passes on pristine may fail on patched, and no test may fail only on patched. Then come the model-server cells of `mlx_patched::SERVER_CELLS` on mlx-lm's phi3 and llama with random weights. On pristine, the compiled prefills into `QuantizedKVCache` retain at least a quarter of the weights every cycle, and the intermittent cells leak in at least one of their processes: phi3's `KVCache` prefill in 6 processes of 60 cycles, and its `mx.compile(model)` in 6 of 40 (measured rates per process: 23 of 24 and 38 of 40; docs/mlx-lm.md). Each variant's first process builds the cell's kernels with no other process of its variant running (the two variants' first processes run side by side, each in a kernel cache of its own); then the cell's other processes run two at a time. On patched, every cell retains 0 in every cycle of every process. The negative controls (llama's `KVCache` prefill, `generate_step`, llama's trainer) retain 0 on both; phi3's trainer at most 1 KiB a cycle on pristine (one CI run saw 48 B once) and 0 on patched. Both variants compute the same bits in every cell, and the same eager and the same compiled logits as each other (eager and compiled differ from each other by rounding: the largest difference is printed, not asserted). The user's path is tried as written: the fork's wheels alone in a clean environment, then `pip install mlx-lm==0.32.2`, after which the fork's libmlx is still the one loaded and `mlx` and `mlx-cpu` are still the fork's; a dry run of `mlx-lm[cpu]` over the fork must add neither. The check refuses to run without a working `g++` or under `MLX_DISABLE_COMPILE`.",
    }
    mlx_audio_check {
        command: Some("mlx-audio-check"),
        about: "mlx-audio over the fork: its install on every base; on the base it pins, its suite and MossFormer2_SE's server loop (docs/mlx-audio.md)",
        run: mlx_checks::mlx_audio::check,
        claim: "The fork under mlx-audio 0.6.2, which pins `mlx==0.32.4` (docs/mlx-audio.md). On every base, `pip install --dry-run mlx-audio==0.6.2` over the fork's wheels alone: on 0.32.2 pip must replace the fork's `mlx` (why the 0.32.4 base exists), on 0.32.4 it must keep both of the fork's packages. On 0.32.4 (the base's recorded run): the user's install carried out keeps the fork's `mlx`, `mlx-cpu` and libmlx, passes `pip check`, and mlx-audio requires exactly `mlx==0.32.4`; so do two hash-pinned environments, the fork's wheels and the official ones. MossFormer2_SE at its real size (210.8 MiB, random weights), built, evaluated, compiled, run on a fixed clip through mlx-audio's `generate` and dropped: 0 bytes retained in every cycle of 3 processes on the fork and 2 on the official wheel, one digest per library set, and the fork's libmlx on the official wheel's reference BLAS and LAPACK gives the official wheel's bits, as the official libmlx on the fork's OpenBLAS gives the fork's. mlx-audio's own suite, from the wheel, offline, on both, with the exclusions of `tests/python/mlx_audio_excluded.txt` (unshipped fixtures, out-of-range gathers that segfault and server tests that hang, on the official wheel alike): nothing passing on the official wheel may fail on the fork unless flaky alike alone, and pytest's exit on the fork must agree with its results.",
    }
    provenance {
        command: Some("provenance"),
        about: "Compare the pinned tree with the official wheels of its release",
        run: |_| mlx_checks::provenance::check_tree(),
        claim: "The pinned tree is the official release: every header of the `mlx-cpu` wheel and every Python file of the `mlx` wheel (checksums pinned) is byte for byte the tree's; any file that differs is named and fails the run. Skipped, saying so, when pip cannot reach the package index.",
    }
    sanitizer_records {
        command: None,
        about: "The recorded sanitizer runs belong to this tree",
        run: |_| crate::sanitize::check_records(),
        claim: "For each base, `docs/sanitize/address.json` and `thread.json` (another base's in `docs/sanitize/v<release>/`), with their markdown reports, were recorded for the inputs of this tree (every variant's build inputs, the scenario table, the sanitizers' options, the probes, the Rust code under the sanitizer, the runner's version), and all their expectations held.",
    }
    base_records {
        command: None,
        about: "The other bases' recorded runs belong to this tree",
        run: mlx_checks::base_record::check_records,
        claim: "Each base CI does not run (0.32.4) has a recorded run of the whole suite, `docs/bases/v<release>.json` with its report, that was made for the inputs of this tree (the base's row, its series' bytes, each variant's build inputs and verdict, the run version) and passed with nothing failed; the judge is shown rejecting a missing, stale, foreign and red record on made-up records (`base_record` unit tests).",
    }
    mlx_built_once {
        command: None,
        about: "MLX was built once per variant and base",
        run: |_| crate::built_once::check(),
        claim: "MLX was built once per variant and base: every CMake build of MLX under the target directory and the bases' roots is `<root>/<variant>[-<suffix>]/build`, so a root joined twice (`v0.32.2/v0.32.2`) or a build script building MLX in Cargo's folders fails the run; the Python bindings and mlx-c are projects of their own and do not count.",
    }
    upstream_pr {
        command: None,
        about: "Each fix applies alone upstream",
        run: |_| crate::upstream_pr::check(),
        claim: "Run last, and quoting the run's figures only when everything before it passed. Each of the fork's own fixes (the series less the fixes upstream made itself, marked `Upstream-since:`) applies alone with `git am` onto a clean upstream tree of the pin, and its added lines fit MLX's 80 columns. `target/upstream-pr/<patch>/` holds each fix as its own pull request: the applied branch, the patch and its description.",
    }
}

/// The slow check called `name`.
pub fn by_name(name: &str) -> Option<&'static SlowCheck> {
    SLOW_CHECKS.iter().find(|c| c.name == name)
}

/// The slow check run by the xtask command `command`.
pub fn by_command(command: &str) -> Option<&'static SlowCheck> {
    SLOW_CHECKS.iter().find(|c| c.command == Some(command))
}

/// The test of the slow check `name` (see [`mlx_harness::slow_check::run`]).
pub fn run_test(name: &str) {
    let check = by_name(name).unwrap_or_else(|| panic!("no slow check is called {name}"));
    mlx_harness::slow_check::run(check.name, check.run);
}

/// The xtask command of a slow check.
pub fn run_command(check: &SlowCheck) -> Result<()> {
    mlx_harness::slow_check::command(check.command.unwrap_or(check.name), check.run)
}

/// The slow checks' table of `tests/README.md`.
pub fn table() -> String {
    let mut s = String::from("| slow check | claim it proves |\n|---|---|\n");
    for c in SLOW_CHECKS {
        let alone = match c.command {
            Some(cmd) => format!(" (also `cargo xtask {cmd}`)"),
            None => String::new(),
        };
        s += &format!("| `{}`{alone} | {} |\n", c.name, c.claim);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_commands_are_unique_and_upstream_pr_is_last() {
        let mut names: Vec<_> = SLOW_CHECKS.iter().map(|c| c.name).collect();
        assert_eq!(names.last(), Some(&"upstream_pr"));
        names.sort();
        names.dedup();
        assert_eq!(names.len(), SLOW_CHECKS.len());
        let mut commands: Vec<_> = SLOW_CHECKS.iter().filter_map(|c| c.command).collect();
        let n = commands.len();
        commands.sort();
        commands.dedup();
        assert_eq!(commands.len(), n);
    }

    #[test]
    fn the_table_has_a_row_per_check() {
        let t = table();
        for c in SLOW_CHECKS {
            assert!(t.contains(&format!("| `{}`", c.name)), "{}", c.name);
        }
        assert_eq!(t.lines().count(), SLOW_CHECKS.len() + 2);
    }
}
