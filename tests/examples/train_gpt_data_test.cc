// Tests of the train_gpt data side: CharCorpus (load, vocabulary, encode/decode, split) and
// BatchSampler (range, determinism, and the split-invariance contract: every way of splitting a
// global batch over ranks and micro-steps sees the same samples in every step).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "examples/train_gpt/batch_sampler.h"
#include "examples/train_gpt/char_corpus.h"

namespace zs {
namespace {

namespace fs = std::filesystem;

// A fresh directory per test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    const auto* info = testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() /
            ("zs_train_gpt_data_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string Write(const std::string& name, const std::string& bytes) const {
    const std::string file = (path_ / name).string();
    std::ofstream(file, std::ios::binary) << bytes;
    return file;
  }
  std::string Path(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

// Reference vocabulary: the distinct bytes, sorted, via std::set.
std::string ReferenceVocab(const std::string& text) {
  std::set<unsigned char> bytes(text.begin(), text.end());
  return std::string(bytes.begin(), bytes.end());
}

TEST(CharCorpusTest, LoadBuildsSortedVocabAndRoundTrips) {
  TempDir dir;
  const std::string text = "To be, or not to be: that is the question.\n\tZ\xff\x01";
  const std::string path = dir.Write("a.txt", text);
  auto corpus = CharCorpus::Load(path);
  ASSERT_TRUE(corpus.ok()) << corpus.status().ToString();

  const std::string vocab = ReferenceVocab(text);
  EXPECT_EQ(corpus->vocab(), vocab);
  EXPECT_EQ(corpus->vocab_size(), static_cast<int>(vocab.size()));
  ASSERT_EQ(corpus->size(), static_cast<int64_t>(text.size()));
  for (size_t i = 0; i < text.size(); ++i) {
    // token = rank of the byte among the distinct bytes
    const auto expected = static_cast<int32_t>(vocab.find(text[i]));
    EXPECT_EQ(corpus->tokens()[i], expected) << "position " << i;
  }
  EXPECT_EQ(corpus->Decode(corpus->tokens()), text);

  auto encoded = corpus->Encode("not the question");
  ASSERT_TRUE(encoded.ok()) << encoded.status().ToString();
  EXPECT_EQ(corpus->Decode(*encoded), "not the question");
  EXPECT_EQ(corpus->sources(), std::vector<std::string>{path});
}

TEST(CharCorpusTest, EncodeRejectsByteOutsideVocab) {
  auto corpus = CharCorpus::FromText("abcabc");
  ASSERT_TRUE(corpus.ok());
  auto encoded = corpus->Encode("abx");
  ASSERT_FALSE(encoded.ok());
  EXPECT_EQ(encoded.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(encoded.status().message().find("0x78"), std::string::npos)
      << encoded.status().message();
  EXPECT_NE(encoded.status().message().find("position 2"), std::string::npos)
      << encoded.status().message();
}

TEST(CharCorpusTest, LoadListConcatenatesInOrder) {
  TempDir dir;
  const std::string a = dir.Write("a.txt", "hello ");
  const std::string b = dir.Write("b.txt", "world\n");
  auto corpus = CharCorpus::Load(std::vector<std::string>{b, a});
  ASSERT_TRUE(corpus.ok()) << corpus.status().ToString();
  EXPECT_EQ(corpus->Decode(corpus->tokens()), "world\nhello ");
  EXPECT_EQ(corpus->vocab(), ReferenceVocab("hello world\n"));
}

TEST(CharCorpusTest, ErrorsNameThePath) {
  TempDir dir;
  const std::string missing = dir.Path("no_such_file.txt");
  auto r = CharCorpus::Load(missing);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find(missing), std::string::npos) << r.status().message();

  const std::string empty = dir.Write("empty.txt", "");
  r = CharCorpus::Load(empty);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find(empty), std::string::npos) << r.status().message();

  // In a list, the failing one is named even after good ones.
  const std::string good = dir.Write("good.txt", "abc");
  r = CharCorpus::Load(std::vector<std::string>{good, missing});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(missing), std::string::npos) << r.status().message();

  r = CharCorpus::Load(dir.Path(""));  // a directory
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);

  r = CharCorpus::Load(std::vector<std::string>{});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);

  // Not read without end: a device, and a (sparse) file above the bound.
  r = CharCorpus::Load("/dev/zero");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("/dev/zero' is not a regular file"), std::string::npos)
      << r.status().message();
  const std::string huge = dir.Path("huge.txt");
  std::ofstream(huge) << "x";
  fs::resize_file(huge, kMaxCorpusBytes + 1);
  r = CharCorpus::Load(huge);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("1073741825 bytes"), std::string::npos)
      << r.status().message();

  EXPECT_FALSE(CharCorpus::FromText("").ok());
}

TEST(CharCorpusTest, LastTenPercentIsValidation) {
  for (int n : {1, 9, 10, 11, 99, 1000, 1234}) {
    std::string text;
    for (int i = 0; i < n; ++i) text.push_back(static_cast<char>('a' + i % 26));
    auto corpus = CharCorpus::FromText(text);
    ASSERT_TRUE(corpus.ok());
    const size_t val = static_cast<size_t>(n / 10);
    EXPECT_EQ(corpus->val_tokens().size(), val) << "n=" << n;
    EXPECT_EQ(corpus->train_tokens().size(), static_cast<size_t>(n) - val) << "n=" << n;
    EXPECT_EQ(corpus->split_index(), static_cast<int64_t>(n - val));
    // The two views tile tokens(): train is the prefix, validation the suffix.
    EXPECT_EQ(corpus->train_tokens().data(), corpus->tokens().data());
    EXPECT_EQ(corpus->val_tokens().data() + corpus->val_tokens().size(),
              corpus->tokens().data() + corpus->tokens().size());
    EXPECT_EQ(corpus->Decode(corpus->val_tokens()), text.substr(n - val));
  }
}

TEST(CharCorpusTest, ShippedCorpusLoads) {
  const std::string path = DefaultTrainGptCorpusPath();
  auto corpus = CharCorpus::Load(path);
  ASSERT_TRUE(corpus.ok()) << corpus.status().ToString();
  std::ifstream in(path, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GT(text.size(), 100'000u);  // "a few hundred KB": enough text to learn from
  EXPECT_LT(text.size(), 1'500'000u);
  EXPECT_EQ(corpus->vocab(), ReferenceVocab(text));
  EXPECT_EQ(corpus->Decode(corpus->tokens()), text);
}

// ---- BatchSampler --------------------------------------------------------------------------

std::vector<int32_t> RampTokens(int n) {
  // Distinct values per position, so a filled row identifies its start offset.
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) tokens[static_cast<size_t>(i)] = i;
  return tokens;
}

// All start offsets of one step under `split`, gathered the way the ranks would fill them, with
// each filled row checked against the token stream. Returned sorted (a multiset).
std::vector<int64_t> StepStartsViaFill(const BatchSampler& sampler, const BatchSplit& split,
                                       int64_t step) {
  const int64_t t = sampler.seq_len();
  std::vector<int64_t> starts;
  std::vector<int32_t> inputs(static_cast<size_t>(split.micro_batch * t));
  std::vector<int32_t> targets(inputs.size());
  for (int rank = 0; rank < split.world_size; ++rank) {
    for (int m = 0; m < split.accumulation_steps; ++m) {
      auto micro = sampler.MicroBatchStarts(step, split, rank, m);
      EXPECT_TRUE(micro.ok()) << micro.status().ToString();
      if (!micro.ok()) return {};
      Status s = sampler.FillMicroBatch(step, split, rank, m, inputs, targets);
      EXPECT_TRUE(s.ok()) << s.ToString();
      for (int b = 0; b < split.micro_batch; ++b) {
        const int64_t start = (*micro)[static_cast<size_t>(b)];
        EXPECT_EQ(start, sampler.Sample(step, BatchSampler::GlobalIndex(split, rank, m, b)));
        for (int64_t j = 0; j < t; ++j) {
          const size_t k = static_cast<size_t>(b * t + j);
          EXPECT_EQ(inputs[k], sampler.tokens()[static_cast<size_t>(start + j)]);
          EXPECT_EQ(targets[k], sampler.tokens()[static_cast<size_t>(start + j + 1)]);
        }
        starts.push_back(start);
      }
    }
  }
  std::sort(starts.begin(), starts.end());
  return starts;
}

TEST(BatchSamplerTest, SameSamplesForEverySplitOfTheGlobalBatch) {
  const std::vector<int32_t> tokens = RampTokens(5000);
  auto sampler = BatchSampler::Create(tokens, /*seq_len=*/16, /*seed=*/1234, /*global_batch=*/8);
  ASSERT_TRUE(sampler.ok()) << sampler.status().ToString();
  const std::vector<BatchSplit> splits = {
      {.world_size = 1, .micro_batch = 8, .accumulation_steps = 1},
      {.world_size = 2, .micro_batch = 2, .accumulation_steps = 2},
      {.world_size = 4, .micro_batch = 1, .accumulation_steps = 2},
      {.world_size = 1, .micro_batch = 1, .accumulation_steps = 8},
      {.world_size = 8, .micro_batch = 1, .accumulation_steps = 1},
      {.world_size = 2, .micro_batch = 4, .accumulation_steps = 1},
  };
  for (int64_t step : {0, 1, 2, 17, 1000}) {
    const std::vector<int64_t> reference = StepStartsViaFill(*sampler, splits[0], step);
    ASSERT_EQ(reference.size(), 8u);
    for (const BatchSplit& split : splits) {
      EXPECT_EQ(StepStartsViaFill(*sampler, split, step), reference)
          << "step " << step << " split W" << split.world_size << " B" << split.micro_batch << " GA"
          << split.accumulation_steps;
    }
  }
}

TEST(BatchSamplerTest, GlobalIndexCoversTheBatchOnce) {
  for (const BatchSplit& split : {BatchSplit{3, 2, 5}, BatchSplit{1, 7, 1}, BatchSplit{4, 1, 3}}) {
    std::vector<int> hits(static_cast<size_t>(split.global_batch()), 0);
    for (int r = 0; r < split.world_size; ++r) {
      for (int m = 0; m < split.accumulation_steps; ++m) {
        for (int b = 0; b < split.micro_batch; ++b) {
          const int64_t i = BatchSampler::GlobalIndex(split, r, m, b);
          ASSERT_GE(i, 0);
          ASSERT_LT(i, split.global_batch());
          ++hits[static_cast<size_t>(i)];
        }
      }
    }
    EXPECT_TRUE(std::all_of(hits.begin(), hits.end(), [](int h) { return h == 1; }));
  }
}

TEST(BatchSamplerTest, DeterministicAndSensitiveToSeedAndStep) {
  const std::vector<int32_t> tokens = RampTokens(100'000);
  const int64_t g = 32;
  auto a = BatchSampler::Create(tokens, 64, 7, g);
  auto a_again = BatchSampler::Create(tokens, 64, 7, g);
  auto b = BatchSampler::Create(tokens, 64, 8, g);
  ASSERT_TRUE(a.ok() && a_again.ok() && b.ok());
  auto step_starts = [g](const BatchSampler& s, int64_t step) {
    std::vector<int64_t> out;
    for (int64_t i = 0; i < g; ++i) out.push_back(s.Sample(step, i));
    return out;
  };
  for (int64_t step = 0; step < 5; ++step) {
    EXPECT_EQ(step_starts(*a, step), step_starts(*a_again, step));
    // With 99,936 possible starts, 32 equal draws by chance are impossible in practice.
    EXPECT_NE(step_starts(*a, step), step_starts(*b, step)) << "seed change, step " << step;
    EXPECT_NE(step_starts(*a, step), step_starts(*a, step + 1)) << "step change " << step;
  }
  // Within one step the indices give different windows (not one start repeated).
  const std::vector<int64_t> s0 = step_starts(*a, 0);
  EXPECT_GT(std::set<int64_t>(s0.begin(), s0.end()).size(), 28u);
}

TEST(BatchSamplerTest, StartsCoverTheWholeRangeAndStayInside) {
  // n = 40, T = 8: starts must be exactly the values 0..31, and all of them should appear.
  const std::vector<int32_t> tokens = RampTokens(40);
  auto sampler = BatchSampler::Create(tokens, 8, 99, 16);
  ASSERT_TRUE(sampler.ok());
  EXPECT_EQ(sampler->num_starts(), 32);
  std::map<int64_t, int> counts;
  const int steps = 400;
  for (int64_t step = 0; step < steps; ++step) {
    for (int64_t i = 0; i < 16; ++i) {
      const int64_t start = sampler->Sample(step, i);
      ASSERT_GE(start, 0);
      ASSERT_LE(start + 8, 39);  // the last target tokens[start + T] exists
      ++counts[start];
    }
  }
  ASSERT_EQ(counts.size(), 32u);  // every start reachable, including 0 and n - T - 1
  EXPECT_EQ(counts.begin()->first, 0);
  EXPECT_EQ(counts.rbegin()->first, 31);
  // Roughly uniform: 6400 draws over 32 values, expect 200 each; a chi-square-free sanity band.
  for (const auto& [start, c] : counts) {
    EXPECT_GT(c, 120) << "start " << start;
    EXPECT_LT(c, 290) << "start " << start;
  }
  // Smallest legal case: T = n - 1 leaves exactly one start.
  auto tight = BatchSampler::Create(tokens, 39, 5, 3);
  ASSERT_TRUE(tight.ok());
  for (int64_t i = 0; i < 3; ++i) EXPECT_EQ(tight->Sample(4, i), 0);
}

TEST(BatchSamplerTest, ArgumentErrorsNameTheValues) {
  const std::vector<int32_t> tokens = RampTokens(100);
  auto bad = BatchSampler::Create(tokens, 100, 1, 8);  // T >= n
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("100"), std::string::npos) << bad.status().message();
  EXPECT_FALSE(BatchSampler::Create(tokens, 0, 1, 8).ok());
  EXPECT_FALSE(BatchSampler::Create(tokens, 8, 1, 0).ok());
  EXPECT_FALSE(BatchSampler::Create({}, 1, 1, 1).ok());

  auto sampler = BatchSampler::Create(tokens, 8, 1, 8);
  ASSERT_TRUE(sampler.ok());
  std::vector<int32_t> in(16), out(16);
  const BatchSplit good{.world_size = 2, .micro_batch = 2, .accumulation_steps = 2};
  EXPECT_TRUE(sampler->FillMicroBatch(0, good, 1, 1, in, out).ok());

  auto expect_error = [&](const Status& s, const std::string& needle) {
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
  };
  // B < 1, and a split that does not multiply to G.
  expect_error(sampler->FillMicroBatch(0, {2, 0, 2}, 0, 0, in, out), "micro_batch 0");
  expect_error(sampler->FillMicroBatch(0, {2, 2, 3}, 0, 0, in, out), "global batch 8");
  // rank >= world, micro_step >= GA, negative step.
  expect_error(sampler->FillMicroBatch(0, good, 2, 0, in, out), "rank 2");
  expect_error(sampler->FillMicroBatch(0, good, 0, 2, in, out), "micro_step 2");
  expect_error(sampler->FillMicroBatch(-1, good, 0, 0, in, out), "step -1");
  // Wrong buffer sizes; nothing written.
  std::vector<int32_t> small(15, -7);
  expect_error(sampler->FillMicroBatch(0, good, 0, 0, small, out), "15 values");
  EXPECT_TRUE(std::all_of(small.begin(), small.end(), [](int32_t v) { return v == -7; }));
  EXPECT_FALSE(sampler->MicroBatchStarts(0, {1, 1, 1}, 0, 0).ok());
}

TEST(BatchSamplerTest, TrainsOnCorpusTrainSplit) {
  // The demo's wiring: a sampler over the training view never reaches validation tokens.
  std::string text;
  for (int i = 0; i < 2000; ++i) text.push_back(static_cast<char>('a' + (i * 7) % 26));
  auto corpus = CharCorpus::FromText(text);
  ASSERT_TRUE(corpus.ok());
  auto sampler = BatchSampler::Create(corpus->train_tokens(), 32, 3, 4);
  ASSERT_TRUE(sampler.ok());
  for (int64_t step = 0; step < 200; ++step) {
    for (int64_t i = 0; i < 4; ++i) {
      EXPECT_LE(sampler->Sample(step, i) + 32, corpus->split_index() - 1);
    }
  }
}

}  // namespace
}  // namespace zs
