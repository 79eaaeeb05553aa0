# The offline wheels of the benchmark scripts run on borrowed hosts (many_core.sh, gpu.sh): sourced, not run.
#
#   fetch_wheels WHEEL...   on a machine that reaches PyPI: the wheels into .whl/ (CPython WHEEL_PYTHON, 3.12 by
#                           default, on x86_64), then exit
#   use_wheels SITE         on the host, without the network: .whl/'s wheels into SITE where .whl/ exists, and
#                           PYTHONPATH set to SITE (if any) and the repository
fetch_wheels() {
    local py="${WHEEL_PYTHON:-3.12}"
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$py" --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any -d .whl "$@"
    ls -l .whl
    exit 0
}

use_wheels() {
    if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
        python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$1" .whl/*.whl
        export PYTHONPATH="$1:$PWD${PYTHONPATH:+:$PYTHONPATH}"
    else
        export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
    fi
    export PYTHONUNBUFFERED=1
}
