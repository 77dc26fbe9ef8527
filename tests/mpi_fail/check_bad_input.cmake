# Runs bad_input in one mode under mpiexec and requires a non-zero exit and the
# expected message from every rank (a hang is caught by the test's TIMEOUT).
# -DMPIEXEC=... -DEXE=... -DRANKS=N -DMODE=... -DEXPECT=<regex> [-DSETTING=VAR=value]
set(launch ${MPIEXEC})
if(SETTING)  # VAR=value for every rank (mpiexec passes its environment on)
  set(launch ${CMAKE_COMMAND} -E env ${SETTING} ${MPIEXEC})
endif()
execute_process(
  COMMAND ${launch} -n ${RANKS} ${OVERSUBSCRIBE} ${EXE} ${MODE}
  RESULT_VARIABLE rc
  OUTPUT_VARIABLE out
  ERROR_VARIABLE err
  TIMEOUT 60)
set(all "${out}${err}")
if(rc EQUAL 0)
  message(FATAL_ERROR "bad input '${MODE}' exited 0:\n${all}")
endif()
math(EXPR last "${RANKS} - 1")
foreach(r RANGE 0 ${last})
  if(NOT all MATCHES "\\[strata\\] rank ${r}: [^\n]*${EXPECT}")
    message(FATAL_ERROR "rank ${r} did not report '${EXPECT}' for bad input '${MODE}' (exit ${rc}):\n${all}")
  endif()
endforeach()
# a clean exit: no std::terminate, no signal, no MPI_Abort stack dumps
if(all MATCHES "terminate called|Signal:|MPI_ABORT was invoked")
  message(FATAL_ERROR "bad input '${MODE}' ended with a crash or an abort, not a clean exit:\n${all}")
endif()
message(STATUS "bad input '${MODE}': every rank reported it, exit ${rc}")
