#!/usr/bin/env bash
# train_gpt stopped by SIGTERM (as `timeout` and zerorun send it) or SIGINT (Ctrl-C) during
# training ends at once with 128+signal and "train_gpt: interrupted by SIG...", never a SIGSEGV
# or *.btr files ([Note: termination signals] in runtime/base/termination_signals.h; issue 27). Before, libinfinipath's
# handler (installed before main) called exit(1) from the signal handler while the rank threads
# ran: exit code 1 every time here, and a SIGSEGV in the destructors in issue 27's report.
# Cases: ranks as threads, SIGTERM and SIGINT, started without IPATH_NO_BACKTRACE (as a user
# starts it); ranks as processes under zerorun over fabric, SIGTERM to zerorun.
# usage: train_gpt_signals.sh TRAIN_GPT ZERORUN CONFIG
set -euo pipefail
set -m  # background jobs keep SIGINT (a non-interactive shell would start them ignoring it)
train_gpt=$1
zerorun=$2
config=$3
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cd "$out"  # libinfinipath writes its *.btr files into the working directory
fail() { echo "FAIL: $*"; cat "$out/log"; exit 1; }

# run_and_signal SIGNAL EXPECTED_CODE PATTERN -- command...: starts the command, waits (bounded)
# until it printed its first step, sends SIGNAL, and checks how it ended.
run_and_signal() {
  local sig=$1 code=$2 pattern=$3; shift 4
  env -u IPATH_NO_BACKTRACE -u HFI_NO_BACKTRACE "$@" > "$out/log" 2>&1 &
  local pid=$!
  for _ in $(seq 1200); do
    grep -q "step " "$out/log" && break
    kill -0 "$pid" 2> /dev/null || break
    sleep 0.1
  done
  grep -q "step " "$out/log" || { kill -KILL "$pid" 2> /dev/null; fail "$*: no step within 120 s"; }
  kill "-$sig" "$pid"
  set +e
  for _ in $(seq 600); do kill -0 "$pid" 2> /dev/null || break; sleep 0.1; done
  kill -KILL "$pid" 2> /dev/null && { wait "$pid"; fail "$*: still running 60 s after SIG$sig"; }
  wait "$pid"
  local got=$?
  set -e
  [[ $got == "$code" ]] || fail "$* after SIG$sig exited $got, expected $code"
  grep -q -- "$pattern" "$out/log" || fail "$*: no '$pattern' in the output"
  if grep -q -i -E "segmentation|SIGSEGV|signal 11" "$out/log"; then fail "$*: a SIGSEGV"; fi
  if compgen -G "$out/*.btr" > /dev/null; then fail "$*: left $(ls "$out"/*.btr)"; fi
  echo "ok: SIG$sig -> $got: $*"
}

run_and_signal TERM 143 "^train_gpt: interrupted by SIGTERM" -- \
  "$train_gpt" --config "$config" --world 2 --steps 100000 --print-every 1
run_and_signal INT 130 "^train_gpt: interrupted by SIGINT" -- \
  "$train_gpt" --config "$config" --world 2 --steps 100000 --print-every 1
run_and_signal TERM 143 "^\[r[01]\] train_gpt: interrupted by SIGTERM" -- \
  "$zerorun" -n 2 --backend fabric -- "$train_gpt" --config "$config" --steps 100000 \
  --print-every 1
echo PASS
