// The C++ half of safetensors_export_python: trains a tiny GPT (runtime/nn) for a few steps at
// ZeRO stage 3 on 2 ranks (threads), then writes into OUT_DIR
//   model.f32.safetensors    ExportSafetensors, F32
//   model.bf16.safetensors   ExportSafetensors, BF16
//   model.16bit.safetensors  Save16BitWeightsOnModelSave
//   (stage3_gather_16bit_weights_on_model_save) reference.json           [{"name": ..., "shape":
//   [...]}, ...] in export order reference.f32            GatherMasterParam's values of each,
//   concatenated, little-endian f32
// check_safetensors_export.py then reads the files with the safetensors package.
//   usage: safetensors_export_main OUT_DIR
#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>

#include "runtime/base/splitmix64.h"
#include "runtime/checkpoint/safetensors_export.h"
#include "runtime/comm/local_ranks.h"
#include "runtime/device/device_factory.h"
#include "runtime/nn/gpt.h"

namespace zs {
namespace {

constexpr int kVocab = 37, kSeq = 7, kBatch = 2, kWorld = 2, kSteps = 3;

Status Run(const std::string& out) {
  CommOptions options;
  std::mutex mu;
  return RunLocalRanks(
      kWorld, options, [&](int rank, Communicator& comm, MemoryTracker& tracker) -> Status {
        nn::GptConfig gc{kVocab, kSeq, 2, 18, 3};
        ZS_ASSIGN_OR_RETURN(auto gpt, nn::Gpt::Create(gc, &tracker));
        ZS_ASSIGN_OR_RETURN(auto device, CreateDevice("cpu", tracker));
        EngineConfig config;
        config.zero_optimization.stage = 3;
        config.zero_optimization.stage3_param_persistence_threshold = 50;
        config.zero_optimization.stage3_gather_16bit_weights_on_model_save = true;
        config.optimizer.lr = 1e-2;
        ZS_ASSIGN_OR_RETURN(auto engine,
                            ZeroEngine::Create(config, gpt->spec(), gpt->Init(7), *device, comm));
        std::vector<int32_t> in(size_t(kBatch) * kSeq), tgt(in.size());
        for (int step = 0; step < kSteps; ++step) {
          for (size_t i = 0; i < in.size(); ++i) {
            const uint64_t r = SplitMix64(uint64_t(step) * 7919 + uint64_t(rank) * 131 + i);
            in[i] = int32_t(r % kVocab);
            tgt[i] = int32_t((r >> 20) % kVocab);
          }
          ZS_RETURN_IF_ERROR(gpt->ForwardBackward(*engine, in, tgt, kBatch, kSeq).status());
          ZS_RETURN_IF_ERROR(engine->Step().status());
        }
        SafetensorsExportOptions f32;
        f32.metadata["producer"] = "safetensors_export_main";
        ZS_RETURN_IF_ERROR(ExportSafetensors(*engine, out + "/model.f32.safetensors", f32));
        SafetensorsExportOptions bf16;
        bf16.dtype = DType::kBF16;
        ZS_RETURN_IF_ERROR(ExportSafetensors(*engine, out + "/model.bf16.safetensors", bf16));
        ZS_ASSIGN_OR_RETURN(bool written, Save16BitWeightsOnModelSave(*engine, out));
        if (!written) return InternalError("Save16BitWeightsOnModelSave wrote nothing at stage 3");

        // The reference: GatherMasterParam (collective), written by rank 0.
        nlohmann::json index = nlohmann::json::array();
        std::vector<float> values;
        const ModelSpec& model = engine->model();
        for (size_t u = 0; u < model.units.size(); ++u) {
          for (size_t p = 0; p < model.units[u].params.size(); ++p) {
            ZS_ASSIGN_OR_RETURN(std::vector<float> v, engine->GatherMasterParam(int(u), int(p)));
            index.push_back({{"name", ExportTensorName(model, int(u), int(p))},
                             {"shape", model.units[u].params[p].shape}});
            values.insert(values.end(), v.begin(), v.end());
          }
        }
        if (rank != 0) return OkStatus();
        std::lock_guard<std::mutex> lock(mu);
        std::ofstream json(out + "/reference.json");
        json << index.dump(1) << "\n";
        std::ofstream raw(out + "/reference.f32", std::ios::binary);
        raw.write(reinterpret_cast<const char*>(values.data()),
                  std::streamsize(values.size() * sizeof(float)));
        if (!json || !raw) return IoError(fmt::format("writing the reference into {}", out));
        fmt::print("exported {} tensors ({} values) into {}\n", index.size(), values.size(), out);
        return OkStatus();
      });
}

}  // namespace
}  // namespace zs

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  zs::Status status = zs::Run(argv[1]);
  if (!status.ok()) {
    std::fprintf(stderr, "safetensors_export_main: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
