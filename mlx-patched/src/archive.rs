//! A static libmlx made from the objects the variant's shared build already
//! compiled, so that a crate can link MLX into its binaries (as the
//! published mlx-sys does) without a second compile of MLX.
//!
//! The objects and the libraries they need are read from the link
//! statement CMake wrote for the shared library (`build.ninja`), so the
//! archive holds exactly what `libmlx.so` holds, and its dependencies are
//! the ones MLX's own CMake chose (BLAS, gguflib, the system libraries).

use crate::build::plan::LinkKind;
use crate::build::Artifacts;
use crate::{io, lock_file, Error};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// What a binary needs to contain MLX statically: the archives (libmlx's
/// own, then the static libraries MLX links), then the shared libraries,
/// each with the folders to search.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StaticLink {
    pub search: Vec<PathBuf>,
    pub libs: Vec<(LinkKind, String)>,
}

impl StaticLink {
    /// The link lines for Cargo, in link order.
    pub fn print_cargo_metadata(&self) {
        for dir in &self.search {
            println!("cargo:rustc-link-search=native={}", dir.display());
        }
        for (kind, name) in &self.libs {
            let kind = match kind {
                LinkKind::Static => "static",
                LinkKind::Dylib => "dylib",
                LinkKind::Framework => "framework",
            };
            println!("cargo:rustc-link-lib={kind}={name}");
        }
    }
}

/// The statement that links the shared library in a ninja file: its
/// objects (relative to the build folder) and its `LINK_LIBRARIES`.
fn link_statement(ninja: &str, output: &str) -> Option<(Vec<String>, Vec<String>)> {
    let mut lines = ninja.lines();
    let head = lines.find(|l| l.starts_with(&format!("build {output}:")))?;
    let inputs = head.split_once(':')?.1;
    // `rule obj obj ... | implicit deps || order-only deps`
    let explicit = inputs.split(" | ").next()?.split(" || ").next()?;
    let objects: Vec<String> = explicit
        .split_whitespace()
        .skip(1)
        .map(String::from)
        .collect();
    let libraries = lines
        .take_while(|l| l.starts_with("  "))
        .find_map(|l| l.trim().strip_prefix("LINK_LIBRARIES = "))
        .unwrap_or("")
        .split_whitespace()
        .map(String::from)
        .collect();
    Some((objects, libraries))
}

/// Cargo's form of `LINK_LIBRARIES`: `-lfoo`, `/abs/libfoo.so`,
/// `rel/libfoo.a` (copied beside the archive) and `-framework Foo`, in
/// order, without repeats.
fn link_lines(libraries: &[String], build: &Path, archive_dir: &Path) -> Result<StaticLink, Error> {
    let mut link = StaticLink {
        search: vec![archive_dir.to_path_buf()],
        libs: vec![(LinkKind::Static, "mlx".into())],
    };
    let mut words = libraries.iter();
    while let Some(w) = words.next() {
        let entry = if w == "-framework" {
            let name = words
                .next()
                .ok_or_else(|| Error::new("`-framework` without a name in MLX's link line"))?;
            (LinkKind::Framework, name.clone())
        } else if let Some(name) = w.strip_prefix("-l") {
            (LinkKind::Dylib, name.to_string())
        } else if w.starts_with('-') {
            // Linker flags (`-Wl,...`) carry nothing a dependent needs.
            continue;
        } else if let Some(framework) = framework_of(Path::new(w)) {
            (LinkKind::Framework, framework)
        } else {
            let path = Path::new(w);
            let file = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let (stem, kind) = if let Some(s) = file.strip_suffix(".a") {
                (s, LinkKind::Static)
            } else if let Some(s) = file
                .strip_suffix(".so")
                .or_else(|| file.strip_suffix(".dylib"))
                .or_else(|| file.strip_suffix(".tbd"))
            {
                (s, LinkKind::Dylib)
            } else {
                return Err(Error::new(format!(
                    "MLX's link line names {w}, which is neither a library flag nor a library file"
                )));
            };
            let name = stem.strip_prefix("lib").unwrap_or(stem).to_string();
            if kind == LinkKind::Static {
                let from = if path.is_absolute() {
                    path.to_path_buf()
                } else {
                    build.join(path)
                };
                let to = archive_dir.join(&file);
                fs::copy(&from, &to).map_err(io(format!(
                    "cannot copy {} to {}",
                    from.display(),
                    to.display()
                )))?;
            } else if let Some(dir) = path.parent().filter(|d| d.is_absolute()) {
                if !link.search.iter().any(|s| s == dir) {
                    link.search.push(dir.to_path_buf());
                }
            }
            (kind, name)
        };
        if !link.libs.contains(&entry) {
            link.libs.push(entry);
        }
    }
    Ok(link)
}

/// `Foo` for `/…/Foo.framework` or a file inside it (`Foo.framework/Foo.tbd`).
fn framework_of(path: &Path) -> Option<String> {
    path.ancestors().take(2).find_map(|p| {
        p.file_name()?
            .to_str()?
            .strip_suffix(".framework")
            .map(String::from)
    })
}

impl Artifacts {
    /// `libmlx.a` of this variant, archived once (per build key) from the
    /// objects of its shared build, in `<variant>/static/`, and the link
    /// lines that go with it. Only for a variant built here: a prefix
    /// installed elsewhere has no objects to archive.
    pub fn static_link(&self, env: &crate::Env) -> Result<StaticLink, Error> {
        let variant_dir = self
            .prefix
            .parent()
            .ok_or_else(|| Error::new("a prefix has a parent"))?;
        let build = variant_dir.join("build");
        let ninja_file = build.join("build.ninja");
        if self.build_key.is_empty() || !ninja_file.is_file() {
            return Err(Error::new(format!(
                "{} has no shared build of its own to archive (no {})",
                self.name,
                ninja_file.display()
            )));
        }
        let ninja = fs::read_to_string(&ninja_file)
            .map_err(io(format!("cannot read {}", ninja_file.display())))?;
        let shared = ["libmlx.so", "libmlx.dylib"]
            .into_iter()
            .find(|o| ninja.contains(&format!("\nbuild {o}:")))
            .ok_or_else(|| Error::new(format!("{} links no libmlx", ninja_file.display())))?;
        let (objects, libraries) = link_statement(&ninja, shared).ok_or_else(|| {
            Error::new(format!(
                "cannot read the link of {shared} in {}",
                ninja_file.display()
            ))
        })?;
        if objects.is_empty() || objects.iter().any(|o| o.contains('$')) {
            return Err(Error::new(format!(
                "the link of {shared} in {} lists no plain object files",
                ninja_file.display()
            )));
        }
        let dir = variant_dir.join("static");
        fs::create_dir_all(&dir).map_err(io(format!("cannot create {}", dir.display())))?;
        let _lock = lock_file(&variant_dir.join("static.lock"))?;
        let link = link_lines(&libraries, &build, &dir)?;
        // The link line is MLX's CMake's choice (another distribution may
        // find another BLAS); the plan says what it is here, and a
        // difference is said, not fatal.
        let system: Vec<(LinkKind, String)> = link
            .libs
            .iter()
            .filter(|(k, _)| *k != LinkKind::Static)
            .cloned()
            .collect();
        if let Some(d) = crate::plan::libs_differ(&self.plan.system_libs, &system) {
            let msg = format!("the build plan of {}: {d}", self.name);
            if env.is_build_script() {
                println!("cargo:warning={msg}");
            } else {
                eprintln!("{msg}");
            }
        }
        let archive = dir.join("libmlx.a");
        let stamp = dir.join("stamp");
        let ar = env.ar();
        // Another archiver archives afresh; the default keeps the old stamp.
        let key = if ar == "ar" {
            self.build_key.clone()
        } else {
            format!("{} AR={}", self.build_key, ar.to_string_lossy())
        };
        if fs::read_to_string(&stamp).is_ok_and(|s| s.trim() == key) && archive.is_file() {
            return Ok(link);
        }
        let _ = fs::remove_file(&stamp);
        let partial = dir.join("libmlx.a.partial");
        let _ = fs::remove_file(&partial);
        let out = Command::new(&ar)
            .arg("crs")
            .arg(&partial)
            .args(objects.iter().map(|o| build.join(o)))
            .output()
            .map_err(io(format!(
                "cannot run {} (binutils)",
                ar.to_string_lossy()
            )))?;
        if !out.status.success() {
            return Err(Error::new(format!(
                "{} could not archive MLX's objects: {}",
                ar.to_string_lossy(),
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        fs::rename(&partial, &archive)
            .map_err(io(format!("cannot write {}", archive.display())))?;
        fs::write(&stamp, &key).map_err(io("cannot write the archive's stamp"))?;
        Ok(link)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NINJA: &str = "rule X\n\nbuild libmlx.so: CXX_SHARED_LIBRARY_LINKER__mlx_Release mlx/a.o CMakeFiles/mlx.dir/mlx/b.cpp.o | /usr/lib/libopenblas.so mlx/io/libgguflib.a || mlx/mlx_version\n  LANGUAGE_COMPILE_FLAGS = -O3\n  LINK_LIBRARIES = -ldl  -lpthread  /usr/lib/x86_64-linux-gnu/libopenblas.so  -lm  -ldl  mlx/io/libgguflib.a  -Wl,--as-needed\n  SONAME = libmlx.so\n\nbuild other: phony\n";

    #[test]
    fn the_shared_library_s_link_gives_its_objects_and_libraries() {
        let (objects, libraries) = link_statement(NINJA, "libmlx.so").unwrap();
        assert_eq!(objects, ["mlx/a.o", "CMakeFiles/mlx.dir/mlx/b.cpp.o"]);
        assert_eq!(libraries.len(), 7);
        assert!(link_statement(NINJA, "libmlx.dylib").is_none());

        let dir = std::env::temp_dir().join(format!("mlx-archive-{}", std::process::id()));
        let build = dir.join("build");
        fs::create_dir_all(build.join("mlx/io")).unwrap();
        fs::write(build.join("mlx/io/libgguflib.a"), b"!<arch>\n").unwrap();
        let out = dir.join("static");
        fs::create_dir_all(&out).unwrap();
        let link = link_lines(&libraries, &build, &out).unwrap();
        assert_eq!(
            link.search,
            [out.clone(), PathBuf::from("/usr/lib/x86_64-linux-gnu")]
        );
        use LinkKind::*;
        let want: Vec<(LinkKind, String)> = [
            (Static, "mlx"),
            (Dylib, "dl"),
            (Dylib, "pthread"),
            (Dylib, "openblas"),
            (Dylib, "m"),
            (Static, "gguflib"),
        ]
        .into_iter()
        .map(|(k, n)| (k, n.to_string()))
        .collect();
        assert_eq!(link.libs, want);
        assert!(out.join("libgguflib.a").is_file());
        assert!(link_lines(&["libweird.txt".into()], &build, &out).is_err());
        // A Metal build's link line, as CMake writes it on macOS.
        let mac: Vec<String> = "-framework Metal -framework Foundation -framework QuartzCore /Applications/Xcode.app/SDKs/MacOSX.sdk/System/Library/Frameworks/Accelerate.framework/Accelerate.tbd /SDK/Frameworks/Accelerate.framework mlx/io/libgguflib.a"
            .split(' ')
            .map(String::from)
            .collect();
        let link = link_lines(&mac, &build, &out).unwrap();
        let names: Vec<(LinkKind, &str)> = link
            .libs
            .iter()
            .map(|(k, n)| (k.clone(), n.as_str()))
            .collect();
        assert_eq!(
            names,
            [
                (Static, "mlx"),
                (Framework, "Metal"),
                (Framework, "Foundation"),
                (Framework, "QuartzCore"),
                (Framework, "Accelerate"),
                (Static, "gguflib")
            ]
        );
        let _ = fs::remove_dir_all(&dir);
    }
}
