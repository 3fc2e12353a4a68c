# Installs gpufeed into a fresh prefix, then configures and builds the
# one-file C++ example (examples/) as an outside project against it with
# find_package(gpufeed CONFIG REQUIRED), and runs it.
#   cmake -DSOURCE_DIR=... -DBINARY_DIR=... -DWORK_DIR=... -DGENERATOR=... -P this file
file(REMOVE_RECURSE "${WORK_DIR}")
set(prefix "${WORK_DIR}/prefix")

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "command failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
endfunction()

run(${CMAKE_COMMAND} --install "${BINARY_DIR}" --prefix "${prefix}")
if(NOT EXISTS "${prefix}/lib/cmake/gpufeed/gpufeedConfig.cmake")
  message(FATAL_ERROR "no package config installed under ${prefix}")
endif()
run(${CMAKE_COMMAND} -S "${SOURCE_DIR}/examples" -B "${WORK_DIR}/build" -G "${GENERATOR}"
    "-DCMAKE_PREFIX_PATH=${prefix}")
run(${CMAKE_COMMAND} --build "${WORK_DIR}/build")

# Run the example on a tiny ImageFolder: it packs and reads back.
file(MAKE_DIRECTORY "${WORK_DIR}/data/cls_a" "${WORK_DIR}/data/cls_b")
file(WRITE "${WORK_DIR}/data/cls_a/one.jpg" "not really a jpeg, but bytes")
file(WRITE "${WORK_DIR}/data/cls_b/two.jpg" "more bytes")
run("${WORK_DIR}/build/pack_and_read" "${WORK_DIR}/data" "${WORK_DIR}/packed")
run("${WORK_DIR}/build/train_loop" "${WORK_DIR}/packed" --raw)

# The trainer: 3 epochs of the 2 records, preempted after 3 batches, then
# resumed from its checkpoint; the two runs together see every sample of
# every epoch exactly once (6).
set(checkpoint "${WORK_DIR}/trainer.state")
set(trainer "${WORK_DIR}/build/cpp_trainer" "${WORK_DIR}/packed" --raw 8 --batch-size 1
    --epochs 3 --threads 2 --checkpoint "${checkpoint}" --log-every 1)
execute_process(COMMAND ${trainer} --stop-after 3 RESULT_VARIABLE rc OUTPUT_VARIABLE first
                ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT first MATCHES "samples this run: 3\n" OR NOT EXISTS "${checkpoint}")
  message(FATAL_ERROR "cpp_trainer first run (${rc}):\n${first}\n${err}")
endif()
execute_process(COMMAND ${trainer} RESULT_VARIABLE rc OUTPUT_VARIABLE second ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT second MATCHES "resumed from .*epoch 1, 1 samples consumed"
   OR NOT second MATCHES "training done" OR NOT second MATCHES "samples this run: 3\n")
  message(FATAL_ERROR "cpp_trainer resumed run (${rc}):\n${second}\n${err}")
endif()
message(STATUS "installed gpufeed works from an outside project")
