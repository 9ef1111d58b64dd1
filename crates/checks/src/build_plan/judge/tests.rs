use super::*;
use mlx_patched::plan::{self, dep_metadata, Exported, Linkage};
use mlx_patched::{Host, Layout, Variant};
use std::path::{Path, PathBuf};

#[test]
fn a_build_unlike_the_plan_is_named() {
    let layout = Layout {
        prefix: PathBuf::from("/t/prefix"),
        build: PathBuf::from("/t/build"),
        tests: false,
        metallib_dir: None,
    };
    let plan = plan::plan(&Host::new("linux", "x86_64", "unknown"), &layout);
    let metadata = dep_metadata(&Exported {
        linkage: Linkage::Static,
        prefix: &layout.prefix,
        mlxc_include: Path::new("/reg/mlx-c"),
        version: "0.32.2",
        variant: Variant::PATCHED.name,
        metallib: None,
    })
    .unwrap();
    let mut cache = String::from("CMAKE_GENERATOR:INTERNAL=Ninja\n");
    for a in &plan.cmake_args {
        if let Some((n, v)) = a.strip_prefix("-D").and_then(|d| d.split_once('=')) {
            cache += &format!("{n}:STRING={v}\n");
        }
    }
    let mut output = String::from(
        "cargo:rustc-link-lib=static=mlxc\ncargo:rustc-link-lib=static=mlx\ncargo:rustc-link-lib=dylib=dl\ncargo:rustc-link-lib=dylib=pthread\ncargo:rustc-link-lib=dylib=openblas\ncargo:rustc-link-lib=dylib=m\ncargo:rustc-link-lib=static=gguflib\ncargo:rustc-link-lib=static=mlx_sys_half_accessors\ncargo:rustc-link-lib=dylib=stdc++\n",
    );
    for (k, v) in &metadata {
        output += &format!("cargo:{k}={v}\n");
    }
    assert_eq!(
        differences(&plan, &metadata, &cache, &output),
        Vec::<String>::new()
    );
    let cases = [
        (
            cache.replace("USE_SYSTEM_FMT:STRING=ON", "USE_SYSTEM_FMT:STRING=OFF"),
            output.clone(),
        ),
        (cache.replace("Ninja", "Unix Makefiles"), output.clone()),
        (
            cache.clone(),
            output.replace("dylib=openblas", "dylib=flexiblas"),
        ),
        (
            cache.clone(),
            output.replace("cargo:rustc-link-lib=static=mlx_sys_half_accessors\n", ""),
        ),
        (
            cache.clone(),
            output.replace("cargo:defines=MLX_STATIC", "cargo:defines="),
        ),
        (
            cache.clone(),
            output.replace(
                "cargo:rustc-link-lib=dylib=stdc++",
                "cargo:rustc-link-lib=dylib=c++",
            ),
        ),
    ];
    for (i, (c, o)) in cases.iter().enumerate() {
        assert!(
            !differences(&plan, &metadata, c, o).is_empty(),
            "case {i} passed"
        );
    }
}
