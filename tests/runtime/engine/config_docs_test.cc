// Keeps docs/CONFIG.md and the parser's key table (EngineConfigKeys()) in agreement: every key
// the code accepts is documented with the code's default, and every documented key exists.
// The same for the "DeepSpeed keys" table and DeepSpeedKeys(): every DeepSpeed key the parser
// knows (read, accepted without effect, refused as not implemented, or an old spelling) has a
// row saying how it compares with DeepSpeed, and every row is a key the parser knows.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/engine/engine_config.h"

#ifndef ZS_CONFIG_DOC
#error "ZS_CONFIG_DOC must name docs/CONFIG.md"
#endif

namespace zs {
namespace {

using Json = nlohmann::json;

struct DocRow {
  int line;
  std::string type;
  std::string default_text;
};

std::string Trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t");
  size_t e = s.find_last_not_of(" \t");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

// "`x`" -> "x"; anything else -> "" (not a code cell).
std::string Unquote(const std::string& cell) {
  if (cell.size() < 2 || cell.front() != '`' || cell.back() != '`') return "";
  return cell.substr(1, cell.size() - 2);
}

// The key rows of every table whose header is "| Key | Type | Default | Allowed | Meaning |":
// key path -> row. A key documented twice is a test failure.
std::map<std::string, DocRow> ReadDocTables(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::map<std::string, DocRow> rows;
  std::string line;
  bool in_key_table = false;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.empty() || line[0] != '|') {
      in_key_table = false;
      continue;
    }
    std::vector<std::string> cells;
    std::stringstream ss(line.substr(1));
    std::string cell;
    while (std::getline(ss, cell, '|')) cells.push_back(Trim(cell));
    if (cells.size() >= 5 && cells[0] == "Key" && cells[1] == "Type" && cells[2] == "Default") {
      in_key_table = true;
      continue;
    }
    if (!in_key_table || cells.empty() || cells[0].starts_with("---")) continue;
    std::string key = Unquote(cells[0]);
    EXPECT_FALSE(key.empty()) << path << ":" << number << ": key cell is not `code`: " << line;
    EXPECT_GE(cells.size(), 5u) << path << ":" << number << ": " << line;
    if (key.empty() || cells.size() < 5) continue;
    EXPECT_EQ(rows.count(key), 0u) << path << ":" << number << ": " << key << " documented twice";
    rows[key] = {number, cells[1], Unquote(cells[2])};
  }
  return rows;
}

TEST(ConfigDocsTest, EveryKeyIsDocumentedWithTheCodesDefault) {
  std::map<std::string, DocRow> doc = ReadDocTables(ZS_CONFIG_DOC);
  ASSERT_FALSE(doc.empty()) << "no key tables found in " << ZS_CONFIG_DOC;
  for (const ConfigKeyInfo& key : EngineConfigKeys()) {
    auto it = doc.find(key.path);
    if (it == doc.end()) {
      ADD_FAILURE() << key.path << " (default " << key.default_json << ") is missing from "
                    << ZS_CONFIG_DOC;
      continue;
    }
    const DocRow& row = it->second;
    EXPECT_EQ(row.type, key.type) << ZS_CONFIG_DOC << ":" << row.line << ": type of " << key.path;
    // Defaults compare as JSON values, so the doc may write 5e8 for 500000000.
    Json documented = Json::parse(row.default_text, nullptr, /*allow_exceptions=*/false);
    EXPECT_FALSE(documented.is_discarded())
        << ZS_CONFIG_DOC << ":" << row.line << ": default of " << key.path << " is not JSON: `"
        << row.default_text << "`";
    EXPECT_EQ(documented, Json::parse(key.default_json))
        << ZS_CONFIG_DOC << ":" << row.line << ": default of " << key.path << " is `"
        << row.default_text << "` in the doc but " << key.default_json << " in the code";
  }
}

TEST(ConfigDocsTest, EveryDocumentedKeyExists) {
  std::map<std::string, bool> code;
  for (const ConfigKeyInfo& key : EngineConfigKeys()) code[key.path] = true;
  for (const auto& [path, row] : ReadDocTables(ZS_CONFIG_DOC)) {
    EXPECT_TRUE(code.count(path)) << ZS_CONFIG_DOC << ":" << row.line << ": " << path
                                  << " is documented but the parser does not accept it";
  }
}

// The rows of the table whose header is "| DeepSpeed key | vs DeepSpeed | How |".
struct VerdictRow {
  int line;
  std::string verdict;
  std::string how;
};

std::map<std::string, VerdictRow> ReadVerdictTable(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::map<std::string, VerdictRow> rows;
  std::string line;
  bool in_table = false;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.empty() || line[0] != '|') {
      in_table = false;
      continue;
    }
    std::vector<std::string> cells;
    std::stringstream ss(line.substr(1));
    std::string cell;
    while (std::getline(ss, cell, '|')) cells.push_back(Trim(cell));
    if (cells.size() >= 3 && cells[0] == "DeepSpeed key" && cells[1] == "vs DeepSpeed") {
      in_table = true;
      continue;
    }
    if (!in_table || cells.empty() || cells[0].starts_with("---")) continue;
    const std::string key = Unquote(cells[0]);
    EXPECT_FALSE(key.empty()) << path << ":" << number << ": key cell is not `code`: " << line;
    EXPECT_GE(cells.size(), 3u) << path << ":" << number << ": " << line;
    if (key.empty() || cells.size() < 3) continue;
    EXPECT_EQ(rows.count(key), 0u) << path << ":" << number << ": " << key << " listed twice";
    rows[key] = {number, cells[1], cells[2]};
  }
  return rows;
}

const char* KindName(DeepSpeedKeyKind kind) {
  switch (kind) {
    case DeepSpeedKeyKind::kRead: return "read";
    case DeepSpeedKeyKind::kNoEffect: return "accepted without effect";
    case DeepSpeedKeyKind::kNotImplemented: return "refused as not implemented";
    case DeepSpeedKeyKind::kOldSpelling: return "an old spelling";
  }
  return "?";
}

TEST(ConfigDocsTest, EveryDeepSpeedKeyHasAVerdict) {
  const std::map<std::string, VerdictRow> doc = ReadVerdictTable(ZS_CONFIG_DOC);
  ASSERT_FALSE(doc.empty()) << "no \"DeepSpeed key | vs DeepSpeed\" table in " << ZS_CONFIG_DOC;
  const std::vector<DeepSpeedKeyInfo> keys = DeepSpeedKeys();
  std::set<std::string> unique;
  for (const DeepSpeedKeyInfo& key : keys) {
    EXPECT_TRUE(unique.insert(key.path).second) << key.path << " is listed twice by the code";
    auto it = doc.find(key.path);
    if (it == doc.end()) {
      ADD_FAILURE() << key.path << " (" << KindName(key.kind) << ") has no row in the "
                    << "\"DeepSpeed keys\" table of " << ZS_CONFIG_DOC;
      continue;
    }
    const VerdictRow& row = it->second;
    const std::string where = std::string(ZS_CONFIG_DOC) + ":" + std::to_string(row.line) +
                              ": " + key.path + " (" + KindName(key.kind) + ")";
    EXPECT_TRUE(row.verdict == "same" || row.verdict == "different" ||
                row.verdict == "not implemented")
        << where << ": the verdict is \"" << row.verdict
        << "\"; it must be same, different or not implemented";
    // The code refuses it exactly when the doc says not implemented.
    EXPECT_EQ(row.verdict == "not implemented", key.kind == DeepSpeedKeyKind::kNotImplemented)
        << where << ": the doc says \"" << row.verdict << "\"";
    if (row.verdict != "same") {
      EXPECT_FALSE(row.how.empty()) << where << ": \"" << row.verdict << "\" needs a How";
    }
  }
}

TEST(ConfigDocsTest, EveryKeyWithAVerdictIsKnownToTheParser) {
  std::set<std::string> code;
  for (const DeepSpeedKeyInfo& key : DeepSpeedKeys()) code.insert(key.path);
  for (const auto& [path, row] : ReadVerdictTable(ZS_CONFIG_DOC)) {
    EXPECT_TRUE(code.count(path)) << ZS_CONFIG_DOC << ":" << row.line << ": " << path
                                  << " has a verdict but the parser does not know it";
  }
}

// The accessor agrees with the parser: a key DeepSpeedKeys() calls not implemented is refused
// with those words, and every other one is accepted in a config (with a valid value).
TEST(ConfigDocsTest, DeepSpeedKeysSayWhatTheParserDoes) {
  for (const DeepSpeedKeyInfo& key : DeepSpeedKeys()) {
    if (key.kind != DeepSpeedKeyKind::kNotImplemented) continue;
    std::string pointer = "/" + key.path;
    std::replace(pointer.begin(), pointer.end(), '.', '/');
    Json config = Json::object();
    config[Json::json_pointer(pointer)] = Json{{"enabled", true}, {"x", 2}};
    StatusOr<EngineConfig> c = ParseEngineConfig(config.dump());
    ASSERT_FALSE(c.ok()) << key.path;
    EXPECT_NE(c.status().message().find("not implemented"), std::string::npos)
        << key.path << ": " << c.status().message();
  }
}

}  // namespace
}  // namespace zs
