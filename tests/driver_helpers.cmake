# Shared by the cmake -P test drivers: `fail` removes the driver's `tmp`
# folder and stops with a message; `run` runs a command and fails the test
# when it fails. Include after setting `tmp`.

function(fail message)
  file(REMOVE_RECURSE "${tmp}")
  message(FATAL_ERROR "${message}")
endfunction()

# Runs ARGN, failing the test if it fails; its stdout in `out`.
function(run what out)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE stdout
    ERROR_VARIABLE stderr)
  if(NOT rc EQUAL 0)
    fail("${what} failed (${rc}):\n${stdout}${stderr}")
  endif()
  set(${out} "${stdout}" PARENT_SCOPE)
endfunction()
