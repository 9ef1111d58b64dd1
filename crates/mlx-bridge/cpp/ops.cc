// Array operations. Shape/dtype checks in MLX throw while the op is being
// built, so each of these is `Result` on the Rust side.
#include "mlx-bridge/src/ffi/ops.rs.h"

#include <optional>

namespace mlx_bridge {

std::unique_ptr<Array> arange(double start, double stop, double step, Dtype dtype) {
  return wrap(mx::arange(start, stop, step, to_mx(dtype)));
}
std::unique_ptr<Array> zeros(rust::Slice<const std::int32_t> shape, Dtype dtype) {
  return wrap(mx::zeros(to_shape(shape), to_mx(dtype)));
}
std::unique_ptr<Array> ones(rust::Slice<const std::int32_t> shape, Dtype dtype) {
  return wrap(mx::ones(to_shape(shape), to_mx(dtype)));
}
std::unique_ptr<Array> full_f64(rust::Slice<const std::int32_t> shape, double value, Dtype dtype) {
  return wrap(mx::full(to_shape(shape), mx::array(value, to_mx(dtype)), to_mx(dtype)));
}
std::unique_ptr<Array> astype(const Array& a, Dtype dtype) {
  return wrap(mx::astype(a.a, to_mx(dtype)));
}

std::unique_ptr<Array> matmul(const Array& a, const Array& b) {
  return wrap(mx::matmul(a.a, b.a));
}
std::unique_ptr<Array> add(const Array& a, const Array& b) {
  return wrap(mx::add(a.a, b.a));
}
std::unique_ptr<Array> subtract(const Array& a, const Array& b) {
  return wrap(mx::subtract(a.a, b.a));
}
std::unique_ptr<Array> multiply(const Array& a, const Array& b) {
  return wrap(mx::multiply(a.a, b.a));
}
std::unique_ptr<Array> divide(const Array& a, const Array& b) {
  return wrap(mx::divide(a.a, b.a));
}
std::unique_ptr<Array> maximum(const Array& a, const Array& b) {
  return wrap(mx::maximum(a.a, b.a));
}
std::unique_ptr<Array> greater(const Array& a, const Array& b) {
  return wrap(mx::greater(a.a, b.a));
}
std::unique_ptr<Array> equal(const Array& a, const Array& b) {
  return wrap(mx::equal(a.a, b.a));
}
std::unique_ptr<Array> array_equal(const Array& a, const Array& b, bool equal_nan) {
  return wrap(mx::array_equal(a.a, b.a, equal_nan));
}

std::unique_ptr<Array> abs(const Array& a) {
  return wrap(mx::abs(a.a));
}
std::unique_ptr<Array> negative(const Array& a) {
  return wrap(mx::negative(a.a));
}
std::unique_ptr<Array> exp(const Array& a) {
  return wrap(mx::exp(a.a));
}
std::unique_ptr<Array> sqrt(const Array& a) {
  return wrap(mx::sqrt(a.a));
}
std::unique_ptr<Array> square(const Array& a) {
  return wrap(mx::square(a.a));
}
std::unique_ptr<Array> real(const Array& a) {
  return wrap(mx::real(a.a));
}
std::unique_ptr<Array> imag(const Array& a) {
  return wrap(mx::imag(a.a));
}
std::unique_ptr<Array> stop_gradient(const Array& a) {
  return wrap(mx::stop_gradient(a.a));
}

std::unique_ptr<Array> reshape(const Array& a, rust::Slice<const std::int32_t> shape) {
  return wrap(mx::reshape(a.a, to_shape(shape)));
}
std::unique_ptr<Array> transpose(const Array& a) {
  return wrap(mx::transpose(a.a));
}
std::unique_ptr<Array> transpose_axes(const Array& a, rust::Slice<const std::int32_t> axes) {
  return wrap(mx::transpose(a.a, to_ints(axes)));
}
std::unique_ptr<Array> slice(const Array& a, rust::Slice<const std::int32_t> start,
                             rust::Slice<const std::int32_t> stop,
                             rust::Slice<const std::int32_t> strides) {
  return wrap(mx::slice(a.a, to_shape(start), to_shape(stop), to_shape(strides)));
}
std::unique_ptr<ArrayList> split(const Array& a, std::int32_t num_splits, std::int32_t axis) {
  return wrap_list(mx::split(a.a, num_splits, axis));
}
std::unique_ptr<ArrayList> split_at(const Array& a, rust::Slice<const std::int32_t> indices,
                                    std::int32_t axis) {
  return wrap_list(mx::split(a.a, to_shape(indices), axis));
}
std::unique_ptr<Array> concatenate(const ArrayList& arrays, std::int32_t axis) {
  return wrap(mx::concatenate(arrays.v, axis));
}

std::unique_ptr<Array> sum_all(const Array& a, bool keepdims) {
  return wrap(mx::sum(a.a, keepdims));
}
std::unique_ptr<Array> sum_axes(const Array& a, rust::Slice<const std::int32_t> axes, bool keepdims) {
  return wrap(mx::sum(a.a, to_ints(axes), keepdims));
}
std::unique_ptr<Array> mean_axes(const Array& a, rust::Slice<const std::int32_t> axes, bool keepdims) {
  return wrap(mx::mean(a.a, to_ints(axes), keepdims));
}

std::unique_ptr<ArrayList> divmod(const Array& a, const Array& b) {
  return wrap_list(mx::divmod(a.a, b.a));
}

std::unique_ptr<ArrayList> quantize(const Array& w, std::int32_t group_size, std::int32_t bits) {
  // "affine" is the mode that yields (wq, scales, biases).
  return wrap_list(mx::quantize(w.a, group_size, bits, "affine"));
}
std::unique_ptr<Array> dequantize(const Array& wq, const Array& scales, const Array& biases,
                                  std::int32_t group_size, std::int32_t bits) {
  return wrap(mx::dequantize(wq.a, scales.a, biases.a, group_size, bits, "affine"));
}

std::unique_ptr<ArrayList> depends(const ArrayList& inputs, const ArrayList& deps) {
  return wrap_list(mx::depends(inputs.v, deps.v));
}

namespace {
// Rust passes an absent optional argument as a null UniquePtr.
std::optional<mx::array> opt(const std::unique_ptr<Array>& p) {
  if (p) {
    return p->a;
  }
  return std::nullopt;
}
} // namespace

std::unique_ptr<Array> rms_norm(const Array& x, std::unique_ptr<Array> weight, float eps) {
  return wrap(mx::fast::rms_norm(x.a, opt(weight), eps));
}
std::unique_ptr<Array> layer_norm(const Array& x, std::unique_ptr<Array> weight,
                                  std::unique_ptr<Array> bias, float eps) {
  return wrap(mx::fast::layer_norm(x.a, opt(weight), opt(bias), eps));
}

} // namespace mlx_bridge
