// NvmeStore: round trips on every backend and knob, and every documented error path (stale files
// of a killed run, corruption, truncation, never-written pages, a full disk, RLIMIT_FSIZE, bad
// options). Sizes are a few MiB so the whole file runs in seconds, also under TSan.
#include "offload/nvme_store.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <thread>
#include <vector>

#include "offload/block_checksum.h"
#include "runtime/base/splitmix64.h"
#include "tests/offload/scoped_limits.h"
#include "tests/status_is.h"

namespace zs {
namespace {

namespace fs = std::filesystem;
constexpr int64_t kKiB = 1024;
constexpr int64_t kMiB = 1024 * kKiB;
constexpr IoBackend kConcreteBackends[] = {IoBackend::kIoUring, IoBackend::kLibaio,
                                           IoBackend::kPosix};

// A fresh directory per test, removed after.
class TempDir {
 public:
  explicit TempDir(const std::string& base = ::testing::TempDir()) {
    std::string pattern = (fs::path(base) / "nvme_store_test.XXXXXX").string();
    ZS_CHECK(mkdtemp(pattern.data()) != nullptr, "mkdtemp {}: {}", pattern, strerror(errno));
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A 4096-aligned host buffer (what O_DIRECT needs and Device's host tiers give).
class AlignedBuffer {
 public:
  explicit AlignedBuffer(int64_t bytes)
      : bytes_(bytes),
        data_(static_cast<unsigned char*>(
            std::aligned_alloc(kNvmeAlignment, static_cast<size_t>(bytes)))) {
    ZS_CHECK(data_ != nullptr);
    std::memset(data_, 0, static_cast<size_t>(bytes));
  }
  ~AlignedBuffer() { std::free(data_); }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  unsigned char* data() const { return data_; }
  int64_t size() const { return bytes_; }
  void FillRandom(uint64_t seed) {
    for (int64_t i = 0; i < bytes_; i += 8) {
      const uint64_t w = SplitMix64(seed + static_cast<uint64_t>(i));
      std::memcpy(data_ + i, &w, 8);
    }
  }
  bool SameAs(const AlignedBuffer& other) const {
    return bytes_ == other.bytes_ &&
           std::memcmp(data_, other.data_, static_cast<size_t>(bytes_)) == 0;
  }

 private:
  int64_t bytes_;
  unsigned char* data_;
};

NvmeStoreOptions Options(const std::string& dir, IoBackend backend = IoBackend::kAuto,
                         int64_t block_size = 64 * kKiB) {
  NvmeStoreOptions o;
  o.dir = dir;
  o.name = "optimizer.rank0";
  o.block_size = block_size;
  o.backend = backend;
  return o;
}

std::unique_ptr<NvmeStore> MustCreate(const NvmeStoreOptions& options, int64_t capacity) {
  auto store = NvmeStore::Create(options, capacity);
  ZS_CHECK(store.ok(), "{}", store.status().ToString());
  return std::move(store).value();
}

// ---- the checksum -----------------------------------------------------------------------------

TEST(PageChecksumTest, EverySingleBitFlipAndEveryOffsetChangeIsSeen) {
  AlignedBuffer page(kChecksumPageBytes);
  page.FillRandom(7);
  const uint64_t clean = PageChecksum(page.data(), 8192);
  EXPECT_EQ(PageChecksum(page.data(), 8192), clean);
  EXPECT_NE(PageChecksum(page.data(), 4096), clean) << "the same page at another offset";
  for (int64_t bit = 0; bit < kChecksumPageBytes * 8; ++bit) {
    page.data()[bit / 8] ^= static_cast<unsigned char>(1u << (bit % 8));
    ASSERT_NE(PageChecksum(page.data(), 8192), clean) << "bit " << bit;
    page.data()[bit / 8] ^= static_cast<unsigned char>(1u << (bit % 8));
  }
  // Two sign bits of words in the same lane (words 0 and 8) must not cancel.
  page.data()[7] ^= 0x80;
  page.data()[71] ^= 0x80;
  EXPECT_NE(PageChecksum(page.data(), 8192), clean);
}

// ---- round trips on every backend and knob ----------------------------------------------------

struct Knobs {
  IoBackend backend;
  int64_t queue_depth;
  int64_t threads;
  bool single_submit;
  bool overlap_events;
};

std::string KnobsName(const ::testing::TestParamInfo<Knobs>& info) {
  const Knobs& k = info.param;
  return fmt::format("{}_qd{}_t{}_{}_{}", IoBackendName(k.backend), k.queue_depth, k.threads,
                     k.single_submit ? "single" : "batch", k.overlap_events ? "overlap" : "drain");
}

std::vector<Knobs> AllKnobs() {
  std::vector<Knobs> all;
  for (IoBackend b : kConcreteBackends) {
    for (int64_t qd : {1, 8}) {
      for (int64_t threads : {1, 2}) {
        for (bool single : {false, true}) {
          for (bool overlap : {true, false}) all.push_back({b, qd, threads, single, overlap});
        }
      }
    }
  }
  return all;
}

// A backend the kernel refuses here (io_uring under a seccomp profile, say) is skipped, with the
// reason, rather than failed: kAuto falls back past it, and the other backends still run.
std::optional<std::string> Unavailable(IoBackend backend) {
  TempDir dir;
  NvmeStoreOptions o = Options(dir.path(), backend, 64 * kKiB);
  auto store = NvmeStore::Create(o, 64 * kKiB);
  if (store.ok() || store.status().code() != StatusCode::kUnavailable) return std::nullopt;
  return store.status().ToString();
}

class NvmeStoreRoundTripTest : public ::testing::TestWithParam<Knobs> {
 protected:
  void SetUp() override {
    if (auto why = Unavailable(GetParam().backend)) GTEST_SKIP() << *why;
  }
};

TEST_P(NvmeStoreRoundTripTest, RandomDataComesBackAtEverySizeAndOffset) {
  const Knobs& k = GetParam();
  TempDir dir;
  NvmeStoreOptions o = Options(dir.path(), k.backend, 64 * kKiB);
  o.queue_depth = k.queue_depth;
  o.intra_op_parallelism = k.threads;
  o.single_submit = k.single_submit;
  o.overlap_events = k.overlap_events;
  auto store = MustCreate(o, 4 * kMiB);
  ASSERT_EQ(store->backend(), k.backend);

  // {offset, bytes}: one page, one block, a block and a page, an odd number of pages, more than
  // 16 blocks and not a multiple of the block, and the very end of the file.
  const std::vector<std::pair<int64_t, int64_t>> ranges = {{0, 4 * kKiB},
                                                           {4 * kKiB, 64 * kKiB},
                                                           {128 * kKiB, 68 * kKiB},
                                                           {512 * kKiB, 75 * 4 * kKiB},
                                                           {1 * kMiB, 1 * kMiB + 12 * kKiB},
                                                           {4 * kMiB - 8 * kKiB, 8 * kKiB}};
  std::vector<std::unique_ptr<AlignedBuffer>> written;
  std::vector<IoHandle> handles;
  for (size_t i = 0; i < ranges.size(); ++i) {
    written.push_back(std::make_unique<AlignedBuffer>(ranges[i].second));
    written.back()->FillRandom(1000 * i + 1);
    handles.push_back(store->StartWrite(ranges[i].first, written.back()->data(), ranges[i].second));
  }
  for (IoHandle& h : handles) ASSERT_TRUE(h.Wait().ok());
  for (size_t i = 0; i < ranges.size(); ++i) {
    AlignedBuffer back(ranges[i].second);
    ASSERT_TRUE(store->Read(ranges[i].first, back.data(), back.size()).ok()) << "range " << i;
    EXPECT_TRUE(back.SameAs(*written[i])) << "range " << i;
  }
  // Rewriting changes what comes back (the checksums follow the data).
  written[3]->FillRandom(99);
  ASSERT_TRUE(store->Write(ranges[3].first, written[3]->data(), ranges[3].second).ok());
  AlignedBuffer back(ranges[3].second);
  ASSERT_TRUE(store->Read(ranges[3].first, back.data(), back.size()).ok());
  EXPECT_TRUE(back.SameAs(*written[3]));
}

INSTANTIATE_TEST_SUITE_P(AllBackendsAndKnobs, NvmeStoreRoundTripTest,
                         ::testing::ValuesIn(AllKnobs()), KnobsName);

TEST(NvmeStoreTest, AutoChoosesAConcreteBackend) {
  TempDir dir;
  auto store = MustCreate(Options(dir.path()), 64 * kKiB);
  EXPECT_NE(store->backend(), IoBackend::kAuto);
  EXPECT_EQ(IoBackendName(store->backend()), "io_uring") << "io_uring works on the build machines";
}

TEST(NvmeStoreTest, ManyConcurrentHandlesFromManyThreads) {
  TempDir dir;
  NvmeStoreOptions o = Options(dir.path(), IoBackend::kAuto, 8 * kKiB);
  o.intra_op_parallelism = 2;
  o.queue_depth = 4;
  constexpr int kThreads = 4, kPerThread = 16;
  constexpr int64_t kBytes = 16 * kKiB;
  auto store = MustCreate(o, kThreads * kPerThread * kBytes);
  AlignedBuffer data(kThreads * kPerThread * kBytes), back(data.size());
  data.FillRandom(5);
  auto run = [&](bool write) {
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        std::vector<IoHandle> handles;
        for (int i = 0; i < kPerThread; ++i) {
          const int64_t at = (int64_t{i} * kThreads + t) * kBytes;  // interleaved offsets
          handles.push_back(write ? store->StartWrite(at, data.data() + at, kBytes)
                                  : store->StartRead(at, back.data() + at, kBytes));
        }
        for (IoHandle& h : handles) EXPECT_TRUE(h.Wait().ok());
      });
    }
    for (std::thread& t : threads) t.join();
  };
  run(/*write=*/true);
  run(/*write=*/false);
  EXPECT_TRUE(back.SameAs(data));
  const NvmeStats stats = store->stats();
  EXPECT_EQ(stats.writes, kThreads * kPerThread);
  EXPECT_EQ(stats.reads, kThreads * kPerThread);
  EXPECT_EQ(stats.bytes_written, data.size());
  EXPECT_EQ(stats.bytes_read, data.size());
  EXPECT_GT(stats.write_seconds, 0);
  EXPECT_GT(stats.read_seconds, 0);
}

TEST(NvmeStoreTest, FileIsNamedPreallocatedAndRemovedByTheDestructor) {
  TempDir dir;
  auto store = MustCreate(Options(dir.path()), 10000);  // rounded up to 12288
  const std::string expected =
      fmt::format("{}/zerostack-optimizer.rank0.{}.swap", dir.path(), getpid());
  EXPECT_EQ(store->path(), expected);
  EXPECT_EQ(store->capacity(), 12288);
  struct stat st {};
  ASSERT_EQ(stat(expected.c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 12288);
  EXPECT_GE(st.st_blocks * 512, 12288) << "fallocate reserved the blocks";
  // A second store of the same name in this process is refused (O_EXCL), naming the file.
  EXPECT_TRUE(StatusIs(NvmeStore::Create(Options(dir.path()), 4096).status(),
                       StatusCode::kFailedPrecondition, {expected, "already exists"}));
  store.reset();
  EXPECT_FALSE(fs::exists(expected));
}

TEST(NvmeStoreTest, ZeroByteRequestsAreDoneAtOnce) {
  TempDir dir;
  auto store = MustCreate(Options(dir.path()), 4096);
  AlignedBuffer buffer(4096);
  IoHandle h = store->StartRead(4096, buffer.data(), 0);
  EXPECT_TRUE(h.valid());
  EXPECT_TRUE(h.Wait().ok());
  IoHandle empty;
  EXPECT_FALSE(empty.valid());
  EXPECT_TRUE(empty.Wait().ok());
}

// ---- stale files of a killed run --------------------------------------------------------------

void Touch(const std::string& path) { std::ofstream(path) << "x"; }

TEST(NvmeStoreTest, StaleFileOfAKilledRunIsRefusedAndLiveOnesAreLeftAlone) {
  TempDir dir;
  // A pid that no longer exists: a child that has exited and been reaped.
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(0);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);

  const std::string stale = fmt::format("{}/zerostack-optimizer.rank0.{}.swap", dir.path(), child);
  const std::string other_name =
      fmt::format("{}/zerostack-params.rank0.{}.swap", dir.path(), child);
  const std::string live_other = fmt::format("{}/zerostack-other.{}.swap", dir.path(), getpid());
  const std::string live_same = fmt::format("{}/zerostack-optimizer.rank0.1.swap", dir.path());
  for (const std::string& f : {stale, other_name, live_other, live_same}) Touch(f);

  auto refused = NvmeStore::Create(Options(dir.path()), 64 * kKiB);
  ASSERT_TRUE(
      StatusIs(refused.status(), StatusCode::kFailedPrecondition, {stale, "killed run", "Remove"}));
  EXPECT_EQ(refused.status().message().find(live_same), std::string::npos);
  EXPECT_EQ(refused.status().message().find(other_name), std::string::npos)
      << "another store's name is not this store's business";

  ASSERT_TRUE(fs::remove(stale));
  { auto store = MustCreate(Options(dir.path()), 64 * kKiB); }
  for (const std::string& f : {other_name, live_other, live_same}) EXPECT_TRUE(fs::exists(f)) << f;
}

// ---- corruption, truncation, never-written pages ----------------------------------------------

class NvmeStoreBackendTest : public ::testing::TestWithParam<IoBackend> {
 protected:
  void SetUp() override {
    if (auto why = Unavailable(GetParam())) GTEST_SKIP() << *why;
  }
};

TEST_P(NvmeStoreBackendTest, CorruptedByteIsACheckumMismatchAtItsPage) {
  TempDir dir;
  auto store = MustCreate(Options(dir.path(), GetParam()), 1 * kMiB);
  AlignedBuffer data(256 * kKiB), back(256 * kKiB);
  data.FillRandom(3);
  ASSERT_TRUE(store->Write(0, data.data(), data.size()).ok());

  // Another process (here: a plain buffered descriptor) flips one byte of page 21.
  const int64_t bad_page = 21 * 4096;
  const int fd = open(store->path().c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  unsigned char byte = static_cast<unsigned char>(data.data()[bad_page + 100] ^ 0x01);
  ASSERT_EQ(pwrite(fd, &byte, 1, bad_page + 100), 1);
  ASSERT_EQ(close(fd), 0);

  EXPECT_TRUE(StatusIs(store->Read(0, back.data(), back.size()), StatusCode::kIoError,
                       {"checksum mismatch", store->path(), "at offset 86016 "}));
  // Pages before the bad one still read fine.
  EXPECT_TRUE(store->Read(0, back.data(), bad_page).ok());
  // Rewriting the page heals it.
  ASSERT_TRUE(store->Write(bad_page, data.data() + bad_page, 4096).ok());
  ASSERT_TRUE(store->Read(0, back.data(), back.size()).ok());
  EXPECT_TRUE(back.SameAs(data));
}

TEST_P(NvmeStoreBackendTest, TruncatedFileIsAShortRead) {
  TempDir dir;
  auto store = MustCreate(Options(dir.path(), GetParam(), 256 * kKiB), 2 * kMiB);
  AlignedBuffer data(2 * kMiB), back(2 * kMiB);
  data.FillRandom(4);
  ASSERT_TRUE(store->Write(0, data.data(), data.size()).ok());
  ASSERT_EQ(truncate(store->path().c_str(), 1 * kMiB), 0);
  // Every piece past 1 MiB reads nothing; the lowest offset is the one reported.
  EXPECT_TRUE(
      StatusIs(store->Read(0, back.data(), back.size()), StatusCode::kIoError,
               {"short read", store->path(), "at offset 1048576", "asked 262144 bytes", "got 0"}));
  EXPECT_TRUE(store->Read(0, back.data(), 1 * kMiB).ok());
}

TEST_P(NvmeStoreBackendTest, NeverWrittenPagesCannotBeRead) {
  TempDir dir;
  auto store = MustCreate(Options(dir.path(), GetParam()), 1 * kMiB);
  AlignedBuffer data(64 * kKiB), back(128 * kKiB);
  EXPECT_TRUE(StatusIs(store->Read(0, back.data(), 4096), StatusCode::kFailedPrecondition,
                       {store->path(), "at offset 0:", "never written"}));
  ASSERT_TRUE(store->Write(0, data.data(), data.size()).ok());
  EXPECT_TRUE(StatusIs(store->Read(0, back.data(), back.size()), StatusCode::kFailedPrecondition,
                       {store->path(), "at offset 65536:", "never written"}));
}

INSTANTIATE_TEST_SUITE_P(AllBackends, NvmeStoreBackendTest, ::testing::ValuesIn(kConcreteBackends),
                         [](const auto& info) { return std::string(IoBackendName(info.param)); });

// ---- a full disk ------------------------------------------------------------------------------

TEST(NvmeStoreTest, CapacityBeyondTheFilesystemFailsNamingPathAndBytes) {
  TempDir tmp;
  std::vector<std::string> dirs = {tmp.path()};
  std::unique_ptr<TempDir> shm;
  if (fs::is_directory("/dev/shm")) {  // tmpfs: another filesystem with another free space
    shm = std::make_unique<TempDir>("/dev/shm");
    dirs.push_back(shm->path());
  }
  for (const std::string& d : dirs) {
    struct statvfs vfs {};
    ASSERT_EQ(statvfs(d.c_str(), &vfs), 0);
    const int64_t bytes = 2 * static_cast<int64_t>(vfs.f_blocks * vfs.f_frsize);
    auto store = NvmeStore::Create(Options(d), bytes);
    const std::string path = fmt::format("{}/zerostack-optimizer.rank0.{}.swap", d, getpid());
    EXPECT_TRUE(StatusIs(store.status(), StatusCode::kIoError,
                         {fmt::format("no space for {} bytes", bytes), path}));
    EXPECT_FALSE(fs::exists(path));
  }
}

using testing_support::FileSizeLimit;

TEST_P(NvmeStoreBackendTest, FileSizeLimitIsNoSpaceOnCreateAndOnWrite) {
  TempDir dir;
  const std::string path =
      fmt::format("{}/zerostack-optimizer.rank0.{}.swap", dir.path(), getpid());
  {
    FileSizeLimit limit(256 * kKiB);
    EXPECT_TRUE(StatusIs(NvmeStore::Create(Options(dir.path(), GetParam()), 1 * kMiB).status(),
                         StatusCode::kIoError, {"no space for 1048576 bytes", path, "fallocate"}));
    EXPECT_FALSE(fs::exists(path));
  }
  auto store = MustCreate(Options(dir.path(), GetParam(), 256 * kKiB), 1 * kMiB);
  AlignedBuffer data(1 * kMiB), back(256 * kKiB);
  data.FillRandom(6);
  {
    FileSizeLimit limit(512 * kKiB);
    EXPECT_TRUE(StatusIs(store->Write(0, data.data(), data.size()), StatusCode::kIoError,
                         {"no space left writing 262144 bytes to", path, "at offset 524288"}));
  }
  // The pieces below the limit landed; the failed ones cannot be read as if they were valid.
  ASSERT_TRUE(store->Read(256 * kKiB, back.data(), back.size()).ok());
  EXPECT_EQ(std::memcmp(back.data(), data.data() + 256 * kKiB, 256 * kKiB), 0);
  EXPECT_TRUE(StatusIs(store->Read(768 * kKiB, back.data(), back.size()),
                       StatusCode::kFailedPrecondition,
                       {path, "at offset 786432:", "did not succeed"}));
  // With the limit gone the write goes through.
  ASSERT_TRUE(store->Write(0, data.data(), data.size()).ok());
  ASSERT_TRUE(store->Read(768 * kKiB, back.data(), back.size()).ok());
  EXPECT_EQ(std::memcmp(back.data(), data.data() + 768 * kKiB, 256 * kKiB), 0);
  const NvmeStats stats = store->stats();
  EXPECT_EQ(stats.writes, 2);
  EXPECT_EQ(stats.bytes_written, 1 * kMiB) << "only the write that succeeded counts";
}

// ---- bad options and paths --------------------------------------------------------------------

TEST(NvmeStoreTest, BadOptionsNameTheirAioKey) {
  TempDir dir;
  auto create = [&](auto edit, int64_t capacity = 64 * kKiB) {
    NvmeStoreOptions o = Options(dir.path());
    edit(o);
    return NvmeStore::Create(o, capacity).status();
  };
  const auto kInvalid = StatusCode::kInvalidArgument;
  EXPECT_TRUE(StatusIs(create([](auto& o) { o.block_size = 1000; }), kInvalid,
                       {"aio.block_size = 1000", "multiple of 4096"}));
  EXPECT_TRUE(StatusIs(create([](auto& o) { o.block_size = 0; }), kInvalid, {"aio.block_size"}));
  EXPECT_TRUE(
      StatusIs(create([](auto& o) { o.queue_depth = 0; }), kInvalid, {"aio.queue_depth = 0"}));
  EXPECT_TRUE(StatusIs(create([](auto& o) { o.intra_op_parallelism = 0; }), kInvalid,
                       {"aio.intra_op_parallelism = 0"}));
  EXPECT_TRUE(StatusIs(create([](auto& o) { o.name = "a/b"; }), kInvalid, {"a/b"}));
  EXPECT_TRUE(StatusIs(create([](auto&) {}, 0), kInvalid, {"capacity 0"}));

  const std::string missing = dir.path() + "/no_such_dir";
  EXPECT_TRUE(StatusIs(create([&](auto& o) { o.dir = missing; }), StatusCode::kNotFound,
                       {missing, "does not exist"}));
  const std::string file = dir.path() + "/a_file";
  Touch(file);
  EXPECT_TRUE(
      StatusIs(create([&](auto& o) { o.dir = file; }), kInvalid, {file, "not a directory"}));
}

// ---- handle misuse ----------------------------------------------------------------------------

// Death tests use gtest's default "fast" style (fork at the statement) on purpose: the dying
// child shares the parent's store and temp dir, which the parent removes ("threadsafe" style
// re-runs the test in a fresh process that would leave its own swap file behind). The child has
// no I/O threads, so the statements die before queueing anything for them.
TEST(NvmeStoreDeathTest, MisalignedRequestsAreProgrammerBugs) {
  TempDir dir;
  auto store = MustCreate(Options(dir.path()), 64 * kKiB);
  AlignedBuffer buffer(8192);
  EXPECT_DEATH((void)store->Write(0, buffer.data() + 512, 4096), "not 4096-byte aligned");
  EXPECT_DEATH((void)store->Write(100, buffer.data(), 4096), "multiples of 4096");
  EXPECT_DEATH((void)store->Read(60 * kKiB, buffer.data(), 8192), "past the capacity");
}

#ifdef NDEBUG
TEST(NvmeStoreTest, UnwaitedHandleWaitsInReleaseBuilds) {
  TempDir dir;
  auto store = MustCreate(Options(dir.path()), 256 * kKiB);
  AlignedBuffer data(256 * kKiB), back(256 * kKiB);
  data.FillRandom(8);
  { IoHandle forgotten = store->StartWrite(0, data.data(), data.size()); }
  ASSERT_TRUE(store->Read(0, back.data(), back.size()).ok());
  EXPECT_TRUE(back.SameAs(data));
}
#else
TEST(NvmeStoreDeathTest, UnwaitedHandleIsABugInDebugBuilds) {
  TempDir dir;
  auto store = MustCreate(Options(dir.path()), 64 * kKiB);
  AlignedBuffer data(4096);
  // A zero-byte request is done at once, so the child never needs the I/O threads.
  EXPECT_DEATH({ IoHandle forgotten = store->StartWrite(0, data.data(), 0); },
               "destroyed before Wait");
}
#endif

}  // namespace
}  // namespace zs
