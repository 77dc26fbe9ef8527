# Runs bad_input in one mode under mpiexec and requires a non-zero exit and the
# expected message from every rank (a hang is caught by the test's TIMEOUT).
# -DMPIEXEC=... -DEXE=... -DRANKS=N -DMODE=... -DEXPECT=<regex>
execute_process(
  COMMAND ${MPIEXEC} -n ${RANKS} ${OVERSUBSCRIBE} ${EXE} ${MODE}
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
message(STATUS "bad input '${MODE}': every rank reported it, exit ${rc}")
