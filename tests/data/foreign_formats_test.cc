// Token files of other trainers read by --data: llm.c shards, nanoGPT raw uint16 .bin files and
// Megatron-LM indexed datasets. Each test writes the file byte by byte from the published layout
// (docs/formats/foreign-tokens.md) with its own little-endian writer, reads it back through
// TokenSource and compares with the known token sequence; every malformed case checks that the
// message names the problem.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "data/batching.h"
#include "data/token_file.h"
#include "util/error.h"

namespace hp {
namespace {

namespace fs = std::filesystem;

// Little-endian byte writers, independent of the reader's code.
void put(std::string& b, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) b.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

std::string tokens_bytes(const std::vector<int64_t>& t, int width) {
  std::string b;
  for (int64_t v : t) put(b, static_cast<uint64_t>(v), width);
  return b;
}

// llm.c's layout: 256 int32 (magic, version, count, zeros), then the tokens.
std::string llmc_bytes(int32_t magic, int32_t version, int64_t count, const std::vector<int64_t>& t,
                       int width) {
  std::string b;
  put(b, static_cast<uint32_t>(magic), 4);
  put(b, static_cast<uint32_t>(version), 4);
  put(b, static_cast<uint32_t>(count), 4);
  b.append(253 * 4, '\0');
  return b + tokens_bytes(t, width);
}

// Megatron's .idx: magic, version (u64), dtype code (u8), sequence count (u64), document index
// entries (u64), sizes (int32), pointers (int64, byte offsets), document index (int64).
struct MegatronFiles {
  std::string bin, idx;
};

MegatronFiles megatron_bytes(const std::vector<std::vector<int64_t>>& sequences,
                             const std::vector<int64_t>& doc_index, uint8_t code, int width) {
  MegatronFiles f;
  std::vector<int64_t> sizes, pointers;
  for (const auto& s : sequences) {
    pointers.push_back(static_cast<int64_t>(f.bin.size()));
    sizes.push_back(static_cast<int64_t>(s.size()));
    f.bin += tokens_bytes(s, width);
  }
  f.idx.append("MMIDIDX\0\0", 9);
  put(f.idx, 1, 8);
  put(f.idx, code, 1);
  put(f.idx, sequences.size(), 8);
  put(f.idx, doc_index.size(), 8);
  for (int64_t s : sizes) put(f.idx, static_cast<uint64_t>(s), 4);
  for (int64_t p : pointers) put(f.idx, static_cast<uint64_t>(p), 8);
  for (int64_t d : doc_index) put(f.idx, static_cast<uint64_t>(d), 8);
  return f;
}

class ForeignTokens : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("hp_foreign_tokens_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string write(const std::string& name, const std::string& bytes) const {
    std::ofstream(path(name), std::ios::binary).write(bytes.data(), bytes.size());
    return path(name);
  }
  static std::vector<int64_t> read_all(const TokenSource& s) {
    std::vector<int32_t> out(s.size());
    s.copy(0, s.size(), out.data());
    return {out.begin(), out.end()};
  }
  // Expects hp::Error containing every needle.
  template <typename F>
  static void expect_error(F&& f, std::initializer_list<std::string> needles) {
    try {
      f();
      ADD_FAILURE() << "expected an hp::Error containing '" << *needles.begin() << "'";
    } catch (const Error& e) {
      for (const auto& n : needles)
        EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
    }
  }

  fs::path dir_;
};

const std::vector<int64_t> kGpt2Tokens = {50256, 15496, 11, 995, 0, 50255, 7, 318, 257, 1332};

TEST_F(ForeignTokens, LlmcUint16ShardReadsBack) {
  const std::string p =
      write("fineweb_train_000001.bin", llmc_bytes(20240520, 1, 10, kGpt2Tokens, 2));
  const TokenSource s = TokenSource::open(p, {.vocab = 50257});
  EXPECT_EQ(s.format(), DataFormat::kLlmc);
  EXPECT_EQ(s.dtype(), TokenDType::kUint16);
  EXPECT_EQ(read_all(s), kGpt2Tokens);
  EXPECT_EQ(s.max_token(), 50256);
  EXPECT_EQ(s.describe(), "llm.c token shard, uint16");
  // The magic decides, not the name; without a model vocab only the dtype bounds the ids.
  const std::string q = write("shard.dat", llmc_bytes(20240520, 1, 10, kGpt2Tokens, 2));
  EXPECT_EQ(read_all(TokenSource::open(q)), kGpt2Tokens);
}

TEST_F(ForeignTokens, LlmcUint32Shards) {
  const std::vector<int64_t> t = {128000, 9906, 1917, 128255, 0, 70000};
  for (auto [magic, version] : {std::pair{20240801, 7}, std::pair{20240520, 2}}) {
    const std::string p = write("llama.bin", llmc_bytes(magic, version, 6, t, 4));
    const TokenSource s = TokenSource::open(p, {.vocab = 128256});
    EXPECT_EQ(s.dtype(), TokenDType::kUint32);
    EXPECT_EQ(read_all(s), t);
  }
}

TEST_F(ForeignTokens, LlmcMalformed) {
  const std::string good = llmc_bytes(20240520, 1, 10, kGpt2Tokens, 2);
  const TokenOpenOptions gpt2{.vocab = 50257};
  auto rejected = [&](const std::string& bytes, std::initializer_list<std::string> needles) {
    const std::string p = write("bad.bin", bytes);
    expect_error([&] { TokenSource::open(p, gpt2); }, needles);
  };
  rejected(llmc_bytes(20240520, 3, 10, kGpt2Tokens, 2), {"version 3", "llm.c token shard"});
  rejected(good.substr(0, 600), {"truncated", "600 bytes", "1024-byte header"});
  rejected(good.substr(0, good.size() - 2), {"header says 10 tokens", "truncated or corrupt"});
  rejected(good + "xy", {"header says 10 tokens", "holds 22 bytes"});
  rejected(llmc_bytes(20240520, 1, 11, kGpt2Tokens, 2), {"header says 11 tokens"});
  rejected(llmc_bytes(20240520, 1, -5, kGpt2Tokens, 2), {"token count in the header is -5"});
  std::vector<int64_t> big = kGpt2Tokens;
  big[5] = 50300;
  rejected(llmc_bytes(20240520, 1, 10, big, 2),
           {"token 50300 at position 5 is outside [0, 50257)", "vocab_size is 50257"});
  rejected(llmc_bytes(20240522, 1, 10, kGpt2Tokens, 2), {"evaluation file", "not training tokens"});
  // A file named as llm.c by the flag but without its magic.
  const std::string txt = write("notes.txt", "hello, world");
  expect_error([&] { TokenSource::open(txt, {.format = DataFormat::kLlmc}); },
               {"does not start with an llm.c magic"});
}

TEST_F(ForeignTokens, NanoGptRawUint16) {
  const std::string p = write("train.bin", tokens_bytes(kGpt2Tokens, 2));
  const TokenSource s = TokenSource::open(p, {.vocab = 50304});
  EXPECT_EQ(s.format(), DataFormat::kNanoGpt);
  EXPECT_EQ(read_all(s), kGpt2Tokens);
  // Without a model vocab nothing bounds the ids: refused with the reason.
  expect_error([&] { TokenSource::open(p); }, {"does not record its vocabulary", "vocab_size"});
  // Odd size: not whole uint16 tokens.
  const std::string odd = write("odd.bin", tokens_bytes(kGpt2Tokens, 2) + "x");
  expect_error([&] { TokenSource::open(odd, {.vocab = 50304}); },
               {"odd size of 21 bytes", "--data-format=text"});
  // An id the model cannot embed, with its position.
  std::vector<int64_t> big = kGpt2Tokens;
  big[3] = 60000;
  const std::string q = write("val.bin", tokens_bytes(big, 2));
  expect_error(
      [&] { TokenSource::open(q, {.vocab = 50304}); },
      {"token 60000 at position 3 is outside [0, 50304)", "nanoGPT token file", "--data-format"});
  // The same bytes under another name have no header but hold NUL bytes: not taken for text
  // silently. --data-format=text reads them (and a .bin) as bytes.
  const std::string txt = write("train.txt", tokens_bytes(kGpt2Tokens, 2));
  expect_error([&] { TokenSource::open(txt); }, {"NUL byte", "--data-format=text"});
  EXPECT_TRUE(TokenSource::open(txt, {.format = DataFormat::kText}).is_text());
  const TokenSource t = TokenSource::open(p, {.format = DataFormat::kText});
  EXPECT_TRUE(t.is_text());
  EXPECT_EQ(t.size(), 20);
}

// Three documents: [sentences 0, 1], [2], [3, 4, 5] (sentence 4 empty).
const std::vector<std::vector<int64_t>> kSentences = {{1, 2, 3}, {4, 5}, {6, 7, 8, 9},
                                                      {10},      {},     {11, 12, 13, 14, 65535}};
const std::vector<int64_t> kDocIndex = {0, 2, 3, 6};
const std::vector<int64_t> kAllTokens = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 65535};

TEST_F(ForeignTokens, MegatronReadsBackWithDocuments) {
  for (auto [code, width] : {std::pair{uint8_t{8}, 2}, std::pair{uint8_t{4}, 4}}) {
    const MegatronFiles f = megatron_bytes(kSentences, kDocIndex, code, width);
    write("corpus_text_document.bin", f.bin);
    write("corpus_text_document.idx", f.idx);
    const std::string prefix = path("corpus_text_document");
    for (const std::string& name : {prefix, prefix + ".bin", prefix + ".idx"}) {
      for (DataFormat fmt : {DataFormat::kAuto, DataFormat::kMegatron}) {
        const TokenSource s = TokenSource::open(name, {.format = fmt, .vocab = 65536});
        EXPECT_EQ(s.format(), DataFormat::kMegatron) << name;
        EXPECT_EQ(s.dtype(), width == 2 ? TokenDType::kUint16 : TokenDType::kInt32);
        EXPECT_EQ(read_all(s), kAllTokens) << name;
        EXPECT_EQ(s.document_offsets(), (std::vector<int64_t>{0, 5, 9, 15}));
        EXPECT_EQ(s.describe().find("3 documents") != std::string::npos, true) << s.describe();
      }
    }
    // Sequences run across document boundaries, as in Megatron's GPT dataset.
    const TokenSource s = TokenSource::open(prefix, {.vocab = 65536});
    SequenceReader reader(s, 4, 65536);
    std::vector<int32_t> in(4), tg(4);
    reader.read(1, 1, false, in.data(), tg.data());
    EXPECT_EQ(in, (std::vector<int32_t>{5, 6, 7, 8}));
    EXPECT_EQ(tg, (std::vector<int32_t>{6, 7, 8, 9}));
  }
}

TEST_F(ForeignTokens, MegatronMalformed) {
  const MegatronFiles good = megatron_bytes(kSentences, kDocIndex, 8, 2);
  const std::string prefix = path("ds");
  auto rejected = [&](const std::string& bin, const std::string& idx,
                      std::initializer_list<std::string> needles) {
    write("ds.bin", bin);
    write("ds.idx", idx);
    expect_error([&] { TokenSource::open(prefix, {.vocab = 65536}); }, needles);
  };
  std::string idx = good.idx;
  idx[0] = 'X';
  rejected(good.bin, idx, {"does not start with the Megatron index magic"});
  rejected(good.bin, good.idx.substr(0, 20), {"truncated", "34-byte header"});
  rejected(good.bin, good.idx.substr(0, good.idx.size() - 4), {"truncated or corrupt"});
  idx = good.idx;
  idx[9] = 2;
  rejected(good.bin, idx, {"version 2"});
  idx = good.idx;
  idx[17] = 7;
  rejected(good.bin, idx, {"dtype code 7"});
  idx = good.idx;
  idx[18] = 7;  // 7 sequences where 6 are listed
  rejected(good.bin, idx, {"header says 7 sequences and 4 document entries"});
  idx = good.idx;
  idx[26] = static_cast<char>(0xff);
  idx[33] = 0x7f;  // absurd document count: must not overflow into acceptance
  rejected(good.bin, idx, {"truncated or corrupt"});
  rejected(good.bin.substr(0, good.bin.size() - 2), good.idx,
           {"hold more than the 14 tokens", "truncated"});
  rejected(good.bin + "ab", good.idx, {"lists 15 tokens", "data file has 32 bytes"});
  // Pointer of sequence 2 moved by one token.
  idx = good.idx;
  idx[34 + 6 * 4 + 2 * 8] += 2;
  rejected(good.bin, idx, {"sequence 2 starts at byte 12", "end at byte 10"});
  // Document index that stops short of the last sequence.
  rejected(good.bin, megatron_bytes(kSentences, {0, 2, 3, 5}, 8, 2).idx,
           {"ends at sequence 5", "has 6 sequences"});
  rejected(good.bin, megatron_bytes(kSentences, {1, 2, 6}, 8, 2).idx,
           {"document index entry 0 is 1"});
  rejected(good.bin, megatron_bytes(kSentences, {0, 3, 2, 6}, 8, 2).idx,
           {"document index entry 2 is 2"});
  // A multimodal index (one mode byte per sequence appended) is named as such.
  rejected(good.bin, good.idx + std::string(6, '\0'), {"multimodal"});
}

TEST_F(ForeignTokens, MegatronVocabAndMissingFiles) {
  const MegatronFiles good = megatron_bytes(kSentences, kDocIndex, 8, 2);
  write("ds.bin", good.bin);
  write("ds.idx", good.idx);
  expect_error([&] { TokenSource::open(path("ds"), {.vocab = 50257}); },
               {"token 65535 at position 14 is outside [0, 50257)", "Megatron indexed dataset"});
  fs::remove(path("ds.bin"));
  expect_error([&] { TokenSource::open(path("ds.idx")); }, {"ds.bin' is missing"});
  expect_error([&] { TokenSource::open(path("ds")); }, {"ds.bin' is missing"});
  expect_error([&] { TokenSource::open(path("ds"), {.format = DataFormat::kMegatron}); },
               {"ds.bin' is missing", "PREFIX.idx"});
}

TEST_F(ForeignTokens, AmbiguousMagicAndCompanion) {
  // An llm.c shard with a Megatron index beside it: refuse to guess, say which flag decides.
  write("mix.bin", llmc_bytes(20240520, 1, 10, kGpt2Tokens, 2));
  write("mix.idx", megatron_bytes(kSentences, kDocIndex, 8, 2).idx);
  expect_error([&] { TokenSource::open(path("mix.bin"), {.vocab = 50257}); },
               {"llm.c token shard", "--data-format=llmc", "--data-format=megatron"});
  const TokenSource s =
      TokenSource::open(path("mix.bin"), {.format = DataFormat::kLlmc, .vocab = 50257});
  EXPECT_EQ(read_all(s), kGpt2Tokens);
}

TEST_F(ForeignTokens, OwnTokenFileCheckedAgainstModelVocab) {
  const std::vector<int32_t> t = {5, 9, 700, 2};
  write_token_file(path("d.tok"), t, TokenDType::kUint16, 1000);
  EXPECT_EQ(TokenSource::open(path("d.tok"), {.vocab = 1000}).max_token(), 700);
  expect_error([&] { TokenSource::open(path("d.tok"), {.vocab = 512}); },
               {"token 700 at position 2 is outside [0, 512)", "vocab_size is 512"});
  expect_error([&] { write_token_file(path("e.tok"), t, TokenDType::kUint32, 1000); },
               {"uint32 cannot be written"});
}

TEST_F(ForeignTokens, BinaryFileWithoutHeaderIsNotTakenForText) {
  // uint16 token ids under a name that says nothing (not .bin): auto-detection sees no header, and
  // the NUL high bytes of small ids show the file is not text.
  const std::string p = write("train.tokens", tokens_bytes({72, 105, 33, 10}, 2));
  expect_error([&] { TokenSource::open(p, {.vocab = 256}); },
               {"'" + p + "'", "NUL byte at offset 1", "--data-format=hptokens, llmc, nanogpt",
                "--data-format=text"});
  // Asked for by name, the same bytes are text: one token per byte, NULs included.
  const TokenSource s = TokenSource::open(p, {.format = DataFormat::kText, .vocab = 256});
  EXPECT_EQ(read_all(s), (std::vector<int64_t>{72, 0, 105, 0, 33, 0, 10, 0}));
  // Text without NUL bytes is still auto-detected as text.
  const TokenSource t = TokenSource::open(write("notes.txt", "plain text\n"), {.vocab = 256});
  EXPECT_EQ(t.format(), DataFormat::kText);
  EXPECT_EQ(t.size(), 11);
}

TEST(DataFormatNames, RoundTripAndUnknown) {
  for (DataFormat f : {DataFormat::kAuto, DataFormat::kText, DataFormat::kHpTokens,
                       DataFormat::kLlmc, DataFormat::kNanoGpt, DataFormat::kMegatron})
    EXPECT_EQ(parse_data_format(data_format_name(f)), f);
  try {
    parse_data_format("parquet");
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown data format 'parquet'"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("megatron"), std::string::npos);
  }
}

}  // namespace
}  // namespace hp
