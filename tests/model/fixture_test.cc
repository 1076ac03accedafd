// Loss and every gradient against PyTorch (tools/make_fixture.py, float64) on committed fixtures:
// a GQA untied model and a tied one (different rope_theta, an odd GQA ratio, 3 layers).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>

#include "kernels/backend.h"
#include "model/model.h"

namespace hp {
namespace {

struct Fixture {
  ModelConfig cfg;
  int64_t batch = 0, seq = 0;
  int microbatches = 0;
  double loss = 0;
  std::vector<int32_t> tokens, targets;
  std::map<std::string, std::vector<float>> tensors;
  std::map<std::string, std::vector<int64_t>> shapes;
};

Fixture load(const std::string& name) {
  const std::string path = std::string(HP_SOURCE_DIR) + "/tests/model/data/" + name + ".hpfix";
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path + " (run tools/make_fixture.py)");
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() < 16 || bytes.compare(0, 8, "HPFIX001") != 0)
    throw std::runtime_error(path + ": not a fixture (bad magic)");
  uint64_t n = 0;
  std::memcpy(&n, bytes.data() + 8, 8);
  if (16 + n > bytes.size()) throw std::runtime_error(path + ": header runs past the file");
  const auto j = nlohmann::json::parse(bytes.substr(16, n));
  Fixture f;
  f.cfg = ModelConfig::from_json(j.at("config"), path);
  f.batch = j.at("batch");
  f.seq = j.at("seq");
  f.microbatches = j.at("microbatches");
  f.loss = j.at("loss");
  f.tokens = j.at("tokens").get<std::vector<int32_t>>();
  f.targets = j.at("targets").get<std::vector<int32_t>>();
  const char* data = bytes.data() + 16 + n;
  const size_t data_bytes = bytes.size() - 16 - n;
  for (const auto& t : j.at("tensors")) {
    const auto shape = t.at("shape").get<std::vector<int64_t>>();
    int64_t numel = 1;
    for (int64_t d : shape) numel *= d;
    const int64_t off = t.at("offset");
    if (static_cast<size_t>((off + numel) * 4) > data_bytes)
      throw std::runtime_error(path + ": tensor runs past the file");
    std::vector<float> v(static_cast<size_t>(numel));
    std::memcpy(v.data(), data + off * 4, static_cast<size_t>(numel) * 4);
    f.tensors[t.at("name")] = std::move(v);
    f.shapes[t.at("name")] = shape;
  }
  return f;
}

// max |got - want| / max |want| over a tensor.
double rel_err(const double* got, const std::vector<float>& want) {
  double e = 0, m = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    e = std::max(e, std::abs(static_cast<double>(got[i]) - want[i]));
    m = std::max(m, std::abs(static_cast<double>(want[i])));
  }
  return e / std::max(m, 1e-30);
}

void check(const Fixture& f, Backend& be, Precision prec, StepOptions so, int64_t mlp_chunk,
           double tol) {
  Params params(f.cfg, Params::all_parts(f.cfg), be, prec);
  ASSERT_EQ(params.tensors().size() * 2, f.tensors.size());
  std::vector<double> w(static_cast<size_t>(params.size()));
  for (const ParamTensor& t : params.tensors()) {
    auto it = f.tensors.find("param." + t.name);
    ASSERT_NE(it, f.tensors.end()) << t.name << " missing from the fixture";
    ASSERT_EQ(f.shapes.at("param." + t.name), t.shape) << t.name;
    std::copy(it->second.begin(), it->second.end(), w.begin() + t.offset);
  }
  params.set_values(w);
  Model model(params, ModelOptions{mlp_chunk, 7});
  params.zero_grad();
  TokenBuffer tok, tgt;
  tok.upload(be, f.tokens, f.cfg.vocab, "token");
  tgt.upload(be, f.targets, f.cfg.vocab, "target");
  const double loss =
      loss_and_grads(model, tok.data(), tgt.data(), f.batch, f.seq, f.microbatches, so);
  EXPECT_LT(std::abs(loss - f.loss) / f.loss, tol) << "loss " << loss << " vs torch " << f.loss;
  const std::vector<double> g = params.host_grads<double>();
  for (const ParamTensor& t : params.tensors()) {
    const double e = rel_err(g.data() + t.offset, f.tensors.at("grad." + t.name));
    EXPECT_LT(e, tol) << t.name << " gradient relative error " << e;
  }
}

class FixtureTest : public ::testing::TestWithParam<const char*> {};

TEST_P(FixtureTest, FloatCpuKernelsMatchTorch) {
  Fixture f = load(GetParam());
  auto be = make_cpu_backend(1);
  check(f, *be, Precision::fp32(), {}, 0, 1e-5);
  check(f, *be, Precision::fp32(), {Recompute::kNoAttn, TransferMode::kWeights}, 5, 1e-5);
}

TEST_P(FixtureTest, FloatReferenceKernelsMatchTorch) {
  Fixture f = load(GetParam());
  auto be = make_reference_backend();
  check(f, *be, Precision::fp32(), {Recompute::kFull, TransferMode::kActivations}, 0, 1e-5);
}

// In double the only differences left are the fixture's float32 rounding of its results.
TEST_P(FixtureTest, DoubleReferenceKernelsMatchTorchClosely) {
  Fixture f = load(GetParam());
  auto be = make_reference_backend();
  check(f, *be, Precision::fp64(), {}, 0, 1e-6);
}

INSTANTIATE_TEST_SUITE_P(Torch, FixtureTest, ::testing::Values("gqa_untied", "gqa_tied"));

}  // namespace
}  // namespace hp
