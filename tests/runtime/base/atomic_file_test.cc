// runtime/base/atomic_file.h: a write that fails part-way (a full disk, emulated with
// RLIMIT_FSIZE: write() fails with EFBIG as it fails with ENOSPC on a full disk) leaves no
// file cut short and no temporary file, and its error names the path and the errno; the
// up-front check names a missing directory.
#include "runtime/base/atomic_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace zs {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

class AtomicFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("zs_atomic_file_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  static std::string Read(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
  }
  fs::path dir_;
};

// Files may grow to `bytes` while it lives; SIGXFSZ ignored, so write() fails with EFBIG.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    ::getrlimit(RLIMIT_FSIZE, &old_);
    old_handler_ = ::signal(SIGXFSZ, SIG_IGN);
    rlimit limit = old_;
    limit.rlim_cur = bytes;
    ok_ = ::setrlimit(RLIMIT_FSIZE, &limit) == 0;
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &old_);
    ::signal(SIGXFSZ, old_handler_);
  }
  bool ok() const { return ok_; }

 private:
  rlimit old_{};
  sighandler_t old_handler_;
  bool ok_ = false;
};

TEST_F(AtomicFileTest, WritesAndReplacesWholeFiles) {
  const std::string path = (dir_ / "report.json").string();
  ASSERT_TRUE(WriteFileAtomically(path, "{\"a\": 1}\n").ok());
  EXPECT_EQ(Read(path), "{\"a\": 1}\n");
  ASSERT_TRUE(WriteFileAtomically(path, "{\"b\": 2}\n").ok());
  EXPECT_EQ(Read(path), "{\"b\": 2}\n");
  EXPECT_FALSE(fs::exists(AtomicWriteTempPath(path)));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);
}

TEST_F(AtomicFileTest, AFullDiskLeavesTheOldFileAndNamesTheErrno) {
  const std::string path = (dir_ / "report.json").string();
  ASSERT_TRUE(WriteFileAtomically(path, "old\n").ok());
  const std::string big(1 << 20, 'x');
  Status s;
  {
    FileSizeLimit limit(64 << 10);
    ASSERT_TRUE(limit.ok());
    s = WriteFileAtomically(path, big);
  }
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kIoError) << s.ToString();
  EXPECT_THAT(s.message(), HasSubstr(path));
  EXPECT_THAT(s.message(), HasSubstr("File too large"));       // strerror(EFBIG)
  EXPECT_THAT(s.message(), HasSubstr("after 65536 of 1048576 bytes"));
  EXPECT_EQ(Read(path), "old\n");                              // not cut short
  EXPECT_FALSE(fs::exists(AtomicWriteTempPath(path)));         // no leftover
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);

  // A first write that fails leaves nothing at all.
  const std::string fresh = (dir_ / "fresh.json").string();
  {
    FileSizeLimit limit(4096);
    ASSERT_TRUE(limit.ok());
    s = WriteFileAtomically(fresh, big);
  }
  EXPECT_THAT(s.message(), HasSubstr("File too large"));
  EXPECT_FALSE(fs::exists(fresh));
  EXPECT_FALSE(fs::exists(AtomicWriteTempPath(fresh)));
}

TEST_F(AtomicFileTest, CheckWritableDirectoryNamesWhatIsWrong) {
  EXPECT_TRUE(CheckWritableDirectory((dir_ / "report.json").string()).ok());
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 0);

  const std::string missing = (dir_ / "no_such_dir" / "report.json").string();
  Status s = CheckWritableDirectory(missing);
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s.ToString();
  EXPECT_THAT(s.message(), HasSubstr((dir_ / "no_such_dir").string() + " does not exist"));
  s = WriteFileAtomically(missing, "x");
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_THAT(s.message(), HasSubstr("No such file or directory"));

  s = CheckWritableDirectory(dir_.string());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_THAT(s.message(), HasSubstr("is a directory"));

  const std::string file = (dir_ / "plain").string();
  ASSERT_TRUE(WriteFileDurably(file, "x").ok());
  s = CheckWritableDirectory(file + "/report.json");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_THAT(s.message(), HasSubstr("is not a directory"));

  if (::geteuid() != 0) {  // root writes anywhere
    const fs::path locked = dir_ / "locked";
    fs::create_directories(locked);
    fs::permissions(locked, fs::perms::owner_read | fs::perms::owner_exec);
    s = CheckWritableDirectory((locked / "report.json").string());
    EXPECT_EQ(s.code(), StatusCode::kIoError) << s.ToString();
    EXPECT_THAT(s.message(), HasSubstr("Permission denied"));
    fs::permissions(locked, fs::perms::owner_all);
  }
}

}  // namespace
}  // namespace zs
