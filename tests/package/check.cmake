# ctest driver (cmake -P): pack this build tree with cpack into a folder of
# the test's own, check the .deb's files and Depends, run its binary, and
# have systemd-analyze verify its unit.
# -D: BUILD_DIR, CPACK, CONFIG, VERSION
set(tmp "${BUILD_DIR}/package-check")
file(REMOVE_RECURSE "${tmp}")
file(MAKE_DIRECTORY "${tmp}")

include(${CMAKE_CURRENT_LIST_DIR}/../driver_helpers.cmake)

foreach(program dpkg-deb dpkg-shlibdeps systemd-analyze)
  find_program(found_${program} ${program})
  if(NOT found_${program})
    fail("${program} is missing (Debian: dpkg, dpkg-dev, systemd; bash .ci/install-deps --test)")
  endif()
endforeach()

run("cpack" ignored "${CPACK}" -G DEB -C "${CONFIG}" -B "${tmp}/out"
  --config "${BUILD_DIR}/CPackConfig.cmake")
file(GLOB deb "${tmp}/out/canopy_${VERSION}_*.deb")
list(LENGTH deb count)
if(NOT count EQUAL 1)
  fail("expected one canopy_${VERSION}_<arch>.deb in ${tmp}/out, found: ${deb}")
endif()

run("dpkg-deb -c" listing dpkg-deb -c "${deb}")
foreach(path usr/bin/canopy usr/lib/systemd/system/canopy.service
    usr/share/bash-completion/completions/canopy etc/canopy/node.json
    usr/include/canopy/canopy.hpp usr/lib/cmake/canopy/canopyConfig.cmake
    usr/lib/pkgconfig/canopy.pc usr/share/zsh/vendor-completions/_canopy)
  string(FIND "${listing}" " ./${path}\n" at)
  if(at EQUAL -1)
    fail("the package lacks /${path}:\n${listing}")
  endif()
endforeach()

if(NOT listing MATCHES " ./usr/lib/libcanopy\\.so\\.[0-9]+\\.[0-9]+\\.[0-9]+\n")
  fail("the package lacks libcanopy.so.${VERSION}:\n${listing}")
endif()
if(listing MATCHES "usr/include/canopy/(runtime|actors|persistence)/|\\.a\n")
  fail("the package holds internal headers or static libraries:\n${listing}")
endif()

run("dpkg-deb -f" depends dpkg-deb -f "${deb}" Depends)
if(NOT depends MATCHES "libcaf-core")
  fail("Depends does not name libcaf (dpkg-shlibdeps): ${depends}")
endif()

set(root "${tmp}/root")
run("dpkg-deb -x" ignored dpkg-deb -x "${deb}" "${root}")
run("the packaged canopy version" version "${root}/usr/bin/canopy" version)
if(NOT version STREQUAL "canopy ${VERSION}\n")
  fail("canopy version printed '${version}', expected 'canopy ${VERSION}'")
endif()

# verify runs offline (no systemd needed) but checks that ExecStart's binary
# exists: point it at the extracted one. Lines about other units (the
# system's own) are not this package's.
file(READ "${root}/usr/lib/systemd/system/canopy.service" unit)
if(NOT unit MATCHES "\nExecStart=/usr/bin/canopy ")
  fail("the unit's ExecStart is not /usr/bin/canopy:\n${unit}")
endif()
string(REPLACE "\nExecStart=/usr/bin/canopy " "\nExecStart=${root}/usr/bin/canopy " unit "${unit}")
file(WRITE "${tmp}/unit/canopy.service" "${unit}")
execute_process(COMMAND systemd-analyze verify "${tmp}/unit/canopy.service"
  RESULT_VARIABLE rc OUTPUT_VARIABLE stdout ERROR_VARIABLE stderr)
string(REGEX MATCHALL "[^\n]*canopy\\.service[^\n]*" about_unit "${stdout}${stderr}")
if(NOT rc EQUAL 0 OR about_unit)
  fail("systemd-analyze verify (${rc}):\n${stdout}${stderr}")
endif()
message(STATUS "${deb}: files, Depends, `canopy version` and the unit verified")
file(REMOVE_RECURSE "${tmp}")
