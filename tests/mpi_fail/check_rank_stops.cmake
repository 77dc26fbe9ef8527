# Runs rank_stops in one mode on 4 ranks with STRATA_MPI_TIMEOUT_S=TIMEOUT_S: rank 2 stops
# (SIGSTOP); the job must exit non-zero within LIMIT seconds, a rank other than 2 must print
# the watchdog's message (EXPECT, a regex matched after "[strata] rank R: MPI watchdog: "),
# and no process of the job may be left behind (a stopped one included).
# -DMPIEXEC=... -DEXE=... -DMODE=... -DEXPECT=<regex> -DTIMEOUT_S=<s> -DLIMIT=<s>
string(TIMESTAMP t0 "%s")
execute_process(
  COMMAND ${CMAKE_COMMAND} -E env STRATA_MPI_TIMEOUT_S=${TIMEOUT_S}
          ${MPIEXEC} -n 4 ${OVERSUBSCRIBE} ${EXE} ${MODE}
  RESULT_VARIABLE rc
  OUTPUT_VARIABLE out
  ERROR_VARIABLE err
  TIMEOUT 120)
string(TIMESTAMP t1 "%s")
math(EXPR elapsed "${t1} - ${t0}")
set(all "${out}${err}")
if(rc EQUAL 0)
  message(FATAL_ERROR "'${MODE}': the job exited 0 although rank 2 stopped:\n${all}")
endif()
if(NOT all MATCHES "rank 2: stopping \\(SIGSTOP\\)")
  message(FATAL_ERROR "'${MODE}': rank 2 never stopped (exit ${rc}):\n${all}")
endif()
if(NOT all MATCHES "\\[strata\\] rank [013]: MPI watchdog: ${EXPECT}[^\n]* has not completed after ${TIMEOUT_S} s; a peer rank is stuck or dead")
  message(FATAL_ERROR "'${MODE}': no watchdog message matching '${EXPECT}' from a rank other than 2 (exit ${rc}):\n${all}")
endif()
if(elapsed GREATER ${LIMIT})
  message(FATAL_ERROR "'${MODE}': the job took ${elapsed} s to end (limit ${LIMIT} s, timeout ${TIMEOUT_S} s):\n${all}")
endif()
# The launcher must have killed the stopped rank too (SIGTERM alone stays pending on it).
find_program(PGREP pgrep)
if(PGREP)
  execute_process(COMMAND ${PGREP} -f "${EXE} ${MODE}" OUTPUT_VARIABLE left OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT left STREQUAL "")
    message(FATAL_ERROR "'${MODE}': processes of the job are still there after it ended: ${left}\n${all}")
  endif()
endif()
string(REGEX MATCH "\\[strata\\] rank [013]: MPI watchdog: [^\n]*" said "${all}")
message(STATUS "'${MODE}': the job ended in ${elapsed} s, exit ${rc}; ${said}")
