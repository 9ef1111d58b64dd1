//! The pure half of the build plan's check: this host's row of the plan
//! against what the build here did (the patched variant's CMake cache, and
//! the lines mlx-sys's build script printed), each difference named.

use mlx_expectations::report::Row;
use mlx_harness::tally::Tally;
use mlx_patched::plan::BuildPlan;
use std::path::PathBuf;

/// What `collect` read.
pub struct Evidence {
    /// The host, as the plan saw it.
    pub host: String,
    pub plan: BuildPlan,
    /// The `DEP_MLX_*` metadata the plan says a static link prints.
    pub metadata: Vec<(&'static str, String)>,
    pub cache_path: PathBuf,
    pub cache: String,
    pub output_path: PathBuf,
    pub output: String,
}

/// One claim: the build did what the plan says.
pub fn judge(e: &Evidence) -> Tally {
    let mut t = Tally::new();
    let diff = differences(&e.plan, &e.metadata, &e.cache, &e.output);
    t.claim(diff.is_empty(), || {
        format!(
            "the plan for {} is not what the build did ({} and {}):\n{}",
            e.host,
            e.cache_path.display(),
            e.output_path.display(),
            diff.join("\n")
        )
    });
    t
}

pub fn render(e: &Evidence) -> Vec<Row> {
    vec![Row::note(format!(
        "build plan for {}: {} CMake options, {} system libraries, checked against the build here",
        e.host,
        e.plan.cmake_args.len(),
        e.plan.system_libs.len()
    ))]
}

pub fn cache_value<'a>(cache: &'a str, name: &str) -> Option<&'a str> {
    cache.lines().find_map(|l| {
        let (key, value) = l.split_once('=')?;
        (key.split_once(':')?.0 == name).then_some(value)
    })
}

pub fn directives(output: &str) -> Vec<(&str, &str)> {
    output
        .lines()
        .filter_map(|l| l.strip_prefix("cargo:")?.split_once('='))
        .collect()
}

pub fn differences(
    plan: &BuildPlan,
    expected_metadata: &[(&str, String)],
    cache: &str,
    output: &str,
) -> Vec<String> {
    let mut out = Vec::new();
    let mut args = plan.cmake_args.iter();
    while let Some(a) = args.next() {
        if a == "-G" {
            let generator = args.next().map(String::as_str);
            if cache_value(cache, "CMAKE_GENERATOR") != generator {
                out.push(format!(
                    "generator: the cache has {:?}",
                    cache_value(cache, "CMAKE_GENERATOR")
                ));
            }
        } else if let Some((name, value)) = a.strip_prefix("-D").and_then(|d| d.split_once('=')) {
            if cache_value(cache, name) != Some(value) {
                out.push(format!("{a}: the cache has {:?}", cache_value(cache, name)));
            }
        }
    }
    let lines = directives(output);
    let linked: Vec<&str> = lines
        .iter()
        .filter(|(k, _)| *k == "rustc-link-lib")
        .map(|(_, v)| *v)
        .collect();
    let shared: Vec<&str> = linked
        .iter()
        .filter_map(|l| l.strip_prefix("dylib="))
        .collect();
    let mut want: Vec<String> = plan.system_libs.iter().map(|(_, n)| n.clone()).collect();
    want.push(plan.cxx_runtime.to_string());
    for w in &want {
        if !shared.contains(&w.as_str()) {
            out.push(format!("the plan's {w} was not linked: {linked:?}"));
        }
    }
    for s in &shared {
        if !want.iter().any(|w| w == s) {
            out.push(format!("{s} was linked, which the plan does not name"));
        }
    }
    for s in ["mlxc", "mlx"] {
        if !linked.contains(&format!("static={s}").as_str()) {
            out.push(format!("static {s} was not linked: {linked:?}"));
        }
    }
    let shim = linked.contains(&"static=mlx_sys_half_accessors");
    if shim != plan.half_accessors {
        out.push(format!(
            "the half accessors: the plan says {}, the build {}",
            plan.half_accessors, shim
        ));
    }
    for (key, value) in expected_metadata {
        if !lines.contains(&(*key, value.as_str())) {
            out.push(format!(
                "DEP_MLX_{}: the build printed {:?}, the plan says {value:?}",
                key.to_uppercase(),
                lines.iter().find(|(k, _)| k == key).map(|(_, v)| v)
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests;
