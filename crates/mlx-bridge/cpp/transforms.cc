// Function transforms over Rust closures. A Rust closure becomes an
// `ArrayFn` that calls back into Rust; an `Err` (or caught panic) there comes
// back as a thrown `rust::Error`, which MLX sees as an ordinary exception and
// which cxx turns into `Err` again at the outer call.
#include "mlx-bridge/src/ffi/transforms.rs.h"

namespace mlx_bridge {

namespace {

// std::function must be copyable while rust::Box is move-only: share the box.
// The Rust closure (and any arrays it captured) is dropped together with the
// last copy of the std::function, e.g. when MLX drops a graph node holding it.
ArrayFn from_rust(rust::Box<RustFn> f) {
  auto shared = std::make_shared<rust::Box<RustFn>>(std::move(f));
  return [shared](const std::vector<mx::array>& inputs) {
    ArrayList in{inputs};
    return std::move(call_rust_fn(**shared, in)->v);
  };
}

} // namespace

std::unique_ptr<Function> function_from_rust(rust::Box<RustFn> f) {
  return std::make_unique<Function>(Function{from_rust(std::move(f))});
}

std::unique_ptr<ArrayList> function_call(const Function& f, const ArrayList& inputs) {
  return wrap_list(f.f(inputs.v));
}

std::unique_ptr<Function> compile(const Function& f, bool shapeless) {
  // The Function's own heap address is the compile-cache key: unique while
  // it lives, and Rust erases the entry before freeing it.
  auto out = std::make_unique<Function>();
  auto id = reinterpret_cast<std::uintptr_t>(out.get());
  auto compiled = mx::detail::compile(f.f, id, shapeless);
  out->compile_id = id;
#ifdef MLX_BRIDGE_CACHE_PER_THREAD
  out->compile_cache = mx::detail::compile_cache();
#endif
  out->f = [compiled = std::move(compiled), owner = out.get()](const std::vector<mx::array>& inputs) {
    try {
      return compiled(inputs);
    } catch (...) {
      // MLX marks a cache entry filled *before* tracing; if the trace throws,
      // an empty entry (no inputs, no tape) stays behind: dead weight, and
      // for a function without inputs every later call would match it and
      // silently return no outputs. Drop it so the next call retraces.
      compile_erase(*owner);
      throw;
    }
  };
  return out;
}

void compile_erase(const Function& f) {
#ifdef MLX_BRIDGE_CACHE_PER_THREAD
  mx::detail::compile_erase(f.compile_cache, f.compile_id);
#else
  mx::detail::compile_erase(f.compile_id);
#endif
}

std::unique_ptr<Function> vmap(const Function& f, rust::Slice<const std::int32_t> in_axes,
                               rust::Slice<const std::int32_t> out_axes) {
  return std::make_unique<Function>(Function{mx::vmap(f.f, to_ints(in_axes), to_ints(out_axes))});
}

std::unique_ptr<Function> checkpoint(const Function& f) {
  return std::make_unique<Function>(Function{mx::checkpoint(f.f)});
}

std::unique_ptr<Function> custom_vjp(const Function& f, rust::Box<RustVjpFn> vjp_fn) {
  auto shared = std::make_shared<rust::Box<RustVjpFn>>(std::move(vjp_fn));
  auto vjp_f = [shared](const std::vector<mx::array>& primals,
                        const std::vector<mx::array>& cotangents,
                        const std::vector<mx::array>& outputs) {
    ArrayList p{primals}, c{cotangents}, o{outputs};
    return std::move(call_rust_vjp_fn(**shared, p, c, o)->v);
  };
  return std::make_unique<Function>(Function{mx::custom_vjp(f.f, std::move(vjp_f))});
}

// A function returning the values followed by the gradients of the first
// value with respect to the inputs `argnums` (MLX checks they exist and
// that the first value is a scalar, when it is called).
std::unique_ptr<Function> value_and_grad(const Function& f,
                                         rust::Slice<const std::int32_t> argnums) {
  auto vg = mx::value_and_grad(f.f, to_ints(argnums));
  return std::make_unique<Function>(Function{[vg](const std::vector<mx::array>& inputs) {
    auto [values, grads] = vg(inputs);
    values.insert(values.end(), grads.begin(), grads.end());
    return values;
  }});
}

// MLX's `grad` of the function's first output.
std::unique_ptr<Function> grad(const Function& f, rust::Slice<const std::int32_t> argnums) {
  auto inner = f.f;
  std::function<mx::array(const std::vector<mx::array>&)> first =
      [inner](const std::vector<mx::array>& inputs) {
        auto outs = inner(inputs);
        if (outs.empty()) {
          throw std::invalid_argument("[grad] the function returned no array");
        }
        return outs[0];
      };
  return std::make_unique<Function>(Function{mx::grad(first, to_ints(argnums))});
}

// Returns the outputs followed by the vjps (one per primal).
std::unique_ptr<ArrayList> vjp(const Function& f, const ArrayList& primals,
                               const ArrayList& cotangents) {
  auto [outs, vjps] = mx::vjp(f.f, primals.v, cotangents.v);
  outs.insert(outs.end(), vjps.begin(), vjps.end());
  return wrap_list(std::move(outs));
}

// Returns the outputs followed by the jvps (one per output).
std::unique_ptr<ArrayList> jvp(const Function& f, const ArrayList& primals,
                               const ArrayList& tangents) {
  auto [outs, jvps] = mx::jvp(f.f, primals.v, tangents.v);
  outs.insert(outs.end(), jvps.begin(), jvps.end());
  return wrap_list(std::move(outs));
}

// Traces `f` on arrays shaped as `example` and writes the trace to `path`.
void export_function(rust::Str path, const Function& f, const ArrayList& example, bool shapeless) {
  mx::export_function(std::string(path), f.f, example.v, shapeless);
}

// The function a file `export_function` wrote holds. Its constants are read
// from the file when they are first evaluated, so the file stays open (on
// POSIX systems it may be unlinked) for as long as a copy lives.
std::unique_ptr<Function> import_function(rust::Str path) {
  auto imported = std::make_shared<mx::ImportedFunction>(mx::import_function(std::string(path)));
  return std::make_unique<Function>(Function{[imported](const std::vector<mx::array>& inputs) {
    return (*imported)(inputs);
  }});
}

} // namespace mlx_bridge
