// A bounded random-input test (a fuzzer that runs in every ctest, issue 27) of what users hand
// zerostack: the config parser (ParseEngineConfig, with and without program values for
// "auto") and train_gpt's command line (ParseTrainGptArgs).
//
// Inputs are mutations of the real configs (examples/train_gpt/configs,
// tests/runtime/engine/deepspeed_configs): structure-aware (a value replaced by a huge number,
// NaN/Inf, "auto", another type, a unicode string, another key's value; keys renamed, removed,
// repeated or nested deeply) and then byte-level (flips, insertions, deletions, NULs,
// truncation). Command lines are drawn from train_gpt's own flags with values in and out of
// range, malformed, huge or missing.
//
// Properties: nothing crashes or throws; a rejection is an error whose message is non-empty,
// bounded (kMaxMessageBytes) and names something (a key, a section, the flag or argument, or
// the offset in the text); an accepted config round-trips through EngineConfigToJson.
//
// Knobs ([Note: test knobs] in docs/ARCHITECTURE.md):
//   ZS_FUZZ_SECONDS  time budget of the whole test (default ZS_FUZZ_DEFAULT_SECONDS: 10, 4
//                    under sanitizers); 0 runs only the first 200 cases of each part
//   ZS_FUZZ_SEED     base seed (default 27); case i uses SplitMix64(seed + i)
//   ZS_FUZZ_CASE     run only the case with this seed (printed by a failure or a crash)
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "examples/train_gpt/train_gpt_args.h"
#include "runtime/base/env.h"
#include "runtime/base/splitmix64.h"
#include "runtime/engine/engine_config.h"

#ifndef ZS_FUZZ_CONFIG_DIRS
#error "ZS_FUZZ_CONFIG_DIRS must name the directories of seed configs ('|'-separated)"
#endif
#ifndef ZS_FUZZ_DEFAULT_SECONDS
#define ZS_FUZZ_DEFAULT_SECONDS 10
#endif

extern "C" void __sanitizer_set_death_callback(void (*)(void)) __attribute__((weak));

namespace zs {
namespace {

using Json = nlohmann::json;
using Rng = std::mt19937_64;

constexpr size_t kMaxMessageBytes = 2048;

// The case being run, for the crash handler (written before each case, read in a handler).
volatile uint64_t g_current_case = 0;
volatile int g_in_case = 0;

void SayCurrentCase() {
  if (!g_in_case) return;
  char line[160];
  const int n = std::snprintf(line, sizeof(line),
                              "\nconfig_fuzz_test: crashed in case 0x%016llx; rerun with "
                              "ZS_FUZZ_CASE=0x%016llx\n",
                              static_cast<unsigned long long>(g_current_case),
                              static_cast<unsigned long long>(g_current_case));
  if (n > 0) (void)!::write(2, line, size_t(n));
}

void OnFatalSignal(int sig) {
  SayCurrentCase();
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

void InstallCrashReporter() {
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGABRT, SIGILL}) ::signal(sig, OnFatalSignal);
  if (__sanitizer_set_death_callback != nullptr) __sanitizer_set_death_callback(SayCurrentCase);
}

// The knobs, read once.
struct FuzzKnobs {
  double seconds = ZS_FUZZ_DEFAULT_SECONDS;
  uint64_t seed = 27;
  std::optional<uint64_t> only_case;
};

const FuzzKnobs& Knobs() {
  static const FuzzKnobs knobs = [] {
    FuzzKnobs k;
    StatusOr<double> seconds = ParseEnvDouble("ZS_FUZZ_SECONDS", k.seconds);
    EXPECT_TRUE(seconds.ok()) << seconds.status().ToString();
    if (seconds.ok()) k.seconds = *seconds;
    auto parse_u64 = [](const char* name) -> std::optional<uint64_t> {
      std::optional<std::string> s = GetEnvString(name);
      if (!s) return std::nullopt;
      try {
        return std::stoull(*s, nullptr, 0);  // decimal or 0x...
      } catch (const std::exception&) {
        ADD_FAILURE() << name << "=" << *s << " is not a 64-bit unsigned integer";
        return std::nullopt;
      }
    };
    k.seed = parse_u64("ZS_FUZZ_SEED").value_or(k.seed);
    k.only_case = parse_u64("ZS_FUZZ_CASE");
    return k;
  }();
  return knobs;
}

// Runs `one_case(case_seed)` for every case seed until `share` of the budget is spent (at
// least the `min_cases` first ones), or only ZS_FUZZ_CASE.
template <typename F>
void RunCases(const char* what, double share, int min_cases, F one_case) {
  InstallCrashReporter();
  const FuzzKnobs& knobs = Knobs();
  if (knobs.only_case) {
    g_current_case = *knobs.only_case;
    g_in_case = 1;
    one_case(*knobs.only_case);
    g_in_case = 0;
    return;
  }
  const auto start = std::chrono::steady_clock::now();
  const auto budget = std::chrono::duration<double>(knobs.seconds * share);
  int64_t cases = 0;
  for (uint64_t i = 0;; ++i) {
    if (int64_t(i) >= min_cases && std::chrono::steady_clock::now() - start >= budget) break;
    const uint64_t case_seed = SplitMix64(knobs.seed + i);
    g_current_case = case_seed;
    g_in_case = 1;
    one_case(case_seed);
    g_in_case = 0;
    ++cases;
    if (::testing::Test::HasFailure()) {
      ADD_FAILURE() << what << ": stopped at the first failing case; rerun it with ZS_FUZZ_CASE="
                    << fmt::format("{:#018x}", case_seed);
      return;
    }
  }
  std::printf("%s: %lld cases in %.1f s (ZS_FUZZ_SEED=%llu)\n", what,
              static_cast<long long>(cases),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
              static_cast<unsigned long long>(knobs.seed));
}

template <typename T>
const T& Pick(Rng& rng, const std::vector<T>& v) {
  return v[rng() % v.size()];
}

// The input, printable and bounded, for a failure message.
std::string Shown(const std::string& text) {
  std::string out;
  for (unsigned char c : text.substr(0, 600)) {
    if (c >= 0x20 && c < 0x7f) {
      out += char(c);
    } else {
      out += fmt::format("\\x{:02x}", c);
    }
  }
  return text.size() > 600 ? out + fmt::format("... ({} bytes)", text.size()) : out;
}

// ---------------------------------------------------------------------------------------------
// Configs.

struct Seeds {
  std::vector<std::string> texts;   // the seed files as they are
  std::vector<Json> objects;        // parsed
  std::vector<std::string> names;   // every key and section name the parser knows
};

const Seeds& SeedConfigs() {
  static const Seeds* const seeds = [] {
    auto* s = new Seeds();
    std::stringstream dirs(ZS_FUZZ_CONFIG_DIRS);
    std::string dir;
    while (std::getline(dirs, dir, '|')) {
      for (const auto& entry : std::filesystem::directory_iterator(dir)) {
        if (entry.path().extension() != ".json") continue;
        std::ifstream in(entry.path(), std::ios::binary);
        std::ostringstream text;
        text << in.rdbuf();
        s->texts.push_back(text.str());
        Json parsed = Json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
        if (!parsed.is_discarded()) s->objects.push_back(std::move(parsed));
      }
    }
    std::sort(s->texts.begin(), s->texts.end());  // directory order is not fixed
    s->texts.push_back("{}");
    s->objects.push_back(Json::object());
    for (const ConfigKeyInfo& key : EngineConfigKeys()) {
      std::stringstream parts(key.path);
      std::string part;
      while (std::getline(parts, part, '.')) s->names.push_back(part);
    }
    std::sort(s->names.begin(), s->names.end());
    s->names.erase(std::unique(s->names.begin(), s->names.end()), s->names.end());
    return s;
  }();
  return *seeds;
}

// Values of every kind a user (or a bug) puts in a config.
Json RandomValue(Rng& rng, const std::vector<Json>& others) {
  static const std::vector<Json> kValues = {
      Json(0), Json(-1), Json(1), Json(2), Json(3), Json(4), Json(7), Json(16), Json(65536),
      Json(2147483647), Json(int64_t{9223372036854775807}), Json(uint64_t{18446744073709551615u}),
      Json(int64_t{-9223372036854775807} - 1), Json(1e308), Json(-1e308), Json(5e8), Json(1.5),
      Json(1e-320), Json(-0.0), Json(0.5), Json(0.999999), Json(1e30), Json(true), Json(false),
      Json(nullptr), Json("auto"), Json("AUTO"), Json(""), Json("cpu"), Json("nvme"),
      Json("none"), Json("AdamW"), Json("adam"), Json("Lamb"), Json("WarmupLR"),
      Json("WarmupCosineLR"), Json("OneCycle"), Json("linear"), Json("log"), Json("bf16"),
      Json("int8"), Json("mean"), Json("fp32"), Json("\u00e9t\u00e9 \u2603 \U0001F600"),
      Json(std::string("a\0b", 3)), Json(std::string(300, 'k')), Json::array(),
      Json::array({0.9, 0.999}), Json::array({0.9}), Json::array({1, 2, 3}),
      Json::array({"auto", "auto"}), Json::object(), Json{{"enabled", true}},
      Json{{"enabled", false}}, Json{{"device", "cpu"}, {"pin_memory", true}},
      Json::array({Json{{"name", "g"}, {"lr_scale", 0.5}}}),
      Json::array({Json{{"name", "g"}}, Json{{"name", "g"}}})};
  if (!others.empty() && rng() % 4 == 0) return Pick(rng, others);
  return Pick(rng, kValues);
}

// Every value in `j` (to swap between keys).
void CollectValues(const Json& j, std::vector<Json>* out) {
  if (j.is_object()) {
    for (const auto& [k, v] : j.items()) {
      out->push_back(v);
      CollectValues(v, out);
    }
  }
}

// A random object inside `j` (j itself included), or null.
Json* RandomObject(Rng& rng, Json& j) {
  std::vector<Json*> objects;
  std::vector<Json*> stack = {&j};
  while (!stack.empty()) {
    Json* at = stack.back();
    stack.pop_back();
    if (!at->is_object()) continue;
    objects.push_back(at);
    for (auto& [k, v] : at->items()) stack.push_back(&v);
  }
  return objects.empty() ? nullptr : objects[rng() % objects.size()];
}

std::string RandomName(Rng& rng) {
  const Seeds& seeds = SeedConfigs();
  std::string name = Pick(rng, seeds.names);
  switch (rng() % 6) {
    case 0: return name;
    case 1: name.erase(rng() % name.size(), 1); return name;  // a typo
    case 2: return name + "s";
    case 3: return std::string(1, char('A' + rng() % 26)) + name;
    case 4: return "\u00fc" + name;
    default: return fmt::format("k{}", rng() % 100);
  }
}

void MutateTree(Rng& rng, Json& root, const std::vector<Json>& values) {
  Json* object = RandomObject(rng, root);
  if (object == nullptr) return;
  std::vector<std::string> keys;
  for (const auto& [k, v] : object->items()) keys.push_back(k);
  switch (rng() % 7) {
    case 0:
    case 1:  // a value replaced
      if (!keys.empty()) (*object)[Pick(rng, keys)] = RandomValue(rng, values);
      break;
    case 2:  // a known or near-known key added
      (*object)[RandomName(rng)] = RandomValue(rng, values);
      break;
    case 3:  // a key removed
      if (!keys.empty()) object->erase(Pick(rng, keys));
      break;
    case 4: {  // a key renamed
      if (keys.empty()) break;
      const std::string key = Pick(rng, keys);
      Json v = (*object)[key];
      object->erase(key);
      (*object)[RandomName(rng)] = std::move(v);
      break;
    }
    case 5: {  // nested deeply (around the nesting bound)
      Json nested = RandomValue(rng, values);
      const int depth = int(rng() % 40);
      for (int i = 0; i < depth; ++i) {
        nested = rng() % 2 ? Json::array({std::move(nested)}) : Json{{RandomName(rng), nested}};
      }
      (*object)[keys.empty() ? RandomName(rng) : Pick(rng, keys)] = std::move(nested);
      break;
    }
    default:  // two values swapped
      if (keys.size() >= 2) std::swap((*object)[keys[0]], (*object)[Pick(rng, keys)]);
      break;
  }
}

// Byte-level mutations of the JSON text, and tokens JSON has not (NaN, Infinity).
void MutateText(Rng& rng, std::string& text) {
  static const std::vector<std::string> kTokens = {
      "NaN", "nan", "Infinity", "-Infinity", "1e999", "-1e999", "1e-999", "0x10", "01", "-",
      "1.", ".5", "+1", "\"auto\"", "\\u0000", "\\ud800", "\"\\uDFFF\"", "\xff\xfe", "\xc3",
      "\"\xe2\x82\"", "//", "/*", ",", ":", "{", "}", "[", "]", "\"", "\\", "true", "null",
      "18446744073709551616", "-9223372036854775809", "123456789012345678901234567890"};
  const int edits = 1 + int(rng() % 3);
  for (int e = 0; e < edits; ++e) {
    const size_t at = text.empty() ? 0 : rng() % (text.size() + 1);
    switch (rng() % 9) {
      case 0:
        if (!text.empty()) text[at % text.size()] ^= char(1u << (rng() % 8));
        break;
      case 1: text.insert(at, 1, char(rng() % 256)); break;
      case 2:
        if (at < text.size()) text.erase(at, 1 + rng() % 16);
        break;
      case 3: text.insert(at, 1, '\0'); break;
      case 4: text.resize(at); break;  // truncated
      case 5: {  // a number token replaced
        const size_t digit = text.find_first_of("0123456789", at);
        if (digit == std::string::npos) break;
        size_t end = text.find_first_not_of("0123456789.eE+-", digit);
        if (end == std::string::npos) end = text.size();
        text.replace(digit, end - digit, Pick(rng, kTokens));
        break;
      }
      case 6: text.insert(at, Pick(rng, kTokens)); break;
      case 7: {  // a key given twice
        const size_t quote = text.find('"', at);
        const size_t colon = quote == std::string::npos ? quote : text.find(':', quote);
        if (colon == std::string::npos) break;
        const size_t comma = text.find_first_of(",}", colon);
        if (comma == std::string::npos) break;
        const std::string member = text.substr(quote, comma - quote);
        text.insert(comma, "," + member);
        break;
      }
      default: {  // a slice duplicated
        if (text.empty()) break;
        const size_t from = rng() % text.size();
        text.insert(at, text.substr(from, 1 + rng() % 64));
        break;
      }
    }
  }
}

std::string MakeConfig(Rng& rng) {
  const Seeds& seeds = SeedConfigs();
  switch (rng() % 8) {
    case 0: {  // a seed file, bytes mutated
      std::string text = Pick(rng, seeds.texts);
      MutateText(rng, text);
      return text;
    }
    case 1:  // deep nesting, in text, near and past the bound
      return std::string(20 + rng() % 30, rng() % 2 ? '[' : '{') + Pick(rng, seeds.texts);
    default: {  // the tree mutated, then sometimes the text
      Json root = Pick(rng, seeds.objects);
      std::vector<Json> values;
      CollectValues(root, &values);
      const int mutations = 1 + int(rng() % 4);
      for (int m = 0; m < mutations; ++m) MutateTree(rng, root, values);
      std::string text = root.dump(rng() % 2 ? 2 : -1, ' ', /*ensure_ascii=*/rng() % 2,
                                   Json::error_handler_t::replace);
      if (rng() % 3 == 0) MutateText(rng, text);
      return text;
    }
  }
}

ProgramValues FullProgram(Rng& rng) {
  ProgramValues p;
  if (rng() % 4 == 0) return p;  // nothing to resolve "auto" with
  p.micro_batch = int64_t(1 + rng() % 8);
  p.accumulation_steps = int64_t(1 + rng() % 4);
  p.dp_world_size = int64_t(1 + rng() % 8);
  p.max_grad_norm = 1.0;
  p.lr = rng() % 8 == 0 ? 1e30 : 3e-4;
  p.betas = {{0.9, 0.999}};
  p.eps = 1e-8;
  p.weight_decay = 0.0;
  p.warmup_steps = int64_t(rng() % 100);
  p.total_steps = int64_t(rng() % 1000);
  p.hidden_size = rng() % 8 == 0 ? int64_t{1} << 40 : int64_t(1 + rng() % 4096);
  p.precision = Pick(rng, std::vector<std::string>{"fp32", "bf16", "fp16", "fp64"});
  p.flags = {{"lr", "--lr"}, {"hidden_size", "--hidden"}};
  return p;
}

// What a config error must name: a key or section, or where in the text it went wrong.
bool ConfigErrorNamesSomething(const std::string& message) {
  for (const char* where : {"malformed JSON", "NUL byte at byte offset", "levels deep",
                            "a config must be a JSON object"}) {
    if (message.find(where) != std::string::npos) return true;
  }
  for (const std::string& name : SeedConfigs().names) {
    if (message.find(name) != std::string::npos) return true;
  }
  return message.find('"') != std::string::npos;  // an unknown key, quoted
}

void CheckConfigCase(uint64_t case_seed) {
  Rng rng(case_seed);
  const std::string text = MakeConfig(rng);
  const ProgramValues program = FullProgram(rng);
  const auto where = [&] {
    return fmt::format("case ZS_FUZZ_CASE={:#018x}, config: {}", case_seed, Shown(text));
  };
  for (int with_program = 0; with_program < 2; ++with_program) {
    StatusOr<EngineConfig> parsed = EngineConfig{};
    try {
      std::vector<AutoFill> filled;
      parsed = with_program ? ParseEngineConfig(text, program, &filled) : ParseEngineConfig(text);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "ParseEngineConfig threw " << e.what() << "; " << where();
      return;
    }
    if (!parsed.ok()) {
      const std::string m = parsed.status().message();
      EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument) << m << "; " << where();
      EXPECT_FALSE(m.empty()) << where();
      EXPECT_LE(m.size(), kMaxMessageBytes) << Shown(m) << "; " << where();
      EXPECT_TRUE(ConfigErrorNamesSomething(m)) << "names nothing: " << m << "; " << where();
      continue;
    }
    // Accepted: what a run reports it used parses back to the same config.
    try {
      const std::string json = EngineConfigToJson(*parsed);
      StatusOr<EngineConfig> again = ParseEngineConfig(json);
      ASSERT_TRUE(again.ok()) << again.status().ToString() << "; written: " << json << "; "
                              << where();
      EXPECT_TRUE(*again == *parsed) << "written: " << json << "; " << where();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "EngineConfigToJson or its parse threw " << e.what() << "; " << where();
    }
  }
}

TEST(ConfigFuzzTest, SeedsParseOrFailCleanly) {
  ASSERT_GE(SeedConfigs().texts.size(), 3u) << "no seed configs in " << ZS_FUZZ_CONFIG_DIRS;
  for (const std::string& text : SeedConfigs().texts) {
    StatusOr<EngineConfig> c = ParseEngineConfig(text);
    if (!c.ok()) {
      EXPECT_FALSE(c.status().message().empty());
    }
  }
}

TEST(ConfigFuzzTest, ConfigParser) {
  RunCases("config parser", 0.7, 200, CheckConfigCase);
}

// ---------------------------------------------------------------------------------------------
// train_gpt's command line.

std::vector<std::string> TrainGptFlags() {
  Args args;
  CLI::App app;
  AddTrainGptFlags(app, args);
  std::vector<std::string> flags;
  for (const CLI::Option* option : app.get_options()) {
    for (const std::string& name : option->get_lnames()) flags.push_back("--" + name);
  }
  return flags;
}

std::string RandomArgValue(Rng& rng) {
  static const std::vector<std::string> kValues = {
      "0", "1", "2", "3", "4", "-1", "7", "64", "1024", "65536", "65537", "1048576",
      "2147483647", "2147483648", "-2147483649", "9223372036854775807",
      "18446744073709551616", "1e3", "1.5", "0.0", "-0.0", "1e-300", "1e309", "nan", "NaN",
      "inf", "-inf", "0x10", "010", "1_000", " 5", "5 ", "", "true", "false", "cpu",
      "budgeted-cpu:1M", "fp16", "bf16", "fp64", "gpipe", "interleaved", "measured",
      "/nonexistent/x.json", "/tmp", "/dev/null", ZS_FUZZ_FIRST_CONFIG, "--", "-", "--steps",
      "\u00e9\u2603", std::string("a\0b", 3), std::string(5000, '9')};
  return Pick(rng, kValues);
}

void CheckCommandLineCase(uint64_t case_seed) {
  static const std::vector<std::string> flags = TrainGptFlags();
  Rng rng(case_seed);
  std::vector<std::string> words = {"train_gpt"};
  const int n = int(rng() % 8);
  for (int i = 0; i < n; ++i) {
    switch (rng() % 8) {
      case 0: words.push_back(Pick(rng, flags)); break;  // a value may be missing
      case 1: words.push_back(Pick(rng, flags) + "=" + RandomArgValue(rng)); break;
      case 2: words.push_back(RandomArgValue(rng)); break;  // stray
      case 3: words.push_back("--" + RandomName(rng)); break;  // unknown flag
      default:
        words.push_back(Pick(rng, flags));
        words.push_back(RandomArgValue(rng));
        break;
    }
  }
  std::vector<const char*> argv;
  for (const std::string& w : words) argv.push_back(w.c_str());
  const auto where = [&] {
    std::string shown;
    for (const std::string& w : words) shown += " '" + Shown(w) + "'";
    return fmt::format("case ZS_FUZZ_CASE={:#018x}, argv:{}", case_seed, shown);
  };
  Args args;
  CLI::App app;
  AddTrainGptFlags(app, args);
  CommandLineOutcome outcome;
  try {
    outcome = ParseTrainGptArgs(app, int(argv.size()), argv.data());
  } catch (const std::exception& e) {
    ADD_FAILURE() << "ParseTrainGptArgs threw " << e.what() << "; " << where();
    return;
  }
  if (outcome.status.ok()) {
    EXPECT_EQ(outcome.exit_code, 0) << where();
    return;
  }
  const std::string m = outcome.status.message();
  EXPECT_EQ(outcome.status.code(), StatusCode::kInvalidArgument) << m << "; " << where();
  EXPECT_NE(outcome.exit_code, 0) << m << "; " << where();
  EXPECT_FALSE(m.empty()) << where();
  EXPECT_LE(m.size(), kMaxMessageBytes) << where();
  // It names a flag, or quotes back an argument of the command line.
  bool names = m.find("--") != std::string::npos;
  for (size_t i = 1; i < words.size() && !names; ++i) {
    const std::string word = std::string(words[i].c_str()).substr(0, 40);  // argv ends at a NUL
    names = m.find(word.empty() ? std::string("\"\"") : word) != std::string::npos;
  }
  EXPECT_TRUE(names) << "names no flag or argument: " << m << "; " << where();
}

TEST(ConfigFuzzTest, TrainGptCommandLine) {
  RunCases("train_gpt command line", 0.3, 200, CheckCommandLineCase);
}

// The wrapper keeps CLI11's own outcome: its exit codes, and --help.
TEST(ConfigFuzzTest, CommandLineErrorsKeepCli11sExitCodes) {
  auto parse = [](std::vector<const char*> argv) {
    Args args;
    CLI::App app;
    AddTrainGptFlags(app, args);
    return ParseTrainGptArgs(app, int(argv.size()), argv.data());
  };
  CommandLineOutcome help = parse({"train_gpt", "--help"});
  EXPECT_TRUE(help.status.ok());
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.help.find("--config"), std::string::npos);
  CommandLineOutcome range = parse({"train_gpt", "--steps", "0"});
  EXPECT_EQ(range.status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(range.exit_code, static_cast<int>(CLI::ExitCodes::ValidationError));
  EXPECT_NE(range.status.message().find("--steps"), std::string::npos) << range.status.message();
  CommandLineOutcome extra = parse({"train_gpt", "--nope"});
  EXPECT_EQ(extra.exit_code, static_cast<int>(CLI::ExitCodes::ExtrasError));
  EXPECT_NE(extra.status.message().find("--nope"), std::string::npos);
  CommandLineOutcome empty = parse({"train_gpt", "--steps", "5", ""});  // named, quoted
  EXPECT_EQ(empty.exit_code, static_cast<int>(CLI::ExitCodes::ExtrasError));
  EXPECT_EQ(empty.status.message(), "unexpected argument: \"\" (train_gpt takes flags only)");
  EXPECT_TRUE(parse({"train_gpt", "--steps", "5", "--stage", "3"}).status.ok());
}

}  // namespace
}  // namespace zs
