# The data side of the train_gpt demo: the character corpus and the split-invariant batch
# sampler. Included from examples/CMakeLists.txt; tests in tests/examples/. Not installed: it
# belongs to the demo, not to the library.
add_library(zs_train_gpt_data STATIC
  ${CMAKE_CURRENT_LIST_DIR}/char_corpus.cc
  ${CMAKE_CURRENT_LIST_DIR}/batch_sampler.cc)
target_include_directories(zs_train_gpt_data PUBLIC ${PROJECT_SOURCE_DIR})
target_link_libraries(zs_train_gpt_data PUBLIC zs_base fmt::fmt)
# DefaultTrainGptCorpusPath() points at the shipped text in this source tree.
target_compile_definitions(zs_train_gpt_data
  PRIVATE ZS_TRAIN_GPT_DATA_DIR="${CMAKE_CURRENT_LIST_DIR}/data")
