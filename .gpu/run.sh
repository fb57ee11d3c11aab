set -e
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .gpu/whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/.gpu/shim:$PWD PYTHONUNBUFFERED=1
python3 -m benchmarks.gpu_check run --out "${OUT:-/tmp/gpu-out}" "$@"
