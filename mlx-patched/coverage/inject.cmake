# Included by MLX's top-level project() (CMAKE_PROJECT_mlx_INCLUDE) in the
# coverage variant. Once every target exists, libmlx alone is instrumented,
# set on the target, not in CMAKE_CXX_FLAGS: CMake's compiler checks, MLX's
# tests and anything else built here stay plain, and need no counter.
#
# * gcov's line and branch counters (--coverage) on every source of libmlx,
#   for the coverage map;
# * the edges (-fsanitize-coverage=trace-pc, counted by edges.cpp, which
#   joins libmlx) on the graph's code only, not on mlx/backend/: a call per
#   block in a kernel's inner loop would cost the fuzzer most of its speed,
#   and the kernels' loops are not what the lifetime question is about.
function(mlx_fork_instrument_mlx)
  target_sources(mlx PRIVATE "${MLX_FORK_COVERAGE_DIR}/edges.cpp")
  # The map's size is the fuzzer's (mlx_facts::coverage::MAP_SIZE), given
  # by the build on CMake's command line.
  set_property(SOURCE "${MLX_FORK_COVERAGE_DIR}/edges.cpp" TARGET_DIRECTORY mlx
               APPEND PROPERTY COMPILE_DEFINITIONS
               "MLX_FORK_COVERAGE_MAP_SIZE=${MLX_FORK_COVERAGE_MAP_SIZE}u")
  target_compile_options(mlx PRIVATE --coverage)
  target_link_options(mlx PRIVATE --coverage)
  target_link_libraries(mlx PRIVATE ${CMAKE_DL_LIBS})
  get_target_property(sources mlx SOURCES)
  foreach(source IN LISTS sources)
    if(source MATCHES "\\.cpp$" AND NOT source MATCHES "/backend/")
      set_property(SOURCE "${source}" TARGET_DIRECTORY mlx APPEND
                   PROPERTY COMPILE_OPTIONS -fsanitize-coverage=trace-pc)
    endif()
  endforeach()
endfunction()
if(NOT MLX_FORK_COVERAGE_MAP_SIZE)
  message(FATAL_ERROR "MLX_FORK_COVERAGE_MAP_SIZE: the build gives the coverage map's size (mlx_facts::coverage::MAP_SIZE)")
endif()
set(MLX_FORK_COVERAGE_DIR "${CMAKE_CURRENT_LIST_DIR}")
cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL mlx_fork_instrument_mlx)
