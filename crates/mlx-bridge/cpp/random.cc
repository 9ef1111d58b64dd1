// Random number generation, always with an explicit key so results are
// reproducible and independent of MLX's global key sequence.
#include "mlx-bridge/src/ffi/random.rs.h"

namespace mlx_bridge {

std::unique_ptr<Array> random_key(std::uint64_t seed) {
  return wrap(mx::random::key(seed));
}
std::unique_ptr<ArrayList> random_split(const Array& key) {
  auto [a, b] = mx::random::split(key.a);
  return wrap_list({std::move(a), std::move(b)});
}
std::unique_ptr<Array> random_split_n(const Array& key, std::int32_t num) {
  return wrap(mx::random::split(key.a, num));
}
std::unique_ptr<Array> random_normal(rust::Slice<const std::int32_t> shape, Dtype dtype, float loc,
                                     float scale, const Array& key) {
  return wrap(mx::random::normal(to_shape(shape), to_mx(dtype), loc, scale, key.a));
}
std::unique_ptr<Array> random_uniform(float low, float high, rust::Slice<const std::int32_t> shape,
                                      Dtype dtype, const Array& key) {
  return wrap(mx::random::uniform(mx::array(low), mx::array(high), to_shape(shape), to_mx(dtype),
                                  key.a));
}
std::unique_ptr<Array> random_bits(rust::Slice<const std::int32_t> shape, const Array& key) {
  return wrap(mx::random::bits(to_shape(shape), key.a));
}

} // namespace mlx_bridge
