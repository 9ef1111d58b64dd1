//! No module imports one that imports it back, at any depth, in any
//! crate of the tree.

use crate::{report, tracked};
use std::collections::{BTreeMap, BTreeSet};

// ---- module cycles ----

/// A crate's modules at every depth (`src/a.rs` and `src/a/mod.rs` are
/// `a`, `src/a/b.rs` is `a::b`) and the ones each refers to: through
/// `crate::`, `super::` and `self::` paths, and, in the file that declares
/// a child (`mod b;`), through paths that start with the child's name. A
/// path counts for the deepest module it names; a name a module re-exports
/// (`pub use b::{…}`) counts for the module it comes from. The crate root
/// is not a node: it declares and re-exports. A file's test module (from
/// `#[cfg(test)]` on) is left out: it may reach anything it tests.
fn module_graph(files: &[(String, String)]) -> BTreeMap<String, BTreeSet<String>> {
    let module_of = |path: &str| -> Option<String> {
        let (_, rest) = path.split_once("src/")?;
        let rest = rest.strip_suffix(".rs")?;
        let mut parts: Vec<&str> = rest.split('/').collect();
        if parts.first() == Some(&"bin") {
            return None;
        }
        if parts.last() == Some(&"mod") {
            parts.pop();
        }
        let m = parts.join("::");
        (!m.is_empty() && m != "lib" && m != "main").then_some(m)
    };
    let without_tests = |text: &str| -> String {
        let cut = text
            .match_indices("#[cfg(test)]")
            .map(|(i, m)| i + m.len())
            .find(|&i| text[i..].trim_start().starts_with("mod "))
            .map_or(text.len(), |i| i - "#[cfg(test)]".len());
        text[..cut].to_string()
    };
    let modules: BTreeSet<String> = files.iter().filter_map(|(p, _)| module_of(p)).collect();
    let parent = |m: &str| {
        m.rsplit_once("::")
            .map_or(String::new(), |(p, _)| p.to_string())
    };
    let join = |base: &str, rest: &str| {
        if base.is_empty() {
            rest.to_string()
        } else {
            format!("{base}::{rest}")
        }
    };
    // Names each module (`""`: the root) re-exports, to the module they come
    // from, relative paths resolved against the exporting module.
    let mut reexported: BTreeMap<(String, String), String> = BTreeMap::new();
    for (p, text) in files {
        let here = module_of(p).unwrap_or_default();
        for line in without_tests(text).lines() {
            let line = line.trim();
            let Some(rest) = ["pub use ", "pub(crate) use ", "pub(super) use "]
                .iter()
                .find_map(|k| line.strip_prefix(k))
            else {
                continue;
            };
            let Some((m, names)) = rest.rsplit_once("::") else {
                continue;
            };
            let m = m.trim_start_matches("self::");
            let from = if let Some(abs) = m.strip_prefix("crate::") {
                abs.to_string()
            } else {
                join(&here, m)
            };
            for n in names.split([',', '{', '}', ';', ' ']) {
                let n = n.split(" as ").next().unwrap_or("").trim();
                if !n.is_empty() && n != "*" {
                    reexported.insert((here.clone(), n.to_string()), from.clone());
                }
            }
        }
    }
    // The deepest module `segments` (from the root) names.
    let resolve = |segments: &[String]| -> Option<String> {
        let mut at = String::new();
        for s in segments {
            let next = join(&at, s);
            if modules.contains(&next) {
                at = next;
            } else if let Some(to) = reexported.get(&(at.clone(), s.clone())) {
                return Some(to.clone());
            } else {
                break;
            }
        }
        (!at.is_empty()).then_some(at)
    };
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (p, text) in files {
        let Some(from) = module_of(p) else { continue };
        let text = without_tests(text);
        let children: Vec<String> = text
            .lines()
            .filter_map(|l| {
                let l = l.trim();
                let l = l
                    .strip_prefix("pub ")
                    .or(l.strip_prefix("pub(crate) "))
                    .unwrap_or(l);
                l.strip_prefix("mod ")?
                    .strip_suffix(';')
                    .map(str::to_string)
            })
            .collect();
        let edges = graph.entry(from.clone()).or_default();
        let mut refer = |segments: Vec<String>| {
            if let Some(to) = resolve(&segments).filter(|t| *t != from) {
                edges.insert(to);
            }
        };
        let bytes = text.as_bytes();
        let starts_word = |i: usize| {
            i == 0
                || !(bytes[i - 1].is_ascii_alphanumeric()
                    || bytes[i - 1] == b'_'
                    || bytes[i - 1] == b':')
        };
        for (i, _) in text.match_indices("crate::") {
            if starts_word(i) {
                path_after(&text[i + "crate::".len()..])
                    .into_iter()
                    .for_each(&mut refer);
            }
        }
        for (i, _) in text.match_indices("self::") {
            if starts_word(i) {
                for tail in path_after(&text[i + "self::".len()..]) {
                    let mut segs: Vec<String> = from.split("::").map(str::to_string).collect();
                    segs.extend(tail);
                    refer(segs);
                }
            }
        }
        for (i, _) in text.match_indices("super::") {
            if !starts_word(i) {
                continue;
            }
            let mut base = parent(&from);
            let mut rest = &text[i + "super::".len()..];
            while let Some(r) = rest.strip_prefix("super::") {
                base = parent(&base);
                rest = r;
            }
            for tail in path_after(rest) {
                // `super::Evidence` names the parent itself: an item of it.
                let mut segs: Vec<String> = base
                    .split("::")
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .collect();
                segs.extend(tail);
                refer(segs);
            }
        }
        for child in &children {
            let pat = format!("{child}::");
            for (i, _) in text.match_indices(&pat) {
                if starts_word(i) {
                    for tail in path_after(&text[i..]) {
                        let mut segs: Vec<String> = from.split("::").map(str::to_string).collect();
                        segs.extend(tail);
                        refer(segs);
                    }
                }
            }
        }
    }
    graph
}

/// The path at the start of `text` as segments, or each path of a `{…}`
/// group (at the start or after a prefix: `a::{b, c::d}`).
fn path_after(text: &str) -> Vec<Vec<String>> {
    if let Some(group) = text.strip_prefix('{') {
        let group = &group[..group.find('}').unwrap_or(group.len())];
        return group
            .split(',')
            .map(|item| item.split("::").map(ident).collect())
            .collect();
    }
    let mut segs = Vec::new();
    let mut rest = text;
    loop {
        let id = ident(rest);
        if id.is_empty() {
            break;
        }
        rest = &rest.trim_start()[id.len()..];
        segs.push(id);
        match rest.strip_prefix("::") {
            Some(r) if r.starts_with('{') => {
                return path_after(r)
                    .into_iter()
                    .map(|tail| segs.iter().cloned().chain(tail).collect())
                    .collect();
            }
            Some(r) => rest = r,
            None => break,
        }
    }
    vec![segs]
}

/// The identifier at the start of `text`.
fn ident(text: &str) -> String {
    text.trim_start()
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect()
}

/// Each pair of modules that import each other, directly or through others.
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let reaches = |from: &str, to: &str| {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.to_string()];
        while let Some(m) = stack.pop() {
            for n in graph.get(&m).into_iter().flatten() {
                if n == to {
                    return true;
                }
                if seen.insert(n.clone()) {
                    stack.push(n.clone());
                }
            }
        }
        false
    };
    let mut found = Vec::new();
    for (m, edges) in graph {
        for n in edges {
            if m < n && reaches(n, m) {
                found.push(format!("{m} imports {n}, and {n} imports {m} back"));
            }
        }
    }
    found
}

/// Each crate's files, by the directory holding its `src/`.
fn crates(files: &[(String, String)]) -> BTreeMap<String, Vec<(String, String)>> {
    let mut by_crate: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    for (p, text) in files {
        if !p.ends_with(".rs") {
            continue;
        }
        let Some(i) = p.find("src/").filter(|&i| i == 0 || p[..i].ends_with('/')) else {
            continue;
        };
        by_crate
            .entry(p[..i].to_string())
            .or_default()
            .push((p[i..].to_string(), text.clone()));
    }
    by_crate
}

#[test]
fn no_module_imports_one_that_imports_it_back() {
    let files = tracked();
    let mut violations = Vec::new();
    for (krate, files) in crates(&files) {
        for c in cycles(&module_graph(&files)) {
            violations.push(format!(
                "{}: {c}",
                if krate.is_empty() { "." } else { &krate }
            ));
        }
    }
    report("import cycles", violations);
}

#[test]
fn the_cycle_rule_finds_a_cycle_through_a_third_module_and_a_reexport() {
    let file = |p: &str, t: &str| (p.to_string(), t.to_string());
    let three = [
        file("src/a.rs", "use crate::b::f;"),
        file("src/b.rs", "fn g() { crate::c::h() }"),
        file("src/c/mod.rs", "use crate::{a::x, Error};"),
        file("src/lib.rs", "mod a; mod b; mod c;"),
    ];
    assert_eq!(
        cycles(&module_graph(&three)).len(),
        2,
        "a-b and a-c, both through c"
    );
    let reexport = [
        file("src/a.rs", "pub struct Error; fn f() { crate::b::g() }"),
        file("src/b.rs", "fn g() -> crate::Error { todo!() }"),
        file("src/lib.rs", "mod a; mod b;\npub use a::{Error};"),
    ];
    assert_eq!(cycles(&module_graph(&reexport)).len(), 1);
    let layered = [
        file("src/a.rs", "use crate::b::f;"),
        file("src/b.rs", "use crate::Error;"),
        file("src/lib.rs", "pub struct Error;"),
    ];
    assert!(cycles(&module_graph(&layered)).is_empty());
    // Nested modules: two siblings through `super::`, and a child that
    // reaches for its parent's item while the parent calls into it.
    let nested = [
        file(
            "src/s/mod.rs",
            "mod judge;\nmod record;\npub struct Args;\nfn f() { judge::run() }",
        ),
        file(
            "src/s/judge.rs",
            "use super::record::Check;\nuse super::Args;",
        ),
        file("src/s/record.rs", "fn g() { super::judge::ids() }"),
        file("src/lib.rs", "mod s;"),
    ];
    let found = cycles(&module_graph(&nested));
    assert_eq!(
        found,
        [
            "s imports s::judge, and s::judge imports s back",
            "s::judge imports s::record, and s::record imports s::judge back",
        ],
    );
    // The same, layered: the judge owns its types, the record reads them,
    // and a test module may reach anywhere.
    let layered = [
        file(
            "src/s/mod.rs",
            "mod judge;\nmod record;\nfn f() { judge::run() }",
        ),
        file(
            "src/s/judge.rs",
            "pub struct Args;\n#[cfg(test)]\nmod tests { use super::super::record::x; }",
        ),
        file("src/s/record.rs", "use super::judge::{Args, ids};"),
        file("src/lib.rs", "mod s;"),
    ];
    assert!(cycles(&module_graph(&layered)).is_empty());
}
