# ctest driver (cmake -P): install the canopy build tree into a temp prefix,
# configure and build tests/install as an outside consumer, run it.
# -D: BUILD_DIR, CONSUMER_DIR, CONFIG, GENERATOR, CXX_COMPILER
set(tmp "${BUILD_DIR}/install-check")
file(REMOVE_RECURSE "${tmp}")
file(MAKE_DIRECTORY "${tmp}/home")

function(step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    file(REMOVE_RECURSE "${tmp}")
    message(FATAL_ERROR "${what} failed (${rc})")
  endif()
endfunction()

step("cmake --install" "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --config "${CONFIG}"
  --prefix "${tmp}/prefix")
step("configure the consumer" "${CMAKE_COMMAND}" -S "${CONSUMER_DIR}" -B "${tmp}/build"
  -G "${GENERATOR}" "-DCMAKE_BUILD_TYPE=${CONFIG}" "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}"
  "-DCMAKE_PREFIX_PATH=${tmp}/prefix" -DCMAKE_FIND_PACKAGE_NO_PACKAGE_REGISTRY=ON)
step("build the consumer" "${CMAKE_COMMAND}" --build "${tmp}/build" --config "${CONFIG}")
set(exe "${tmp}/build/consumer")
if(EXISTS "${tmp}/build/${CONFIG}/consumer")  # multi-config generators
  set(exe "${tmp}/build/${CONFIG}/consumer")
endif()
step("run the consumer" "${exe}" "${tmp}/home")
file(REMOVE_RECURSE "${tmp}")
