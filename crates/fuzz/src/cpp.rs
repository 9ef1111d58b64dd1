//! A program as a standalone C++ file against an MLX install prefix: the
//! faithful form of a finding, since every release path (destructor, copy
//! and move assignment, `overwrite_descriptor`, erase) is written as such.
//!
//! `main` runs the program once to warm up, then again, and prints what the
//! second run left behind (`leaked_bytes N`, and `leaked_descriptors N` on a
//! census build). It exits 1 if anything was left, or if the program threw
//! (`error: ...`), so the file shows its failure by itself. After each
//! `eval` it checks, as the fuzzer's worker does, that every evaluated
//! array's data lies within its buffer (`error: overrun: ...`).

use crate::ir::*;
use std::collections::BTreeSet;
use std::fmt::Write as _;

/// How to build the file against `prefix`.
pub fn build_command(source: &str, exe: &str, prefix: &str) -> String {
    format!("g++ -std=c++20 -O1 {source} -o {exe} -I{prefix}/include -L{prefix}/lib -lmlx -Wl,-rpath,{prefix}/lib")
}

const PRELUDE: &str = r#"#include <atomic>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <unistd.h>

#include "mlx/mlx.h"

namespace mx = mlx::core;
using Arrays = std::vector<mx::array>;
using Fn = std::function<Arrays(const Arrays&)>;

// The live-descriptor census of the fork's census builds; null elsewhere.
extern "C" __attribute__((weak)) long long mlx_fork_live_array_descs();

namespace {

mx::array normal(mx::Shape shape, int seed) {
  return mx::random::normal(shape, mx::float32, 0.0f, 1.0f, mx::random::key(seed));
}

Arrays group(std::pair<mx::array, mx::array> p) {
  return {std::move(p.first), std::move(p.second)};
}

Arrays group(Arrays v) {
  return v;
}

// Ends a value's life here: its destructor runs (a move leaves nothing).
template <class T>
void drop(T& x) {
  T gone = std::move(x);
}

// Two threads let go of `a` and `b` at the same instant: a spin barrier,
// then a random spin of up to 2048 iterations on each side.
void release_together(mx::array a, mx::array b) {
  static std::mt19937 rng(std::random_device{}());
  std::uniform_int_distribution<int> spins(0, 2048);
  int delay_a = spins(rng), delay_b = spins(rng);
  std::atomic<int> ready{0};
  auto go = [&ready](int delay, mx::array x) {
    ready.fetch_add(1);
    while (ready.load() < 2) {
    }
    for (volatile int k = 0; k < delay; k = k + 1) {
    }
    drop(x);
  };
  std::thread other(go, delay_a, std::move(a));
  go(delay_b, std::move(b));
  other.join();
}

// `f` exported, traced on `example`, to a file and imported back. The
// imported constants are read from the file when first evaluated: the
// unlinked file stays open while the function lives.
Fn export_import(const Fn& f, const Arrays& example, bool shapeless) {
  static int count = 0;
  auto path = std::filesystem::temp_directory_path() /
      ("mlx-fuzz-" + std::to_string(getpid()) + "-" + std::to_string(count++) + ".mlxfn");
  mx::export_function(path.string(), f, example, shapeless);
  auto imported = std::make_shared<mx::ImportedFunction>(mx::import_function(path.string()));
  std::filesystem::remove(path);
  return [imported](const Arrays& in) { return (*imported)(in); };
}

const mx::StreamOrDevice cpu = mx::Device(mx::Device::cpu);

// Ops run over a contiguous input's data_size elements from its offset:
// an array claiming more than its buffer holds makes them overrun it.
void check(const Arrays& v) {
  mx::eval(v);
  for (const auto& a : v) {
    if (a.offset() < 0 || static_cast<std::size_t>(a.offset()) + a.data_size() * a.itemsize() > a.buffer_size()) {
      throw std::runtime_error(
          "overrun: an array of " + std::to_string(a.size()) + " elements claims " +
          std::to_string(a.data_size()) + " of a " + std::to_string(a.buffer_size()) + "-byte buffer");
    }
  }
}
"#;

const MAIN: &str = r#"
} // namespace

int main() {
  try {
    program(); // warm-up: first-use allocations are not a leak
    mx::synchronize();
    long long bytes = static_cast<long long>(mx::get_active_memory());
    long long descs = mlx_fork_live_array_descs ? mlx_fork_live_array_descs() : 0;
    program();
    mx::synchronize();
    bytes = static_cast<long long>(mx::get_active_memory()) - bytes;
    std::printf("leaked_bytes %lld\n", bytes);
    if (mlx_fork_live_array_descs) {
      descs = mlx_fork_live_array_descs() - descs;
      std::printf("leaked_descriptors %lld\n", descs);
      bytes += descs;
    }
    return bytes != 0 ? 1 : 0;
  } catch (const std::exception& e) {
    std::printf("error: %s\n", e.what());
    return 1;
  }
}
"#;

fn shape(s: &[i32]) -> String {
    format!(
        "{{{}}}",
        s.iter().map(i32::to_string).collect::<Vec<_>>().join(", ")
    )
}

fn list(refs: &[Ref]) -> String {
    format!(
        "{{{}}}",
        refs.iter()
            .map(Ref::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    )
}

fn expr(op: &Op) -> String {
    match op {
        Op::Normal { shape: s, seed } => format!("normal({}, {seed})", shape(s)),
        // The IR names its unary ops, binary ops and reductions as MLX's C++ API does.
        Op::Unary(_, a) => format!("mx::{}({a})", op.name()),
        Op::Binary(_, a, b) => format!("mx::{}({a}, {b})", op.name()),
        Op::Matmul(a, b) => format!("mx::matmul({a}, {b})"),
        Op::Reshape(a, s) => format!("mx::reshape({a}, {})", shape(s)),
        Op::Slice { a, start, stop } => {
            format!("mx::slice({a}, {}, {})", shape(start), shape(stop))
        }
        Op::Concat { parts, axis } => format!("mx::concatenate({}, {axis})", list(parts)),
        Op::Reduce { a, axis, .. } => format!("mx::{}({a}, {axis})", op.name()),
        Op::Split { a, parts, axis } => format!("mx::split({a}, {parts}, {axis})"),
        Op::SplitAt { a, indices, axis } => {
            format!("mx::split({a}, mx::Shape{}, {axis})", shape(indices))
        }
        Op::Divmod(a, b) => format!("mx::divmod({a}, {b})"),
        Op::Linalg(l, a) => match l {
            Linalg::Qr => format!("group(mx::linalg::qr({a}, cpu))"),
            Linalg::Svd => format!("mx::linalg::svd({a}, true, cpu)"),
            Linalg::Eigh => format!("group(mx::linalg::eigh({a}, \"L\", cpu))"),
            Linalg::Eig => format!("group(mx::linalg::eig({a}, cpu))"),
            Linalg::Lu => format!("mx::linalg::lu({a}, cpu)"),
            Linalg::LuFactor => format!("group(mx::linalg::lu_factor({a}, cpu))"),
        },
        Op::Quantize(a) => format!("mx::quantize({a}, {QUANT_GROUP}, {QUANT_BITS}, \"affine\")"),
        Op::Depends { inputs, deps } => {
            format!("mx::depends(Arrays{}, Arrays{})", list(inputs), list(deps))
        }
        Op::KeySplit { seed } => format!("group(mx::random::split(mx::random::key({seed})))"),
        Op::Call { f, args } => format!("{f}({})", list(args)),
    }
}

/// The functions a closure body calls (captured by value like its arrays).
fn called(body: &[Stmt]) -> BTreeSet<FnId> {
    body.iter()
        .filter_map(|s| {
            if let Stmt::Let {
                op: Op::Call { f, .. },
                ..
            } = s
            {
                Some(*f)
            } else {
                None
            }
        })
        .collect()
}

/// Zeros of each type, as an `Arrays` initializer.
fn zeros(tys: &[Ty]) -> String {
    let each: Vec<String> = tys
        .iter()
        .map(|t| format!("mx::zeros({}, mx::{})", shape(&t.shape), t.dtype.mlx_name()))
        .collect();
    format!("Arrays{{{}}}", each.join(", "))
}

fn stmt(out: &mut String, s: &Stmt, sigs: &std::collections::BTreeMap<FnId, Vec<Ty>>, indent: &str) {
    let w = |out: &mut String, line: String| writeln!(out, "{indent}{line}").unwrap();
    match s {
        Stmt::Let { out: v, op } => {
            let ty = if op.is_group() { "Arrays" } else { "mx::array" };
            w(out, format!("{ty} {v} = {};", expr(op)));
        }
        Stmt::Def { id, def } => match def {
            FnDef::Closure { params, captures, body, results } => {
                let mut caps: Vec<String> = captures.iter().map(Var::to_string).collect();
                caps.extend(called(body).iter().map(FnId::to_string));
                w(out, format!("Fn {id} = [{}](const Arrays& in) -> Arrays {{", caps.join(", ")));
                let inner = format!("{indent}  ");
                for (i, (p, _)) in params.iter().enumerate() {
                    writeln!(out, "{inner}mx::array {p} = in[{i}];").unwrap();
                }
                for s in body {
                    stmt(out, s, sigs, &inner);
                }
                writeln!(out, "{inner}return {};", list(results)).unwrap();
                w(out, "};".into());
            }
            FnDef::Compile { f, shapeless } => w(out, format!("Fn {id} = mx::compile({f}, {shapeless});")),
            FnDef::Checkpoint { f } => w(out, format!("Fn {id} = mx::checkpoint({f});")),
            FnDef::CustomVjp { f } => w(
                out,
                format!("Fn {id} = mx::custom_vjp({f}, [](const Arrays& p, const Arrays& c, const Arrays&) {{ Arrays g; for (auto& x : p) g.push_back(mx::multiply(x, mx::sum(c[0]))); return g; }});"),
            ),
            FnDef::Vjp { f } | FnDef::Jvp { f } => {
                let n = sigs.get(f).map_or(0, Vec::len);
                let t = if matches!(def, FnDef::Vjp { .. }) { "vjp" } else { "jvp" };
                w(
                    out,
                    format!("Fn {id} = [{f}](const Arrays& in) -> Arrays {{ Arrays p(in.begin(), in.begin() + {n}), c(in.begin() + {n}, in.end()); auto [o, d] = mx::{t}({f}, p, c); o.insert(o.end(), d.begin(), d.end()); return o; }};"),
                );
            }
            FnDef::Vmap { f } => w(out, format!("Fn {id} = mx::vmap({f});")),
            FnDef::ExportImport { f, shapeless } => {
                let example = zeros(sigs.get(f).map_or(&[][..], Vec::as_slice));
                w(out, format!("Fn {id} = export_import({f}, {example}, {shapeless});"))
            }
            FnDef::Grad { f } | FnDef::ValueAndGrad { f } => {
                let n = sigs.get(f).map_or(0, Vec::len);
                let argnums = (0..n).map(|i| i.to_string()).collect::<Vec<_>>().join(", ");
                if matches!(def, FnDef::Grad { .. }) {
                    w(out, format!("Fn {id} = mx::grad(std::function<mx::array(const Arrays&)>([{f}](const Arrays& in) {{ return mx::sum({f}(in)[0]); }}), std::vector<int>{{{argnums}}});"));
                } else {
                    w(out, format!("Fn {id} = [vg = mx::value_and_grad(Fn([{f}](const Arrays& in) {{ Arrays o = {f}(in); o[0] = mx::sum(o[0]); return o; }}), std::vector<int>{{{argnums}}})](const Arrays& in) -> Arrays {{ auto [v, g] = vg(in); v.insert(v.end(), g.begin(), g.end()); return v; }};"));
                }
            }
        },
        Stmt::Eval { refs, asynchronous } => {
            w(out, format!("mx::{}({});", if *asynchronous { "async_eval" } else { "eval" }, list(refs)));
            w(out, format!("check({});", list(refs)));
        }
        Stmt::Synchronize => w(out, "mx::synchronize();".into()),
        Stmt::Drop(v) => w(out, format!("drop({v});")),
        Stmt::DropFn(f) => w(out, format!("{f} = nullptr;")),
        Stmt::Assign { dst, src, how } => w(
            out,
            match how {
                How::Copy => format!("{dst} = {src};"),
                How::Move => format!("{dst} = std::move({src});"),
                How::Overwrite => format!("{dst}.overwrite_descriptor({src});"),
            },
        ),
        Stmt::Erase { group, index } => w(out, format!("{group}.erase({group}.begin() + {index});")),
        Stmt::ReleaseTogether { refs: [a, b] } => w(out, format!("release_together(std::move({a}), std::move({b}));")),
        Stmt::Release(r) => w(out, format!("drop({r});")),
    }
}

/// The whole C++ file; `title` goes in its first comment.
pub fn print(p: &Program, title: &str) -> String {
    // Each function's parameters: how many primals a vjp/jvp splits off,
    // and the example arrays an export traces.
    let mut scope = Scope::default();
    let mut params = std::collections::BTreeMap::new();
    for s in &p.stmts {
        let _ = scope.stmt(s);
        if let Stmt::Def { id, .. } = s {
            if let Some(sig) = scope.fns.get(id) {
                params.insert(*id, sig.params.clone());
            }
        }
    }
    let mut out = String::new();
    writeln!(out, "// {title}").unwrap();
    writeln!(
        out,
        "// Written by mlx-fuzz. Build: {}",
        build_command("repro.cpp", "repro", "<prefix>")
    )
    .unwrap();
    out += PRELUDE;
    out += "\nvoid program() {\n";
    for s in &p.stmts {
        stmt(&mut out, s, &params, "  ");
    }
    out += "}\n";
    out += MAIN;
    out
}
