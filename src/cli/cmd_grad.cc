// helixpipe grad: the mean loss of a checkpoint over fixed data and its gradient with respect to
// every parameter, saved under the parameter names. Sequence k = j*B + r (micro-batch j, row r)
// reads inputs tokens[k*S .. k*S+S-1] and targets tokens[k*S+1 .. k*S+S] from the start of the
// file. The last line printed is {"loss": ...}. The pipelined version is cli/train_dist.*.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "checkpoint/safetensors.h"
#include "cli/commands.h"
#include "cli/train_dist.h"
#include "comm/mpi_comm.h"
#include "cli/train_cli.h"
#include "data/token_file.h"
#include "runtime/model_io.h"
#include "runtime/trainer.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace hp::cli {

int cmd_grad(int argc, char** argv) {
  // Under mpirun the ranks run the pipelined (D x P) path; cli/train_dist.h.
  if (MpiComm::launched_by_mpirun()) return grad_dist_main(argc, argv);
  CLI::App app("Loss and gradients of a checkpoint on the first B*M sequences of a data file.",
               "grad");
  GradRequest f;
  add_grad_flags(app, f);
  if (auto rc = parse_flags(app, argc, argv)) return *rc;
  check_grad_request(f);
  check_output_file("--out", f.out);
  const CheckpointInfo info = open_checkpoint(f.checkpoint);
  const ModelConfig cfg = checkpoint_model_config(info);
  HP_CHECK(f.seq_len <= cfg.max_positions, "--seq-len {} exceeds the model's max_position_embeddings {}",
           f.seq_len, cfg.max_positions);
  auto be = make_cpu_backend(f.threads);
  Params params(cfg, Params::all_parts(cfg), *be, resolve_precision(f.precision, *be));
  load_checkpoint_params(info, params);
  const TokenSource source = open_data(f.data, f.data_format, cfg.vocab);
  const SequenceReader reader(source, f.seq_len, cfg.vocab);
  StepShape shape;
  shape.seq_len = f.seq_len;
  shape.microbatch_size = f.microbatch_size;
  shape.microbatches = f.microbatches;
  shape.recompute = parse_recompute(f.recompute);
  std::vector<int32_t> tokens, targets;
  read_step_batch(reader, 0, shape, /*wrap=*/false, tokens, targets);

  ModelOptions mo;
  mo.mlp_chunk = f.mlp_chunk;
  Model model(params, mo);
  TokenBuffer tok, tgt;
  tok.upload(*be, tokens, cfg.vocab, "token");
  tgt.upload(*be, targets, cfg.vocab, "target");
  params.zero_grad();
  StepOptions so;
  so.recompute = shape.recompute;
  const double loss = loss_and_grads(model, tok.data(), tgt.data(), shape.microbatch_size,
                                     shape.seq_len, static_cast<int>(shape.microbatches), so);
  std::vector<float> host;
  const auto grads = params_write_tensors(params, host, /*grads=*/true);
  write_safetensors(f.out, grads,
                    {{"format", "pt"},
                     {"helixpipe", "gradients of the mean loss"},
                     {"loss", fmt::format("{:.9g}", loss)}});
  fmt::print("wrote {}: gradients of {} tensors over {} sequences of {} tokens ({})\n", f.out,
             grads.size(), shape.sequences(), shape.seq_len, params.precision().name());
  fmt::print("{}\n", nlohmann::json{{"loss", loss}}.dump());
  return 0;
}

}  // namespace hp::cli
