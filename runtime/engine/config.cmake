# The engine's JSON configuration (DeepSpeed-shaped). Included from runtime/engine/CMakeLists.txt.
zs_add_library(zs_engine_config
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine_config.cc ${CMAKE_CURRENT_LIST_DIR}/engine_config_checks.cc
          ${CMAKE_CURRENT_LIST_DIR}/param_groups_json.cc
          ${CMAKE_CURRENT_LIST_DIR}/auto_values.cc
          ${CMAKE_CURRENT_LIST_DIR}/deepspeed_keys.cc
          ${CMAKE_CURRENT_LIST_DIR}/scheduler_config.cc
  DEPS zs_base zs_lr_schedule
  PRIVATE_DEPS nlohmann_json::nlohmann_json fmt::fmt)
