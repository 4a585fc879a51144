# Test helpers shared by every component.
#   kolo_unit_test(NAME test_ring SOURCES tests/unit/test_ring.c LIBS kolo)
#     a CMocka test, registered in CTest with label "unit";
#   kolo_integration_test(NAME ... SOURCES ... LIBS ... [TIMEOUT s])
#     a program (CMocka or plain) that starts real processes on 127.0.0.1, label "integration";
#   kolo_script_test(NAME ... COMMAND ... [LABELS ...] [TIMEOUT s])
#     a script run through CTest.
# Every test may exit 77 (KOLO_TEST_SKIP in tests/support/skip.h) to be reported as
# skipped; scripts/check-skips.py fails CI for a skip the machine does not justify
# (label gpu without a GPU, nogpu with one, image without KOLO_TEST_IMAGE=1).
pkg_check_modules(CMOCKA REQUIRED IMPORTED_TARGET cmocka)

function(kolo_unit_test)
  cmake_parse_arguments(T "" "NAME;TIMEOUT" "SOURCES;LIBS" ${ARGN})
  add_executable(${T_NAME} ${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE ${T_LIBS} PkgConfig::CMOCKA Threads::Threads)
  set_target_properties(${T_NAME} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  add_test(NAME ${T_NAME} COMMAND ${T_NAME})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 120)
  endif()
  set_tests_properties(${T_NAME} PROPERTIES LABELS unit TIMEOUT ${T_TIMEOUT} SKIP_RETURN_CODE 77
    ENVIRONMENT "KOLO_BIN_DIR=${CMAKE_BINARY_DIR}/bin;KOLO_SOURCE_DIR=${CMAKE_SOURCE_DIR}")
endfunction()

function(kolo_integration_test)
  cmake_parse_arguments(T "" "NAME;TIMEOUT" "SOURCES;LIBS" ${ARGN})
  add_executable(${T_NAME} ${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE ${T_LIBS} PkgConfig::CMOCKA Threads::Threads)
  set_target_properties(${T_NAME} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  add_test(NAME ${T_NAME} COMMAND ${T_NAME})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  set_tests_properties(${T_NAME} PROPERTIES LABELS integration TIMEOUT ${T_TIMEOUT} SKIP_RETURN_CODE 77
    ENVIRONMENT "KOLO_BIN_DIR=${CMAKE_BINARY_DIR}/bin;KOLO_TEST_DIR=${CMAKE_BINARY_DIR}/tests;KOLO_SOURCE_DIR=${CMAKE_SOURCE_DIR}")
endfunction()

function(kolo_script_test)
  cmake_parse_arguments(T "" "NAME;TIMEOUT" "COMMAND;LABELS" ${ARGN})
  add_test(NAME ${T_NAME} COMMAND ${T_COMMAND})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  if(NOT T_LABELS)
    set(T_LABELS integration)
  endif()
  set_tests_properties(${T_NAME} PROPERTIES LABELS "${T_LABELS}" TIMEOUT ${T_TIMEOUT} SKIP_RETURN_CODE 77
    ENVIRONMENT "KOLO_BIN_DIR=${CMAKE_BINARY_DIR}/bin;KOLO_TEST_DIR=${CMAKE_BINARY_DIR}/tests;KOLO_SOURCE_DIR=${CMAKE_SOURCE_DIR};KOLO_BUILD_DIR=${CMAKE_BINARY_DIR}")
endfunction()
