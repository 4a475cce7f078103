# The safetensors writer/reader and the engine export (C++), and the same files read by the
# `safetensors` Python package (scripts/setup.sh makes .venv; without python3 the test skips).
zs_add_test(safetensors_writer_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/safetensors_writer_test.cc
            LIBS zs_safetensors_export zs_safetensors zs_engine zs_nn zs_comm zs_device fmt::fmt
                 nlohmann_json::nlohmann_json
            LABELS checkpoint engine TIMEOUT 300)
add_executable(safetensors_export_main ${CMAKE_CURRENT_LIST_DIR}/safetensors_export_main.cc)
target_link_libraries(safetensors_export_main PRIVATE zs_safetensors_export zs_engine zs_nn zs_comm
                                                      zs_device fmt::fmt nlohmann_json::nlohmann_json)
add_test(NAME safetensors_export_python
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/safetensors_export_python.sh
                 $<TARGET_FILE:safetensors_export_main> ${PROJECT_SOURCE_DIR})
set_tests_properties(safetensors_export_python PROPERTIES LABELS "checkpoint;python"
                     SKIP_RETURN_CODE 77 TIMEOUT 300)
