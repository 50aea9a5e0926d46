#!/usr/bin/env bash
# The prepared device check (one call of the `device` tool, or any NVIDIA node): the image's own
# python3 with the project's locked wheels from .gpu-wheels (`make gpu-wheels`), nothing changed on
# the GPU. Writes everything under $OUT (default ./gpu-report).
set -u
OUT=${OUT:-gpu-report}
mkdir -p "$OUT"
deps=$(mktemp -d)
python3 -m pip install -q --no-index --find-links .gpu-wheels --target "$deps" --require-hashes --no-deps \
  -r .gpu-wheels/requirements.txt \
  >"$OUT/pip.log" 2>&1 || { cat "$OUT/pip.log"; exit 2; }
export PYTHONPATH="$deps:$PWD" PYTHONUNBUFFERED=1
{ nvidia-smi; nvidia-smi -q; ls -la /dev/nvidia* /dev/nvidia-caps 2>&1; ldconfig -p | grep -i nvidia-ml; } >"$OUT/machine.txt" 2>&1
python3 -m hardware.record "$OUT" 2>&1 | tee "$OUT/record.log"
cli='import sys; from nativedra.cli import main; sys.exit(main(sys.argv[1:]))'
{ python3 -c "$cli" inventory --backend nvml; python3 -c "$cli" inventory --backend nvml -o profile; } >"$OUT/inventory.txt" 2>&1
python3 -m pytest -p no:cacheprovider -q -rA hardware 2>&1 | tee "$OUT/pytest.log"
