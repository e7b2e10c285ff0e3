# ctest driver (cmake -P): install the canopy build tree into a temp prefix
# and use it as a program outside the tree would, from the installed files
# alone:
#  - the installed headers are the public ones (<canopy/...>) and name no
#    CAF, cpp-httplib or spdlog type, and include no internal header;
#  - libcanopy.so has its SONAME and exports only canopy's API;
#  - examples/embed builds with find_package(canopy) and runs (a function,
#    the builder, a stop, a resume, a failing step);
#  - the same source builds with pkg-config and runs.
# -D: BUILD_DIR, CONSUMER_DIR, CONFIG, GENERATOR, CXX_COMPILER, VERSION
set(tmp "${BUILD_DIR}/install-check")
file(REMOVE_RECURSE "${tmp}")
file(MAKE_DIRECTORY "${tmp}")
set(prefix "${tmp}/prefix")

include(${CMAKE_CURRENT_LIST_DIR}/../driver_helpers.cmake)

run("cmake --install" ignored "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --config "${CONFIG}"
  --prefix "${prefix}")

# -- the headers: an allow-list, and nothing of the implementation in them ----
file(GLOB_RECURSE headers RELATIVE "${prefix}/include" "${prefix}/include/*")
list(SORT headers)
set(allowed canopy/canopy.hpp canopy/error.hpp canopy/export.hpp canopy/graph.hpp
  canopy/records.hpp canopy/runtime.hpp)
if(NOT headers STREQUAL allowed)
  fail("installed headers are not the public ones:\n  ${headers}\nexpected:\n  ${allowed}")
endif()
foreach(h ${headers})
  file(STRINGS "${prefix}/include/${h}" bad REGEX "caf::|httplib|spdlog|#include \"")
  if(bad)
    fail("${h} names the implementation:\n${bad}")
  endif()
endforeach()

# -- the library: SONAME, and the API alone exported ---------------------------
file(GLOB libs "${prefix}/lib*/libcanopy.so.*.*.*" "${prefix}/lib*/*/libcanopy.so.*.*.*")
list(LENGTH libs count)
if(NOT count EQUAL 1)
  fail("expected one libcanopy.so.${VERSION}, found: ${libs}")
endif()
get_filename_component(libdir "${libs}" DIRECTORY)
run("readelf -d" dynamic readelf -d "${libs}")
string(REGEX MATCH "Library soname: \\[([A-Za-z0-9._+-]+)\\]" ignored "${dynamic}")
set(soname "${CMAKE_MATCH_1}")
string(REGEX MATCH "^[0-9]+\\.[0-9]+" major_minor "${VERSION}")
if(NOT soname STREQUAL "libcanopy.so.${major_minor}")
  fail("SONAME is '${soname}', expected libcanopy.so.${major_minor}")
endif()
if(NOT EXISTS "${libdir}/libcanopy.so" OR NOT EXISTS "${libdir}/libcanopy.so.${major_minor}")
  fail("libcanopy.so and libcanopy.so.${major_minor} links are missing in ${libdir}")
endif()
run("nm -D" symbols nm -D -C --defined-only "${libs}")
string(REPLACE "\n" ";" symbols "${symbols}")
set(foreign "")
foreach(line ${symbols})
  # Weak definitions of templates of the standard library or nlohmann/json
  # (instantiated in the API's inline code) are the consumer's as well.
  if(line MATCHES "^[0-9a-f]+ [TDBR] " AND NOT line MATCHES "canopy::")
    string(APPEND foreign "  ${line}\n")
  endif()
endforeach()
if(foreign)
  fail("libcanopy.so exports symbols outside canopy's API:\n${foreign}")
endif()
string(REGEX MATCHALL "[^;]*canopy::core::[^;]*" internal "${symbols}")
if(internal)
  fail("libcanopy.so exports the implementation:\n${internal}")
endif()

# -- a consumer with find_package(canopy) ---------------------------------------
run("configure the consumer" ignored "${CMAKE_COMMAND}" -S "${CONSUMER_DIR}" -B "${tmp}/build"
  -G "${GENERATOR}" "-DCMAKE_BUILD_TYPE=${CONFIG}" "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}"
  "-DCMAKE_PREFIX_PATH=${prefix}" -DCMAKE_FIND_PACKAGE_NO_PACKAGE_REGISTRY=ON)
run("build the consumer" ignored "${CMAKE_COMMAND}" --build "${tmp}/build" --config "${CONFIG}")
set(exe "${tmp}/build/embed")
if(EXISTS "${tmp}/build/${CONFIG}/embed")  # multi-config generators
  set(exe "${tmp}/build/${CONFIG}/embed")
endif()
run("run the find_package consumer" out "${exe}" "${tmp}/home-cmake")
if(NOT out MATCHES "stop: stopped, status stopped" OR NOT out MATCHES "completed: .*\"words\":8")
  fail("the find_package consumer printed:\n${out}")
endif()

# -- the same source with pkg-config ----------------------------------------------
find_program(pkg_config pkg-config)
if(NOT pkg_config)
  fail("pkg-config is missing (Debian: pkgconf; bash .ci/install-deps)")
endif()
set(ENV{PKG_CONFIG_PATH} "${libdir}/pkgconfig")
run("pkg-config" flags "${pkg_config}" --cflags --libs canopy)
string(STRIP "${flags}" flags)
separate_arguments(flags UNIX_COMMAND "${flags}")
run("build the pkg-config consumer" ignored "${CXX_COMPILER}" -std=c++17 -o "${tmp}/embed-pc"
  "${CONSUMER_DIR}/main.cpp" ${flags} "-Wl,-rpath,${libdir}")
run("run the pkg-config consumer" out "${tmp}/embed-pc" "${tmp}/home-pc")
if(NOT out MATCHES "completed: .*\"words\":8")
  fail("the pkg-config consumer printed:\n${out}")
endif()
file(REMOVE_RECURSE "${tmp}")
