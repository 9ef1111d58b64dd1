// Array construction, inspection, data read-back and evaluation.
#include "mlx-bridge/src/ffi/array.rs.h"

#include <cstring>
#include <stdexcept>
#include <string>

namespace mlx_bridge {

mx::Dtype to_mx(Dtype d) {
  switch (d) {
    case Dtype::Bool: return mx::bool_;
    case Dtype::U8: return mx::uint8;
    case Dtype::U16: return mx::uint16;
    case Dtype::U32: return mx::uint32;
    case Dtype::U64: return mx::uint64;
    case Dtype::I8: return mx::int8;
    case Dtype::I16: return mx::int16;
    case Dtype::I32: return mx::int32;
    case Dtype::I64: return mx::int64;
    case Dtype::F16: return mx::float16;
    case Dtype::F32: return mx::float32;
    case Dtype::F64: return mx::float64;
    case Dtype::BF16: return mx::bfloat16;
    case Dtype::C64: return mx::complex64;
  }
  // Rust only passes declared variants, but cxx enums are open integers.
  throw std::invalid_argument("[mlx_bridge] unknown dtype code " +
                              std::to_string(static_cast<int>(d)));
}

Dtype from_mx(mx::Dtype d) {
  switch (d.val()) {
    case mx::Dtype::Val::bool_: return Dtype::Bool;
    case mx::Dtype::Val::uint8: return Dtype::U8;
    case mx::Dtype::Val::uint16: return Dtype::U16;
    case mx::Dtype::Val::uint32: return Dtype::U32;
    case mx::Dtype::Val::uint64: return Dtype::U64;
    case mx::Dtype::Val::int8: return Dtype::I8;
    case mx::Dtype::Val::int16: return Dtype::I16;
    case mx::Dtype::Val::int32: return Dtype::I32;
    case mx::Dtype::Val::int64: return Dtype::I64;
    case mx::Dtype::Val::float16: return Dtype::F16;
    case mx::Dtype::Val::float32: return Dtype::F32;
    case mx::Dtype::Val::float64: return Dtype::F64;
    case mx::Dtype::Val::bfloat16: return Dtype::BF16;
    case mx::Dtype::Val::complex64: return Dtype::C64;
  }
  // A dtype added by a newer MLX: Rust maps unknown codes to an error.
  return static_cast<Dtype>(255);
}

namespace {

// Copies `data` into a new MLX-owned buffer. Rust checked the length, but a
// second check keeps this function safe on its own.
template <typename T>
std::unique_ptr<Array> from_slice(rust::Slice<const T> data,
                                  rust::Slice<const std::int32_t> shape,
                                  mx::Dtype dtype) {
  auto s = to_shape(shape);
  std::size_t n = 1;
  for (auto d : s) {
    if (d < 0) {
      throw std::invalid_argument("[mlx_bridge] negative dimension in shape");
    }
    n *= static_cast<std::size_t>(d);
  }
  if (n != data.size()) {
    throw std::invalid_argument(
        "[mlx_bridge] data length " + std::to_string(data.size()) +
        " does not match shape size " + std::to_string(n));
  }
  return wrap(mx::array(data.data(), std::move(s), dtype));
}

} // namespace

std::unique_ptr<Array> array_from_f32(rust::Slice<const float> d, rust::Slice<const std::int32_t> s) {
  return from_slice(d, s, mx::float32);
}
std::unique_ptr<Array> array_from_i32(rust::Slice<const std::int32_t> d, rust::Slice<const std::int32_t> s) {
  return from_slice(d, s, mx::int32);
}
std::unique_ptr<Array> array_from_u32(rust::Slice<const std::uint32_t> d, rust::Slice<const std::int32_t> s) {
  return from_slice(d, s, mx::uint32);
}
std::unique_ptr<Array> array_from_i64(rust::Slice<const std::int64_t> d, rust::Slice<const std::int32_t> s) {
  return from_slice(d, s, mx::int64);
}
std::unique_ptr<Array> array_from_f64(rust::Slice<const double> d, rust::Slice<const std::int32_t> s) {
  return from_slice(d, s, mx::float64);
}
std::unique_ptr<Array> array_from_u8(rust::Slice<const std::uint8_t> d, rust::Slice<const std::int32_t> s) {
  return from_slice(d, s, mx::uint8);
}
std::unique_ptr<Array> array_from_bool(rust::Slice<const bool> d, rust::Slice<const std::int32_t> s) {
  return from_slice(d, s, mx::bool_);
}

std::unique_ptr<Array> array_scalar_f32(float v) {
  return wrap(mx::array(v));
}
std::unique_ptr<Array> array_scalar_i32(std::int32_t v) {
  return wrap(mx::array(v));
}

std::unique_ptr<Array> array_clone(const Array& a) {
  return wrap(a.a);
}

rust::Vec<std::int32_t> array_shape(const Array& a) {
  rust::Vec<std::int32_t> out;
  out.reserve(a.a.ndim());
  for (auto d : a.a.shape()) {
    out.push_back(d);
  }
  return out;
}

Dtype array_dtype(const Array& a) {
  return from_mx(a.a.dtype());
}
std::size_t array_size(const Array& a) {
  return a.a.size();
}
std::size_t array_ndim(const Array& a) {
  return a.a.ndim();
}
std::size_t array_nbytes(const Array& a) {
  return a.a.nbytes();
}
std::size_t array_id(const Array& a) {
  return a.a.id();
}

void array_eval(const Array& a) {
  mx::eval({a.a});
}

void array_copy_bytes(const Array& a, rust::Slice<std::uint8_t> out) {
  // Views (transpose, broadcast, strided slices) are not laid out densely;
  // materialise a row-major copy first.
  mx::array x = a.a;
  mx::eval({x});
  if (!x.flags().row_contiguous || x.data_size() != x.size()) {
    x = mx::contiguous(x);
    mx::eval({x});
  }
  if (out.size() != x.nbytes()) {
    throw std::invalid_argument(
        "[mlx_bridge] output buffer has " + std::to_string(out.size()) +
        " bytes, array has " + std::to_string(x.nbytes()));
  }
  if (x.nbytes() > 0) {
    std::memcpy(out.data(), x.data<std::uint8_t>(), x.nbytes());
  }
}

std::unique_ptr<ArrayList> array_list_new() {
  return std::make_unique<ArrayList>();
}
void array_list_push(ArrayList& list, const Array& a) {
  list.v.push_back(a.a);
}
std::size_t array_list_len(const ArrayList& list) {
  return list.v.size();
}
std::unique_ptr<Array> array_list_get(const ArrayList& list, std::size_t i) {
  return wrap(list.v.at(i));
}

void eval(const ArrayList& list) {
  mx::eval(list.v);
}

void synchronize() {
  mx::synchronize();
}

} // namespace mlx_bridge
