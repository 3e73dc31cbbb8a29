# The prefix-dependent part of `cmake --install` (CMakeLists.txt runs it
# after setting RELAY_SOURCE_DIR, RELAY_PACKAGING_SRC, RELAY_PACKAGING_OUT, RELAY_SYSTEMD_UNIT_DIR,
# RELAY_INSTALL_BINDIR and RELAY_INSTALL_DATADIR). It runs when installing,
# not when configuring, because CMAKE_INSTALL_PREFIX is only known then:
# `cmake --install --prefix P` and CPack's /usr staging each get units whose
# ExecStart and EnvironmentFile name their own paths.
set(prefix "${CMAKE_INSTALL_PREFIX}")
if(prefix STREQUAL "/usr")
  # A system install (the .deb): configuration in /etc, zsh's Debian
  # directory, the copyright file Debian expects.
  set(etc "/etc/relay")
  set(zsh_dir "${prefix}/${RELAY_INSTALL_DATADIR}/zsh/vendor-completions")
  set(system 1)
else()
  set(etc "${prefix}/etc/relay")
  set(zsh_dir "${prefix}/${RELAY_INSTALL_DATADIR}/zsh/site-functions")
  set(system 0)
endif()

set(RELAY_BINDIR "${prefix}/${RELAY_INSTALL_BINDIR}")
set(RELAY_SYSCONFDIR "${etc}")
set(units "${RELAY_PACKAGING_OUT}/units")
foreach(unit relay.service relay@.service)
  configure_file("${RELAY_PACKAGING_SRC}/${unit}.in" "${units}/${unit}" @ONLY)
endforeach()
configure_file("${RELAY_PACKAGING_SRC}/relay.env.in" "${units}/relay.env" @ONLY)

# file(INSTALL) adds DESTDIR and records each file in the install manifest.
file(INSTALL DESTINATION "${prefix}/${RELAY_SYSTEMD_UNIT_DIR}" TYPE FILE
     FILES "${units}/relay.service" "${units}/relay@.service")
file(INSTALL DESTINATION "${zsh_dir}" TYPE FILE FILES "${RELAY_PACKAGING_OUT}/_relay")
file(MAKE_DIRECTORY "$ENV{DESTDIR}${etc}/apps")
# Never over an operator's edited settings (a re-install onto a live system).
if(NOT EXISTS "$ENV{DESTDIR}${etc}/relay.env")
  file(INSTALL DESTINATION "${etc}" TYPE FILE PERMISSIONS OWNER_READ OWNER_WRITE
       FILES "${units}/relay.env")
endif()
if(system)
  file(INSTALL DESTINATION "${prefix}/${RELAY_INSTALL_DATADIR}/doc/relay" TYPE FILE
       FILES "${RELAY_SOURCE_DIR}/LICENSE" RENAME copyright)
endif()
