# gdl_add_program(<target> <file.gdl>
#                 [NAME <identifier>] [EMBED] [DESTINATION <dir>]
#                 [OPTIONS <gdlc arguments>...] [DEPENDS <files>...])
#
# Compiles file.gdl with gdlc at build time into
# ${CMAKE_CURRENT_BINARY_DIR}/gdl_programs/<target>/<NAME>.gdlx (NAME: the file's stem),
# again whenever the file, gdlc or a DEPENDS file changes; gdlc's NVRTC
# cache ($GDL_CACHE_DIR, else ~/.cache/gdl) is used as at the command line.
#  - EMBED: the artifact's bytes become part of <target> as
#    gdl_program_<NAME> (declare with GDL_EMBEDDED_PROGRAM(<NAME>) from
#    gdl/embed.h, load with Program::load_memory).
#  - otherwise <target> depends on the file; DESTINATION installs it there.
# OPTIONS go to gdlc as they are (--arch=sm_90, -DNAME=VALUE, ...).
include_guard(GLOBAL)

function(gdl_add_program target source)
  cmake_parse_arguments(ARG "EMBED" "NAME;DESTINATION" "OPTIONS;DEPENDS" ${ARGN})
  if(ARG_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "gdl_add_program: unknown arguments ${ARG_UNPARSED_ARGUMENTS}")
  endif()
  if(ARG_EMBED AND ARG_DESTINATION)
    message(FATAL_ERROR "gdl_add_program: EMBED puts the artifact inside ${target}; DESTINATION installs a file: pick one")
  endif()
  set(embed_script "${CMAKE_CURRENT_FUNCTION_LIST_DIR}/embed_binary.cmake")
  get_filename_component(src "${source}" ABSOLUTE)
  if(NOT ARG_NAME)
    get_filename_component(ARG_NAME "${source}" NAME_WE)
  endif()
  if(NOT ARG_NAME MATCHES "^[A-Za-z_][A-Za-z0-9_]*$")
    message(FATAL_ERROR "gdl_add_program: NAME '${ARG_NAME}' is not a C identifier; pass NAME <identifier>")
  endif()
  set(dir "${CMAKE_CURRENT_BINARY_DIR}/gdl_programs/${target}")
  set(artifact "${dir}/${ARG_NAME}.gdlx")
  add_custom_command(
    OUTPUT "${artifact}"
    COMMAND ${CMAKE_COMMAND} -E make_directory "${dir}"
    COMMAND gdl::gdlc "${src}" -o "${artifact}" ${ARG_OPTIONS}
    DEPENDS "${src}" gdl::gdlc ${ARG_DEPENDS}
    COMMENT "gdlc: compiling ${source}"
    VERBATIM)
  if(ARG_EMBED)
    set(embedded "${dir}/${ARG_NAME}_embedded.cc")
    add_custom_command(
      OUTPUT "${embedded}"
      COMMAND ${CMAKE_COMMAND} -DINPUT=${artifact} -DOUTPUT=${embedded} -DSYMBOL=gdl_program_${ARG_NAME}
              -P "${embed_script}"
      DEPENDS "${artifact}" "${embed_script}"
      COMMENT "Embedding ${ARG_NAME}.gdlx"
      VERBATIM)
    target_sources(${target} PRIVATE "${embedded}")
  else()
    add_custom_target(${target}_gdl_${ARG_NAME} DEPENDS "${artifact}")
    add_dependencies(${target} ${target}_gdl_${ARG_NAME})
    if(ARG_DESTINATION)
      install(FILES "${artifact}" DESTINATION "${ARG_DESTINATION}")
    endif()
  endif()
endfunction()
