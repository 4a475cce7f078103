#include "runtime/parallel/pipeline/pipeline_links.h"

#include <fmt/format.h>

#include <string>

namespace zs {

int PipelineLinks::CopiesPerDirection(int p, bool wrap) {
  if (p <= 1) return 0;
  if (p == 2) return wrap ? 2 : 1;
  return wrap && p % 2 == 1 ? 3 : 2;
}

int PipelineLinks::Color(int link) const {
  if (wrap_ && size_ % 2 == 1 && link == size_ - 1) return 2;
  return link % 2;
}

Communicator& PipelineLinks::Copy(const std::vector<std::unique_ptr<Communicator>>& copies,
                                  int link) const {
  ZS_CHECK(size_ > 1, "pipeline links of a single rank carry nothing");
  ZS_CHECK(wrap_ || link != size_ - 1, "link {} (rank {} -> rank 0) exists only with wrap-around",
           link, size_ - 1);
  const int color = Color(link);
  ZS_CHECK(color < int(copies.size()), "link {} has no communicator copy", link);
  return *copies[color];
}

StatusOr<PipelineLinks> PipelineLinks::Create(Communicator& pp, bool wrap) {
  PipelineLinks links(pp.rank(), pp.size(), wrap);
  const int copies = CopiesPerDirection(pp.size(), wrap);
  for (int direction = 0; direction < 2; ++direction) {
    auto& out = direction == 0 ? links.forward_ : links.backward_;
    for (int k = 0; k < copies; ++k) {
      const std::string name =
          fmt::format("{}.{}{}", pp.group_name(), direction == 0 ? "fwd" : "bwd", k);
      StatusOr<std::unique_ptr<Communicator>> copy = pp.Split(0, pp.rank(), name);
      if (!copy.ok()) {
        return copy.status().WithContext(
            fmt::format("pipeline links: splitting '{}' from group '{}'", name, pp.group_name()));
      }
      out.push_back(std::move(*copy));
    }
  }
  return links;
}

}  // namespace zs
