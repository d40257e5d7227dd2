# ctest build.components: fails when a component the configuration required (ON) or
# auto-detected (AUTO) was not built. Run as cmake -P with REQUIRE_CUDA, REQUIRE_GUI,
# RUNTIME_FILE, GUI_FILE, GUI_TESTS.
set(_checked 0)
if(NOT REQUIRE_CUDA STREQUAL "OFF")
  math(EXPR _checked "${_checked} + 1")
  if(NOT RUNTIME_FILE OR NOT EXISTS "${RUNTIME_FILE}")
    message(FATAL_ERROR "PREFLIGHT_CUDA=${REQUIRE_CUDA} but the CUDA runtime library was not built "
                        "(no nvcc found?): install the CUDA toolkit, or configure with -DPREFLIGHT_CUDA=OFF")
  endif()
  message(STATUS "CUDA runtime built: ${RUNTIME_FILE}")
endif()
if(NOT REQUIRE_GUI STREQUAL "OFF")
  math(EXPR _checked "${_checked} + 1")
  if(NOT GUI_FILE OR NOT EXISTS "${GUI_FILE}")
    message(FATAL_ERROR "PREFLIGHT_GUI=${REQUIRE_GUI} but the Qt explorer was not built (Qt6 Widgets/Charts "
                        "not found?): run .ci/setup, or configure with -DPREFLIGHT_GUI=OFF")
  endif()
  if(NOT GUI_TESTS)
    message(FATAL_ERROR "the explorer was built but its QtTest suites were not")
  endif()
  message(STATUS "Qt explorer built: ${GUI_FILE}, GUI test suites registered")
endif()
if(_checked EQUAL 0)
  message(STATUS "SKIPPED: PREFLIGHT_CUDA and PREFLIGHT_GUI are OFF in this configuration")
endif()
