// Nothing above the backend reads or writes backend memory on the host: the model, the parameters,
// the value store, the optimizer, the trainer and checkpoints run here on a backend whose memory
// is a guarded arena (mprotect PROT_NONE) that is opened only while a kernel or a backend copy
// runs. Any other access is a segmentation fault, reported with its address; the test would then
// fail as a crash. A death test checks that the guard does fire.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>

#include "../model/forwarding_backend.h"
#include "../model/model_test_util.h"
#include "data/batching.h"
#include "data/token_file.h"
#include "kernels/host/host_backend.h"
#include "runtime/trainer.h"
#include "util/error.h"

namespace hp {
namespace {

// A fixed mapping handed out by a bump allocator (the caching allocator above it reuses blocks).
class GuardedArena {
 public:
  explicit GuardedArena(int64_t bytes) : size_(bytes) {
    base_ = static_cast<char*>(
        mmap(nullptr, static_cast<size_t>(bytes), PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    HP_CHECK(base_ != MAP_FAILED, "cannot map the guarded arena");
    active_ = this;
  }
  ~GuardedArena() {
    munmap(base_, static_cast<size_t>(size_));
    active_ = nullptr;
  }
  HostAllocator::System system() {
    return {[this](int64_t bytes) -> void* {
              if (used_ + bytes > size_) return nullptr;
              void* p = base_ + used_;
              used_ += (bytes + 255) / 256 * 256;
              return p;
            },
            [](void*) {}};
  }
  // Opens the arena for the outermost enter and closes it at the matching leave.
  void enter() {
    if (depth_++ == 0) mprotect(base_, static_cast<size_t>(size_), PROT_READ | PROT_WRITE);
  }
  void leave() {
    if (--depth_ == 0) mprotect(base_, static_cast<size_t>(size_), PROT_NONE);
  }
  bool contains(const void* p) const { return p >= base_ && p < base_ + size_; }
  static GuardedArena* active() { return active_; }

 private:
  char* base_ = nullptr;
  int64_t size_ = 0, used_ = 0;
  int depth_ = 0;
  static inline GuardedArena* active_ = nullptr;
};

class GuardedKernels : public test::ForwardingKernels {
 public:
  GuardedKernels(Kernels& inner, GuardedArena& arena) : ForwardingKernels(inner), arena_(arena) {}
  void enter(const char*) override { arena_.enter(); }
  void leave() override { arena_.leave(); }

 private:
  GuardedArena& arena_;
};

class GuardedBackend : public test::ForwardingBackend {
 public:
  GuardedBackend(Backend& inner, Kernels& k, GuardedArena& arena)
      : ForwardingBackend(inner, k), arena_(arena) {}
  void enter(const char*) override { arena_.enter(); }
  void leave() override { arena_.leave(); }

 private:
  GuardedArena& arena_;
};

void on_segv(int, siginfo_t* info, void*) {
  const GuardedArena* a = GuardedArena::active();
  char msg[160];
  const int n = std::snprintf(
      msg, sizeof msg, "%s at %p outside a kernel or a backend copy\n",
      a && a->contains(info->si_addr) ? "host access to backend memory" : "segmentation fault",
      info->si_addr);
  if (n > 0) (void)!write(2, msg, static_cast<size_t>(n));
  _exit(3);
}

class GuardedBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    struct sigaction sa {};
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGSEGV, &sa, &old_);
  }
  void TearDown() override { sigaction(SIGSEGV, &old_, nullptr); }

  GuardedArena arena_{int64_t{256} << 20};
  std::unique_ptr<HostBackend> inner_ = std::make_unique<HostBackend>(
      "reference in a guarded arena", make_reference_kernels(), arena_.system());
  GuardedKernels kernels_{inner_->kernels(), arena_};
  GuardedBackend be_{*inner_, kernels_, arena_};
  struct sigaction old_ {};
};

TEST_F(GuardedBackendTest, TheGuardFires) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // the BLAS may have started threads
  Buffer b(be_, DType::kF32, 16);
  std::vector<float> host(16, 1.0f);
  be_.upload(b.data(), host.data(), 64);  // through the backend: fine
  EXPECT_EXIT(
      {
        volatile float x = *static_cast<float*>(b.data());
        (void)x;
        _exit(0);
      },
      ::testing::ExitedWithCode(3), "host access to backend memory");
}

TEST_F(GuardedBackendTest, ModelStepsEvalAndLogitsTouchOnlyThroughTheBackend) {
  const ModelConfig cfg = test::tiny_config(/*tied=*/true);
  for (Precision prec : {Precision::fp32(), Precision::bf16()}) {
    Params params(cfg, Params::all_parts(cfg), be_, prec);
    params.init(3);
    Model model(params, ModelOptions{2, 3});
    const std::vector<int32_t> ids = test::random_tokens(2 * 6 * 2, cfg.vocab, 4);
    const TokenBuffer tok = test::on_backend(be_, ids, cfg.vocab);
    ValueStore store(be_, prec);
    for (Recompute policy : {Recompute::kNone, Recompute::kNoAttn, Recompute::kFull})
      for (TransferMode tr : {TransferMode::kWeights, TransferMode::kActivations}) {
        const double loss =
            loss_and_grads(model, tok.data(), tok.data(), 2, 6, 2, {policy, tr}, &store);
        EXPECT_GT(loss, 0.0);
      }
    // Split backward (I then W), one op per part.
    std::vector<int> cuts;
    for (int i = 1; i <= 3 * static_cast<int>(cfg.layers) + 1; ++i) cuts.push_back(i);
    test::SplitRun r{Recompute::kNoAttn, TransferMode::kWeights, true, false};
    test::run_split(model, store, test::split_parts(static_cast<int>(cfg.layers), cuts), r,
                    tok.data(), tok.data(), 2, 6, 2, [](ValueStore&) {});
    EXPECT_GT(eval_loss(model, tok.data(), tok.data(), 2, 6), 0.0);
    std::vector<float> logits(2 * cfg.vocab);
    forward_logits(model, tok.data(), 2, 6, logits.data(), true);
    EXPECT_TRUE(std::isfinite(logits[0]));
    EXPECT_GT(params.host_grads<double>().size(), 0u);
  }
}

TEST_F(GuardedBackendTest, TrainerStepsAndCheckpointsTouchOnlyThroughTheBackend) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("hp_guarded_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const ModelConfig cfg = test::tiny_config();
  std::vector<int32_t> toks(400);
  for (size_t i = 0; i < toks.size(); ++i) toks[i] = static_cast<int32_t>((i * 7 + i / 3) % 11);
  write_token_file((dir / "d.tok").string(), toks, TokenDType::kUint8, 11);
  const TokenSource src = TokenSource::open((dir / "d.tok").string());
  StepShape shape{
      .seq_len = 8, .microbatch_size = 2, .microbatches = 2, .recompute = Recompute::kNoAttn};
  const SequenceReader reader(src, shape.seq_len, cfg.vocab);
  for (Precision prec : {Precision::fp32(), Precision::bf16()}) {
    Params params(cfg, Params::all_parts(cfg), be_, prec);
    params.init(5);
    TrainState st;
    st.lr.total = 3;
    st.clip = 1.0;
    Trainer tr(cfg, params, {}, shape, st);
    for (int i = 0; i < 3; ++i) EXPECT_TRUE(std::isfinite(tr.step(reader).loss));
    tr.save((dir / "ck").string());
    Params back(cfg, Params::all_parts(cfg), be_, prec);
    load_checkpoint_params(open_checkpoint((dir / "ck").string()), back);
    EXPECT_EQ(back.host_values<float>(), params.host_values<float>());
    Trainer resumed(cfg, back, {}, shape, tr.state());
    resumed.load_optimizer(*open_checkpoint((dir / "ck").string()).optimizer_path);
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace hp
