#!/usr/bin/env bash
# The ticket and queued spinlocks' unlock must compile to a plain store: no locked instruction (seed
# 000: spin_unlock is a store, read_unlock a bus-locked RMW); PercpuRwSem's read lock and unlock
# likewise, and without a fence (seed 002). Disassembles the release build of examples/unlock_asm.rs.
# The mutex unlock is the control: it must contain an atomic read-modify-write, or the check is not
# looking at the right code.
#
# Usage: check-unlock-asm.sh [TARGET]. Without a target: x86-64 (AT&T syntax): no `lock` prefix, no
# `xchg`, no `mfence`. With aarch64-unknown-linux-gnu: no exclusive pair (`ldxr`/`ldaxr`/`stxr`/
# `stlxr`), no LSE atomic (`cas`, `swp`, `ldadd`, `ldclr`, `ldset`, ...), no call to the outline
# atomics (`__aarch64_*`), no `dmb`; the store is a plain `str`/`stlr` (a release store).
set -euo pipefail
cd "$(dirname "$0")/.."
target=${1:-}
if [ -z "$target" ]; then
  cargo build -q --release -p locklab --example unlock_asm
  bin=target/release/examples/unlock_asm
  objdump=objdump
  rmw='\block\b|xchg|mfence'
  ctrl_rmw='\block\b'
  # An AT&T instruction whose last (destination) operand is memory: a store.
  store='\b(mov|inc|add|dec|sub)[bwlq]?\s+([^,]*,)?\s*-?(0x[0-9a-f]+)?\(%[a-z0-9,%]*\)\s*$'
else
  cargo build -q --release -p locklab --example unlock_asm --target "$target"
  bin=target/$target/release/examples/unlock_asm
  objdump=aarch64-linux-gnu-objdump
  # A call (`bl`/`b`) to an outline atomic counts; objdump's `<__aarch64_...>` label on an `adrp`
  # (a page address that happens to be near one) does not.
  rmw='\b(ld[a]?xr[bh]?|st[l]?xr[bh]?|ldaxp|stlxp|cas[al]*[bh]?|swp[al]*[bh]?|ld(add|clr|eor|set|smax|smin|umax|umin)[al]*[bh]?)\b|\bbl?\s+[0-9a-f]+ <__aarch64_|\bdmb\b'
  ctrl_rmw=$rmw
  store='\b(str|stlr|stur|stp)[bh]?\s'
fi
dis=$($objdump -d --no-show-raw-insn "$bin")
fn_asm() { awk -v f="<$1>:" '$2 == f {p=1; next} p && (NF == 0 || /int3/) {exit} p' <<<"$dis"; }
fail=0
# check_plain F: function F holds no atomic read-modify-write and no fence, and does store to memory.
# Slow paths are calls to out-of-line functions, so they are not in F's body.
check_plain() {
  local f=$1 asm
  asm=$(fn_asm "$f")
  [ -n "$asm" ] || { echo "unlock-asm: $f not found in $bin"; exit 1; }
  if grep -qE "$rmw" <<<"$asm"; then
    echo "unlock-asm: FAIL $f has an atomic read-modify-write or a fence:"; echo "$asm"; fail=1
  elif ! grep -qE "$store" <<<"$asm"; then
    echo "unlock-asm: FAIL $f has no plain store to memory:"; echo "$asm"; fail=1
  else
    echo "unlock-asm: ok   $f: no atomic RMW, no fence; $(grep -cE '^\s*[0-9a-f]+:' <<<"$asm") instructions, last store: $(grep -E "$store" <<<"$asm" | tail -1 | sed 's/^[^:]*:\s*//')"
  fi
}
# Spinlock unlocks (seed 000), and PercpuRwSem's read fast path (seed 002).
for f in locklab_asm_ticket_unlock locklab_asm_qspinlock_unlock \
         locklab_asm_percpu_read_lock locklab_asm_percpu_read_unlock; do
  check_plain "$f"
done
ctrl=$(fn_asm locklab_asm_mutex_unlock)
if grep -qE "$ctrl_rmw" <<<"$ctrl"; then
  echo "unlock-asm: ok   control locklab_asm_mutex_unlock has an atomic RMW: $(grep -E "$ctrl_rmw" <<<"$ctrl" | head -1 | sed 's/^[^:]*:\s*//')"
else
  echo "unlock-asm: FAIL the control shows no atomic RMW: the check is broken"; echo "$ctrl"; fail=1
fi
exit $fail
