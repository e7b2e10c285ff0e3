# ctest driver (cmake -P): the execution machine is plain logic, and no
# translation unit of it includes a CAF actor header. For every
# actors/execution/machine*.cpp the compiler lists the headers the file
# includes (-M), with the file's own compile command from the build's
# compile_commands.json (its include paths, definitions and flags); the test
# fails naming the file, each forbidden header and the chain of includes
# that brought it in (-H).
# caf/error.hpp and caf/expected.hpp are fine: they include none of these.
# -D: SOURCE_DIR, BUILD_DIR, CXX_COMPILER
cmake_minimum_required(VERSION 3.16)
set(sources_glob "${SOURCE_DIR}/actors/execution/machine*.cpp")
# The headers of CAF's actors: a file that includes one of them compiles
# the actor runtime's templates.
set(forbidden_regex
  "/caf/(actor[A-Za-z0-9_]*|behavior|event_based_actor|scheduled_actor|local_actor)\\.hpp")

# -- the compile command of every file ----------------------------------------
set(db "${BUILD_DIR}/compile_commands.json")
if(NOT EXISTS "${db}")
  message(FATAL_ERROR "no ${db}: this generator writes no compile commands "
    "(CMAKE_EXPORT_COMPILE_COMMANDS needs a Makefile or Ninja generator)")
endif()
file(READ "${db}" json)
string(JSON count LENGTH "${json}")
math(EXPR last "${count} - 1")
file(GLOB sources "${sources_glob}")
list(SORT sources)
if(NOT sources)
  message(FATAL_ERROR "no file matches ${sources_glob}")
endif()
foreach(i RANGE ${last})
  string(JSON file GET "${json}" ${i} file)
  get_filename_component(file "${file}" REALPATH)
  foreach(source IN LISTS sources)
    get_filename_component(real "${source}" REALPATH)
    if(file STREQUAL real)
      string(JSON cmd_${i} GET "${json}" ${i} command)
      string(JSON dir_${i} GET "${json}" ${i} directory)
      set(entry_of_${real} ${i})
    endif()
  endforeach()
endforeach()

# The flags of compile command `command` without its launcher, its compiler,
# its outputs and its source file: what -M needs to see the same headers.
function(flags_of command source out)
  separate_arguments(args UNIX_COMMAND "${command}")
  list(FIND args "${CXX_COMPILER}" at)
  if(at LESS 0)
    set(at 0) # the compiler is the first word
  endif()
  set(flags)
  set(skip_next FALSE)
  list(LENGTH args n)
  math(EXPR at "${at} + 1")
  foreach(k RANGE ${at} ${n})
    if(k EQUAL n)
      break()
    endif()
    list(GET args ${k} a)
    if(skip_next)
      set(skip_next FALSE)
    elseif(a MATCHES "^-(o|MF|MT|MQ)$")
      set(skip_next TRUE)
    elseif(a MATCHES "^-(c|MD|MMD)$" OR a MATCHES "^-o.")
    elseif(a STREQUAL source OR a MATCHES "/actors/execution/machine[^/]*\\.cpp$")
    else()
      list(APPEND flags "${a}")
    endif()
  endforeach()
  set(${out} "${flags}" PARENT_SCOPE)
endfunction()

# -- each file: its headers, and where a forbidden one came from --------------
set(failures "")
foreach(source IN LISTS sources)
  get_filename_component(real "${source}" REALPATH)
  file(RELATIVE_PATH name "${SOURCE_DIR}" "${source}")
  if(NOT DEFINED entry_of_${real})
    string(APPEND failures "${name}: no compile command in ${db} (not in a target?)\n")
    continue()
  endif()
  set(i ${entry_of_${real}})
  flags_of("${cmd_${i}}" "${source}" flags)
  execute_process(COMMAND "${CXX_COMPILER}" ${flags} -M "${source}"
    WORKING_DIRECTORY "${dir_${i}}" RESULT_VARIABLE rc OUTPUT_VARIABLE deps
    ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    string(APPEND failures "${name}: ${CXX_COMPILER} -M failed (${rc}):\n${err}\n")
    continue()
  endif()
  string(REGEX MATCHALL "[^ \\\\\n]*${forbidden_regex}" found "${deps}")
  if(NOT found)
    continue()
  endif()
  list(REMOVE_DUPLICATES found)
  # -H prints every include, one dot per level: the stack of open headers
  # at a forbidden one is the chain that brought it in.
  execute_process(COMMAND "${CXX_COMPILER}" ${flags} -E -H -o /dev/null "${source}"
    WORKING_DIRECTORY "${dir_${i}}" ERROR_VARIABLE tree OUTPUT_QUIET)
  string(REPLACE "\n" ";" lines "${tree}")
  set(stack "")
  set(reported "")
  foreach(line IN LISTS lines)
    if(NOT line MATCHES "^(\\.+) (.*)$")
      continue()
    endif()
    string(LENGTH "${CMAKE_MATCH_1}" depth)
    set(path "${CMAKE_MATCH_2}")
    list(LENGTH stack size)
    while(size GREATER_EQUAL depth AND size GREATER 0)
      list(REMOVE_AT stack -1)
      list(LENGTH stack size)
    endwhile()
    # The outermost forbidden header of a chain only: the ones it includes
    # go with it.
    set(inside FALSE)
    foreach(h IN LISTS stack)
      if(h MATCHES "${forbidden_regex}")
        set(inside TRUE)
      endif()
    endforeach()
    list(APPEND stack "${path}")
    if(inside OR NOT path MATCHES "${forbidden_regex}" OR path IN_LIST reported)
      continue()
    endif()
    list(APPEND reported "${path}")
    set(chain "${name}")
    foreach(h IN LISTS stack)
      string(REPLACE "${SOURCE_DIR}/" "" h "${h}")
      string(APPEND chain " -> ${h}")
    endforeach()
    string(APPEND failures "${name} includes ${path}\n    via ${chain}\n")
  endforeach()
  if(NOT reported)
    string(APPEND failures "${name} includes ${found}\n")
  endif()
endforeach()

if(failures)
  message(FATAL_ERROR "the execution machine includes CAF actor headers "
    "(move the plain types it needs into headers of their own):\n${failures}")
endif()
list(LENGTH sources checked)
message(STATUS "${checked} files of the execution machine include no CAF actor header")
