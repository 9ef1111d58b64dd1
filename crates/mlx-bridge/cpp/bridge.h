// Shared C++ side of the bridge: the opaque types Rust sees and the
// conversions every area needs. Each `src/ffi/<area>.rs` includes this
// header; the function bodies live in `cpp/<area>.cc`.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "mlx/array.h"
#include "mlx/compile_impl.h"
#include "mlx/device.h"
#include "mlx/export.h"
#include "mlx/fast.h"
#include "mlx/linalg.h"
#include "mlx/version.h"
#include "mlx/memory.h"
#include "mlx/ops.h"
#include "mlx/random.h"
#include "mlx/stream.h"
#include "mlx/transforms.h"
#include "rust/cxx.h"

namespace mlx_bridge {

namespace mx = mlx::core;

// The source of truth for the dtype enum; `ffi/array.rs` declares it as an
// extern enum so cxx static-asserts that both sides agree.
enum class Dtype : std::uint8_t {
  Bool = 0,
  U8,
  U16,
  U32,
  U64,
  I8,
  I16,
  I32,
  I64,
  F16,
  F32,
  F64,
  BF16,
  C64,
};

// One MLX array. Copying an `mx::array` shares the graph node, so cloning
// this struct gives Rust the same semantics as MLX's C++/Python copies.
struct Array {
  mx::array a;
};

// Many arrays, for every op that takes or returns a vector of them.
struct ArrayList {
  std::vector<mx::array> v;
};

using ArrayFn = std::function<std::vector<mx::array>(const std::vector<mx::array>&)>;

// A callable C++ function object over arrays: a Rust closure, or the result
// of transforming one (compile, vmap, checkpoint, custom_vjp).
// MLX 0.32 made the compile cache per thread: an entry is erased through
// the cache it was made in.
#if MLX_VERSION_NUMERIC >= 32000
#define MLX_BRIDGE_CACHE_PER_THREAD 1
#endif

struct Function {
  ArrayFn f;
  // Non-zero for compiled functions: the key of their compile-cache entry.
  std::uintptr_t compile_id = 0;
#ifdef MLX_BRIDGE_CACHE_PER_THREAD
  mlx::core::detail::CompileCacheWeakPtr compile_cache{};
#endif
};

// Opaque Rust types, defined by `ffi/transforms.rs`.
struct RustFn;
struct RustVjpFn;

// ---- conversions shared by all areas ----

mx::Dtype to_mx(Dtype d);
Dtype from_mx(mx::Dtype d);

inline mx::Shape to_shape(rust::Slice<const std::int32_t> s) {
  return mx::Shape(s.begin(), s.end());
}

inline std::vector<int> to_ints(rust::Slice<const std::int32_t> s) {
  return std::vector<int>(s.begin(), s.end());
}

inline std::unique_ptr<Array> wrap(mx::array a) {
  return std::make_unique<Array>(Array{std::move(a)});
}

inline std::unique_ptr<ArrayList> wrap_list(std::vector<mx::array> v) {
  return std::make_unique<ArrayList>(ArrayList{std::move(v)});
}

// linalg (and its helpers) is implemented for the CPU only; naming the
// device keeps it working where the default device is the GPU.
inline mx::StreamOrDevice cpu() {
  return mx::Device(mx::Device::cpu);
}

// ---- array.cc ----
std::unique_ptr<Array> array_from_f32(rust::Slice<const float> data, rust::Slice<const std::int32_t> shape);
std::unique_ptr<Array> array_from_i32(rust::Slice<const std::int32_t> data, rust::Slice<const std::int32_t> shape);
std::unique_ptr<Array> array_from_u32(rust::Slice<const std::uint32_t> data, rust::Slice<const std::int32_t> shape);
std::unique_ptr<Array> array_from_i64(rust::Slice<const std::int64_t> data, rust::Slice<const std::int32_t> shape);
std::unique_ptr<Array> array_from_f64(rust::Slice<const double> data, rust::Slice<const std::int32_t> shape);
std::unique_ptr<Array> array_from_u8(rust::Slice<const std::uint8_t> data, rust::Slice<const std::int32_t> shape);
std::unique_ptr<Array> array_from_bool(rust::Slice<const bool> data, rust::Slice<const std::int32_t> shape);
std::unique_ptr<Array> array_scalar_f32(float v);
std::unique_ptr<Array> array_scalar_i32(std::int32_t v);
std::unique_ptr<Array> array_clone(const Array& a);
rust::Vec<std::int32_t> array_shape(const Array& a);
Dtype array_dtype(const Array& a);
std::size_t array_size(const Array& a);
std::size_t array_ndim(const Array& a);
std::size_t array_nbytes(const Array& a);
std::size_t array_id(const Array& a);
void array_eval(const Array& a);
void array_copy_bytes(const Array& a, rust::Slice<std::uint8_t> out);

std::unique_ptr<ArrayList> array_list_new();
void array_list_push(ArrayList& list, const Array& a);
std::size_t array_list_len(const ArrayList& list);
std::unique_ptr<Array> array_list_get(const ArrayList& list, std::size_t i);

void eval(const ArrayList& list);
void synchronize();

// ---- ops.cc ----
std::unique_ptr<Array> arange(double start, double stop, double step, Dtype dtype);
std::unique_ptr<Array> zeros(rust::Slice<const std::int32_t> shape, Dtype dtype);
std::unique_ptr<Array> ones(rust::Slice<const std::int32_t> shape, Dtype dtype);
std::unique_ptr<Array> full_f64(rust::Slice<const std::int32_t> shape, double value, Dtype dtype);
std::unique_ptr<Array> astype(const Array& a, Dtype dtype);
std::unique_ptr<Array> matmul(const Array& a, const Array& b);
std::unique_ptr<Array> add(const Array& a, const Array& b);
std::unique_ptr<Array> subtract(const Array& a, const Array& b);
std::unique_ptr<Array> multiply(const Array& a, const Array& b);
std::unique_ptr<Array> divide(const Array& a, const Array& b);
std::unique_ptr<Array> maximum(const Array& a, const Array& b);
std::unique_ptr<Array> greater(const Array& a, const Array& b);
std::unique_ptr<Array> equal(const Array& a, const Array& b);
std::unique_ptr<Array> array_equal(const Array& a, const Array& b, bool equal_nan);
std::unique_ptr<Array> abs(const Array& a);
std::unique_ptr<Array> negative(const Array& a);
std::unique_ptr<Array> exp(const Array& a);
std::unique_ptr<Array> sqrt(const Array& a);
std::unique_ptr<Array> square(const Array& a);
std::unique_ptr<Array> real(const Array& a);
std::unique_ptr<Array> imag(const Array& a);
std::unique_ptr<Array> stop_gradient(const Array& a);
std::unique_ptr<Array> reshape(const Array& a, rust::Slice<const std::int32_t> shape);
std::unique_ptr<Array> transpose(const Array& a);
std::unique_ptr<Array> transpose_axes(const Array& a, rust::Slice<const std::int32_t> axes);
std::unique_ptr<Array> slice(const Array& a, rust::Slice<const std::int32_t> start,
                             rust::Slice<const std::int32_t> stop,
                             rust::Slice<const std::int32_t> strides);
std::unique_ptr<ArrayList> split(const Array& a, std::int32_t num_splits, std::int32_t axis);
std::unique_ptr<ArrayList> split_at(const Array& a, rust::Slice<const std::int32_t> indices,
                                    std::int32_t axis);
std::unique_ptr<Array> concatenate(const ArrayList& arrays, std::int32_t axis);
std::unique_ptr<Array> sum_all(const Array& a, bool keepdims);
std::unique_ptr<Array> sum_axes(const Array& a, rust::Slice<const std::int32_t> axes, bool keepdims);
std::unique_ptr<Array> mean_axes(const Array& a, rust::Slice<const std::int32_t> axes, bool keepdims);
std::unique_ptr<ArrayList> divmod(const Array& a, const Array& b);
std::unique_ptr<ArrayList> quantize(const Array& w, std::int32_t group_size, std::int32_t bits);
std::unique_ptr<Array> dequantize(const Array& wq, const Array& scales, const Array& biases,
                                  std::int32_t group_size, std::int32_t bits);
std::unique_ptr<ArrayList> depends(const ArrayList& inputs, const ArrayList& deps);
std::unique_ptr<Array> rms_norm(const Array& x, std::unique_ptr<Array> weight, float eps);
std::unique_ptr<Array> layer_norm(const Array& x, std::unique_ptr<Array> weight,
                                  std::unique_ptr<Array> bias, float eps);

// ---- random.cc ----
std::unique_ptr<Array> random_key(std::uint64_t seed);
std::unique_ptr<ArrayList> random_split(const Array& key);
std::unique_ptr<Array> random_split_n(const Array& key, std::int32_t num);
std::unique_ptr<Array> random_normal(rust::Slice<const std::int32_t> shape, Dtype dtype, float loc,
                                     float scale, const Array& key);
std::unique_ptr<Array> random_uniform(float low, float high, rust::Slice<const std::int32_t> shape,
                                      Dtype dtype, const Array& key);
std::unique_ptr<Array> random_bits(rust::Slice<const std::int32_t> shape, const Array& key);

// ---- linalg.cc ----
std::unique_ptr<ArrayList> linalg_qr(const Array& a);
std::unique_ptr<ArrayList> linalg_svd(const Array& a, bool compute_uv);
std::unique_ptr<ArrayList> linalg_eigh(const Array& a, rust::Str uplo);
std::unique_ptr<ArrayList> linalg_eig(const Array& a);
std::unique_ptr<ArrayList> linalg_lu(const Array& a);
std::unique_ptr<ArrayList> linalg_lu_factor(const Array& a);
std::unique_ptr<Array> linalg_inv(const Array& a);
std::unique_ptr<Array> linalg_norm(const Array& a);

// ---- transforms.cc ----
std::unique_ptr<Function> function_from_rust(rust::Box<RustFn> f);
std::unique_ptr<ArrayList> function_call(const Function& f, const ArrayList& inputs);
std::unique_ptr<Function> compile(const Function& f, bool shapeless);
void compile_erase(const Function& f);
std::unique_ptr<Function> vmap(const Function& f, rust::Slice<const std::int32_t> in_axes,
                               rust::Slice<const std::int32_t> out_axes);
std::unique_ptr<Function> checkpoint(const Function& f);
std::unique_ptr<Function> custom_vjp(const Function& f, rust::Box<RustVjpFn> vjp_fn);
std::unique_ptr<Function> value_and_grad(const Function& f,
                                         rust::Slice<const std::int32_t> argnums);
std::unique_ptr<Function> grad(const Function& f, rust::Slice<const std::int32_t> argnums);
std::unique_ptr<ArrayList> vjp(const Function& f, const ArrayList& primals,
                               const ArrayList& cotangents);
std::unique_ptr<ArrayList> jvp(const Function& f, const ArrayList& primals,
                               const ArrayList& tangents);
void export_function(rust::Str path, const Function& f, const ArrayList& example, bool shapeless);
std::unique_ptr<Function> import_function(rust::Str path);

// ---- memory.cc ----
std::size_t get_active_memory();
std::size_t get_peak_memory();
std::size_t get_cache_memory();
void reset_peak_memory();
void clear_cache();
std::size_t set_cache_limit(std::size_t limit);

// ---- fuzz.cc (feature `fuzz`) ----
void list_assign_copy(ArrayList& list, std::size_t i, const Array& a);
std::unique_ptr<Array> list_take(ArrayList& list, std::size_t i);
void list_assign_move(ArrayList& list, std::size_t i, Array& a);
void list_overwrite(ArrayList& list, std::size_t i, const Array& a);
void list_erase(ArrayList& list, std::size_t i);
void release_together(std::unique_ptr<Array> a, std::unique_ptr<Array> b);
void async_eval(const ArrayList& list);
std::int64_t live_array_descs();
rust::String buffer_overrun(const Array& a);
void set_compile_fusion(bool fuse);

} // namespace mlx_bridge
