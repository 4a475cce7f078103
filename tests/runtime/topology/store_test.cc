// The Store contract (runtime/topology/store.h) checked on every implementation: the in-process
// store, the file store and the tcp store (its serving side and its clients).
#include "runtime/topology/store.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <functional>
#include <thread>

#include "runtime/topology/tcp_store.h"

namespace zs {
namespace {

using std::chrono::milliseconds;
constexpr milliseconds kLong{20'000};  // never reached unless broken; no test measures time

// A store shared by several "ranks": handle(i) is rank i's view of the same key space.
class StoreWorld {
 public:
  virtual ~StoreWorld() = default;
  virtual Store& handle(int i) = 0;
};

class InProcessWorld : public StoreWorld {
 public:
  Store& handle(int) override { return store_; }
  InProcessStore store_;
};

class FileWorld : public StoreWorld {
 public:
  FileWorld() {
    static std::atomic<int> n{0};
    dir_ = ::testing::TempDir() + "/store_test_" + std::to_string(::getpid()) + "_" +
           std::to_string(n++);
  }
  ~FileWorld() override { std::filesystem::remove_all(dir_); }
  Store& handle(int i) override {
    while (int(stores_.size()) <= i) stores_.push_back(FileStore::Open(dir_ + "/a/b").value());
    return *stores_[size_t(i)];
  }
  std::string dir_;
  std::vector<std::unique_ptr<FileStore>> stores_;
};

// Handle 0 serves; every other handle is a client of its own.
class TcpWorld : public StoreWorld {
 public:
  TcpWorld() : server_(TcpStore::Serve(0).value()) {}
  Store& handle(int i) override {
    if (i == 0) return *server_;
    while (int(clients_.size()) < i) {
      clients_.push_back(TcpStore::Connect("localhost", server_->port()).value());
    }
    return *clients_[size_t(i - 1)];
  }
  std::unique_ptr<TcpStore> server_;
  std::vector<std::unique_ptr<TcpStore>> clients_;
};

using WorldFactory = std::function<std::unique_ptr<StoreWorld>()>;

class StoreTest : public ::testing::TestWithParam<std::pair<std::string, WorldFactory>> {
 protected:
  void SetUp() override { world_ = GetParam().second(); }
  Store& handle(int i) { return world_->handle(i); }
  std::unique_ptr<StoreWorld> world_;
};

TEST_P(StoreTest, SetIsVisibleToEveryHandle) {
  ASSERT_TRUE(handle(1).Set("rank/1/address", "fi_addr:42").ok());
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(handle(i).Contains("rank/1/address"));
    EXPECT_EQ(handle(i).Get("rank/1/address", kLong).value(), "fi_addr:42");
  }
  EXPECT_FALSE(handle(2).Contains("rank/2/address"));
}

TEST_P(StoreTest, ValuesAreBytes) {
  const std::string binary("a\0b\n\xff", 5);
  std::string big(1 << 20, 'x');
  for (size_t i = 0; i < big.size(); i += 4097) big[i] = char(i);
  ASSERT_TRUE(handle(1).Set("binary", binary).ok());
  ASSERT_TRUE(handle(2).Set("big", big).ok());
  ASSERT_TRUE(handle(0).Set("empty", "").ok());
  ASSERT_TRUE(handle(1).Set("a%2Fb/c%", "escaped").ok());
  EXPECT_EQ(handle(0).Get("binary", kLong).value(), binary);
  EXPECT_EQ(handle(1).Get("big", kLong).value(), big);
  EXPECT_EQ(handle(2).Get("empty", kLong).value(), "");
  EXPECT_EQ(handle(2).Get("a%2Fb/c%", kLong).value(), "escaped");
  EXPECT_FALSE(handle(2).Contains("a/b/c%"));
}

TEST_P(StoreTest, KeysAreWriteOnce) {
  ASSERT_TRUE(handle(1).Set("once", "first").ok());
  for (int i = 0; i < 3; ++i) {
    Status again = handle(i).Set("once", "second");
    EXPECT_EQ(again.code(), StatusCode::kInvalidArgument) << again.ToString();
    EXPECT_NE(again.message().find("key 'once' was already set"), std::string::npos)
        << again.ToString();
  }
  EXPECT_EQ(handle(2).Get("once", kLong).value(), "first");
}

TEST_P(StoreTest, GetTimesOutNamingTheKey) {
  auto missing = handle(1).Get("never/set", milliseconds(30));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(missing.status().message().find("key 'never/set' did not appear within 30 ms"),
            std::string::npos)
      << missing.status().ToString();
  EXPECT_NE(missing.status().message().find(handle(1).Describe()), std::string::npos);
  // The handle still works after a timeout.
  ASSERT_TRUE(handle(0).Set("never/set", "late").ok());
  EXPECT_EQ(handle(1).Get("never/set", kLong).value(), "late");
}

TEST_P(StoreTest, GetWaitsForALaterSet) {
  Store& reader = handle(2);
  Store& writer = handle(1);
  std::thread t([&] {
    std::this_thread::sleep_for(milliseconds(20));
    ASSERT_TRUE(writer.Set("later", "here").ok());
  });
  EXPECT_EQ(reader.Get("later", kLong).value(), "here");
  t.join();
}

// Ranks as threads: each publishes keys and reads everyone's, through its own handle.
TEST_P(StoreTest, ManyThreadsExchange) {
  constexpr int kRanks = 6, kKeys = 20;
  std::vector<Store*> handles;
  for (int r = 0; r < kRanks; ++r) handles.push_back(&handle(r));
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      for (int k = 0; k < kKeys; ++k) {
        if (!handles[size_t(r)]->Set(fmt::format("r{}/k{}", r, k), fmt::format("{}:{}", r, k)).ok())
          ++wrong;
      }
      for (int p = 0; p < kRanks; ++p) {
        for (int k = kKeys; k-- > 0;) {
          auto v = handles[size_t(r)]->Get(fmt::format("r{}/k{}", p, k), kLong);
          if (!v.ok() || *v != fmt::format("{}:{}", p, k)) ++wrong;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
}

// Many threads share ONE handle; one of them blocks in Get while the others Set.
TEST_P(StoreTest, OneHandleSharedByThreads) {
  Store& shared = handle(1);
  constexpr int kThreads = 6;
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      // Thread t waits for the key thread t+1 sets (the last waits for thread 0's).
      if (!shared.Set(fmt::format("shared/{}", t), std::to_string(t)).ok()) ++wrong;
      const int next = (t + 1) % kThreads;
      auto v = shared.Get(fmt::format("shared/{}", next), kLong);
      if (!v.ok() || *v != std::to_string(next)) ++wrong;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
}

TEST_P(StoreTest, RacingSetsOfOneKeyHaveOneWinner) {
  constexpr int kThreads = 6;
  std::vector<Store*> handles;
  for (int r = 0; r < kThreads; ++r) handles.push_back(&handle(r % 3));
  std::atomic<int> wins{0}, already{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Status s = handles[size_t(t)]->Set("contested", std::to_string(t));
      if (s.ok()) ++wins;
      if (s.code() == StatusCode::kInvalidArgument) ++already;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(wins.load(), 1);
  EXPECT_EQ(already.load(), kThreads - 1);
  const std::string v = handle(0).Get("contested", kLong).value();
  EXPECT_EQ(handle(1).Get("contested", kLong).value(), v);
}

INSTANTIATE_TEST_SUITE_P(
    AllStores, StoreTest,
    ::testing::Values(
        std::pair<std::string, WorldFactory>{"InProcess",
                                             [] { return std::make_unique<InProcessWorld>(); }},
        std::pair<std::string, WorldFactory>{"File", [] { return std::make_unique<FileWorld>(); }},
        std::pair<std::string, WorldFactory>{"Tcp", [] { return std::make_unique<TcpWorld>(); }}),
    [](const auto& info) { return info.param.first; });

TEST(FileStoreTest, OpenFailsNamingTheDirectory) {
  const std::string file = ::testing::TempDir() + "/store_test_file_" + std::to_string(::getpid());
  { ASSERT_TRUE(FileStore::Open(::testing::TempDir()).ok()); }
  FILE* f = std::fopen(file.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fclose(f);
  auto store = FileStore::Open(file + "/sub");
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.status().message().find(file + "/sub"), std::string::npos)
      << store.status().ToString();
  std::filesystem::remove(file);
}

}  // namespace
}  // namespace zs
