#include "runtime/device/device_factory.h"

#include <gtest/gtest.h>

#include "runtime/device/budgeted_device.h"

namespace zs {
namespace {

bool Contains(const std::string& text, std::string_view part) {
  return text.find(part) != std::string::npos;
}

TEST(DeviceFactoryTest, MakesCpuAndBudgetedDevices) {
  MemoryTracker tracker;
  auto cpu = CreateDevice("cpu", tracker);
  ASSERT_TRUE(cpu.ok()) << cpu.status().ToString();
  EXPECT_EQ((*cpu)->name(), "cpu");
  EXPECT_EQ((*cpu)->kind(), DeviceKind::kCpu);
  EXPECT_EQ(&(*cpu)->tracker(), &tracker);

  auto budgeted = CreateDevice("budgeted-cpu:2G", tracker);
  ASSERT_TRUE(budgeted.ok()) << budgeted.status().ToString();
  auto* b = dynamic_cast<BudgetedDevice*>(budgeted->get());
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->Capacity(MemoryTier::kDevice), size_t{2} << 30);
  EXPECT_FALSE(b->Capacity(MemoryTier::kPinnedHost).has_value());

  auto pinned = CreateDevice("budgeted-cpu:512M:64k", tracker);
  ASSERT_TRUE(pinned.ok()) << pinned.status().ToString();
  b = dynamic_cast<BudgetedDevice*>(pinned->get());
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->Capacity(MemoryTier::kDevice), size_t{512} << 20);
  EXPECT_EQ(b->Capacity(MemoryTier::kPinnedHost), size_t{64} << 10);
}

TEST(DeviceFactoryTest, MalformedArgumentsAreInvalid) {
  MemoryTracker tracker;
  for (const char* spec : {"budgeted-cpu", "budgeted-cpu:", "budgeted-cpu:lots", "budgeted-cpu:0",
                           "budgeted-cpu:1G:x", "cpu:1"}) {
    auto d = CreateDevice(spec, tracker);
    ASSERT_FALSE(d.ok()) << spec;
    EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument) << d.status().ToString();
    EXPECT_TRUE(Contains(d.status().message(), spec)) << d.status().ToString();
  }
}

TEST(DeviceFactoryTest, UnknownKindListsTheAllowedSpecs) {
  MemoryTracker tracker;
  auto d = CreateDevice("tpu:0", tracker);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kNotFound);
  const std::string m = d.status().message();
  EXPECT_TRUE(Contains(m, "unknown device 'tpu:0'")) << m;
  EXPECT_TRUE(Contains(m, "cpu, budgeted-cpu:<bytes>[:<pinned bytes>]")) << m;
  EXPECT_TRUE(Contains(m, "cuda:<ordinal>")) << m;
  std::vector<std::string> forms = DeviceSpecForms();
  ASSERT_GE(forms.size(), 2u);
  EXPECT_EQ(forms[0], "cpu");
  EXPECT_TRUE(DeviceKindBuilt("cpu"));
  EXPECT_TRUE(DeviceKindBuilt("budgeted-cpu"));
  EXPECT_FALSE(DeviceKindBuilt("tpu"));
}

// "cuda:0" works on a machine with a GPU and a CUDA build; otherwise it is Unavailable and
// says why (no CUDA in the build, or no driver/GPU).
TEST(DeviceFactoryTest, CudaIsCreatedOrUnavailableWithAReason) {
  MemoryTracker tracker;
  auto d = CreateDevice("cuda:0", tracker);
  if (!DeviceKindBuilt("cuda")) {
    ASSERT_FALSE(d.ok());
    EXPECT_EQ(d.status().code(), StatusCode::kUnavailable);
    EXPECT_TRUE(Contains(d.status().message(), "no CUDA support")) << d.status().ToString();
    EXPECT_EQ(CreateDevice("cuda:x", tracker).status().code(), StatusCode::kUnavailable);
    return;
  }
  if (d.ok()) {
    EXPECT_EQ((*d)->kind(), DeviceKind::kCuda);
    EXPECT_EQ((*d)->name(), "cuda:0");
  } else {
    EXPECT_EQ(d.status().code(), StatusCode::kUnavailable);
    EXPECT_TRUE(Contains(d.status().message(), "cuda:0 is unavailable")) << d.status().ToString();
  }
  auto bad = CreateDevice("cuda:x", tracker);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument) << bad.status().ToString();
  auto far = CreateDevice("cuda:4096", tracker);
  EXPECT_EQ(far.status().code(), StatusCode::kUnavailable) << far.status().ToString();
}

}  // namespace
}  // namespace zs
