//! Driving CMake: materializing a variant's tree, configuring, building
//! and installing it.

use super::types::*;
use crate::progress::{self, Progress};
use crate::system::{self};
use crate::CommandVars;
use crate::{copy_tree, io, patch, sync_tree, Error, Fingerprint};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Runs a CMake step; a failure is an error naming `what` was built, with
/// the log's tail.
pub(crate) fn run_cmake(
    cmd: &mut Command,
    log: &fs::File,
    log_path: &Path,
    label: &str,
    progress: Progress,
    what: &str,
    step: &str,
) -> Result<(), Error> {
    // Relative paths in ccache's key let a variant reuse another's objects
    // for every file the patches do not touch.
    if let Some(root) = log_path.parent().and_then(Path::parent) {
        cmd.var(crate::other_vars::CCACHE_BASEDIR, root)
            .var(crate::other_vars::CCACHE_NOHASHDIR, "1");
    }
    let status = progress::run_step(cmd, log, label, progress)
        .map_err(io(format!("cannot run cmake ({step} step)")))?;
    if status.success() {
        return Ok(());
    }
    let text = fs::read_to_string(log_path).unwrap_or_default();
    let tail: Vec<&str> = text.lines().rev().take(40).collect();
    let tail: Vec<&str> = tail.into_iter().rev().collect();
    Err(Error::new(format!(
        "{what}: the {step} step failed; full log: {}\n{}",
        log_path.display(),
        tail.join("\n")
    )))
}

/// Where a build directory keeps the hash of what its last configure was given.
pub(crate) const CONFIGURE_INPUTS: &str = "fork-configure-inputs";

/// What a configure step is made of, hashed: its arguments, the compilers
/// (as the environment names them, and their versions), CMake's version and
/// the system packages that stand in for MLX's downloads. The patches are
/// not in it: ninja sees what they change from the sources' mtimes.
pub(crate) fn configure_inputs(args: &[String], opts: &Options, tests: bool) -> String {
    let mut key = Fingerprint::new("configure 1");
    for a in args {
        key.text("arg", a);
    }
    let env = &opts.env;
    key.text("CC", format!("{:?}", env.cc()))
        .text("CXX", format!("{:?}", env.cxx()));
    key.text("c", tool_identity(&env.cc().unwrap_or_else(|| "cc".into())))
        .text("c++", tool_identity(&env.cxx_or_default()));
    key.text("cmake", tool_identity("cmake".as_ref()));
    key.text(
        "system",
        system::dependency_fingerprint(opts.backend(), tests),
    );
    key.finish()
}

/// Configures `build` from `src`. CMake reads `CC`/`CXX` only on a build
/// directory's first configure and keeps every `-D` option of the earlier
/// ones, so a directory last configured from other `inputs` is configured
/// afresh (`--fresh`: a new cache, a full recompile); with the same inputs
/// it is reconfigured in place and ninja recompiles only what changed.
#[allow(clippy::too_many_arguments)]
pub(crate) fn configure(
    src: &Path,
    build: &Path,
    args: &[String],
    inputs: &str,
    log: &fs::File,
    log_path: &Path,
    label: &str,
    progress: Progress,
    what: &str,
) -> Result<(), Error> {
    let stamp = build.join(CONFIGURE_INPUTS);
    let same = fs::read_to_string(&stamp).is_ok_and(|s| s.trim() == inputs);
    let _ = fs::remove_file(&stamp);
    let mut cmd = Command::new("cmake");
    if !same && build.join("CMakeCache.txt").exists() {
        progress.say(&format!(
            "{label}: its compilers, CMake options or system packages changed: configuring afresh"
        ));
        cmd.arg("--fresh");
    }
    cmd.arg("-S").arg(src).arg("-B").arg(build).args(args);
    run_cmake(&mut cmd, log, log_path, label, progress, what, "configure")?;
    fs::write(&stamp, inputs).map_err(io(format!("cannot write {}", stamp.display())))
}

/// Builds the library (target `mlx`), or everything including MLX's tests.
pub(crate) fn build_targets(
    build: &Path,
    tests: bool,
    opts: &Options,
    log: &fs::File,
    log_path: &Path,
    label: &str,
    what: &str,
) -> Result<(), Error> {
    // Inside a build script, within Cargo's jobserver; held to the end.
    let tokens = crate::jobs::acquire(
        crate::jobs::cargo_jobserver(&opts.env),
        opts.jobs,
        crate::jobs::WAIT,
    );
    let _ = writeln!(
        &*log,
        "-- compiling with {} jobs ({} tokens from Cargo's jobserver, limit {})",
        tokens.jobs(),
        tokens.acquired(),
        opts.jobs
    );
    let mut compile = Command::new("cmake");
    compile
        .arg("--build")
        .arg(build)
        .arg("--parallel")
        .arg(tokens.jobs().to_string());
    if !tests {
        compile.args(["--target", "mlx"]);
    }
    let built = run_cmake(
        &mut compile,
        log,
        log_path,
        label,
        opts.progress,
        what,
        "build",
    );
    drop(tokens);
    built
}

/// `<dir>/mlx-tests`: runs MLX's doctest binary against the installed
/// library of the variant (the library path takes precedence over the
/// binary's own runpath), so the suite tests what users link.
pub(crate) fn write_tests_script(script: &Path, tests: &Path, lib: &Path) -> Result<(), Error> {
    use std::os::unix::fs::PermissionsExt;
    let var = crate::other_vars::LIBRARY_PATH.name;
    let text = format!(
        "#!/bin/sh\n# MLX's own C++ tests, run against the library installed in {lib}.\n\
         {var}='{lib}'${{{var}:+:${var}}} exec '{tests}' \"$@\"\n",
        lib = lib.display(),
        tests = tests.display()
    );
    fs::write(script, text).map_err(io(format!("cannot write {}", script.display())))?;
    fs::set_permissions(script, fs::Permissions::from_mode(0o755))
        .map_err(io("cannot make the tests script executable"))
}

/// MLX installs its CMake package to `share/cmake/MLX`; `lib/cmake/MLX` links
/// to it so the prefix has the layout tools expect either way. The package
/// locates the prefix relative to its own path, which has the same depth.
pub(crate) fn link_cmake_package(prefix: &Path) -> Result<(), Error> {
    let link = prefix.join("lib/cmake/MLX");
    if prefix.join("share/cmake/MLX").is_dir() && fs::symlink_metadata(&link).is_err() {
        fs::create_dir_all(prefix.join("lib/cmake")).map_err(io("cannot create lib/cmake"))?;
        std::os::unix::fs::symlink("../../share/cmake/MLX", &link)
            .map_err(io("cannot link lib/cmake/MLX"))?;
    }
    Ok(())
}

/// CMake arguments of a build laid out as `layout`: the plan's for this
/// host, then a sanitizer's, then the user's. Part of the cache key.
pub(crate) fn cmake_args(opts: &Options, layout: &super::plan::Layout) -> Vec<String> {
    let mut args = super::plan::plan(&opts.host, layout).cmake_args;
    if let Some(s) = opts.sanitizer {
        args.extend(s.cmake_args());
    }
    args.extend(opts.extra_cmake_args.iter().cloned());
    args
}

/// Makes `src` hold upstream plus `patches`, rewriting only files whose bytes
/// change, so that an incremental ninja build recompiles exactly what a patch
/// touched. The new tree is staged in `staging` first: a patch that does not
/// apply leaves `src`, the build and the prefix (and their stamp) as they were.
pub(crate) fn materialize(
    upstream: &Path,
    src: &Path,
    staging: &Path,
    patches: &[(PathBuf, Option<&str>)],
    what: &str,
    stamp: &Path,
) -> Result<(), Error> {
    let _ = fs::remove_dir_all(staging);
    copy_tree(upstream, staging)?;
    for (p, only) in patches {
        patch::apply_series(staging, std::slice::from_ref(p), what, *only)?;
    }
    // From here on the variant is being changed: it is not done until a new stamp says so.
    let _ = fs::remove_file(stamp);
    sync_tree(staging, src)?;
    let _ = fs::remove_dir_all(staging);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Env;

    /// What a build script computes for an `aarch64-apple-darwin` target
    /// while running on Linux: the host comes from the target's cfg, never
    /// the build script's own, and the plan's arguments come first, then a
    /// sanitizer's and the user's (which CMake lets override them).
    #[test]
    fn the_plan_s_arguments_come_first_and_follow_the_target() {
        use super::super::plan::{plan, Backend, Host, Layout};
        let host = Host::new("macos", "aarch64", "apple");
        assert_eq!(host.backend(), Backend::Metal);
        let opts = Options {
            base: crate::pin::Base::default_base(),
            root: PathBuf::from("/nowhere"),
            host: host.clone(),
            jobs: 1,
            extra_cmake_args: vec!["-DUSER=1".into()],
            patches_dir: PathBuf::from("/nowhere/patches"),
            env: Env::process(),
            tests: false,
            progress: Progress::Quiet,
            sanitizer: Some(Sanitizer::Thread),
        };
        let layout = Layout {
            prefix: PathBuf::from("/nowhere/prefix"),
            build: PathBuf::from("/nowhere/build"),
            tests: false,
            metallib_dir: None,
        };
        let args = cmake_args(&opts, &layout);
        let planned = plan(&host, &layout).cmake_args;
        assert!(planned.iter().any(|a| a == "-DMLX_BUILD_METAL=ON"));
        assert_eq!(args[..planned.len()], planned[..]);
        let rest = &args[planned.len()..];
        assert_eq!(rest[0], "-DUSE_TSAN=ON");
        assert_eq!(rest.last().map(String::as_str), Some("-DUSER=1"));
    }

    fn cache_entry(build: &Path, name: &str) -> Option<String> {
        let text = fs::read_to_string(build.join("CMakeCache.txt")).unwrap();
        text.lines().find_map(|l| {
            l.strip_prefix(&format!("{name}:"))
                .and_then(|r| r.split_once('='))
                .map(|(_, v)| v.to_string())
        })
    }

    /// A build directory configured once with an option and one compiler,
    /// then with the option removed and another compiler: the cache must
    /// hold the second configure's values, not the first's.
    #[test]
    fn a_changed_configure_starts_a_fresh_cache() {
        let dir =
            std::env::temp_dir().join(format!("mlx-patched-configure-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let (src, build) = (dir.join("src"), dir.join("build"));
        fs::create_dir_all(&src).unwrap();
        fs::write(
            src.join("CMakeLists.txt"),
            "cmake_minimum_required(VERSION 3.20)\nproject(t C)\n",
        )
        .unwrap();
        // Another compiler: a wrapper of the system's, at another path.
        let other = dir.join("other-cc");
        fs::write(&other, "#!/bin/sh\nexec cc \"$@\"\n").unwrap();
        fs::set_permissions(&other, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let log_path = dir.join("log");
        let log = fs::File::create(&log_path).unwrap();
        let run = |cc: &Path, args: &[&str], inputs: &str| {
            // This test binary reads CC nowhere else.
            std::env::set_var(crate::vars::CC.name, cc);
            let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
            configure(
                &src,
                &build,
                &args,
                inputs,
                &log,
                &log_path,
                "test",
                Progress::Quiet,
                "the test project",
            )
            .unwrap_or_else(|e| panic!("{e}"));
        };
        let cc = Path::new("/usr/bin/cc");
        run(cc, &["-G", "Ninja", "-DFORK_TEST_OPTION=1"], "first");
        assert_eq!(
            cache_entry(&build, "FORK_TEST_OPTION").as_deref(),
            Some("1")
        );
        assert_eq!(
            cache_entry(&build, "CMAKE_C_COMPILER").as_deref(),
            Some("/usr/bin/cc")
        );
        run(&other, &["-G", "Ninja"], "second");
        std::env::remove_var(crate::vars::CC.name);
        assert_eq!(
            cache_entry(&build, "FORK_TEST_OPTION"),
            None,
            "a removed -D option must not survive in the cache"
        );
        assert_eq!(
            cache_entry(&build, "CMAKE_C_COMPILER").as_deref(),
            Some(other.to_str().unwrap()),
            "the new compiler must be the cache's"
        );
        assert_eq!(
            fs::read_to_string(build.join(CONFIGURE_INPUTS)).unwrap(),
            "second"
        );
    }
}

/// The identity of a program: its path as given and the first line of its
/// `--version`, so another compiler (or another version of it) is another key.
pub(crate) fn tool_identity(program: &std::ffi::OsStr) -> String {
    let first = program
        .to_string_lossy()
        .split_whitespace()
        .next()
        .unwrap_or("")
        .to_string();
    let version = Command::new(&first).arg("--version").output().map(|o| {
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .next()
            .unwrap_or("")
            .to_string()
    });
    format!(
        "{first}: {}",
        version.unwrap_or_else(|e| format!("not runnable ({e})"))
    )
}
