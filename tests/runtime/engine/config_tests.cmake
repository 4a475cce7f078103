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
# A bounded random-input test of the config parser and train_gpt's command line (issue 27):
# ZS_FUZZ_SECONDS of mutated configs and command lines (default 10 s; 4 s in the sanitizer
# builds, which run it under ASan+UBSan as part of make test); docs/ARCHITECTURE.md, "Tests and
# sanitizers".
find_package(CLI11 REQUIRED)
zs_add_test(config_fuzz_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/config_fuzz_test.cc
          ${PROJECT_SOURCE_DIR}/examples/train_gpt/train_gpt_args.cc
  LIBS zs_engine_config nlohmann_json::nlohmann_json CLI11::CLI11 fmt::fmt
  LABELS engine fuzz
  TIMEOUT 120)
target_compile_definitions(config_fuzz_test PRIVATE
  ZS_FUZZ_CONFIG_DIRS="${PROJECT_SOURCE_DIR}/examples/train_gpt/configs|${CMAKE_CURRENT_LIST_DIR}/deepspeed_configs"
  ZS_FUZZ_FIRST_CONFIG="${PROJECT_SOURCE_DIR}/examples/train_gpt/configs/zero3.json"
  ZS_FUZZ_DEFAULT_SECONDS=$<IF:$<BOOL:${ZS_SANITIZE}>,4,10>)
