# Writes the output of `CANOPY completion SHELL` to OUT (cmake -P; the
# build runs it once the binary is linked). -D: CANOPY, SHELL, OUT
get_filename_component(dir "${OUT}" DIRECTORY)
file(MAKE_DIRECTORY "${dir}")
execute_process(COMMAND "${CANOPY}" completion "${SHELL}" OUTPUT_FILE "${OUT}.tmp"
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${CANOPY} completion ${SHELL} failed (${rc})")
endif()
file(RENAME "${OUT}.tmp" "${OUT}")
