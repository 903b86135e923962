# The sanitizers' run-time options for scripts/sanitize.sh and scripts/fuzz.sh
# (sourced); a value already in the environment wins.
#   ASan: also static initialisation order, and use of a stack variable
#   after its function returned. Leaks are checked at exit (the default).
#   UBSan: a stack trace with every report (the build already stops at the first).
export ASAN_OPTIONS=${ASAN_OPTIONS:-check_initialization_order=1:strict_init_order=1:detect_stack_use_after_return=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
