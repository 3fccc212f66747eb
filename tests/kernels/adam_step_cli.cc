// adam_step_cli KIND IN OUT: the kernel's adam or adamw (lr 3e-3, betas 0.9/0.999, eps
// 1e-8, weight decay 0.05) over the parameters and gradients in IN (float32: N params,
// then STEPS gradients of N; N and STEPS as two uint32 first), the parameters to OUT.
// adam_vs_torch.py runs it against torch.optim. Exit 2 on bad arguments or files.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "groupsgd/kernels/optimizer.h"

using namespace groupsgd::kernels;

int main(int argc, char** argv) {
  OptimizerKind kind{};
  if (argc != 4 || !parseOptimizerKind(argv[1], &kind) ||
      (kind != OptimizerKind::kAdam && kind != OptimizerKind::kAdamW)) {
    std::fprintf(stderr, "usage: adam_step_cli adam|adamw IN OUT\n");
    return 2;
  }
  FILE* in = std::fopen(argv[2], "rb");
  std::uint32_t dims[2] = {0, 0};
  if (in == nullptr || std::fread(dims, sizeof dims[0], 2, in) != 2) return 2;
  const std::size_t n = dims[0], steps = dims[1];
  std::vector<float> p(n), g(n * steps);
  const bool read = std::fread(p.data(), sizeof(float), n, in) == n &&
                    std::fread(g.data(), sizeof(float), g.size(), in) == g.size();
  std::fclose(in);
  if (!read) return 2;
  Optimizer opt({kind, 3e-3f, 0.0f, 0.05f, 0.9f, 0.999f, 1e-8f}, n);
  for (std::size_t s = 0; s < steps; ++s) opt.step(p, std::span<const float>(g).subspan(s * n, n));
  FILE* out = std::fopen(argv[3], "wb");
  if (out == nullptr || std::fwrite(p.data(), sizeof(float), n, out) != n) return 2;
  return std::fclose(out) == 0 ? 0 : 2;
}
