# Runs rank_stops in one mode on RANKS ranks with STRATA_MPI_TIMEOUT_S=TIMEOUT_S: rank STOPPED
# stops (SIGSTOP; -1: none stops). The job must exit non-zero within LIMIT seconds with one
# watchdog verdict: every other rank prints its first line, which names STOPPED and where its
# own record says it stood (AT, a regex), or says that every rank answered; the full verdict,
# printed once, says for every other rank what it waits in (one of them matching EXPECT) and
# that STOPPED gave no answer. No process of the job may be left behind (a stopped one included).
# (No ';' in the regexes: CMake's list separator.)
# -DMPIEXEC=... -DEXE=... -DMODE=... -DRANKS=<n> -DSTOPPED=<rank> -DAT=<regex> -DEXPECT=<regex>
# -DDIR=<checkpoint directory> -DTIMEOUT_S=<s> -DLIMIT=<s>
string(TIMESTAMP t0 "%s")
execute_process(
  COMMAND ${CMAKE_COMMAND} -E env STRATA_MPI_TIMEOUT_S=${TIMEOUT_S}
          ${MPIEXEC} -n ${RANKS} ${OVERSUBSCRIBE} ${EXE} ${MODE} ${STOPPED} ${DIR}
  RESULT_VARIABLE rc
  OUTPUT_VARIABLE out
  ERROR_VARIABLE err
  TIMEOUT 120)
string(TIMESTAMP t1 "%s")
math(EXPR elapsed "${t1} - ${t0}")
set(all "${out}${err}")
set(name "'${MODE}' on ${RANKS} ranks")
if(rc EQUAL 0)
  message(FATAL_ERROR "${name}: the job exited 0:\n${all}")
endif()
if(STOPPED GREATER_EQUAL 0)
  if(NOT all MATCHES "rank ${STOPPED}: stopping \\(SIGSTOP\\)")
    message(FATAL_ERROR "${name}: rank ${STOPPED} never stopped (exit ${rc}):\n${all}")
  endif()
  set(headline "rank ${STOPPED} stopped answering, ${AT}")
else()
  set(headline "every rank answered, so none stopped")
endif()
# the rank giving the verdict names the operation its watchdog saw expire
if(NOT all MATCHES "\\[strata\\] rank [0-9]+: MPI watchdog: [^\n]* has not completed after ${TIMEOUT_S} s")
  message(FATAL_ERROR "${name}: no rank printed its watchdog's message (exit ${rc}):\n${all}")
endif()
# the full verdict, once: a line per rank
string(REGEX MATCHALL "\n\\[strata\\]   rank [0-9]+: " lines "${all}")
list(LENGTH lines printed)
if(NOT printed EQUAL RANKS)
  message(FATAL_ERROR "${name}: the full verdict has ${printed} rank lines, not ${RANKS} (once per rank) (exit ${rc}):\n${all}")
endif()
math(EXPR last "${RANKS} - 1")
foreach(r RANGE ${last})
  if(r EQUAL STOPPED)
    if(NOT all MATCHES "\\[strata\\]   rank ${r}: no answer within ${TIMEOUT_S} s")
      message(FATAL_ERROR "${name}: the verdict does not say that rank ${r} gave no answer (exit ${rc}):\n${all}")
    endif()
    continue()
  endif()
  if(NOT all MATCHES "\\[strata\\] rank ${r}: watchdog verdict: ${headline}")
    message(FATAL_ERROR "${name}: rank ${r} did not print the verdict '${headline}' (exit ${rc}):\n${all}")
  endif()
  if(NOT all MATCHES "\\[strata\\]   rank ${r}: waits [0-9.]+ s in ")
    message(FATAL_ERROR "${name}: the verdict does not say what rank ${r} waits in (exit ${rc}):\n${all}")
  endif()
endforeach()
if(NOT all MATCHES "\\[strata\\]   rank [0-9]+: waits [0-9.]+ s in ${EXPECT}")
  message(FATAL_ERROR "${name}: no rank of the verdict waits in '${EXPECT}' (exit ${rc}):\n${all}")
endif()
if(elapsed GREATER ${LIMIT})
  message(FATAL_ERROR "${name}: the job took ${elapsed} s to end (limit ${LIMIT} s, timeout ${TIMEOUT_S} s):\n${all}")
endif()
# The launcher must have killed the stopped rank too (SIGTERM alone stays pending on it).
find_program(PGREP pgrep)
if(PGREP)
  # (the whole command line: two tests may run one mode at once)
  execute_process(COMMAND ${PGREP} -f "${EXE} ${MODE} ${STOPPED} ${DIR}" OUTPUT_VARIABLE left
                  OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT left STREQUAL "")
    message(FATAL_ERROR "${name}: processes of the job are still there after it ended: ${left}\n${all}")
  endif()
endif()
string(REGEX MATCH "\\[strata\\] rank [0-9]+: watchdog verdict: [^\n]*" said "${all}")
message(STATUS "${name}: the job ended in ${elapsed} s, exit ${rc}; ${said}")
file(REMOVE_RECURSE ${DIR} ${DIR}.tmp ${DIR}.old)
