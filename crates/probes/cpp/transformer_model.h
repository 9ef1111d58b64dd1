// The realistic model of the suite and the benchmarks: pre-norm transformer
// blocks whose attention splits one fused QKV projection in three, with
// rotary embeddings (rotate_half via split), returning a KV cache. With the
// default Config, about 192 MiB of float32 weights.

#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "mlx/mlx.h"

namespace transformer {

namespace mx = mlx::core;

struct Config {
  int cycles = 5;
  int layers = 4;
  int d_model = 1024;
  int heads = 16;
  int ffn = 4096;
  int seq = 16;
};

struct Layer {
  mx::array norm1, wqkv, wo, norm2, w_up, w_down;
};

inline std::vector<Layer> make_model(const Config& c) {
  std::vector<Layer> layers;
  uint64_t seed = 100;
  auto dense = [&](int in, int out) {
    // Uniform in +-1/sqrt(in), the usual default init of a linear layer.
    float bound = 1.0f / std::sqrt(static_cast<float>(in));
    return mx::random::uniform(
        mx::array(-bound),
        mx::array(bound),
        {in, out},
        mx::float32,
        mx::random::key(seed++));
  };
  for (int i = 0; i < c.layers; ++i) {
    layers.push_back(Layer{
        mx::ones({c.d_model}),
        dense(c.d_model, 3 * c.d_model),
        dense(c.d_model, c.d_model),
        mx::ones({c.d_model}),
        dense(c.d_model, c.ffn),
        dense(c.ffn, c.d_model)});
  }
  return layers;
}

// Rotary position embedding with rotate_half written as in most Llama-style
// code: split the head dimension in two halves and swap them, one negated.
inline mx::array rope(const mx::array& t) {
  int seq = t.shape(1), hd = t.shape(2);
  auto pos = mx::reshape(mx::arange(seq, mx::float32), {seq, 1});
  auto freq = mx::power(
      mx::array(10000.0f),
      mx::arange(0, hd, 2, mx::float32) / static_cast<float>(-hd));
  auto angle = mx::concatenate({pos * freq, pos * freq}, -1);
  auto halves = mx::split(t, 2, -1);
  auto rotated = mx::concatenate({mx::negative(halves[1]), halves[0]}, -1);
  return t * mx::cos(angle) + rotated * mx::sin(angle);
}

// Returns the attention output; appends this layer's keys and values to
// `cache`, as a decoding step returns its KV cache.
inline mx::array attention(
    const Layer& l,
    const mx::array& x,
    int heads,
    std::vector<mx::array>& cache) {
  int seq = x.shape(0), d = x.shape(1), hd = d / heads;
  // One projection for q, k and v, split in three.
  auto qkv = mx::split(mx::matmul(x, l.wqkv), 3, -1);
  auto to_heads = [&](const mx::array& t) {
    return mx::transpose(mx::reshape(t, {seq, heads, hd}), {1, 0, 2});
  };
  auto q = rope(to_heads(qkv[0])), k = rope(to_heads(qkv[1]));
  auto v = to_heads(qkv[2]);
  cache.push_back(k);
  cache.push_back(v);
  auto scores = mx::matmul(q, mx::transpose(k, {0, 2, 1})) /
      std::sqrt(static_cast<float>(hd));
  auto causal = mx::triu(mx::full({seq, seq}, -1e9f), 1);
  auto out = mx::matmul(mx::softmax(scores + causal, -1), v);
  out = mx::reshape(mx::transpose(out, {1, 0, 2}), {seq, d});
  return mx::matmul(out, l.wo);
}

// The hidden state, then each layer's keys and values.
inline std::vector<mx::array>
forward(const std::vector<Layer>& layers, mx::array x, int heads) {
  std::vector<mx::array> cache;
  for (auto& l : layers) {
    x = x + attention(l, mx::fast::rms_norm(x, l.norm1, 1e-5f), heads, cache);
    auto h = mx::matmul(mx::fast::rms_norm(x, l.norm2, 1e-5f), l.w_up);
    x = x + mx::matmul(h * mx::sigmoid(h), l.w_down);
  }
  cache.insert(cache.begin(), x);
  return cache;
}

} // namespace transformer
