#!/usr/bin/env bash
# Prepare the GPU check from the project's root: fills .gpu/ (ignored by git) with the check, SmolLM2's config and
# tokenizer (no weights: the check builds models of that shape with random weights there) and the wheels the GPU
# machine lacks (the versions of this .venv). Then, on the GPU machine, from the project's root with .gpu/ along:
#   bash .gpu/run.sh [--only smoke,sampling] [--skip pairs]     (results in $OUT/results.jsonl, or ./gpu-results/)
# First here: bash bench/gpu/prepare.sh && .venv/bin/python .gpu/gpu_check.py .gpu /tmp/gpu-dry --dry
set -eu
here=$(dirname "$(readlink -f "$0")")
py=${PY:-.venv/bin/python}
[ -x "$py" ] || { echo "no $py: make the virtual environment first"; exit 1; }
mkdir -p .git/info .gpu/smol .gpu/.whl
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> .git/info/exclude
cp "$here/gpu_check.py" "$here/run.sh" .gpu/
model=${SMOLLM2_DIR:-/tmp/gpu-prepare-smollm2}
[ -f "$model/tokenizer.json" ] || "$py" -m trainer build-smollm2 "$model" >/dev/null
for f in config.json tokenizer.json tokenizer_config.json chat_template.jinja generation_config.json; do
  [ -f "$model/$f" ] && cp "$model/$f" .gpu/smol/
done
version() { "$py" -m pip show "$1" 2>/dev/null | sed -n 's/^Version: //p'; }
specs=""
for p in trl datasets dill multiprocess transformers peft accelerate; do v=$(version $p); [ -n "$v" ] && specs="$specs $p==$v"; done
rm -f .gpu/.whl/*.whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .gpu/.whl $specs
du -sh .gpu
echo "ready: on the GPU machine run 'bash .gpu/run.sh' from the project's root, with .gpu/ carried along"
