# The service and the .deb: `cmake --install` adds the systemd unit, the node
# configuration and the bash completion to the binary and the library;
# `cpack -G DEB` in the build folder packs all of it for /usr.

set(dist ${PROJECT_SOURCE_DIR}/runtime/dist)
set(dist_out ${PROJECT_BINARY_DIR}/dist)

# Shell completions, from the built binary (the scripts list its commands):
# bash's, and zsh's for $fpath (Debian's zsh reads vendor-completions).
foreach(shell bash zsh)
  add_custom_command(OUTPUT ${dist_out}/canopy.${shell}
    COMMAND ${CMAKE_COMMAND} -DCANOPY=$<TARGET_FILE:canopy> -DSHELL=${shell}
      -DOUT=${dist_out}/canopy.${shell} -P ${dist}/completion.cmake
    DEPENDS canopy ${dist}/completion.cmake
    COMMENT "Writing canopy's ${shell} completion")
endforeach()
add_custom_target(canopy_completion ALL DEPENDS ${dist_out}/canopy.bash ${dist_out}/canopy.zsh)
# OPTIONAL: a tree built with `--target canopy` alone has no completions yet,
# and still installs (cpack builds everything first).
install(FILES ${dist_out}/canopy.bash DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions
  RENAME canopy OPTIONAL)
install(FILES ${dist_out}/canopy.zsh DESTINATION ${CMAKE_INSTALL_DATADIR}/zsh/vendor-completions
  RENAME _canopy OPTIONAL)

# The unit names the binary of the prefix installed to, known only at install
# time (cpack installs this tree again with the prefix /usr). Configured into
# a folder of that prefix's own: installs to other prefixes may run at once.
# lib/, not the multiarch libdir: systemd looks in <prefix>/lib/systemd/system.
install(CODE "
  set(CANOPY_BINDIR \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_BINDIR}\")
  string(MD5 key \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}\")
  configure_file(\"${dist}/canopy.service.in\" \"${dist_out}/\${key}/canopy.service\" @ONLY)
  file(INSTALL \"${dist_out}/\${key}/canopy.service\"
    DESTINATION \"\${CMAKE_INSTALL_PREFIX}/lib/systemd/system\")")

# node.json goes to /etc/canopy when the prefix is /usr (as GNUInstallDirs'
# sysconfdir), else to <prefix>/etc/canopy; an existing one is the
# operator's and stays (in the .deb it is a conffile).
install(CODE "
  if(CMAKE_INSTALL_PREFIX STREQUAL \"/usr\")
    set(etc /etc/canopy)
  else()
    set(etc \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_SYSCONFDIR}/canopy\")
  endif()
  if(NOT EXISTS \"\$ENV{DESTDIR}\${etc}/node.json\")
    file(INSTALL \"${dist}/node.json\" DESTINATION \"\${etc}\")
  endif()")

# -- cpack -G DEB -> canopy_<version>_<arch>.deb ----------------------------------
set(CANOPY_PACKAGE_MAINTAINER "canopy maintainers <maintainers@canopy.invalid>"
  CACHE STRING "Maintainer field of the .deb")
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME canopy)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "runs agent graphs as supervised actor trees")
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION "${CPACK_PACKAGE_DESCRIPTION_SUMMARY}
 canopy runs agent graphs (subprocess, function, model and nested graph
 steps) as CAF actor trees whose state is committed to LMDB, so a crash or a
 stop never loses a finished step. The package holds the canopy command, the
 supervisor node as a systemd service (canopy.service), shell completions,
 and libcanopy with its headers, CMake package and pkg-config file for
 embedding canopy in C++ programs.")
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "${CANOPY_PACKAGE_MAINTAINER}")
set(CPACK_DEBIAN_PACKAGE_SECTION admin)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# A shlibs file for libcanopy (programs built against it depend on this
# package) and the ldconfig trigger.
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
# What a program that embeds the library compiles against: its headers
# include nlohmann/json's.
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "nlohmann-json3-dev")
# Installed with DESTDIR and the prefix /usr, so that the unit names
# /usr/bin/canopy and node.json lands in /etc.
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_INSTALL_PREFIX /usr)
set(CPACK_SET_DESTDIR ON)
# The binary and the library without their line tables, as dh_strip would.
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
  ${dist}/deb/conffiles ${dist}/deb/postinst ${dist}/deb/prerm ${dist}/deb/postrm
  ${dist}/deb/triggers)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
include(CPack)
