//! MLX's own tests are configured only when something asks for them: a
//! build of the library alone (what the drop-in mlx-sys asks for) passes
//! `-DMLX_BUILD_TESTS=OFF` and no doctest, so it needs no doctest-dev. A
//! later request for the tests configures them in place and compiles only
//! them, and a build with tests serves a request for the library alone.
//!
//! The tree is a small CMake project shaped like MLX's where it matters:
//! `MLX_BUILD_TESTS` defaults to ON, and its tests need doctest's folder.

use mlx_patched::{from_override, pin, Env, Host, Options, Progress, Variant};
use std::fs;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

fn fake_mlx(dir: &Path) {
    fs::create_dir_all(dir.join("mlx/io")).unwrap();
    fs::create_dir_all(dir.join("tests")).unwrap();
    fs::write(dir.join("mlx/array.h"), "int answer();\n").unwrap();
    fs::write(dir.join("mlx/array.cpp"), "int answer() { return 42; }\n").unwrap();
    // The build reads gguflib's pin from here.
    fs::write(
        dir.join("mlx/io/CMakeLists.txt"),
        format!("  GIT_TAG {}\n", pin::GGUFLIB_COMMIT),
    )
    .unwrap();
    fs::write(
        dir.join("CMakeLists.txt"),
        "cmake_minimum_required(VERSION 3.20)\n\
         project(mlx CXX)\n\
         option(MLX_BUILD_TESTS \"Build tests for mlx\" ON)\n\
         add_library(mlx mlx/array.cpp)\n\
         install(TARGETS mlx)\n\
         if(MLX_BUILD_TESTS)\n\
         \x20 if(NOT EXISTS \"${FETCHCONTENT_SOURCE_DIR_DOCTEST}/scripts/cmake/doctest.cmake\")\n\
         \x20   message(FATAL_ERROR \"tests configured without doctest's folder\")\n\
         \x20 endif()\n\
         \x20 add_subdirectory(tests)\n\
         endif()\n",
    )
    .unwrap();
    fs::write(
        dir.join("tests/CMakeLists.txt"),
        "add_executable(tests tests.cpp)\ntarget_link_libraries(tests mlx)\n",
    )
    .unwrap();
    fs::write(
        dir.join("tests/tests.cpp"),
        "int answer();\nint main() { return answer() == 42 ? 0 : 1; }\n",
    )
    .unwrap();
}

fn cache_entry(build: &Path, name: &str) -> Option<String> {
    let text = fs::read_to_string(build.join("CMakeCache.txt")).unwrap();
    text.lines().find_map(|l| {
        l.strip_prefix(&format!("{name}:"))
            .and_then(|r| r.split_once('='))
            .map(|(_, v)| v.to_string())
    })
}

fn modified(p: &Path) -> SystemTime {
    fs::metadata(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .modified()
        .unwrap()
}

#[test]
fn tests_are_configured_only_on_request_and_then_alone() {
    let dir = std::env::temp_dir().join(format!(
        "mlx-patched-tests-on-request-{}",
        std::process::id()
    ));
    let _ = fs::remove_dir_all(&dir);
    let tree = dir.join("tree");
    fake_mlx(&tree);
    let series = dir.join("series");
    fs::create_dir_all(&series).unwrap();
    let upstream = from_override(tree).unwrap();
    let mut opts = Options {
        base: mlx_patched::pin::Base::default_base(),
        root: dir.join("build"),
        host: Host::here(false),
        jobs: 2,
        extra_cmake_args: Vec::new(),
        patches_dir: series,
        env: Env::process(),
        tests: false,
        progress: Progress::Quiet,
        sanitizer: None,
    };
    let build: PathBuf = opts.root.join("pristine/build");
    let object = build.join("CMakeFiles/mlx.dir/mlx/array.cpp.o");

    // The library alone: no tests, no doctest.
    let lib = mlx_patched::build_from(Variant::PRISTINE, &upstream, &opts).unwrap();
    assert_eq!(
        cache_entry(&build, "MLX_BUILD_TESTS").as_deref(),
        Some("OFF")
    );
    assert_eq!(cache_entry(&build, "FETCHCONTENT_SOURCE_DIR_DOCTEST"), None);
    assert!(!build.join("tests").exists());
    let compiled = modified(&object);

    // The tests, asked for later: configured in place, compiled alone.
    opts.tests = true;
    let tested = mlx_patched::build_from(Variant::PRISTINE, &upstream, &opts).unwrap();
    assert_eq!(
        cache_entry(&build, "MLX_BUILD_TESTS").as_deref(),
        Some("ON")
    );
    assert!(build.join("tests/tests").is_file());
    assert_eq!(
        modified(&object),
        compiled,
        "the library was compiled again to add its tests"
    );
    assert!(!tested.cached());
    assert_ne!(
        tested.build_key(),
        lib.build_key(),
        "the key covers the tests' inputs"
    );

    // The library alone again: the build with tests serves it, as it is.
    opts.tests = false;
    let again = mlx_patched::build_from(Variant::PRISTINE, &upstream, &opts).unwrap();
    assert!(again.cached());
    assert_eq!(again.build_key(), tested.build_key());
    assert_eq!(
        cache_entry(&build, "MLX_BUILD_TESTS").as_deref(),
        Some("ON")
    );
    let _ = fs::remove_dir_all(&dir);
}
