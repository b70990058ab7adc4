#!/usr/bin/env bash
# openai-python's and anthropic-sdk-python's own request tests, which tests/e2e/test_sdk_suites.py
# runs through the proxy: their published source archives (sdists, which hold `tests/`) from
# PyPI at pinned versions and hashes, unpacked into tests/.sdk-suites/ (gitignored), and a venv
# there with those SDK versions and the test tools their conftests import.
set -euo pipefail
cd "$(dirname "$0")/.."
OPENAI=3.57.0
OPENAI_SHA256=5a0a89d6a542efc85e2a8cec701ca9265b795d578c777828e10fafdf80e333b6
ANTHROPIC=2.15.0
ANTHROPIC_SHA256=fb9ae93fe9ff88ae495189ebbe5097837823d95444178ef31535527051f76fb4
dir=tests/.sdk-suites
stamp="$dir/.installed-$OPENAI-$ANTHROPIC"
[ -f "$stamp" ] && exit 0
echo "fetching the SDK test suites: openai==$OPENAI, anthropic==$ANTHROPIC (sdists from PyPI)" >&2
rm -rf "$dir"
mkdir -p "$dir/sdists"
"${PY:-python3}" -m venv "$dir/venv"
pip=("$dir/venv/bin/pip" --quiet --disable-pip-version-check)
"${pip[@]}" install "openai[aiohttp]==$OPENAI" "anthropic[aiohttp]==$ANTHROPIC" \
  pytest==9.2.0 pytest-asyncio==1.5.0 pytest-xdist==3.8.0 inline-snapshot==0.36.1 \
  "http-snapshot[httpx]==0.1.9" >&2
"${pip[@]}" download --no-deps --no-binary :all: -d "$dir/sdists" \
  "openai==$OPENAI" "anthropic==$ANTHROPIC" >&2
(
  cd "$dir/sdists"
  printf '%s  %s\n' "$OPENAI_SHA256" "openai-$OPENAI.tar.gz" \
    "$ANTHROPIC_SHA256" "anthropic-$ANTHROPIC.tar.gz" | sha256sum --check --quiet
)
for sdist in "$dir"/sdists/*.tar.gz; do  # their tests, pytest settings and licenses
  name="$(basename "$sdist" .tar.gz)"
  tar -xzf "$sdist" -C "$dir" --wildcards "$name/tests" "$name/pyproject.toml" "$name/LICENSE*"
done
touch "$stamp"
