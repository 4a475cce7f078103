#include "runtime/base/trace_recorder.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace zs {
namespace {

using json = nlohmann::json;
using Clock = TraceRecorder::Clock;
using std::chrono::microseconds;
using std::chrono::nanoseconds;

json Parse(const std::string& text) {
  json doc;
  EXPECT_NO_THROW(doc = json::parse(text)) << text;
  return doc;
}

// The events of `doc` with phase `ph` (and name `name`, if given).
std::vector<json> Events(const json& doc, const std::string& ph, const std::string& name = "") {
  std::vector<json> out;
  for (const json& e : doc.at("traceEvents")) {
    if (e.at("ph") == ph && (name.empty() || e.at("name") == name)) out.push_back(e);
  }
  return out;
}

// thread_name metadata: tid -> track name.
std::map<int, std::string> ThreadNames(const json& doc) {
  std::map<int, std::string> out;
  for (const json& e : Events(doc, "M", "thread_name")) {
    out[e.at("tid").get<int>()] = e.at("args").at("name").get<std::string>();
  }
  return out;
}

TEST(TraceRecorderTest, WritesMetadataPidTidsAndRecordedTimes) {
  TraceRecorder rec(3);
  const int compute = rec.Track("compute");
  const int gather = rec.Track("gather");
  EXPECT_EQ(compute, 0);
  EXPECT_EQ(gather, 1);
  EXPECT_EQ(rec.Track("compute"), compute);  // same name, same id

  const Clock::time_point t0 = Clock::now();
  // Recorded out of begin order; the file is sorted by begin.
  rec.Record(gather, "all_gather h.3", t0 + microseconds(40), t0 + nanoseconds(65'500),
             R"({"unit":"h.3","bytes":1048576})");
  rec.Record(compute, "forward h.3", t0 + microseconds(10), t0 + microseconds(30));
  rec.Record(compute, "empty", t0 + microseconds(50), t0 + microseconds(50));
  EXPECT_EQ(rec.size(), 3u);

  const json doc = Parse(rec.ToJson());
  const int pid = TracePid(3);
  for (const json& e : doc.at("traceEvents")) EXPECT_EQ(e.at("pid"), pid) << e;

  const std::vector<json> process = Events(doc, "M", "process_name");
  ASSERT_EQ(process.size(), 1u);
  EXPECT_EQ(process[0].at("args").at("name"), "rank 3");

  // One thread per track, named after it, sorted in first-use order.
  EXPECT_EQ(ThreadNames(doc), (std::map<int, std::string>{{TraceTid(compute), "compute"},
                                                          {TraceTid(gather), "gather"}}));
  std::map<int, int> sort_index;
  for (const json& e : Events(doc, "M", "thread_sort_index")) {
    sort_index[e.at("tid").get<int>()] = e.at("args").at("sort_index").get<int>();
  }
  EXPECT_EQ(sort_index, (std::map<int, int>{{TraceTid(compute), 0}, {TraceTid(gather), 1}}));

  const std::vector<json> spans = Events(doc, "X");
  ASSERT_EQ(spans.size(), 3u);
  EXPECT_EQ(spans[0].at("name"), "forward h.3");
  EXPECT_EQ(spans[1].at("name"), "all_gather h.3");
  EXPECT_EQ(spans[2].at("name"), "empty");
  EXPECT_EQ(spans[0].at("tid"), TraceTid(compute));
  EXPECT_EQ(spans[1].at("tid"), TraceTid(gather));
  EXPECT_EQ(spans[1].at("cat"), "gather");

  // Durations are exactly what was recorded; begin times keep their spacing. t0 came after the
  // recorder's construction, so every ts is >= 0.
  EXPECT_NEAR(spans[0].at("dur").get<double>(), 20.0, 1e-9);
  EXPECT_NEAR(spans[1].at("dur").get<double>(), 25.5, 1e-9);
  EXPECT_NEAR(spans[2].at("dur").get<double>(), 0.0, 1e-9);
  const double ts0 = spans[0].at("ts").get<double>();
  EXPECT_GE(ts0, 0.0);
  EXPECT_NEAR(spans[1].at("ts").get<double>() - ts0, 30.0, 1e-6);
  EXPECT_NEAR(spans[2].at("ts").get<double>() - ts0, 40.0, 1e-6);

  EXPECT_EQ(spans[1].at("args"), (json{{"unit", "h.3"}, {"bytes", 1048576}}));
  EXPECT_FALSE(spans[0].contains("args"));
}

TEST(TraceRecorderTest, EmptyRecorderIsAValidTraceWithItsProcess) {
  TraceRecorder rec(0);
  const json doc = Parse(rec.ToJson());
  ASSERT_EQ(Events(doc, "M", "process_name").size(), 1u);
  EXPECT_EQ(Events(doc, "M", "process_name")[0].at("args").at("name"), "rank 0");
  EXPECT_EQ(Events(doc, "M", "process_name")[0].at("pid"), TracePid(0));
  EXPECT_NE(TracePid(0), 0);  // [Note: pid and tid 0]
  EXPECT_TRUE(Events(doc, "X").empty());
  EXPECT_TRUE(ThreadNames(doc).empty());
}

TEST(TraceRecorderTest, SpansFromManyThreadsAtOnce) {
  constexpr int kThreads = 4;
  constexpr int kSpansPerThread = 300;
  const std::vector<std::string> tracks = {"compute", "offload.read", "offload.write", "h2d"};
  TraceRecorder rec(1);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kSpansPerThread; ++i) {
        // Every thread creates and looks up every track, racing on first use.
        const int track = rec.Track(tracks[(t + i) % tracks.size()]);
        auto span = rec.Begin(track, "s" + std::to_string(t) + "." + std::to_string(i),
                              R"({"thread":)" + std::to_string(t) + "}");
        if (i % 2 == 0) span.End();  // the rest end at destruction
      }
    });
  }
  // A reader while writers record.
  threads.emplace_back([&] {
    for (int i = 0; i < 20; ++i) {
      const json doc = Parse(rec.ToJson());
      EXPECT_LE(Events(doc, "X").size(), size_t{kThreads * kSpansPerThread});
      (void)rec.size();
    }
  });
  for (std::thread& th : threads) th.join();

  EXPECT_EQ(rec.size(), size_t{kThreads * kSpansPerThread});
  const json doc = Parse(rec.ToJson());
  const std::map<int, std::string> names = ThreadNames(doc);
  ASSERT_EQ(names.size(), tracks.size());
  std::set<std::string> track_set(tracks.begin(), tracks.end());
  for (const auto& [tid, name] : names) {
    EXPECT_EQ(track_set.count(name), 1u) << name;
    EXPECT_EQ(TraceTid(rec.Track(name)), tid) << name;
  }
  std::map<int, int> per_tid;
  std::set<std::string> span_names;
  double last_ts = -1e300;
  for (const json& e : Events(doc, "X")) {
    per_tid[e.at("tid").get<int>()]++;
    span_names.insert(e.at("name").get<std::string>());
    EXPECT_GE(e.at("dur").get<double>(), 0.0);
    EXPECT_EQ(e.at("cat"), names.at(e.at("tid").get<int>()));
    const double ts = e.at("ts").get<double>();
    EXPECT_GE(ts, last_ts);  // sorted by begin
    last_ts = ts;
  }
  EXPECT_EQ(span_names.size(), size_t{kThreads * kSpansPerThread});  // each recorded once
  for (const auto& [tid, count] : per_tid) EXPECT_EQ(count, kThreads * kSpansPerThread / 4);
}

TEST(TraceRecorderTest, EscapesNamesAndTrackNames) {
  TraceRecorder rec(0);
  const std::string track_name = "off\"load\\read";
  const int track = rec.Track(track_name);
  const std::string name = "say \"hi\" C:\\tmp\n\t\x01 \xc2\xb5s";  // µs is valid UTF-8
  const Clock::time_point t = Clock::now();
  rec.Record(track, name, t, t + microseconds(1));
  rec.Record(track, "bad \xff byte", t, t);  // not UTF-8: replaced, the file stays valid

  const std::string text = rec.ToJson();
  const json doc = Parse(text);
  EXPECT_EQ(ThreadNames(doc).at(TraceTid(track)), track_name);
  const std::vector<json> spans = Events(doc, "X");
  ASSERT_EQ(spans.size(), 2u);
  EXPECT_EQ(spans[0].at("name"), name);  // the longer of two that begin together comes first
  EXPECT_EQ(spans[1].at("name"), "bad \xef\xbf\xbd byte");
  EXPECT_NE(text.find(R"(say \"hi\" C:\\tmp\n\t\u0001)"), std::string::npos) << text;
}

TEST(TraceRecorderTest, SpanRecordsOnceAtEndOrDestruction) {
  TraceRecorder rec(2);
  const int track = rec.Track("optimizer");
  {
    TraceRecorder::Span span = rec.Begin(track, "step");
    EXPECT_TRUE(span.active());
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    span.End();
    EXPECT_FALSE(span.active());
    span.End();  // idempotent
  }
  EXPECT_EQ(rec.size(), 1u);
  {
    TraceRecorder::Span a = rec.Begin(track, "moved");
    TraceRecorder::Span b = std::move(a);
    EXPECT_FALSE(a.active());  // NOLINT: moved-from state is part of the contract
    EXPECT_TRUE(b.active());
    TraceRecorder::Span c = rec.Begin(track, "replaced");
    c = std::move(b);  // ends "replaced" now
    EXPECT_EQ(rec.size(), 2u);
  }  // ends "moved"
  EXPECT_EQ(rec.size(), 3u);

  const json doc = Parse(rec.ToJson());
  std::map<std::string, double> dur;
  for (const json& e : Events(doc, "X")) dur[e.at("name").get<std::string>()] = e.at("dur");
  EXPECT_EQ(dur.size(), 3u);
  EXPECT_GE(dur.at("step"), 2000.0);  // slept 2 ms inside it
  EXPECT_GE(dur.at("moved"), 0.0);
  EXPECT_GE(dur.at("replaced"), 0.0);
}

TEST(TraceRecorderTest, NullRecorderSpanIsANoOp) {
  TraceRecorder::Span span = TraceRecorder::Begin(nullptr, 0, "nothing", R"({"bytes":1})");
  EXPECT_FALSE(span.active());
  span.End();
  TraceRecorder::Span moved = std::move(span);
  EXPECT_FALSE(moved.active());
  TraceRecorder::Span empty;
  EXPECT_FALSE(empty.active());

  // The same helper with a real recorder records.
  TraceRecorder rec(0);
  { auto real = TraceRecorder::Begin(&rec, rec.Track("compute"), "fwd"); }
  EXPECT_EQ(rec.size(), 1u);
}

TEST(TraceRecorderTest, TracePathForRank) {
  EXPECT_EQ(TracePathForRank("trace.json", 1), "trace.rank1.json");
  EXPECT_EQ(TracePathForRank("trace.json", 0), "trace.rank0.json");
  EXPECT_EQ(TracePathForRank("out/run.3/trace.json", 12), "out/run.3/trace.rank12.json");
  EXPECT_EQ(TracePathForRank("trace", 2), "trace.rank2.json");
  EXPECT_EQ(TracePathForRank("out/run.3/trace", 2), "out/run.3/trace.rank2.json");
  EXPECT_EQ(TracePathForRank("/tmp/.trace", 4), "/tmp/.trace.rank4.json");
  EXPECT_EQ(TracePathForRank("t.txt", 5), "t.rank5.txt");
}

class TempDir {
 public:
  TempDir() {
    path_ = std::filesystem::temp_directory_path() /
            ("zs_trace_recorder_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::filesystem::path path_;
};

TEST(TraceRecorderTest, WriteJsonWritesTheFile) {
  TempDir dir;
  TraceRecorder rec(1);
  const Clock::time_point t = Clock::now();
  rec.Record(rec.Track("d2h"), "copy", t, t + microseconds(7), R"({"bytes":4096})");
  const std::string path = TracePathForRank((dir.path_ / "trace.json").string(), rec.rank());
  ASSERT_TRUE(rec.WriteJson(path).ok());

  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), rec.ToJson());
  const json doc = Parse(text.str());
  ASSERT_EQ(Events(doc, "X").size(), 1u);
  EXPECT_EQ(Events(doc, "X")[0].at("args").at("bytes"), 4096);
}

TEST(TraceRecorderTest, WriteJsonToAnUnwritablePathNamesThePath) {
  TempDir dir;
  TraceRecorder rec(0);
  // A directory that does not exist cannot be written, even by root.
  const std::string missing = (dir.path_ / "no_such_dir" / "trace.json").string();
  Status status = rec.WriteJson(missing);
  EXPECT_EQ(status.code(), StatusCode::kIoError);
  EXPECT_NE(status.message().find("'" + missing + "'"), std::string::npos) << status.ToString();

  // A directory in place of the file.
  const std::string is_dir = dir.path_.string();
  status = rec.WriteJson(is_dir);
  EXPECT_EQ(status.code(), StatusCode::kIoError);
  EXPECT_NE(status.message().find("'" + is_dir + "'"), std::string::npos) << status.ToString();
}

TEST(TraceRecorderDeathTest, MisuseIsAProgrammerBug) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  TraceRecorder rec(0);
  const Clock::time_point t = Clock::now();
  EXPECT_DEATH(rec.Record(7, "x", t, t), "only 0 tracks exist");
  const int track = rec.Track("compute");
  EXPECT_DEATH(rec.Record(track, "x", t + microseconds(1), t), "ends 1000 ns before");
  EXPECT_DEATH(rec.Record(track, "x", t, t, "\"bytes\":1"), "not a JSON object");
}

}  // namespace
}  // namespace zs
