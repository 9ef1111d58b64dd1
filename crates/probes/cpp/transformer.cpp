// A realistic model for the leak: a stack of pre-norm transformer blocks
// whose attention projects q, k and v with one fused matrix and `split`s the
// result in three, the most common use of `split` in real models. Per cycle:
// random weights (about 200 MiB with the defaults), evaluated, a compiled
// forward pass capturing them, one run, drop; then what the cycle left behind.
//
//   transformer [--cycles N] [--layers N] [--d-model N] [--heads N]
//               [--ffn N] [--seq N]
//
// Output, one line per cycle, after one line describing the model:
//   model <layers> weight_bytes <n>
//   cycle <i> retained_bytes <n> digest <hex>
// The digest covers the hidden state and the returned KV cache.

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "mlx/mlx.h"

namespace mx = mlx::core;

namespace {

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

uint64_t digest(const mx::array& a) {
  auto bytes = reinterpret_cast<const unsigned char*>(a.data<float>());
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < a.nbytes(); ++i) {
    h = (h ^ bytes[i]) * 1099511628211ull;
  }
  return h;
}

std::vector<Layer> make_model(const Config& c) {
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

// Returns the attention output; appends this layer's keys and values to
// `cache`, as a decoding step returns its KV cache.
// Rotary position embedding with rotate_half written as in most Llama-style
// code: split the head dimension in two halves and swap them, one negated.
mx::array rope(const mx::array& t) {
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

mx::array attention(
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
std::vector<mx::array>
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

} // namespace

int main(int argc, char** argv) {
  Config c;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "%s needs a value\n", a.c_str());
      return 2;
    }
    int v = std::atoi(argv[++i]);
    if (a == "--cycles") {
      c.cycles = v;
    } else if (a == "--layers") {
      c.layers = v;
    } else if (a == "--d-model") {
      c.d_model = v;
    } else if (a == "--heads") {
      c.heads = v;
    } else if (a == "--ffn") {
      c.ffn = v;
    } else if (a == "--seq") {
      c.seq = v;
    } else {
      std::fprintf(
          stderr,
          "usage: %s [--cycles N] [--layers N] [--d-model N] [--heads N] "
          "[--ffn N] [--seq N]\n",
          argv[0]);
      return 2;
    }
  }
  if (c.cycles <= 0 || c.layers <= 0 || c.heads <= 0 || c.ffn <= 0 ||
      c.seq <= 0 || c.d_model <= 0 || c.d_model % c.heads != 0) {
    std::fprintf(stderr, "sizes must be positive, d-model a multiple of heads\n");
    return 2;
  }

  auto input =
      mx::random::normal({c.seq, c.d_model}, mx::float32, mx::random::key(0));
  mx::eval(input);
  for (int cycle = 0; cycle < c.cycles; ++cycle) {
    mx::synchronize();
    auto base = mx::get_active_memory();
    uint64_t d = 0;
    {
      auto layers = make_model(c);
      std::vector<mx::array> all;
      for (auto& l : layers) {
        all.insert(all.end(), {l.norm1, l.wqkv, l.wo, l.norm2, l.w_up, l.w_down});
      }
      mx::eval(all);
      if (cycle == 0) {
        size_t bytes = 0;
        for (auto& w : all) {
          bytes += w.nbytes();
        }
        std::printf("model %d weight_bytes %zu\n", c.layers, bytes);
      }
      all.clear();
      auto fn = mx::compile([layers, heads = c.heads](
                                const std::vector<mx::array>& in) {
        return forward(layers, in[0], heads);
      });
      auto outs = fn({input});
      mx::eval(outs);
      for (auto& o : outs) {
        d = d * 31 + digest(o);
      }
    }
    mx::synchronize();
    long long retained = static_cast<long long>(mx::get_active_memory()) -
        static_cast<long long>(base);
    std::printf(
        "cycle %d retained_bytes %lld digest %016llx\n",
        cycle,
        retained,
        static_cast<unsigned long long>(d));
    std::fflush(stdout);
  }
  return 0;
}
