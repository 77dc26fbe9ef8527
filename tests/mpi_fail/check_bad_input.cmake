# Runs bad_input in one mode under mpiexec and requires a non-zero exit and the
# expected message from every rank, an agreed one printed once (a hang is caught by the test's TIMEOUT).
# -DMPIEXEC=... -DEXE=... -DRANKS=N -DMODE=... -DEXPECT=<regex> -DPRINTED=once|init|each [-DSETTING=VAR=value]
cmake_policy(SET CMP0054 NEW)
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
# PRINTED: "once" — every rank threw the error ("rank R threw: ...") and world.fail printed
# it once ("[strata] all N ranks: ..."); "init" — refused while the world is created: one
# "[strata] all ranks: ..." line; "each" — every rank printed "[strata] rank R: ...".
math(EXPR last "${RANKS} - 1")
if(NOT PRINTED STREQUAL "init")
  if(PRINTED STREQUAL "once")
    set(rank_line "rank RANK threw: ")
  else()
    set(rank_line "\\[strata\\] rank RANK: ")
  endif()
  foreach(r RANGE 0 ${last})
    string(REPLACE "RANK" "${r}" prefix "${rank_line}")
    if(NOT all MATCHES "${prefix}[^\n]*${EXPECT}")
      message(FATAL_ERROR "rank ${r} did not report '${EXPECT}' for bad input '${MODE}' (exit ${rc}):\n${all}")
    endif()
  endforeach()
endif()
if(NOT PRINTED STREQUAL "each")
  string(REGEX MATCHALL "\\[strata\\] all [^\n]*${EXPECT}" printed "${err}")
  list(LENGTH printed times)
  if(NOT times EQUAL 1)
    message(FATAL_ERROR "bad input '${MODE}': the agreed error was printed ${times} times, not once:\n${all}")
  endif()
endif()
# a clean exit: no std::terminate, no signal, no MPI_Abort stack dumps
if(all MATCHES "terminate called|Signal:|MPI_ABORT was invoked")
  message(FATAL_ERROR "bad input '${MODE}' ended with a crash or an abort, not a clean exit:\n${all}")
endif()
message(STATUS "bad input '${MODE}': every rank reported it, exit ${rc}")
