#!/usr/bin/env bash
# The coding agents the end-to-end tests drive through the proxy (Codex CLI, Claude Code, Gemini
# CLI, Qwen Code, OpenCode), at pinned versions, from npm into tests/.agents/ (gitignored).
# Each runs offline.
set -euo pipefail
cd "$(dirname "$0")/.."
CODEX=0.171.0
CLAUDE=2.1.197
CLAUDE_NEWEST=2.1.332  # beside the pinned one, in its own folder (tests/agents.py)
GEMINI=0.61.0
QWEN=0.24.4
OPENCODE=1.18.33
dir=tests/.agents
stamp="$dir/.installed-$CODEX-$CLAUDE-$CLAUDE_NEWEST-$GEMINI-$QWEN-$OPENCODE"
[ -f "$stamp" ] && exit 0
command -v npm >/dev/null 2>&1 || { echo "npm (Node.js 20) is needed for the agent tests" >&2; exit 1; }
mkdir -p "$dir"
echo "installing the coding agents for the tests: @openai/codex@$CODEX," \
  "@anthropic-ai/claude-code@$CLAUDE (and $CLAUDE_NEWEST), @google/gemini-cli@$GEMINI," \
  "@qwen-code/qwen-code@$QWEN, opencode-ai@$OPENCODE" >&2
npm install --prefix "$dir" --no-audit --no-fund --silent \
  "@openai/codex@$CODEX" "@anthropic-ai/claude-code@$CLAUDE" "@google/gemini-cli@$GEMINI" \
  "@qwen-code/qwen-code@$QWEN" "opencode-ai@$OPENCODE" >&2
# Its own prefix: two versions of one package in one folder would share `.bin/claude`.
npm install --prefix "$dir/newest" --no-audit --no-fund --silent \
  "@anthropic-ai/claude-code@$CLAUDE_NEWEST" >&2
touch "$stamp"
