// Token files (round trip, every corruption rejected), text sources, and the batching rule.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "data/batching.h"
#include "data/token_file.h"
#include "data/tokenizer.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace hp {
namespace {

namespace fs = std::filesystem;

std::string temp_path(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("hp_data_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return (dir / name).string();
}

void write_raw(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), bytes.size());
}

// Expects hp::Error whose message contains `needle`.
template <typename F>
void expect_error(F&& f, const std::string& needle) {
  try {
    f();
    FAIL() << "expected hp::Error containing '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(Tokenizer, BytesRoundTrip) {
  std::string text = "hello\n\xC3\xA9 world";
  auto tokens = byte_encode(text);
  ASSERT_EQ(tokens.size(), text.size());
  EXPECT_EQ(tokens[0], 'h');
  EXPECT_EQ(tokens[6], 0xC3);
  EXPECT_EQ(byte_decode(tokens), text);
  std::vector<int32_t> padded = {'a', 300, 'b'};
  EXPECT_EQ(byte_decode(padded), "a\xEF\xBF\xBD" "b");
}

TEST(TokenFile, RoundTripEveryDtype) {
  for (TokenDType d : {TokenDType::kUint8, TokenDType::kUint16, TokenDType::kInt32}) {
    int64_t vocab = d == TokenDType::kUint8 ? 256 : d == TokenDType::kUint16 ? 50000 : 100000;
    std::vector<int32_t> tokens;
    for (int i = 0; i < 1000; ++i) tokens.push_back(static_cast<int32_t>((i * 7919) % vocab));
    std::string path = temp_path(std::string("rt_") + std::string(token_dtype_name(d)) + ".tokens");
    write_token_file(path, tokens, d, vocab);
    EXPECT_EQ(fs::file_size(path), kTokenFileHeaderBytes + tokens.size() * token_dtype_bytes(d));
    TokenSource s = TokenSource::open(path);
    EXPECT_FALSE(s.is_text());
    EXPECT_EQ(s.dtype(), d);
    EXPECT_EQ(s.header_vocab(), vocab);
    ASSERT_EQ(s.size(), 1000);
    std::vector<int32_t> back(1000);
    s.copy(0, 1000, back.data());
    EXPECT_EQ(back, tokens);
    EXPECT_EQ(s.at(999), tokens[999]);
    EXPECT_EQ(s.max_token(), *std::max_element(tokens.begin(), tokens.end()));
  }
}

TEST(TokenFile, WriterRejectsOutOfRangeTokens) {
  std::vector<int32_t> tokens = {1, 2, 300};
  expect_error([&] { write_token_file(temp_path("bad.tokens"), tokens, TokenDType::kUint16, 256); },
               "outside [0, 256)");
  expect_error([&] { write_token_file(temp_path("bad.tokens"), tokens, TokenDType::kUint8, 1000); },
               "does not fit dtype uint8");
}

class TokenFileCorruption : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<int32_t> tokens(100);
    for (int i = 0; i < 100; ++i) tokens[i] = i * 3;
    path_ = temp_path("good.tokens");
    write_token_file(path_, tokens, TokenDType::kUint16, 512);
    good_ = read_file(path_);
  }
  void expect_rejected(const std::string& bytes, const std::string& needle) {
    std::string p = temp_path("corrupt.tokens");
    write_raw(p, bytes);
    expect_error([&] { TokenSource::open(p); }, needle);
  }
  std::string path_, good_;
};

TEST_F(TokenFileCorruption, Truncated) {
  expect_rejected(good_.substr(0, good_.size() - 1), "truncated or corrupt");
  expect_rejected(good_.substr(0, 20), "shorter than the 32-byte header");
  expect_rejected(good_.substr(0, 5), "shorter than the 32-byte header");
  expect_rejected(good_.substr(0, 32), "truncated or corrupt");
}

TEST_F(TokenFileCorruption, TrailingBytes) { expect_rejected(good_ + "xx", "truncated or corrupt"); }

TEST_F(TokenFileCorruption, BadVersionDtypeReservedCount) {
  std::string b = good_;
  b[8] = 7;
  expect_rejected(b, "format version 7");
  b = good_;
  b[12] = 9;
  expect_rejected(b, "unknown dtype code 9");
  b = good_;
  b[28] = 1;
  expect_rejected(b, "reserved header field");
  b = good_;
  b[16] = 101;  // count 101 instead of 100
  expect_rejected(b, "header says 101 tokens");
  b = good_;
  b[23] = 0x7f;  // absurd count: must not overflow into acceptance
  expect_rejected(b, "truncated or corrupt");
}

TEST_F(TokenFileCorruption, TokenAboveHeaderVocab) {
  std::string b = good_;
  b[32 + 2 * 10] = static_cast<char>(0xff);
  b[32 + 2 * 10 + 1] = static_cast<char>(0x7f);
  expect_rejected(b, "at position 10 is outside [0, 512)");
}

TEST(TokenSource, TextFileIsBytes) {
  std::string p = temp_path("plain.txt");
  write_raw(p, "abc\n");
  TokenSource s = TokenSource::open(p);
  EXPECT_TRUE(s.is_text());
  ASSERT_EQ(s.size(), 4);
  EXPECT_EQ(s.at(0), 'a');
  EXPECT_EQ(s.at(3), '\n');
  EXPECT_EQ(s.max_token(), 'c');
  expect_error([&] { TokenSource::open(temp_path("missing.txt")); }, "cannot open");
}

TEST(Batching, ConsecutiveSequencesShareOneToken) {
  // tokens 0..20 as text bytes; S = 4: sequence k covers tokens 4k .. 4k+4.
  std::string text;
  for (int i = 0; i < 21; ++i) text.push_back(static_cast<char>('A' + i));
  std::string p = temp_path("seq.txt");
  write_raw(p, text);
  TokenSource s = TokenSource::open(p);
  EXPECT_EQ(num_sequences(21, 4), 5);
  EXPECT_EQ(num_sequences(20, 4), 4);
  EXPECT_EQ(num_sequences(4, 4), 0);
  SequenceReader reader(s, 4, 256);
  ASSERT_EQ(reader.sequences(), 5);
  std::vector<int32_t> in(8), tg(8);
  reader.read(1, 2, false, in.data(), tg.data());
  for (int r = 0; r < 2; ++r) {
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(in[r * 4 + i], 'A' + (1 + r) * 4 + i);
      EXPECT_EQ(tg[r * 4 + i], 'A' + (1 + r) * 4 + i + 1);
    }
  }
  expect_error([&] { reader.read(4, 2, false, in.data(), tg.data()); }, "holds 5 sequences");
  // With wrap, sequence 5 is sequence 0 again.
  reader.read(4, 2, true, in.data(), tg.data());
  EXPECT_EQ(in[0], 'A' + 16);
  EXPECT_EQ(in[4], 'A');
  EXPECT_EQ(tg[7], 'A' + 4);
}

TEST(Batching, GlobalPositionIsLayoutIndependent) {
  // D=2 replicas x M=3 micro-batches of B=2 read the same sequences as D=1 x M=6.
  std::vector<int64_t> a, b;
  for (int64_t d = 0; d < 2; ++d)
    for (int64_t j = 0; j < 3; ++j) a.push_back(microbatch_first_sequence(100, d, j, 3, 2));
  for (int64_t j = 0; j < 6; ++j) b.push_back(microbatch_first_sequence(100, 0, j, 6, 2));
  EXPECT_EQ(a, b);
  EXPECT_EQ(microbatch_first_sequence(0, 1, 2, 3, 2), (1 * 3 + 2) * 2);
}

TEST(Batching, RejectsShortFilesAndLargeIds) {
  std::string p = temp_path("short.txt");
  write_raw(p, "abcd");
  TokenSource s = TokenSource::open(p);
  expect_error([&] { SequenceReader(s, 4, 256); }, "too few for one sequence");
  write_raw(p, "abcdefgh");
  TokenSource s2 = TokenSource::open(p);
  expect_error([&] { SequenceReader(s2, 4, 100); }, "contains token id 104");
}

}  // namespace
}  // namespace hp
