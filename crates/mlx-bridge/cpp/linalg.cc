// Linear algebra. MLX implements these on the CPU stream only, so every call
// names the CPU device explicitly (see `cpu()` in bridge.h).
#include "mlx-bridge/src/ffi/linalg.rs.h"

#include <string>

namespace mlx_bridge {

namespace la = mx::linalg;

std::unique_ptr<ArrayList> linalg_qr(const Array& a) {
  auto [q, r] = la::qr(a.a, cpu());
  return wrap_list({std::move(q), std::move(r)});
}
std::unique_ptr<ArrayList> linalg_svd(const Array& a, bool compute_uv) {
  return wrap_list(la::svd(a.a, compute_uv, cpu()));
}
std::unique_ptr<ArrayList> linalg_eigh(const Array& a, rust::Str uplo) {
  auto [w, v] = la::eigh(a.a, std::string(uplo), cpu());
  return wrap_list({std::move(w), std::move(v)});
}
std::unique_ptr<ArrayList> linalg_eig(const Array& a) {
  auto [w, v] = la::eig(a.a, cpu());
  return wrap_list({std::move(w), std::move(v)});
}
std::unique_ptr<ArrayList> linalg_lu(const Array& a) {
  return wrap_list(la::lu(a.a, cpu()));
}
std::unique_ptr<ArrayList> linalg_lu_factor(const Array& a) {
  auto [lu, pivots] = la::lu_factor(a.a, cpu());
  return wrap_list({std::move(lu), std::move(pivots)});
}
std::unique_ptr<Array> linalg_inv(const Array& a) {
  return wrap(la::inv(a.a, cpu()));
}
std::unique_ptr<Array> linalg_norm(const Array& a) {
  return wrap(la::norm(a.a, std::nullopt, false, cpu()));
}

} // namespace mlx_bridge
