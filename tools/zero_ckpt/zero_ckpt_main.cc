// zero-ckpt: looks into checkpoints written by runtime/checkpoint/checkpoint.h.
//
//   zero-ckpt inspect DIR                 step, world, stage, grid, dtypes, trainer object,
//                                         files, and every parameter's full shape and the ranges
//                                         each rank holds (in its tp slice's frame for a grid)
//   zero-ckpt verify DIR                  every file's size and checksum (the index's too),
//                                         every array's checksum, the index equal to the rank
//                                         files' headers, every element of every parameter held
//                                         exactly once
//   zero-ckpt consolidate DIR OUT.safetensors [--dtype fp32|bf16]
//                                         the full fp32 master weights (or bf16, rounded to
//                                         nearest even) as one safetensors file named
//                                         "<unit>.<param>", full unpadded shapes, one parameter
//                                         in memory at a time
//
// Grid checkpoints ([Note: grid checkpoints] in checkpoint.h) are read the same way: every
// piece is placed in its full parameter through its tp layout (param_placement.h), parameters
// match by name, and padded vocabulary rows are dropped. The pieces are found through the
// checkpoint's index.json ([Note: checkpoint index] in checkpoint_index.h), or, in a checkpoint
// without one, by reading every rank file's header.
// DIR is a step directory or a --save-dir (its `latest`). Exit status 0 on success, 1 when the
// checkpoint is bad (the reason names the file and parameter), 2 on usage errors. Offline: no
// engine, no communicator.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/checkpoint_index.h"
#include "runtime/checkpoint/consolidate.h"
#include "runtime/checkpoint/shard_file.h"

namespace zs {
namespace {

namespace fs = std::filesystem;

struct Opened {
  CheckpointManifest manifest;
  CheckpointIndex index;  // from index.json, else from a scan of the rank files' headers
  bool scanned = false;
};

StatusOr<Opened> Open(const std::string& path) {
  Opened o;
  ZS_ASSIGN_OR_RETURN(o.manifest, ReadCheckpointManifest(path));
  ZS_ASSIGN_OR_RETURN(o.index, OpenCheckpointIndex(o.manifest));
  o.scanned = o.manifest.index.name.empty();
  return o;
}

std::string Shape(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

Status Inspect(const std::string& path) {
  ZS_ASSIGN_OR_RETURN(Opened o, Open(path));
  const CheckpointManifest& m = o.manifest;
  int64_t total = 0;
  for (const auto& f : m.files) total += f.bytes;
  fmt::print(
      "checkpoint {}: format {}, step {}, world {}, stage {}, compute {}, {} with {} "
      "states\n",
      m.dir, m.format_version, m.step, m.world_size, m.stage, m.compute_dtype, m.optimizer,
      m.state_dtype);
  fmt::print("loss scaler: scale {}, good steps {}, hysteresis left {}\n", m.training.loss_scale,
             m.training.loss_scale_good_steps, m.training.loss_scale_hysteresis_left);
  if (!m.grid.is_null()) fmt::print("grid: {}\n", m.grid.dump());
  fmt::print("trainer: {}\n", m.trainer.dump());
  fmt::print("files: {} ({} bytes)\n", m.files.size(), total);
  if (m.index.name.empty()) {
    fmt::print("index: none (an older checkpoint: the rank files' headers were read)\n");
  } else {
    fmt::print("index: {}  {} bytes  fnv1a64 {}  ({} pieces)\n", m.index.name, m.index.bytes,
               ChecksumHex(m.index.checksum), o.index.pieces.size());
  }
  for (const auto& f : m.files) {
    fmt::print("  {}  rank {}  {} bytes  fnv1a64 {}\n", f.name, f.rank, f.bytes,
               ChecksumHex(f.checksum));
  }
  fmt::print("parameters: {}\n", m.params.size());
  for (const auto& p : m.params) {
    fmt::print("  {}  {}  {} elements\n", p.name, Shape(p.shape), p.numel);
    const auto [first, last] = o.index.Of(p.name);
    for (const CheckpointIndex::Piece* piece = first; piece != last; ++piece) {
      const ShardFileReader::ParamEntry* e = &piece->entry;
      int64_t bytes = 0;
      std::string kinds;
      for (const auto& a : e->arrays) {
        bytes += a.bytes + 4 * a.scales_count;
        kinds += fmt::format("{}{} {}", kinds.empty() ? "" : ", ", a.kind, a.dtype);
      }
      const ParamPlacement& pl = e->placement;
      const std::string slice = pl.identity()
                                    ? std::string()
                                    : fmt::format("  tp {}/{} {} slice {}", pl.tp_rank, pl.tp_size,
                                                  PlacementTpJson(pl).value("kind", std::string()),
                                                  Shape(pl.layout.LocalShape(pl.tp_size)));
      fmt::print("    rank {:<4} [{}, {}){}  {} bytes  ({})\n",
                 o.index.files[size_t(piece->file)].rank, e->begin, e->end, slice, bytes, kinds);
    }
  }
  return OkStatus();
}

// The index against the rank files' own headers: the same files (name, size, where the data
// starts) and the same pieces (every field of every entry).
Status CheckIndexAgainstFiles(const CheckpointManifest& m, const CheckpointIndex& index) {
  const std::string ipath = (fs::path(m.dir) / m.index.name).string();
  std::vector<RankFileRef> refs;
  for (const auto& f : m.files) refs.push_back({f.name, f.rank, f.bytes});
  ZS_ASSIGN_OR_RETURN(CheckpointIndex scan, IndexRankFiles(m.dir, refs));
  scan.Sort();
  if (scan.files.size() != index.files.size()) {
    return IoError(fmt::format("index '{}' lists {} rank files, the manifest {}", ipath,
                               index.files.size(), scan.files.size()));
  }
  for (size_t f = 0; f < scan.files.size(); ++f) {
    const auto &a = scan.files[f], &b = index.files[f];
    if (a.name != b.name || a.rank != b.rank || a.bytes != b.bytes ||
        a.data_start != b.data_start) {
      return IoError(fmt::format(
          "index '{}' describes file {} as '{}' (rank {}, {} bytes, data at {}); it is '{}' "
          "(rank {}, {} bytes, data at {})",
          ipath, f, b.name, b.rank, b.bytes, b.data_start, a.name, a.rank, a.bytes, a.data_start));
    }
  }
  // Both sorted by (name, tp rank, begin): equal lists, entry by entry.
  for (size_t i = 0; i < std::max(scan.pieces.size(), index.pieces.size()); ++i) {
    if (i >= scan.pieces.size() || i >= index.pieces.size()) {
      return IoError(fmt::format("index '{}' lists {} pieces; the rank files hold {}", ipath,
                                 index.pieces.size(), scan.pieces.size()));
    }
    const auto &a = scan.pieces[i], &b = index.pieces[i];
    if (a.file != b.file || ParamEntryToJson(a.entry) != ParamEntryToJson(b.entry)) {
      return IoError(fmt::format(
          "index '{}' disagrees with the rank files at piece {}: parameter '{}' [{}, {}) in '{}' "
          "there, '{}' [{}, {}) in '{}' in the files",
          ipath, i, b.entry.name, b.entry.begin, b.entry.end, index.files[size_t(b.file)].name,
          a.entry.name, a.entry.begin, a.entry.end, scan.files[size_t(a.file)].name));
    }
  }
  return OkStatus();
}

Status Verify(const std::string& path) {
  ZS_ASSIGN_OR_RETURN(CheckpointManifest m, ReadCheckpointManifest(path));
  for (const auto& f : m.files) {
    const std::string p = (fs::path(m.dir) / f.name).string();
    ZS_ASSIGN_OR_RETURN(WrittenFile sum, ChecksumFile(p));
    if (sum.bytes != f.bytes || sum.checksum != f.checksum) {
      return IoError(
          fmt::format("'{}' (rank {}): {} bytes, fnv1a64 {}; the manifest says {} "
                      "bytes, {} ({})",
                      p, f.rank, sum.bytes, ChecksumHex(sum.checksum), f.bytes,
                      ChecksumHex(f.checksum), sum.bytes < f.bytes ? "truncated" : "corrupt"));
    }
  }
  ZS_ASSIGN_OR_RETURN(Opened o, Open(path));  // checks the index's size and checksum
  if (!o.scanned) ZS_RETURN_IF_ERROR(CheckIndexAgainstFiles(o.manifest, o.index));
  RankFileCache files(o.manifest.dir);
  int64_t arrays = 0, elements = 0;
  size_t listed_pieces = 0;
  for (const auto& p : o.manifest.params) {
    // Every full element exactly once: the pieces' full-space runs, sorted, must tile [0, numel).
    std::vector<std::pair<int64_t, int64_t>> runs;  // (full begin, count)
    const auto [first, last] = o.index.Of(p.name);
    listed_pieces += size_t(last - first);
    for (const CheckpointIndex::Piece* piece = first; piece != last; ++piece) {
      const ShardFileReader::ParamEntry* e = &piece->entry;
      ZS_ASSIGN_OR_RETURN(const ShardFileReader* r, files.Get(o.index, piece->file));
      if (e->shape != p.shape) {
        return IoError(fmt::format("'{}': parameter '{}' is {} there, {} in the manifest",
                                   r->path(), p.name, Shape(e->shape), Shape(p.shape)));
      }
      ForEachFullRun(e->placement, e->begin, e->end, [&](int64_t, int64_t full, int64_t n) {
        if (full >= 0) runs.push_back({full, n});
      });
      for (const auto& a : e->arrays) {
        OwnedArray arr;
        ZS_RETURN_IF_ERROR(r->ReadArray(*e, a, arr));
        const int64_t per = a.dtype == "f32" ? 4 : a.dtype == "bf16" ? 2 : 1;
        if (a.bytes != per * (e->end - e->begin)) {
          return IoError(
              fmt::format("'{}': parameter '{}' array {} has {} bytes for {} "
                          "elements of {}",
                          r->path(), p.name, a.kind, a.bytes, e->end - e->begin, a.dtype));
        }
        ++arrays;
      }
    }
    std::sort(runs.begin(), runs.end());
    int64_t at = 0;
    for (const auto& [b, n] : runs) {
      if (b != at) {
        return IoError(fmt::format("parameter '{}': elements [{}, {}) are {}", p.name,
                                   std::min(at, b), std::max(at, b),
                                   b > at ? "in no rank file" : "held twice"));
      }
      at = b + n;
    }
    if (at != p.numel) {
      return IoError(fmt::format("parameter '{}': elements [{}, {}) are in no rank file", p.name,
                                 at, p.numel));
    }
    elements += p.numel;
  }
  if (listed_pieces != o.index.pieces.size()) {
    return IoError(fmt::format("{} of the {} saved pieces belong to no parameter of the manifest",
                               o.index.pieces.size() - listed_pieces, o.index.pieces.size()));
  }
  fmt::print(
      "checkpoint {} is good: {} files, {} arrays, {} parameters with {} elements, each "
      "held once; {}\n",
      o.manifest.dir, o.manifest.files.size(), arrays, o.manifest.params.size(), elements,
      o.scanned
          ? "no index (an older checkpoint)"
          : fmt::format("the index ({} pieces) agrees with the rank files", o.index.pieces.size()));
  return OkStatus();
}

Status Consolidate(const std::string& path, const std::string& out, const std::string& dtype) {
  ZS_ASSIGN_OR_RETURN(Opened o, Open(path));
  DType type = DType::kF32;
  if (dtype == "bf16") {
    type = DType::kBF16;
  } else if (dtype != "fp32" && dtype != "f32") {
    return InvalidArgumentError(fmt::format("--dtype {}: fp32 or bf16", dtype));
  }
  std::vector<ConsolidatedParam> params;
  for (const auto& p : o.manifest.params) params.push_back({p.name, p.shape});
  RankFileCache files(o.manifest.dir);
  ZS_RETURN_IF_ERROR(
      ConsolidateCheckpoint(o.index, files, params, out, type,
                            {{"format", "pt"}, {"step", std::to_string(o.manifest.step)}}));
  fmt::print("wrote {} ({} tensors, {}, step {})\n", out, o.manifest.params.size(),
             type == DType::kF32 ? "F32" : "BF16", o.manifest.step);
  return OkStatus();
}

}  // namespace
}  // namespace zs

int main(int argc, char** argv) {
  CLI::App app{"zero-ckpt: inspect, verify and consolidate zerostack checkpoints"};
  app.require_subcommand(1);
  std::string dir, out, dtype = "fp32";
  CLI::App* inspect =
      app.add_subcommand("inspect", "step, world, stage, grid, index, shapes, ranges, sizes");
  inspect->add_option("DIR", dir, "a checkpoint or a --save-dir")->required();
  CLI::App* verify =
      app.add_subcommand("verify",
                         "checksums (rank files, index, arrays); the index equal to the rank "
                         "files; every element of every parameter held once");
  verify->add_option("DIR", dir, "a checkpoint or a --save-dir")->required();
  CLI::App* consolidate =
      app.add_subcommand("consolidate",
                         "the full, unpadded fp32 master weights (tp slices joined, every pp "
                         "stage and expert) as one safetensors file");
  consolidate->add_option("DIR", dir, "a checkpoint or a --save-dir")->required();
  consolidate->add_option("OUT", out, "the .safetensors file to write")->required();
  consolidate->add_option("--dtype", dtype, "fp32 (exact) or bf16 (rounded to nearest even)")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  CLI11_PARSE(app, argc, argv);
  zs::Status s;
  if (*inspect) s = zs::Inspect(dir);
  if (*verify) s = zs::Verify(dir);
  if (*consolidate) s = zs::Consolidate(dir, out, dtype);
  if (!s.ok()) {
    std::fprintf(stderr, "zero-ckpt: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
