// zero-ckpt: looks into checkpoints written by runtime/checkpoint/checkpoint.h.
//
//   zero-ckpt inspect DIR                 step, world, stage, grid, dtypes, trainer object,
//                                         files, and every parameter's full shape and the ranges
//                                         each rank holds (in its tp slice's frame for a grid)
//   zero-ckpt verify DIR                  every file's size and checksum, every array's checksum,
//                                         every element of every parameter held exactly once
//   zero-ckpt consolidate DIR OUT.safetensors [--dtype fp32|bf16]
//                                         the full fp32 master weights (or bf16) as one
//                                         safetensors file named "<unit>.<param>"
//
// Grid checkpoints ([Note: grid checkpoints] in checkpoint.h) are read the same way: every
// piece is placed in its full parameter through its tp layout (param_placement.h), parameters
// match by name, and padded vocabulary rows are dropped.
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
#include "runtime/checkpoint/safetensors_writer.h"
#include "runtime/checkpoint/shard_file.h"

namespace zs {
namespace {

namespace fs = std::filesystem;

struct Opened {
  CheckpointManifest manifest;
  std::vector<ShardFileReader> readers;
  // parameter name -> (reader, entry), by tp rank, then begin.
  std::map<std::string,
           std::vector<std::pair<const ShardFileReader*, const ShardFileReader::ParamEntry*>>>
      parts;
};

StatusOr<Opened> Open(const std::string& path) {
  Opened o;
  ZS_ASSIGN_OR_RETURN(o.manifest, ReadCheckpointManifest(path));
  for (const auto& f : o.manifest.files) {
    ZS_ASSIGN_OR_RETURN(
        ShardFileReader r,
        ShardFileReader::Open((fs::path(o.manifest.dir) / f.name).string(), f.bytes));
    o.readers.push_back(std::move(r));
  }
  for (const ShardFileReader& r : o.readers) {
    for (const auto& e : r.params()) o.parts[e.name].push_back({&r, &e});
  }
  for (auto& [k, v] : o.parts) {
    std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) {
      return std::pair(a.second->placement.tp_rank, a.second->begin) <
             std::pair(b.second->placement.tp_rank, b.second->begin);
    });
  }
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
  for (const auto& f : m.files) {
    fmt::print("  {}  rank {}  {} bytes  fnv1a64 {}\n", f.name, f.rank, f.bytes,
               ChecksumHex(f.checksum));
  }
  fmt::print("parameters: {}\n", m.params.size());
  for (const auto& p : m.params) {
    fmt::print("  {}  {}  {} elements\n", p.name, Shape(p.shape), p.numel);
    for (const auto& [r, e] : o.parts[p.name]) {
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
      fmt::print("    rank {:<4} [{}, {}){}  {} bytes  ({})\n", r->rank(), e->begin, e->end, slice,
                 bytes, kinds);
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
  ZS_ASSIGN_OR_RETURN(Opened o, Open(path));
  int64_t arrays = 0, elements = 0;
  for (const auto& p : o.manifest.params) {
    // Every full element exactly once: the pieces' full-space runs, sorted, must tile [0, numel).
    std::vector<std::pair<int64_t, int64_t>> runs;  // (full begin, count)
    for (const auto& [r, e] : o.parts[p.name]) {
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
  fmt::print(
      "checkpoint {} is good: {} files, {} arrays, {} parameters with {} elements, each "
      "held once\n",
      o.manifest.dir, o.manifest.files.size(), arrays, o.manifest.params.size(), elements);
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
  std::vector<SafetensorsTensorInfo> tensors;
  for (const auto& p : o.manifest.params) tensors.push_back({p.name, type, p.shape});
  ZS_ASSIGN_OR_RETURN(
      auto writer,
      SafetensorsWriter::Create(out, std::move(tensors),
                                {{"format", "pt"}, {"step", std::to_string(o.manifest.step)}}));
  for (const auto& p : o.manifest.params) {
    // The full tensor from its pieces, each placed through its tp layout.
    std::vector<float> full(size_t(p.numel), 0.0f);
    int64_t placed = 0;
    for (const auto& [r, e] : o.parts[p.name]) {
      auto it = std::find_if(e->arrays.begin(), e->arrays.end(),
                             [](const auto& a) { return a.kind == "master"; });
      if (it == e->arrays.end()) {
        return IoError(fmt::format("'{}': parameter '{}' has no master array", r->path(), p.name));
      }
      OwnedArray a;
      ZS_RETURN_IF_ERROR(r->ReadArray(*e, *it, a));
      const float* src = reinterpret_cast<const float*>(a.data.data());
      ForEachFullRun(e->placement, e->begin, e->end, [&](int64_t off, int64_t f, int64_t n) {
        if (f < 0) return;
        std::copy_n(src + off, n, full.data() + f);
        placed += n;
      });
    }
    if (placed != p.numel) {
      return IoError(fmt::format(
          "parameter '{}': its pieces hold {} of {} elements (zero-ckpt verify names the gap)",
          p.name, placed, p.numel));
    }
    ZS_RETURN_IF_ERROR(writer->Append(std::span<const float>(full)));
  }
  ZS_RETURN_IF_ERROR(writer->Finish());
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
  CLI::App* inspect = app.add_subcommand("inspect", "step, world, stage, shapes, ranges, sizes");
  inspect->add_option("DIR", dir, "a checkpoint or a --save-dir")->required();
  CLI::App* verify =
      app.add_subcommand("verify", "checksums; every element of every parameter held once");
  verify->add_option("DIR", dir, "a checkpoint or a --save-dir")->required();
  CLI::App* consolidate =
      app.add_subcommand("consolidate", "the full weights as one safetensors file");
  consolidate->add_option("DIR", dir, "a checkpoint or a --save-dir")->required();
  consolidate->add_option("OUT", out, "the .safetensors file to write")->required();
  consolidate->add_option("--dtype", dtype, "fp32 or bf16")->check(CLI::IsMember({"fp32", "bf16"}));
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
