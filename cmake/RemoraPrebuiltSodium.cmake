# remora_prebuilt_sodium(<libremora.a> <out_var> <fallback>)
#
# The libsodium a prebuilt libremora.a of this tree was linked against, read from the
# CMakeCache.txt of the build folder that holds it (scripts/lib/sodium.sh's static 1.0.22
# or the system's), so that a module linking that archive links the same libsodium: a
# reused build folder's own cache may name another. <fallback> when the folder has no cache.
function(remora_prebuilt_sodium library out_var fallback)
  set(result "${fallback}")
  get_filename_component(dir "${library}" DIRECTORY)
  if(EXISTS "${dir}/CMakeCache.txt")
    load_cache("${dir}" READ_WITH_PREFIX prebuilt_ REMORA_SODIUM_LIBRARY)
    if(prebuilt_REMORA_SODIUM_LIBRARY)
      set(result "${prebuilt_REMORA_SODIUM_LIBRARY}")
    endif()
  endif()
  set(${out_var} "${result}" PARENT_SCOPE)
endfunction()
