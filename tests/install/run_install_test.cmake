# cmake -P script behind ctest install.find_package (arguments: see CMakeLists.txt).
cmake_minimum_required(VERSION 3.25)
foreach(var STRATA_BUILD_DIR CONSUMER_SOURCE_DIR SCRATCH_DIR GENERATOR CXX_COMPILER)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "run_install_test.cmake: -D${var}=... is required")
  endif()
endforeach()
if(NOT CONFIG)
  set(CONFIG Release)
endif()

set(prefix ${SCRATCH_DIR}/prefix)
set(consumer_build ${SCRATCH_DIR}/consumer-build)
# Start clean: a stale prefix or consumer cache would hide packaging bugs.
file(REMOVE_RECURSE ${SCRATCH_DIR})
file(MAKE_DIRECTORY ${SCRATCH_DIR})

function(run_step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    list(JOIN ARGN " " cmd)
    message(FATAL_ERROR "install test: ${what} failed (${rc})\ncommand: ${cmd}\n${out}")
  endif()
  message(STATUS "install test: ${what}: ok")
endfunction()

run_step("install" ${CMAKE_COMMAND} --install ${STRATA_BUILD_DIR} --prefix ${prefix} --config ${CONFIG})
if(NOT EXISTS ${prefix}/include/strata)
  message(FATAL_ERROR "install test: ${prefix}/include/strata was not installed")
endif()

set(gen_args -G "${GENERATOR}")
if(MAKE_PROGRAM)
  list(APPEND gen_args -DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM})
endif()
run_step("configure consumer" ${CMAKE_COMMAND} -S ${CONSUMER_SOURCE_DIR} -B ${consumer_build}
         ${gen_args} -DCMAKE_BUILD_TYPE=${CONFIG} -DCMAKE_CXX_COMPILER=${CXX_COMPILER}
         -DCMAKE_PREFIX_PATH=${prefix} -DEXPECT_SENTENCEPIECE=${EXPECT_SENTENCEPIECE}
         -DEXPECT_DNNL=${EXPECT_DNNL}
         # Never let a package registry entry stand in for the scratch prefix.
         -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF)
run_step("build consumer" ${CMAKE_COMMAND} --build ${consumer_build} --config ${CONFIG})

# Single-config generators put the exe at the top, multi-config in <CONFIG>/.
set(exe ${consumer_build}/strata_consumer)
if(NOT EXISTS ${exe})
  set(exe ${consumer_build}/${CONFIG}/strata_consumer)
endif()
run_step("run consumer" ${exe})
# The optional components, built when the package has them (the consumer insists when it should).
get_filename_component(exe_dir ${exe} DIRECTORY)
foreach(component IN ITEMS sentencepiece dnnl)
  string(TOUPPER "${component}" _upper)
  if(EXPECT_${_upper})
    run_step("run ${component} consumer" ${exe_dir}/strata_consumer_${component})
  endif()
endforeach()
