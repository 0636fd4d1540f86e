# Every dependency is a Debian package, found through pkg-config (or a plain
# find_library for http-parser, which ships no .pc file).
find_package(PkgConfig REQUIRED)
pkg_check_modules(LIBUV REQUIRED IMPORTED_TARGET libuv>=1.40)
pkg_check_modules(JANSSON REQUIRED IMPORTED_TARGET jansson>=2.13)
pkg_check_modules(OPENSSL REQUIRED IMPORTED_TARGET openssl>=1.1.1)
pkg_check_modules(LIBBSD REQUIRED IMPORTED_TARGET libbsd)
pkg_check_modules(YAML REQUIRED IMPORTED_TARGET yaml-0.1)
pkg_check_modules(CURL REQUIRED IMPORTED_TARGET libcurl>=7.85)
pkg_check_modules(LIBCONFIG REQUIRED IMPORTED_TARGET libconfig)
pkg_check_modules(CHECK IMPORTED_TARGET check>=0.13)

find_path(HTTP_PARSER_INCLUDE_DIR http_parser.h REQUIRED)
find_library(HTTP_PARSER_LIBRARY http_parser REQUIRED)
add_library(http_parser::http_parser UNKNOWN IMPORTED)
set_target_properties(http_parser::http_parser PROPERTIES
  IMPORTED_LOCATION "${HTTP_PARSER_LIBRARY}"
  INTERFACE_INCLUDE_DIRECTORIES "${HTTP_PARSER_INCLUDE_DIR}")
