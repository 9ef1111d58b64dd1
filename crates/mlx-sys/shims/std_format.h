// Force-included into mlx-c's compile. mlx-c 0.7.0 calls std::format (C++20)
// without including <format>, which works where the standard library pulls
// it in anyway (libc++, libstdc++ 13 and later). GCC 12's libstdc++ (Debian
// 12) has no std::format at all: there it is supplied from the {fmt}
// library, which MLX's own build uses too (header-only here, so nothing more
// to link). Elsewhere this only includes <format>.
#pragma once

#if defined(__cplusplus)
#if __has_include(<format>)
#include <format>
#endif

#if !defined(__cpp_lib_format)
#define FMT_HEADER_ONLY
#include <fmt/format.h>
#include <string>
#include <utility>

namespace std {
template <typename... Args>
inline std::string format(fmt::format_string<Args...> f, Args&&... args) {
  return fmt::format(f, std::forward<Args>(args)...);
}
} // namespace std
#endif
#endif
