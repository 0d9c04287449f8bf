# Installs the public headers, both libraries, an exported CMake package and a
# pkg-config file:
#
#   find_package(remora CONFIG REQUIRED)
#   target_link_libraries(app PRIVATE remora::remora)         # or remora::remora_static
#
#   pkg-config --cflags --libs remora            # shared
#   pkg-config --static --cflags --libs remora   # static (adds fmt and -pthread)
#
# Only remora and remora_static are installed and exported. The per-layer OBJECT
# libraries are linked into them as object files ($<TARGET_OBJECTS:...>), not as
# link dependencies, so the export set never refers to them.
include(CMakePackageConfigHelpers)

set(REMORA_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/remora
    CACHE STRING "Where remoraConfig.cmake is installed, relative to the prefix")

install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/remora
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        COMPONENT remora_development
        FILES_MATCHING PATTERN "*.h")

install(TARGETS remora remora_static
        EXPORT remoraTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
                COMPONENT remora_runtime
                NAMELINK_COMPONENT remora_development
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
                COMPONENT remora_development
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
                COMPONENT remora_runtime
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

install(EXPORT remoraTargets
        NAMESPACE remora::
        FILE remoraTargets.cmake
        DESTINATION ${REMORA_INSTALL_CMAKEDIR}
        COMPONENT remora_development)

configure_package_config_file(
  ${PROJECT_SOURCE_DIR}/cmake/remoraConfig.cmake.in
  ${PROJECT_BINARY_DIR}/remoraConfig.cmake
  INSTALL_DESTINATION ${REMORA_INSTALL_CMAKEDIR})
write_basic_package_version_file(
  ${PROJECT_BINARY_DIR}/remoraConfigVersion.cmake
  VERSION ${PROJECT_VERSION}
  COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/remoraConfig.cmake ${PROJECT_BINARY_DIR}/remoraConfigVersion.cmake
        DESTINATION ${REMORA_INSTALL_CMAKEDIR}
        COMPONENT remora_development)

# remora.pc. Its prefix must be the one used at install time, which
# `cmake --install <build> --prefix <dir>` may change after configuring, so the file is
# made in two steps: now, with everything but the prefix (left as @CMAKE_INSTALL_PREFIX@),
# then again by the install script, where CMAKE_INSTALL_PREFIX is the install-time one.
# GNUInstallDirs may hold absolute dirs (-DCMAKE_INSTALL_LIBDIR=/usr/lib/...); keep those.
set(REMORA_PC_PREFIX "@CMAKE_INSTALL_PREFIX@")
foreach(dir LIBDIR INCLUDEDIR)
  if(IS_ABSOLUTE "${CMAKE_INSTALL_${dir}}")
    set(REMORA_PC_${dir} "${CMAKE_INSTALL_${dir}}")
  else()
    set(REMORA_PC_${dir} "\${prefix}/${CMAKE_INSTALL_${dir}}")
  endif()
endforeach()
# libsodium: the build's own static archive (scripts/lib/sodium.sh) goes beside the
# library, as <libdir>/remora/libsodium.a, and both the package and remora.pc name that
# file; a system libsodium is named -lsodium. (libremora.so holds its copy already.)
if(REMORA_SODIUM_BUNDLED)
  install(FILES ${REMORA_SODIUM_LIBRARY} DESTINATION ${CMAKE_INSTALL_LIBDIR}/remora
          COMPONENT remora_development)
  set(REMORA_PC_SODIUM "\${libdir}/remora/libsodium.a")
else()
  set(REMORA_PC_SODIUM "-lsodium")
endif()
# The zerocopy layer's libraries: libmnl always, liburing where the build found it.
set(REMORA_PC_EXTRA_LIBS "-lmnl ")
if(REMORA_URING_LIBS)
  string(APPEND REMORA_PC_EXTRA_LIBS "-luring ")
endif()
if(REMORA_ISAL_LIBS)
  string(APPEND REMORA_PC_EXTRA_LIBS "-lisal ")
endif()
configure_file(${PROJECT_SOURCE_DIR}/cmake/remora.pc.in ${PROJECT_BINARY_DIR}/remora.pc.stage1 @ONLY)
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(remora_pc_dest "${CMAKE_INSTALL_LIBDIR}/pkgconfig")
else()
  set(remora_pc_dest "\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}/pkgconfig")
endif()
install(CODE "
  configure_file(\"${PROJECT_BINARY_DIR}/remora.pc.stage1\" \"${PROJECT_BINARY_DIR}/remora.pc\" @ONLY)
  file(INSTALL DESTINATION \"${remora_pc_dest}\" TYPE FILE FILES \"${PROJECT_BINARY_DIR}/remora.pc\")
" COMPONENT remora_development)
