# hp_library(NAME DEPS...): one static library per src/ folder; sources are every .cc below it
# except under a cuda/ folder, which builds its own library (only when nvcc is found).
function(hp_library name)
  file(GLOB_RECURSE all_srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cc)
  set(srcs "")
  foreach(src IN LISTS all_srcs)
    file(RELATIVE_PATH rel ${CMAKE_CURRENT_SOURCE_DIR} ${src})
    if(NOT rel MATCHES "(^|/)cuda/")
      list(APPEND srcs ${src})
    endif()
  endforeach()
  if(NOT srcs)
    message(FATAL_ERROR "hp_library(${name}): no .cc sources in ${CMAKE_CURRENT_SOURCE_DIR}")
  endif()
  add_library(${name} STATIC ${srcs})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(${name} PUBLIC ${ARGN})
endfunction()

# hp_test(NAME LIBS...): a GoogleTest binary from tests/NAME/*.cc, every test registered with ctest.
# Files named tests/NAME/mpi_*.cc are left out of it: each becomes its own executable
# test_NAME_<stem> (it brings its own main, which initializes MPI) and is run under mpirun by the
# hp_mpi_test(...) lines it carries as comments, e.g.
#   // hp_mpi_test(comm_mpi_basic 4 60 --gtest_brief=1)
#   // hp_mpi_test(comm_mpi_timeout 2 60 --mode=timeout EXPECT_FAIL "rank 0 waits for")
# (same arguments as the function below minus TARGET).
function(hp_test name)
  file(GLOB srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/${name}/*.cc)
  file(GLOB mpi_srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/${name}/mpi_*.cc)
  if(mpi_srcs)
    list(REMOVE_ITEM srcs ${mpi_srcs})
  endif()
  if(srcs)
    add_executable(test_${name} ${srcs})
    target_link_libraries(test_${name} PRIVATE ${ARGN} GTest::gtest GTest::gtest_main)
    # The CLI tests start helixpipe under the same launcher and flags as hp_mpi_test's runs.
    string(JOIN " " mpiexec_flags ${HP_MPIEXEC_FLAGS})
    target_compile_definitions(test_${name} PRIVATE
      HP_SOURCE_DIR="${PROJECT_SOURCE_DIR}" HP_BINARY_DIR="${PROJECT_BINARY_DIR}"
      HP_MPIEXEC="${MPIEXEC_EXECUTABLE}" HP_MPIEXEC_FLAGS="${mpiexec_flags}")
    gtest_discover_tests(test_${name} DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT 600)
  endif()
  foreach(src IN LISTS mpi_srcs)
    get_filename_component(stem ${src} NAME_WE)
    set(target test_${name}_${stem})
    add_executable(${target} ${src})
    target_link_libraries(${target} PRIVATE ${ARGN} GTest::gtest)
    target_compile_definitions(${target} PRIVATE
      HP_SOURCE_DIR="${PROJECT_SOURCE_DIR}" HP_BINARY_DIR="${PROJECT_BINARY_DIR}")
    file(STRINGS ${src} lines REGEX "^// hp_mpi_test\\(.*\\)[ ]*$")
    foreach(line IN LISTS lines)
      string(REGEX REPLACE "^// hp_mpi_test\\((.*)\\)[ ]*$" "\\1" body "${line}")
      separate_arguments(args UNIX_COMMAND "${body}")
      list(POP_FRONT args test_name)
      hp_mpi_test(${test_name} ${target} ${args})
    endforeach()
  endforeach()
endfunction()

# mpirun flags for tests: root in containers and more ranks than cores are both normal here.
set(HP_MPIEXEC_FLAGS "--allow-run-as-root;--oversubscribe" CACHE STRING "Extra mpiexec flags for tests")

# hp_mpi_test(NAME TARGET RANKS TIMEOUT [ARGS...] [EXPECT_FAIL REGEX] [ENV VAR=VALUE...]):
# runs `mpiexec -np RANKS <target> ARGS...` through cmake/mpi_test.sh, which kills it after
# TIMEOUT seconds. With EXPECT_FAIL the test passes only if the run exits non-zero AND its output
# matches REGEX (grep -E): how we assert that a killed rank or a hang ends the job with a message.
function(hp_mpi_test name target ranks timeout)
  cmake_parse_arguments(PARSE_ARGV 4 arg "" "EXPECT_FAIL" "ENV")
  add_test(NAME ${name}
    COMMAND bash ${PROJECT_SOURCE_DIR}/cmake/mpi_test.sh ${timeout} "${arg_EXPECT_FAIL}" --
            ${MPIEXEC_EXECUTABLE} ${HP_MPIEXEC_FLAGS} ${MPIEXEC_NUMPROC_FLAG} ${ranks}
            ${MPIEXEC_PREFLAGS} $<TARGET_FILE:${target}> ${MPIEXEC_POSTFLAGS}
            ${arg_UNPARSED_ARGUMENTS})
  math(EXPR hard_timeout "${timeout} + 20")
  set_tests_properties(${name} PROPERTIES TIMEOUT ${hard_timeout} LABELS mpi
    PROCESSORS ${ranks} ENVIRONMENT "${arg_ENV}")
endfunction()
