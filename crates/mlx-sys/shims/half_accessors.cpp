// mlx-c declares its float16/bfloat16 item and data accessors only on ARM
// (mlx/c/half.h), where its float16_t is the compiler's __fp16; mlx-rs calls
// them on every target. These are the same four functions for other
// targets, over MLX's own float16_t and bfloat16_t, with the 16-bit pattern
// as the C type: the Rust side (src/lib.rs) declares them with the types
// bindgen gives them on ARM, a transparent u16 and a u16.

#include <cstdint>
#include <cstring>
#include <exception>

#include "mlx/c/array.h"
#include "mlx/c/error.h"
#include "mlx/c/private/array.h"

namespace {

template <typename T>
int item_bits(std::uint16_t* res, mlx_array arr) {
  static_assert(sizeof(T) == sizeof(std::uint16_t));
  try {
    T value = mlx_array_get_(arr).item<T>();
    std::memcpy(res, &value, sizeof value);
    return 0;
  } catch (const std::exception& e) {
    _mlx_error(__FILE__, __LINE__, "%s", e.what());
    return 1;
  }
}

template <typename T>
const std::uint16_t* data_bits(mlx_array arr) {
  static_assert(sizeof(T) == sizeof(std::uint16_t));
  try {
    return reinterpret_cast<const std::uint16_t*>(mlx_array_get_(arr).data<T>());
  } catch (const std::exception& e) {
    _mlx_error(__FILE__, __LINE__, "%s", e.what());
    return nullptr;
  }
}

} // namespace

extern "C" int mlx_array_item_float16(std::uint16_t* res, const mlx_array arr) {
  return item_bits<mlx::core::float16_t>(res, arr);
}

extern "C" int mlx_array_item_bfloat16(std::uint16_t* res, const mlx_array arr) {
  return item_bits<mlx::core::bfloat16_t>(res, arr);
}

extern "C" const std::uint16_t* mlx_array_data_float16(const mlx_array arr) {
  return data_bits<mlx::core::float16_t>(arr);
}

extern "C" const std::uint16_t* mlx_array_data_bfloat16(const mlx_array arr) {
  return data_bits<mlx::core::bfloat16_t>(arr);
}
