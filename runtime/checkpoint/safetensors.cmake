# The safetensors format (writer and reader: base only) and the export of a live engine's weights
# (runtime/checkpoint/safetensors_export.h). Included from runtime/checkpoint/CMakeLists.txt.
zs_add_library(zs_safetensors
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/safetensors_writer.cc
  DEPS zs_base
  PRIVATE_DEPS nlohmann_json::nlohmann_json fmt::fmt)
zs_add_library(zs_safetensors_export
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/safetensors_export.cc
  DEPS zs_safetensors zs_engine
  PRIVATE_DEPS fmt::fmt)
