#include "runtime/engine/auto_values.h"

#include <fmt/format.h>

#include <cmath>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

namespace zs::internal {
namespace {

using Json = nlohmann::json;

// One "auto" key: the program field it needs ("" = none) and how the value follows from it.
struct AutoRule {
  const char* key;
  std::vector<const char*> needs;  // the ProgramValues fields it reads, for the error
  std::function<std::optional<Json>(const ProgramValues&)> value;
  const char* from;   // how it was derived, for the list
};

template <typename T>
std::optional<Json> Plain(const std::optional<T>& v) {
  return v ? std::optional<Json>(Json(*v)) : std::nullopt;
}

// The product of the program's integers; past int64 the exact value as a JSON number, which
// the key then refuses by name ("does not fit in a 64-bit integer") instead of overflowing.
Json ProductJson(std::initializer_list<int64_t> factors) {
  int64_t product = 1;
  bool overflow = false;
  double approx = 1;
  for (int64_t f : factors) {
    overflow = overflow || __builtin_mul_overflow(product, f, &product);
    approx *= double(f);
  }
  return overflow ? Json(approx) : Json(product);
}

const std::vector<AutoRule>& Rules() {
  static const std::vector<AutoRule> rules = {
      {"train_micro_batch_size_per_gpu", {"micro_batch"},
       [](const ProgramValues& p) { return Plain(p.micro_batch); }, "micro_batch"},
      {"gradient_accumulation_steps", {"accumulation_steps"},
       [](const ProgramValues& p) { return Plain(p.accumulation_steps); }, "accumulation_steps"},
      {"train_batch_size", {"micro_batch", {"accumulation_steps"}, "dp_world_size"},
       [](const ProgramValues& p) -> std::optional<Json> {
         if (!p.micro_batch || !p.accumulation_steps || !p.dp_world_size) return std::nullopt;
         return ProductJson({*p.micro_batch, *p.accumulation_steps, *p.dp_world_size});
       },
       "micro_batch x accumulation_steps x dp_world_size"},
      {"gradient_clipping", {"max_grad_norm"},
       [](const ProgramValues& p) { return Plain(p.max_grad_norm); }, "max_grad_norm"},
      {"optimizer.params.lr", {"lr"}, [](const ProgramValues& p) { return Plain(p.lr); }, "lr"},
      {"optimizer.params.betas", {"betas"},
       [](const ProgramValues& p) -> std::optional<Json> {
         if (!p.betas) return std::nullopt;
         return Json::array({(*p.betas)[0], (*p.betas)[1]});
       },
       "betas"},
      {"optimizer.params.eps", {"eps"}, [](const ProgramValues& p) { return Plain(p.eps); }, "eps"},
      {"optimizer.params.weight_decay", {"weight_decay"},
       [](const ProgramValues& p) { return Plain(p.weight_decay); }, "weight_decay"},
      {"scheduler.params.warmup_min_lr", {},
       [](const ProgramValues&) -> std::optional<Json> { return Json(0); }, "0"},
      {"scheduler.params.warmup_max_lr", {"lr"}, [](const ProgramValues& p) { return Plain(p.lr); },
       "lr"},
      {"scheduler.params.warmup_num_steps", {"warmup_steps"},
       [](const ProgramValues& p) { return Plain(p.warmup_steps); }, "warmup_steps"},
      {"scheduler.params.total_num_steps", {"total_steps"},
       [](const ProgramValues& p) { return Plain(p.total_steps); }, "total_steps"},
      {"zero_optimization.reduce_bucket_size", {"hidden_size"},
       [](const ProgramValues& p) -> std::optional<Json> {
         if (!p.hidden_size) return std::nullopt;
         return ProductJson({*p.hidden_size, *p.hidden_size});
       },
       "hidden_size^2"},
      {"zero_optimization.stage3_prefetch_bucket_size", {"hidden_size"},
       [](const ProgramValues& p) -> std::optional<Json> {
         if (!p.hidden_size) return std::nullopt;
         const double v = 0.9 * double(*p.hidden_size) * double(*p.hidden_size);
         return std::fabs(v) < 9.2e18 ? Json(int64_t(v)) : Json(v);
       },
       "int(0.9 x hidden_size^2)"},
      {"zero_optimization.stage3_param_persistence_threshold", {"hidden_size"},
       [](const ProgramValues& p) -> std::optional<Json> {
         if (!p.hidden_size) return std::nullopt;
         return ProductJson({10, *p.hidden_size});
       },
       "10 x hidden_size"},
      {"fp16.enabled", {"precision"},
       [](const ProgramValues& p) -> std::optional<Json> {
         if (!p.precision) return std::nullopt;
         return Json(*p.precision == "fp16");
       },
       "precision == fp16"},
      {"bf16.enabled", {"precision"},
       [](const ProgramValues& p) -> std::optional<Json> {
         if (!p.precision) return std::nullopt;
         return Json(*p.precision == "bf16");
       },
       "precision == bf16"},
  };
  return rules;
}

// "lr (--lr)": each field with the program's flag for it, if it named one.
std::string Needs(const ProgramValues& program, const std::vector<const char*>& needs) {
  std::string out;
  for (const char* field : needs) {
    auto flag = program.flags.find(field);
    out += (out.empty() ? "" : ", ") + std::string(field) +
           (flag != program.flags.end() ? fmt::format(" ({})", flag->second) : std::string());
  }
  return out;
}

Status Walk(Json& object, const std::string& path, const ProgramValues& program,
            std::vector<AutoFill>* filled) {
  for (auto& [name, value] : object.items()) {
    const std::string key = path.empty() ? name : path + "." + name;
    if (value.is_object()) {
      ZS_RETURN_IF_ERROR(Walk(value, key, program, filled));
      continue;
    }
    if (!value.is_string() || value.get<std::string>() != "auto") continue;
    const AutoRule* rule = nullptr;
    for (const AutoRule& r : Rules()) {
      if (key == r.key) rule = &r;
    }
    if (rule == nullptr) {
      return InvalidArgumentError(fmt::format(
          "{}: \"auto\" has no meaning for this key (the Hugging Face integration resolves "
          "\"auto\" for batch sizes, gradient_clipping, the optimizer's lr, betas, eps and "
          "weight_decay, the scheduler's warm-up and total steps, the bucket sizes and "
          "fp16/bf16.enabled); give a value",
          key));
    }
    std::optional<Json> resolved = rule->value(program);
    if (!resolved) {
      return InvalidArgumentError(fmt::format(
          "{}: \"auto\" needs the program's {}; supply it or give the key a value", key,
          Needs(program, rule->needs)));
    }
    if (filled != nullptr) filled->push_back({key, resolved->dump(), rule->from});
    value = std::move(*resolved);
  }
  return OkStatus();
}

}  // namespace

Status ResolveAutoValues(Json& root, const ProgramValues& program,
                         std::vector<AutoFill>* filled) {
  if (!root.is_object()) return OkStatus();
  return Walk(root, "", program, filled);
}

}  // namespace zs::internal
