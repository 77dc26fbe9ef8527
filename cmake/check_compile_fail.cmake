# Expected-compile-failure check, run by ctest as
#   cmake -DKIND=<gcc|clang|nvcc> -DSOURCE=<file.cpp> -P check_compile_fail.cmake -- <compiler> <flags...>
# Passes only if the compiler rejects SOURCE with at most one error outside SOURCE and every applicable
#   // expected-error: <regex>          (all compilers)
#   // expected-error(<kind>): <regex>  (one compiler; comma list allowed)
# matches the compiler output. Regexes use CMake syntax and are matched against
# the output with line breaks (and the indentation after them) collapsed to one
# space, so a regex may span a diagnostic that the compiler wrapped.
# The compiler is invoked directly (not through the build tool) so tests can run
# concurrently without sharing a build tree.

cmake_minimum_required(VERSION 3.25)   # policies (IN_LIST etc.) for -P mode

if(NOT DEFINED SOURCE OR NOT DEFINED KIND)
  message(FATAL_ERROR "usage: cmake -DKIND=<kind> -DSOURCE=<file> -P ${CMAKE_CURRENT_LIST_FILE} -- <compiler> <flags...>")
endif()

# Everything after "--" is the compiler command line.
set(cmd "")
set(after_sep OFF)
math(EXPR last "${CMAKE_ARGC} - 1")
foreach(i RANGE ${last})
  if(after_sep)
    list(APPEND cmd "${CMAKE_ARGV${i}}")
  elseif(CMAKE_ARGV${i} STREQUAL "--")
    set(after_sep ON)
  endif()
endforeach()
if(NOT cmd)
  message(FATAL_ERROR "no compiler command after --")
endif()

# Extract directives. ';' and brackets would corrupt CMake list handling, so
# encode them while the text travels through lists and decode per regex.
file(READ "${SOURCE}" text)
string(REPLACE ";" "@strata_semi@" text "${text}")
string(REPLACE "[" "@strata_lb@" text "${text}")
string(REPLACE "]" "@strata_rb@" text "${text}")
string(REPLACE "\n" ";" lines "${text}")
set(expected "")
foreach(line IN LISTS lines)
  if(line MATCHES "//[ \t]*expected-error(\\(([a-z, ]+)\\))?:[ \t]*(.*)$")
    set(kinds "${CMAKE_MATCH_2}")
    string(STRIP "${CMAKE_MATCH_3}" re)
    if(kinds)
      string(REGEX REPLACE "[ ,]+" ";" kinds "${kinds}")
      if(NOT KIND IN_LIST kinds)
        continue()
      endif()
    endif()
    if(re STREQUAL "")
      message(FATAL_ERROR "${SOURCE}: empty expected-error regex")
    endif()
    list(APPEND expected "${re}")
  endif()
endforeach()
if(NOT expected)
  message(FATAL_ERROR "${SOURCE}: no '// expected-error: <regex>' line applies to ${KIND}; "
                      "a compile_fail test must say which error it expects")
endif()

execute_process(COMMAND ${cmd} "${SOURCE}"
                RESULT_VARIABLE rc
                OUTPUT_VARIABLE output
                ERROR_VARIABLE output)   # same variable: merged in order

string(LENGTH "${output}" len)
if(len GREATER 4000)
  string(SUBSTRING "${output}" 0 4000 shown)
  string(APPEND shown "\n... [${len} characters, truncated]")
else()
  set(shown "${output}")
endif()
list(JOIN cmd " " cmd_str)

# message(NOTICE) prints verbatim; FATAL_ERROR would re-wrap the diagnostics.
function(report_failure why)
  message(NOTICE "${why}\ncommand: ${cmd_str} ${SOURCE}\n"
                 "--- ${KIND} output (exit ${rc}) ---\n${shown}\n--- end of output ---")
  message(FATAL_ERROR "compile_fail test failed: ${SOURCE} [${KIND}]")
endfunction()

if(rc EQUAL 0)
  report_failure("FAIL: ${SOURCE} compiled cleanly with ${KIND}, but a compile_fail test must not compile.")
endif()

string(REGEX REPLACE "[ \t]*\r?\n[ \t]*" " " flat "${output}")
set(failed "")
foreach(re IN LISTS expected)
  string(REPLACE "@strata_semi@" ";" re "${re}")
  string(REPLACE "@strata_lb@" "[" re "${re}")
  string(REPLACE "@strata_rb@" "]" re "${re}")
  if(NOT flat MATCHES "${re}")
    string(APPEND failed "  no match for expected-error: ${re}\n")
  endif()
endforeach()

if(failed)
  report_failure("FAIL: ${KIND} rejected ${SOURCE}, but not with the expected error(s):\n${failed}")
endif()

# One broken rule, one error: an error reported outside the test file after the first is
# a cascade (a pass that went on with broken numbers), which the planner must not produce.
string(REPLACE ";" "," errtext "${output}")
string(REGEX MATCHALL "[^\n]*(:[0-9]+:[0-9]+|\\([0-9]+\\)): (fatal )?error[^\n]*" errlines "${errtext}")
set(outside 0)
foreach(line IN LISTS errlines)
  string(FIND "${line}" "${SOURCE}" at)
  if(NOT at EQUAL 0)
    math(EXPR outside "${outside} + 1")
  endif()
endforeach()
if(outside GREATER 1)
  report_failure("FAIL: ${KIND} rejected ${SOURCE} with ${outside} errors outside the test file; a broken rule "
                 "must be reported once, without follow-on errors")
endif()
list(LENGTH expected n)
message(STATUS "OK: ${KIND} rejected ${SOURCE}; all ${n} expected-error regex(es) matched")
