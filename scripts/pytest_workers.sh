# Sourced by scripts/test.sh and scripts/check_deps.sh with the pytest arguments: sets the array
# `xdist` to pytest's worker options, LORASTUDIO_TEST_WORKERS processes (pytest-xdist; default 2,
# CI's core count), one test file per worker at a time (--dist loadfile: a file's module fixtures
# are built once); empty where the arguments choose the workers themselves (-n N, -p no:xdist,
# --dist ...), which are then passed through as given.
xdist=(-n "${LORASTUDIO_TEST_WORKERS:-2}" --dist loadfile)
prev=""
for arg in "$@"; do
  case "$arg" in
    -n | -n[0-9]* | -nauto | --numprocesses* | --dist* | -pno:xdist) xdist=() ;;
    no:xdist) [ "$prev" = "-p" ] && xdist=() ;;
  esac
  prev="$arg"
done
