# embed_file.cmake - writes the bytes of a file as a C initializer list, for
# compiling a file (the dashboard page) into a binary without external tools.
#
#   cmake -DIN=<file> -DOUT=<file.inc> -P embed_file.cmake
#
# OUT gets lines of "0x3c,0x21,...," (16 bytes each, trailing comma), to be
# #included inside the braces of an unsigned char array. OUT is rewritten
# only when its content changes, so an unchanged input recompiles nothing.
if(NOT DEFINED IN OR NOT DEFINED OUT)
  message(FATAL_ERROR "usage: cmake -DIN=<file> -DOUT=<file.inc> -P embed_file.cmake")
endif()
file(READ "${IN}" hex HEX)
string(LENGTH "${hex}" nhex)
math(EXPR nbytes "${nhex} / 2")
string(REPEAT "[0-9a-f][0-9a-f]" 16 line16)
string(REGEX REPLACE "(${line16})" "\\1\n" hex "${hex}")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," hex "${hex}")
set(text "/* generated from ${IN} by embed_file.cmake (${nbytes} bytes); do not edit */\n${hex}\n")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
  if(old STREQUAL text)
    return()
  endif()
endif()
file(WRITE "${OUT}" "${text}")
