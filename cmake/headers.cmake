# fr_check_headers(<target> <header>... LIBS <lib>...)
#
# Every header compiles on its own (STYLE.md): one generated translation
# unit per header that includes that header and nothing else, built as an
# OBJECT library with the module's include paths (<lib>... give them and
# the third-party ones). Part of the default build, so a header that
# forgets an include breaks the build where it is, not in some later user.
function(fr_check_headers target)
  cmake_parse_arguments(H "" "" "LIBS" ${ARGN})
  set(tus)
  foreach(h ${H_UNPARSED_ARGUMENTS})
    file(RELATIVE_PATH rel ${PROJECT_SOURCE_DIR} ${h})
    string(MAKE_C_IDENTIFIER ${rel} id)
    set(tu ${CMAKE_CURRENT_BINARY_DIR}/header_check/${id}.c)
    file(CONFIGURE OUTPUT ${tu} CONTENT "#include \"${h}\"\n" @ONLY)
    list(APPEND tus ${tu})
  endforeach()
  add_library(${target} OBJECT ${tus})
  target_link_libraries(${target} PRIVATE fr_options ${H_LIBS})
endfunction()
