#!/usr/bin/env bash
# Renders a `locklab report` page in headless Chromium and checks it: it loads with no script or
# console errors, and every plot the page declares rendered (a visible <svg> with drawn marks; the
# page's own load-time script counts them into <body data-plots-expected/-rendered>). Saves a
# screenshot. Usage: check-report.sh REPORT.html SCREENSHOT.png
set -uo pipefail
page=$(realpath "$1"); shot=$2
browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
if [ -z "$browser" ]; then echo "check-report: no chromium on this machine"; exit 1; fi
profile=$(mktemp -d)
# The flags keep a root, offline, headless Chromium quiet: no sandbox (root), no GPU, no network
# services it would try at start-up.
flags=(--headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking
  --disable-component-update --disable-sync --user-data-dir="$profile" --virtual-time-budget=5000
  --enable-logging=stderr --v=0)
dom=$(timeout 120 "$browser" "${flags[@]}" --dump-dom "file://$page" 2>"$profile/stderr")
rc=$?
if [ $rc -ne 0 ] || [ -z "$dom" ]; then
  echo "check-report: chromium failed (exit $rc)"; tail -5 "$profile/stderr"; exit 1
fi
attr() { grep -o "<body[^>]*" <<<"$dom" | grep -o "$1=\"[^\"]*\"" | head -1 | cut -d'"' -f2; }
expected=$(attr data-plots-expected); rendered=$(attr data-plots-rendered); errors=$(attr data-errors)
declared=$(grep -o 'data-plots="[0-9]*"' "$page" | head -1 | cut -d'"' -f2)
console=$(grep -E 'CONSOLE|Uncaught' "$profile/stderr" | grep -viE 'level=0|"log"' || true)
echo "check-report: $page: plots declared ${declared:-?}, in the DOM ${expected:-?}, rendered ${rendered:-?}; script errors ${errors:-?}"
ok=1
[ -n "$expected" ] && [ "$expected" -gt 0 ] || { echo "check-report: the load-time check did not run or found no plots"; ok=0; }
[ "${expected:-x}" = "${declared:-y}" ] || { echo "check-report: the DOM has ${expected:-?} plots, the page declares ${declared:-?}"; ok=0; }
[ "${rendered:-x}" = "${expected:-y}" ] || { echo "check-report: only ${rendered:-?} of ${expected:-?} plots rendered"; ok=0; }
[ "${errors:-x}" = 0 ] || { echo "check-report: script errors: $(attr data-error-text)"; ok=0; }
[ -z "$console" ] || { echo "check-report: console: $console"; ok=0; }
mkdir -p "$(dirname "$shot")"
timeout 120 "$browser" "${flags[@]}" --hide-scrollbars --window-size=1280,2200 --screenshot="$shot" "file://$page" \
  >/dev/null 2>&1 || { echo "check-report: screenshot failed"; ok=0; }
[ -s "$shot" ] || { echo "check-report: no screenshot"; ok=0; }
rm -rf "$profile"
[ $ok = 1 ] && echo "check-report: ok (screenshot $shot)"
[ $ok = 1 ]
