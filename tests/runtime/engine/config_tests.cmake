# Tests of runtime/engine/engine_config.h. Included from tests/runtime/engine/CMakeLists.txt.
zs_add_test(engine_config_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine_config_test.cc
  LIBS zs_engine_config nlohmann_json::nlohmann_json GTest::gmock
  LABELS engine)
# Keeps docs/CONFIG.md and EngineConfigKeys() in agreement (every key, every default).
zs_add_test(config_docs_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/config_docs_test.cc
  LIBS zs_engine_config nlohmann_json::nlohmann_json
  LABELS engine)
target_compile_definitions(config_docs_test PRIVATE ZS_CONFIG_DOC="${PROJECT_SOURCE_DIR}/docs/CONFIG.md")
