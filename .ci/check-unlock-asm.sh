#!/usr/bin/env bash
# The ticket and queued spinlocks' unlock must compile to a plain store: no lock-prefixed instruction
# (seed 000: spin_unlock is a store, read_unlock a bus-locked RMW). Disassembles the release build of
# examples/unlock_asm.rs. The mutex unlock is the control: it must contain a lock prefix, or the check
# is not looking at the right code.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -q --release -p locklab --example unlock_asm
bin=target/release/examples/unlock_asm
dis=$(objdump -d --no-show-raw-insn "$bin")
fn_asm() { awk -v f="<$1>:" '$2 == f {p=1; next} p && (NF == 0 || /int3/) {exit} p' <<<"$dis"; }
fail=0
for f in locklab_asm_ticket_unlock locklab_asm_qspinlock_unlock; do
  asm=$(fn_asm "$f")
  [ -n "$asm" ] || { echo "unlock-asm: $f not found in $bin"; exit 1; }
  if grep -qE '\block\b|xchg' <<<"$asm"; then
    echo "unlock-asm: FAIL $f has a locked instruction:"; echo "$asm"; fail=1
  elif ! grep -qE '\b(mov|inc|add)[bwlq]?\s.*\(%' <<<"$asm"; then
    echo "unlock-asm: FAIL $f has no plain store to memory:"; echo "$asm"; fail=1
  else
    echo "unlock-asm: ok   $f is a plain store: $(grep -E '\b(mov|inc|add)[bwlq]?\s.*\(%' <<<"$asm" | tail -1 | sed 's/^[^:]*:\s*//')"
  fi
done
# PercpuRwSem's read fast path (seed 002): no locked instruction and no fence in the function body (the
# slow paths and the no-membarrier fallback's fence are calls to out-of-line functions).
for f in locklab_asm_percpu_read_lock locklab_asm_percpu_read_unlock; do
  asm=$(fn_asm "$f")
  [ -n "$asm" ] || { echo "unlock-asm: $f not found in $bin"; exit 1; }
  if grep -qE '\block\b|xchg|mfence' <<<"$asm"; then
    echo "unlock-asm: FAIL $f has a locked instruction or a fence:"; echo "$asm"; fail=1
  elif ! grep -qE '\b(mov|inc|add|dec|sub)[bwlq]?\s.*\(%' <<<"$asm"; then
    echo "unlock-asm: FAIL $f has no plain store to memory:"; echo "$asm"; fail=1
  else
    echo "unlock-asm: ok   $f has no locked instruction and no fence ($(grep -cE '^\s*[0-9a-f]+:' <<<"$asm") instructions)"
  fi
done
ctrl=$(fn_asm locklab_asm_mutex_unlock)
if grep -qE '\block\b' <<<"$ctrl"; then
  echo "unlock-asm: ok   control locklab_asm_mutex_unlock has a lock prefix: $(grep -E '\block\b' <<<"$ctrl" | head -1 | sed 's/^[^:]*:\s*//')"
else
  echo "unlock-asm: FAIL the control shows no lock prefix: the check is broken"; echo "$ctrl"; fail=1
fi
exit $fail
