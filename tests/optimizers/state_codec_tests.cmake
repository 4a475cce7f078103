# Tests of optimizers/state_codec.h. Included from tests/optimizers/CMakeLists.txt. Links hwy
# directly: the test runs the codecs once per Highway target (hwy::SetSupportedTargetsForTest).
zs_add_test(state_codec_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/state_codec_test.cc
  LIBS zs_optimizers hwy::hwy
  LABELS optimizers TIMEOUT 60)
