# Runs one_rank_fails in one mode on 4 ranks: the job must exit non-zero within
# LIMIT seconds and print the failing rank's message (a hang hits the TIMEOUT).
# -DMPIEXEC=... -DEXE=... -DMODE=... -DEXPECT=<regex> -DLIMIT=<seconds>
string(TIMESTAMP t0 "%s")
execute_process(
  COMMAND ${MPIEXEC} -n 4 ${OVERSUBSCRIBE} ${EXE} ${MODE}
  RESULT_VARIABLE rc
  OUTPUT_VARIABLE out
  ERROR_VARIABLE err
  TIMEOUT 120)
string(TIMESTAMP t1 "%s")
math(EXPR elapsed "${t1} - ${t0}")
set(all "${out}${err}")
if(rc EQUAL 0)
  message(FATAL_ERROR "'${MODE}': the job exited 0 although rank 2 failed:\n${all}")
endif()
if(NOT all MATCHES "\\[strata\\] rank 2: [^\n]*${EXPECT}")
  message(FATAL_ERROR "'${MODE}': rank 2's message '${EXPECT}' is missing (exit ${rc}):\n${all}")
endif()
if(elapsed GREATER ${LIMIT})
  message(FATAL_ERROR "'${MODE}': the job took ${elapsed} s to end (limit ${LIMIT} s):\n${all}")
endif()
message(STATUS "'${MODE}': every rank ended in ${elapsed} s, exit ${rc}; rank 2 said why")
