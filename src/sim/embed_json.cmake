# Writes OUT, a C++ header holding each file of IN ('|'-separated) as a raw string literal:
#   kEmbeddedDeviceProfiles[] = {{"h100.json", R"hpjson(...)hpjson"}, ...}
string(REPLACE "|" ";" files "${IN}")
set(body "// Generated from configs/devices/*.json by src/sim/embed_json.cmake. Do not edit.\n#pragma once\n\nnamespace hp::embedded {\n\nstruct EmbeddedFile { const char* name; const char* text; };\n\ninline constexpr EmbeddedFile kDeviceProfiles[] = {\n")
foreach(f IN LISTS files)
  get_filename_component(name "${f}" NAME)
  file(READ "${f}" text)
  string(APPEND body "    {\"${name}\", R\"hpjson(${text})hpjson\"},\n")
endforeach()
string(APPEND body "};\n\n}  // namespace hp::embedded\n")
file(WRITE "${OUT}.tmp" "${body}")
file(RENAME "${OUT}.tmp" "${OUT}")
