message(STATUS "install test placeholder")
