#include "runtime/checkpoint/safetensors_export.h"

#include <fmt/format.h>

#include <filesystem>
#include <memory>
#include <vector>

#include "runtime/checkpoint/safetensors_writer.h"

namespace zs {

std::string ExportTensorName(const ModelSpec& model, int unit, int param) {
  return fmt::format("{}.{}", model.units[size_t(unit)].name,
                     model.units[size_t(unit)].params[size_t(param)].name);
}

Status ExportSafetensors(ZeroEngine& engine, const std::string& path,
                         const SafetensorsExportOptions& options) {
  const ModelSpec& model = engine.model();
  const bool writer_rank = engine.rank() == 0;
  std::unique_ptr<SafetensorsWriter> writer;
  Status local;  // rank 0's first write error; the gathers go on regardless
  if (writer_rank) {
    std::vector<SafetensorsTensorInfo> tensors;
    for (size_t u = 0; u < model.units.size(); ++u) {
      for (size_t p = 0; p < model.units[u].params.size(); ++p) {
        tensors.push_back({ExportTensorName(model, int(u), int(p)), options.dtype,
                           model.units[u].params[p].shape});
      }
    }
    std::map<std::string, std::string> metadata = options.metadata;
    metadata.emplace("format", "pt");
    auto created = SafetensorsWriter::Create(path, std::move(tensors), metadata);
    if (created.ok()) {
      writer = std::move(*created);
    } else {
      local = created.status();
    }
  }
  for (size_t u = 0; u < model.units.size(); ++u) {
    for (size_t p = 0; p < model.units[u].params.size(); ++p) {
      StatusOr<std::vector<float>> values = engine.GatherMasterParam(int(u), int(p));
      if (!values.ok()) {
        return values.status().WithContext(
            fmt::format("exporting '{}' to {}", ExportTensorName(model, int(u), int(p)), path));
      }
      if (writer != nullptr && local.ok()) local = writer->Append(*values);
    }
  }
  if (writer != nullptr && local.ok()) local = writer->Finish();
  // Every rank learns whether rank 0 wrote the file.
  ZS_ASSIGN_OR_RETURN(const double failed, engine.AllReduceMean(local.ok() ? 0.0 : 1.0));
  if (!local.ok()) return local.WithContext(fmt::format("rank {}", engine.rank()));
  if (failed > 0) {
    return IoError(fmt::format("rank {}: rank 0 failed to write the safetensors file {}",
                               engine.rank(), path));
  }
  return OkStatus();
}

DType SixteenBitDType(const ZeroEngine& engine) {
  return engine.compute_dtype() == DType::kF32 ? DType::kBF16 : engine.compute_dtype();
}

StatusOr<bool> Save16BitModel(ZeroEngine& engine, const std::string& path) {
  if (engine.stage() == 3 &&
      !engine.config().zero_optimization.stage3_gather_16bit_weights_on_model_save) {
    return false;  // DeepSpeed: "the model will be bogus if not consolidated"
  }
  SafetensorsExportOptions options;
  options.dtype = SixteenBitDType(engine);
  ZS_RETURN_IF_ERROR(ExportSafetensors(engine, path, options));
  return true;
}

StatusOr<bool> Save16BitWeightsOnModelSave(ZeroEngine& engine, const std::string& dir) {
  if (engine.stage() != 3 ||
      !engine.config().zero_optimization.stage3_gather_16bit_weights_on_model_save) {
    return false;
  }
  return Save16BitModel(engine, (std::filesystem::path(dir) / kConsolidated16BitFile).string());
}

}  // namespace zs
